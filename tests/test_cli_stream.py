"""Bundle streams (JSON Lines): written by `kernel bundle`, read by `replay` and `run`.

The stream is read as it comes: an unsound envelope (header, run lines,
lines after the last attempt) is refused; a defect in one attempt line is
that attempt's ``invalid_replay_input`` refusal and every other attempt is
still classified. The writer and the reader share one table of limits, so
nothing written is ever refused (a property checked over many limits).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleLimitError,
    BundleLimits,
    BundleStreamError,
    BundleStreamReader,
    RefusedAttempt,
    bundle_document,
    bundle_stream_lines,
)
from kernel.cli import app
from kernel.commands._io import bounded_lines
from kernel.replay import ReplayBundle
from kernel.serde import SerdeError, loads, parse_json
from tests.orchestrate_helpers import ROOT

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
runner = CliRunner()


def _kernel(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from kernel.cli import main; sys.argv[0] = 'kernel'; "
         "main()", *map(str, args)],
        input=stdin, capture_output=True, timeout=600, check=False,
    )


def _draft(tmp_path: Path, attempts: int) -> Path:
    doc = json.loads(DRAFT.read_text())
    shipped = doc["candidates"]
    doc["candidates"] = [shipped[i % len(shipped)] for i in range(attempts)]
    path = tmp_path / f"draft-{attempts}.json"
    path.write_text(json.dumps(doc))
    return path


def _bundle(tmp_path: Path, layout: str, attempts: int = 4, manifest: str = "builtin.v1") -> Path:
    out = tmp_path / f"bundle-{layout}-{attempts}-{manifest}.jsonl"
    result = runner.invoke(app, ["bundle", str(_draft(tmp_path, attempts)), "--layout", layout,
                                 "--manifest", manifest, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _replay_lines(bundle: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["replay", str(bundle), "-q", "-f", "jsonl", *extra])
    return result.exit_code, [json.loads(line) for line in result.stdout.splitlines()]


def test_the_stream_layout_replays_to_the_document_layout_bytes(tmp_path: Path) -> None:
    stream, document = _bundle(tmp_path, "stream"), _bundle(tmp_path, "document")
    lines = stream.read_bytes().splitlines()
    assert len(lines) == 1 + 4 + 4  # header, the run's attempts, the attempt lines
    assert json.loads(lines[0])["format"] == "replay-kernel.bundle-stream.v1"
    assert document.read_bytes().count(b"\n") == 1
    from_stream = runner.invoke(app, ["replay", str(stream), "-q", "-f", "jsonl"])
    from_document = runner.invoke(app, ["replay", str(document), "-q", "-f", "jsonl"])
    assert from_stream.exit_code == from_document.exit_code == 0
    assert from_stream.stdout == from_document.stdout
    assert len(from_stream.stdout.splitlines()) == 4


def test_auto_writes_a_document_for_a_small_run(tmp_path: Path) -> None:
    auto = _bundle(tmp_path, "auto")
    loads(auto.read_bytes(), ReplayBundle)  # one strict document


def test_2k_attempts_stream_end_to_end_through_stdin_and_stdout(tmp_path: Path) -> None:
    draft = _draft(tmp_path, 2000)
    bundled = _kernel("bundle", draft, "--layout", "stream", "--out", "-")
    assert bundled.returncode == 0, bundled.stderr
    done = _kernel("replay", "-", "--out", "-", stdin=bundled.stdout)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2000
    envelopes = [json.loads(line) for line in lines]
    assert [e["attempt_index"] for e in envelopes] == list(range(2000))
    expected = ["contract_and_proof_closed", "contract_refused",
                "contract_closed_but_proof_refused", "contract_and_proof_closed"]
    assert [e["outcome"]["replay_disposition"] for e in envelopes] == expected * 500
    assert b"verdict: PASS (exit 0): 2000 attempts" in done.stderr


def _edit_line(path: Path, number: int, new: bytes | None) -> Path:
    lines = path.read_bytes().splitlines(keepends=True)
    if new is None:
        del lines[number]
    else:
        lines[number] = new
    out = path.with_name(f"edited-{number}.jsonl")
    out.write_bytes(b"".join(lines))
    return out


@pytest.mark.parametrize("bad", [b"{not json\n", b'{"attempt_index": 2}\n', b"\n",
                                 b'{"attempt_index": 1.5}\n'])
def test_a_malformed_attempt_line_refuses_that_attempt_alone(tmp_path: Path, bad: bytes) -> None:
    stream = _bundle(tmp_path, "stream")
    _, good = _replay_lines(stream)
    edited = _edit_line(stream, 1 + 4 + 2, bad)  # attempt 2's line
    code, got = _replay_lines(edited)
    assert code == 3  # invalid_replay_input is integrity
    assert len(got) == 4
    assert got[2]["attempt_index"] == 2 and got[2]["attempt_id"] == good[2]["attempt_id"]
    refusal = got[2]["outcome"]
    assert refusal["replay_disposition"] == "invalid_replay_input"
    assert refusal["attempt_id"] is None  # nothing about the attempt was validated
    assert [got[i] for i in (0, 1, 3)] == [good[i] for i in (0, 1, 3)]


def test_an_attempt_line_out_of_place_refuses_that_attempt(tmp_path: Path) -> None:
    stream = _bundle(tmp_path, "stream")
    lines = stream.read_bytes().splitlines(keepends=True)
    lines[5], lines[6] = lines[6], lines[5]  # attempts 0 and 1 swapped
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_bytes(b"".join(lines))
    code, got = _replay_lines(swapped)
    assert code == 3
    assert [g["outcome"]["replay_disposition"] for g in got[:2]] == ["invalid_replay_input"] * 2


def test_missing_attempt_lines_are_each_refused(tmp_path: Path) -> None:
    stream = _bundle(tmp_path, "stream")
    _, good = _replay_lines(stream)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(stream.read_bytes().splitlines(keepends=True)[:7]))
    code, got = _replay_lines(cut)
    assert code == 3
    assert got[:2] == good[:2]
    assert [g["outcome"]["replay_disposition"] for g in got[2:]] == ["invalid_replay_input"] * 2
    assert "attempt line missing" in got[3]["outcome"]["explanation"]


@pytest.mark.parametrize(
    ("line", "new", "code"),
    [
        (0, b"{}\n", "malformed_json"),  # no format: read as one document, which it is not
        (0, b'{"format": "replay-kernel.bundle-stream.v9", "header": {}}\n',
         "unsupported_bundle_format"),
        (0, b'{"format": "replay-kernel.bundle-stream.v1", "header": {}}\n', "schema_mismatch"),
        (2, b"[1.5]\n", "float_forbidden"),
        (3, None, "schema_mismatch"),  # a run line missing: an attempt line read as one
    ],
)
def test_an_unsound_envelope_is_refused_before_any_outcome(
    tmp_path: Path, line: int, new: bytes | None, code: str
) -> None:
    edited = _edit_line(_bundle(tmp_path, "stream"), line, new)
    out = tmp_path / "o.jsonl"
    done = _kernel("replay", edited, "--out", out)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith(f"error: {code}: ")
    assert done.stdout == b"" and not out.exists()


def test_a_line_after_the_last_attempt_refuses_the_stream_and_writes_no_file(
    tmp_path: Path,
) -> None:
    stream = _bundle(tmp_path, "stream")
    longer = tmp_path / "longer.jsonl"
    longer.write_bytes(stream.read_bytes() + stream.read_bytes().splitlines(keepends=True)[-1])
    out = tmp_path / "o.jsonl"
    done = _kernel("replay", longer, "--out", out)
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: trailing_lines: ")
    assert not out.exists()


@pytest.mark.slow
def test_kernel_run_reads_a_stream_like_its_document(tmp_path: Path) -> None:
    stream = _bundle(tmp_path, "stream", manifest="certified.v1")
    document = _bundle(tmp_path, "document", manifest="certified.v1")
    a = _kernel("run", stream, "--work-dir", tmp_path / "a", "-q", "-f", "jsonl")
    b = _kernel("run", document, "--work-dir", tmp_path / "b", "-q", "-f", "jsonl")
    assert a.returncode == b.returncode == 0, a.stderr
    assert a.stdout == b.stdout and len(a.stdout.splitlines()) == 4


def test_a_draft_stream_seals_into_the_bundle_of_its_document(tmp_path: Path) -> None:
    doc = json.loads(DRAFT.read_text())
    candidates = doc.pop("candidates")
    stream = tmp_path / "draft.jsonl"
    stream.write_text("\n".join(
        [json.dumps({"format": "replay-kernel.draft-stream.v1", "header": doc})]
        + [json.dumps(c) for c in candidates]) + "\n")
    from_stream = runner.invoke(app, ["bundle", str(stream)])
    from_document = runner.invoke(app, ["bundle", str(DRAFT)])
    assert from_stream.exit_code == from_document.exit_code == 0
    assert from_stream.stdout == from_document.stdout
    stream.write_text(stream.read_text() + '{"operator_id": 1}\n')
    bad = runner.invoke(app, ["bundle", str(stream)])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: schema_mismatch: ")
    assert bad.stdout == ""


# --- one table of limits -------------------------------------------------------------------


def _marbles() -> ReplayBundle:
    result = runner.invoke(app, ["bundle", str(DRAFT)])
    return loads(result.stdout.encode(), ReplayBundle)


MARBLES = _marbles()


def _reader_refuses(line: bytes, limits: BundleLimits) -> bool:
    try:
        parse_json(line, max_bytes=limits.line_bytes, max_depth=limits.depth)
    except SerdeError:
        return True
    return False


@settings(max_examples=60, deadline=None)
@given(line_bytes=st.integers(200, 6000), depth=st.integers(2, 12))
def test_the_writer_never_writes_a_line_the_reader_refuses(line_bytes: int, depth: int) -> None:
    limits = BundleLimits(document_bytes=line_bytes, line_bytes=line_bytes, depth=depth)
    written: list[bytes] = []
    try:
        for line in bundle_stream_lines(MARBLES, limits):
            written.append(line)
    except BundleLimitError:
        # refused: the next line would have been refused by the reader too
        full = list(bundle_stream_lines(MARBLES, BUNDLE_LIMITS))
        assert _reader_refuses(full[len(written)].rstrip(b"\n"), limits)
    for line in written:
        assert not _reader_refuses(line.rstrip(b"\n"), limits)
    if len(written) == 9:
        reader = BundleStreamReader(limits)
        items = [reader.feed(line.rstrip(b"\n")) for line in written]
        assert not any(isinstance(i, RefusedAttempt) for i in items)
        assert reader.finish() == ()


@settings(max_examples=30, deadline=None)
@given(document_bytes=st.integers(1000, 40000))
def test_the_document_writer_obeys_the_document_limit(document_bytes: int) -> None:
    limits = BundleLimits(document_bytes=document_bytes, line_bytes=1 << 20, depth=64)
    full = bundle_document(MARBLES)
    try:
        data = bundle_document(MARBLES, limits)
    except BundleLimitError as exc:
        assert exc.code == "document_too_large" and len(full) > document_bytes
    else:
        assert data == full and len(data) <= document_bytes


def test_an_over_long_line_is_skipped_without_being_held() -> None:
    handle = io.BytesIO(b"short\n" + b"x" * 5000 + b"\nafter\nlast")
    assert list(bounded_lines(handle, 100)) == [b"short", None, b"after", b"last"]


def test_an_over_long_attempt_line_is_that_attempt_s_refusal() -> None:
    lines = [line.rstrip(b"\n") for line in bundle_stream_lines(MARBLES)]
    reader = BundleStreamReader()
    for line in lines[:5]:
        reader.feed(line)
    refused = reader.feed_oversized()
    assert isinstance(refused, RefusedAttempt) and refused.attempt_index == 0
    assert "line_too_large" in refused.refusal.explanation
    for line in lines[6:]:
        assert reader.feed(line) is not None
    assert reader.finish() == ()
    with pytest.raises(BundleStreamError):
        reader.feed(lines[-1])  # after the last attempt


def test_the_limits_are_the_documented_ones() -> None:
    assert BundleLimits(16 * 1024 * 1024, 16 * 1024 * 1024, 64) == BUNDLE_LIMITS


def test_the_public_surface_of_kernel_bundles_is_exact() -> None:
    import kernel.bundles

    assert set(kernel.bundles.__all__) == {
        "BUNDLE_LIMITS", "BUNDLE_STREAM_FORMAT", "DRAFT_STREAM_FORMAT", "BundleLimitError",
        "BundleLimits", "BundleSealError", "BundleStreamError", "BundleStreamReader",
        "DraftHeader", "ReadRun", "ReadyAttempt", "RefusedAttempt", "StreamAttempt",
        "StreamHeader",
        "StreamRun", "bundle_document", "bundle_stream_lines", "document_attempts",
        "draft_stream_lines", "is_stream_header", "outcome_line", "read_draft_stream",
        "seal_bundle",
    }
    for name in kernel.bundles.__all__:
        assert hasattr(kernel.bundles, name), name
