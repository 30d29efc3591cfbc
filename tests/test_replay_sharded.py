"""``kernel replay --workers N`` and ``--executor dask``: the serial bytes, from shards (issue 22).

Every test runs the real command line in a fresh interpreter, with real
worker processes (a spawn pool, a local Dask cluster, or a ``dask
scheduler`` with two ``dask worker`` processes): the outcome bytes are
compared with ``cmp``'s strictness (``==`` on bytes) against the serial
command's, also when a worker is killed in the middle of the run. Shards are
made small (``--shard-size``) so that small bundles still cross many shards.
Nothing here measures speed (``make bench`` does).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.bundles import BundleStreamReader, ReadyAttempt, outcome_line
from kernel.orchestrate._shards import classify_item
from kernel.organs import builtin_manifest
from tests.support.cli import KERNEL_MAIN
from tests.support.processes import (
    assert_no_new_descendants,
    communicate_while_killing,
    descendants,
    pool_workers,
)
from tests.test_orchestrate_cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"  # a document with one tampered attempt
SIZES = (1, 10, 1000)


def _kernel(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, timeout=timeout, check=False)


def _bundle(directory: Path, attempts: int) -> Path:
    """A bundle stream of ``attempts`` (the shipped draft's candidates, repeated)."""
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    shipped = [json.dumps(c, sort_keys=True) for c in doc.pop("candidates")]
    draft = directory / f"draft-{attempts}.jsonl"
    with draft.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "replay-kernel.draft-stream.v1", "header": doc}) + "\n")
        for i in range(attempts):
            out.write(shipped[i % len(shipped)] + "\n")
    bundle = directory / f"bundle-{attempts}.jsonl"
    done = _kernel("bundle", draft, "--layout", "stream", "-o", bundle)
    assert done.returncode == 0, done.stderr
    return bundle


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    directory = tmp_path_factory.mktemp("bundles")
    return {size: _bundle(directory, size) for size in SIZES}


@pytest.fixture(scope="module")
def serial(bundles: dict[int, Path]) -> dict[int, bytes]:
    found = {}
    for size, bundle in bundles.items():
        done = _kernel("replay", bundle, "-f", "jsonl")
        assert done.returncode == 0, done.stderr
        assert done.stdout.count(b"\n") == size
        found[size] = done.stdout
    return found


def _replay(bundle: Path, out: Path, *options: str) -> subprocess.CompletedProcess[bytes]:
    return _kernel("replay", bundle, "-q", "-o", out, *options)


@pytest.fixture
def no_leftover_workers() -> Iterator[None]:
    before = descendants()
    yield
    assert_no_new_descendants(before)


# --- byte identity ----------------------------------------------------------------------


@pytest.mark.usefixtures("no_leftover_workers")
@pytest.mark.parametrize("size", SIZES)
def test_a_process_pool_writes_the_serial_bytes(
    tmp_path: Path, bundles: dict[int, Path], serial: dict[int, bytes], size: int
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = _replay(bundles[size], out, "--workers", "2", "--shard-size", "7")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == serial[size]


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
def test_a_local_dask_cluster_writes_the_serial_bytes(
    tmp_path: Path, bundles: dict[int, Path], serial: dict[int, bytes]
) -> None:
    for size in SIZES:
        out = tmp_path / f"outcomes-{size}.jsonl"
        done = _replay(bundles[size], out, "--executor", "dask", "--workers", "2",
                       "--shard-size", "7")
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == serial[size], size


@pytest.mark.usefixtures("no_leftover_workers")
def test_a_document_bundle_gives_the_serial_bytes_summary_and_exit_code(tmp_path: Path) -> None:
    # The shipped example holds one tampered attempt: exit 3 either way.
    expected = _kernel("replay", EXAMPLE, "-o", tmp_path / "serial.jsonl", "-f", "json")
    assert expected.returncode == 3, expected.stderr
    done = _kernel("replay", EXAMPLE, "-o", tmp_path / "sharded.jsonl", "-f", "json",
                   "--workers", "2", "--shard-size", "1")
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "sharded.jsonl").read_bytes() == (tmp_path / "serial.jsonl").read_bytes()
    assert (done.stdout, done.stderr) == (expected.stdout, expected.stderr)


@pytest.mark.usefixtures("no_leftover_workers")
def test_the_verbose_table_and_summary_of_workers_are_the_serial_ones(tmp_path: Path) -> None:
    # Workers send each outcome's line and what the tally reads (ids, reason codes,
    # classes, cause, hint), never the outcome: every row and the summary must agree.
    expected = _kernel("replay", EXAMPLE, "-f", "table", "--verbose")
    assert expected.returncode == 3, expected.stderr
    assert expected.stdout.count(b" attempt=") == 8  # one row per attempt
    for options in (("--workers", "2", "--shard-size", "1"),
                    ("--workers", "1", "--shard-size", "3")):
        done = _kernel("replay", EXAMPLE, "-f", "table", "--verbose", *options)
        assert (done.returncode, done.stdout, done.stderr) == (
            expected.returncode, expected.stdout, expected.stderr), options


def test_a_shard_result_carries_lines_and_counts_never_outcome_records() -> None:
    from kernel.commands._outcomes import replay_summary
    from kernel.commands._verdict import Counted
    from kernel.orchestrate._shards import Shard, classify_shard, shared_document
    from kernel.replay import ReplayAdapterRefusal, ReplayAdapterResult

    data = EXAMPLE.read_bytes()
    results = classify_shard(shared_document(data), Shard(0, 8), replay_summary)
    assert len(results) == 8
    serial = _kernel("replay", EXAMPLE, "-f", "jsonl").stdout.splitlines(keepends=True)
    for index, (attempt_id, summary, line) in enumerate(results):
        assert line == serial[index]
        record = json.loads(line)
        assert isinstance(summary, tuple) and len(summary) == 3
        counted, cause, hint = summary
        assert isinstance(counted, Counted)
        assert counted.disposition == record["outcome"]["replay_disposition"]
        assert attempt_id == record.get("attempt_id")
        flat = [attempt_id, *counted.reason_codes, counted.outcome_id, cause, hint]
        assert not any(isinstance(v, ReplayAdapterResult | ReplayAdapterRefusal) for v in flat)


def test_a_dask_shard_result_travels_as_one_pickle_and_comes_back_whole() -> None:
    """Dask's wire format sends a tuple it is handed item by item (one header and one
    pickle per outcome); the task's wrapped result must go as a single frame."""
    from distributed.protocol.serialize import Serialize, deserialize, serialize

    from kernel.commands._outcomes import replay_summary
    from kernel.orchestrate._shards import Shard, _run_whole, classify_shard, shared_document

    shared = shared_document(EXAMPLE.read_bytes())
    bare = classify_shard(shared, Shard(0, 8), replay_summary)
    wrapped = _run_whole(classify_shard, shared, Shard(0, 8), replay_summary)
    header, frames = serialize(Serialize(wrapped))  # type: ignore[no-untyped-call]
    assert "is-collection" not in header and len(frames) == 1
    # What the bare tuple would have cost: a frame per outcome.
    bare_header, bare_frames = serialize(Serialize(bare))  # type: ignore[no-untyped-call]
    assert bare_header.get("is-collection") is True and len(bare_frames) == len(bare) == 8
    back = deserialize(header, frames)  # type: ignore[no-untyped-call]
    assert back.value == bare


def _defective(bundles: dict[int, Path], directory: Path) -> dict[str, Path]:
    """Streams with defects in their attempt lines, each a case of the serial reader."""
    lines = bundles[10].read_bytes().splitlines(keepends=True)
    first_attempt = 1 + 10  # the header, then 10 run lines
    attempt = json.loads(lines[first_attempt + 3])
    attempt["attempt_index"] = 7
    cases = {
        "malformed": [*lines[:first_attempt + 2], b"{not json\n", *lines[first_attempt + 3:]],
        "wrong_index": [*lines[:first_attempt + 3], json.dumps(attempt).encode() + b"\n",
                        *lines[first_attempt + 4:]],
        "blank_line": [*lines[:first_attempt + 5], b"\n", *lines[first_attempt + 6:]],
        "truncated": lines[:-3],
        "trailing": [*lines, b"{}\n"],
    }
    paths = {}
    for name, content in cases.items():
        path = directory / f"{name}.jsonl"
        path.write_bytes(b"".join(content))
        paths[name] = path
    return paths


@pytest.mark.usefixtures("no_leftover_workers")
def test_defective_attempt_lines_give_the_serial_outcomes_and_refusals(
    tmp_path: Path, bundles: dict[int, Path]
) -> None:
    for name, path in _defective(bundles, tmp_path).items():
        expected = _kernel("replay", path, "-f", "jsonl")
        done = _kernel("replay", path, "-f", "jsonl", "--workers", "2", "--shard-size", "3")
        assert (done.returncode, done.stdout, done.stderr) == (
            expected.returncode, expected.stdout, expected.stderr), name
    # The trailing line is an envelope defect, after every outcome line: exit 2.
    assert expected.returncode == 2 and b"trailing_lines" in expected.stderr


def test_a_positioned_reader_reads_what_one_reader_reads(bundles: dict[int, Path]) -> None:
    lines = bundles[10].read_bytes().splitlines()
    head, attempts = lines[:11], [*lines[11:15], b"{bad", *lines[16:]]
    whole = BundleStreamReader()
    expected = [item for line in [*lines[:15], b"{bad", *lines[16:]]
                if (item := whole.feed(line)) is not None]
    base = BundleStreamReader()
    for line in head:
        assert base.feed(line) is None
    for cut in (0, 1, 4, 5, 9, 10):
        found = []
        for start, part in ((0, attempts[:cut]), (cut, attempts[cut:])):
            reader = base.positioned(start)
            found += [reader.feed(line) for line in part]
        assert [repr(item) for item in found] == [repr(item) for item in expected], cut
    with pytest.raises(ValueError, match="outside"):
        base.positioned(11)
    with pytest.raises(ValueError, match="not been read"):
        BundleStreamReader().positioned(0)


# --- faults -----------------------------------------------------------------------------


def _start(argv: list[str | Path]) -> subprocess.Popen[bytes]:
    # Unbuffered: the first line is read here, the rest by communicate(), which
    # reads the pipe itself (bytes a buffered reader had taken would be lost).
    return subprocess.Popen([sys.executable, "-c", KERNEL_MAIN, *map(str, argv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def _first_line(process: subprocess.Popen[bytes]) -> bytes:
    """The first outcome line on the command's stdout: the workers are running shards now."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else b""
    return line


@pytest.mark.usefixtures("no_leftover_workers")
def test_a_pool_worker_killed_mid_run_loses_and_duplicates_no_outcome(
    bundles: dict[int, Path], serial: dict[int, bytes]
) -> None:
    process = _start(["replay", bundles[1000], "-f", "jsonl", "--workers", "2",
                      "--shard-size", "20"])
    first = _first_line(process)
    workers = pool_workers(process.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    rest, stderr = process.communicate(timeout=120)  # the whole run takes seconds
    assert process.returncode == 0, stderr
    assert first + rest == serial[1000]
    assert b"note: a worker process died; the shards it had not returned were run again" in stderr


@pytest.mark.usefixtures("no_leftover_workers")
def test_workers_that_keep_dying_fail_closed_with_worker_lost(
    tmp_path: Path, bundles: dict[int, Path]
) -> None:
    out = tmp_path / "outcomes.jsonl"
    process = _start(["replay", bundles[1000], "-o", out, "--workers", "2",
                      "--shard-size", "5"])
    stderr = communicate_while_killing(process, lambda: pool_workers(process.pid))
    assert process.returncode == 2, stderr
    assert stderr.startswith(b"error: worker_lost: a worker process died 4 times"), stderr
    assert b"no outcome file written" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file, no temporary beside it


# Large enough that the shards outlast the test's reaction by far: on a quiet
# machine 1,000 attempts finished inside the 0.5 s the test used to sleep "into
# the shards" (8 of 8 runs exit 0), and on a slow one the signal met the pool's
# shutdown instead (issue 35, item 11). 5,000 attempts at --shard-size 5 take
# seconds after the first outcome is flushed; the test signals within one poll.
INTERRUPTED_SIZE = 5000


@pytest.fixture(scope="module")
def long_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _bundle(tmp_path_factory.mktemp("long-bundle"), INTERRUPTED_SIZE)


def _partial_outputs(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.stat().st_size > 0]


@pytest.mark.parametrize("group", [False, True], ids=["kill", "terminal-ctrl-c"])
def test_ctrl_c_ends_every_worker_within_a_bound(
    tmp_path: Path, long_bundle: Path, group: bool
) -> None:
    out = tmp_path / "outcomes.jsonl"
    argv = [sys.executable, "-c", KERNEL_MAIN, "replay", str(long_bundle), "-o", str(out),
            "--workers", "2", "--shard-size", "5"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=group)
    deadline = time.monotonic() + 120
    # Into the shards: the workers are up and outcome lines have reached the
    # unfinished output file (its first buffer flushed), so the command is inside
    # its loop over the shards' results, not setting up nor tearing down.
    while not (workers := pool_workers(process.pid)) or not _partial_outputs(tmp_path):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    sent = time.monotonic()
    if group:  # a terminal's Ctrl-C: SIGINT to the whole foreground group
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    elapsed = time.monotonic() - sent
    assert process.returncode == 130, stderr
    assert stderr.startswith(b"error: interrupted: SIGINT after "), stderr
    done = int(stderr.split(b" after ")[1].split(b" of ")[0])
    assert 0 < done < INTERRUPTED_SIZE, stderr  # mid-run: some outcomes, not all
    assert b"Traceback" not in stderr
    assert elapsed < 15, elapsed
    for worker in workers:
        assert not Path(f"/proc/{worker}").exists() or b"Z" in Path(
            f"/proc/{worker}/stat").read_bytes().split(b")")[-1][:3]
    assert list(tmp_path.iterdir()) == []


# --- a real cluster: dask scheduler + two dask worker processes ---------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    root = tmp_path / "cluster"
    root.mkdir()
    running = Cluster(root)
    try:
        yield running, running.start()
    finally:
        running.stop()
    for process in running.processes:
        assert process.poll() is not None


@pytest.mark.slow
def test_a_real_cluster_with_a_worker_killed_mid_run_writes_the_serial_bytes(
    tmp_path: Path, bundles: dict[int, Path], serial: dict[int, bytes],
    cluster: tuple[Cluster, str],
) -> None:
    running, address = cluster
    out = tmp_path / "outcomes.jsonl"
    done = _replay(bundles[10], out, "--scheduler", address, "--shard-size", "3")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == serial[10]
    process = _start(["replay", bundles[1000], "-f", "jsonl", "--executor", "dask",
                      "--scheduler", address, "--shard-size", "20"])
    first = _first_line(process)
    os.kill(running.workers[0].pid, signal.SIGKILL)  # no nanny: it stays dead
    rest, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert first + rest == serial[1000]
    assert running.workers[0].wait(10) == -signal.SIGKILL


@pytest.mark.parametrize(("options", "code"), [
    (("--workers", "0"), "invalid_worker_count"),
    (("--workers", "two"), "invalid_worker_count"),
    (("--executor", "inline", "--workers", "2"), "option_conflict"),
    (("--executor", "threads"), "unknown_executor"),
    (("--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "1"), "scheduler_unreachable"),
])
def test_executor_options_are_refused_before_anything_is_classified(
    tmp_path: Path, bundles: dict[int, Path], options: tuple[str, ...], code: str
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = _replay(bundles[10], out, *options)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith(f"error: {code}: "), done.stderr
    assert b"Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


# --- the run sent parsed -----------------------------------------------------------------


def _read_head(lines: list[bytes]) -> BundleStreamReader:
    reader = BundleStreamReader()
    for line in lines:
        assert reader.feed(line) is None
    assert reader.run_ready
    return reader


def test_a_resumed_reader_reads_and_replays_what_one_reader_does(
    bundles: dict[int, Path],
) -> None:
    # What a worker gets: the command's header and run, through a pickle.
    lines = bundles[10].read_bytes().splitlines()
    attempts = [*lines[11:15], b"{bad", *lines[16:]]
    whole = _read_head(lines[:11])
    expected = [whole.feed(line) for line in attempts]
    sent = pickle.loads(pickle.dumps(_read_head(lines[:11]).read_run(), 5))
    resumed = BundleStreamReader.resumed(*sent)
    found = [resumed.feed(line) for line in attempts]
    assert [repr(item) for item in found] == [repr(item) for item in expected]
    manifest = builtin_manifest()
    outcomes = [
        [outcome_line(item.attempt_index, item.attempt_id, classify_item(item, manifest, None)[0])
         for item in items if item is not None]
        for items in (expected, found)
    ]
    assert outcomes[0] == outcomes[1] and len(outcomes[0]) == 10
    with pytest.raises(ValueError, match="not been read"):
        BundleStreamReader().read_run()


def test_a_resumed_reader_refuses_a_run_its_header_does_not_state(
    bundles: dict[int, Path],
) -> None:
    header, _ = _read_head(bundles[10].read_bytes().splitlines()[:11]).read_run()
    _, other = _read_head(bundles[1].read_bytes().splitlines()[:2]).read_run()
    with pytest.raises(ValueError, match="not the one its header states"):
        BundleStreamReader.resumed(header, other)
    with pytest.raises(ValueError, match="not a stream header"):
        BundleStreamReader.resumed(other, header)  # type: ignore[arg-type]


def test_a_run_altered_after_the_reader_built_it_is_refused_not_trusted(
    bundles: dict[int, Path],
) -> None:
    # resumed() re-validates nothing: the facts replay examines for every run
    # it classifies catch a record changed behind attrs' back (ADR 0011).
    lines = bundles[10].read_bytes().splitlines()
    header, run = pickle.loads(pickle.dumps(_read_head(lines[:11]).read_run(), 5))
    object.__setattr__(run.candidate_attempts[3], "attempt_id", "0" * 64)
    item = BundleStreamReader.resumed(header, run).feed(lines[11])
    honest = _read_head(lines[:11]).feed(lines[11])
    assert isinstance(item, ReadyAttempt) and isinstance(honest, ReadyAttempt)
    manifest = builtin_manifest()
    forged = json.loads(outcome_line(0, item.attempt_id, classify_item(item, manifest, None)[0]))
    kept = json.loads(outcome_line(0, honest.attempt_id, classify_item(honest, manifest, None)[0]))
    assert forged["outcome"]["reason_codes"] == ["run_attempts_inconsistent"]
    assert forged["outcome"]["replay_disposition"] == "candidate_identity_mismatch"
    assert "run_attempts_inconsistent" not in json.dumps(kept)
