"""`kernel digest` and `kernel replay` on the shipped example, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel.cli import app
from kernel.replay import ReplayAdapterRefusal, ReplayAdapterResult
from kernel.serde import loads
from tests import reference as ref

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "replay"
runner = CliRunner()


def test_the_shipped_examples_are_generated_not_hand_typed() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "build_example_chain.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr


def test_digest_reproduces_every_id_of_the_example_chain() -> None:
    result = runner.invoke(app, ["digest", str(EXAMPLES / "chain.json"), "--json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) > 20 and all(row["ok"] for row in rows)


def test_digest_reports_a_forged_id_with_exit_3(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "chain.json").read_text())
    doc["gate"]["gate_decision_id"] = "0" * 64
    forged = tmp_path / "chain.json"
    forged.write_text(json.dumps(doc))
    result = runner.invoke(app, ["digest", str(forged)])
    assert result.exit_code == 3  # integrity
    assert "MISMATCH" in result.stdout and " gate" in result.stdout


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"chain": 1, "chain": 2}', "duplicate_key"),
        (b"[1.5]", "float_forbidden"),
        (b"\xff", "invalid_utf8"),
        (b'{"problem_frame": {}}', "schema_mismatch"),
        (b"[" * 100 + b"]" * 100, "too_deep"),
    ],
)
@pytest.mark.parametrize("command", ["digest", "replay"])
def test_bad_files_are_refused_in_one_line_with_exit_2(
    tmp_path: Path, content: bytes, code: str, command: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = runner.invoke(app, [command, str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {code}: ")
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_a_missing_file_is_refused_with_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unreadable_file: ")


def test_replay_emits_one_canonical_outcome_per_attempt_in_run_order(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.jsonl"
    result = runner.invoke(app, ["replay", str(EXAMPLES / "bundle.json"), "--out", str(out)])
    # The example holds one tampered attempt on purpose: integrity, exit 3.
    assert result.exit_code == 3, result.output
    lines = out.read_bytes().splitlines()
    bundle = json.loads((EXAMPLES / "bundle.json").read_text())
    attempts = bundle["chain"]["run"]["candidate_attempts"]
    assert len(lines) == len(bundle["inputs"]) == len(attempts) == 8
    dispositions = []
    for index, (line, replay_input) in enumerate(zip(lines, bundle["inputs"], strict=True)):
        envelope = json.loads(line)
        # canonical: re-encoding with the ADR's settings gives the same bytes
        assert json.dumps(envelope, ensure_ascii=False, sort_keys=True,
                          separators=(",", ":")).encode() == line
        assert set(envelope) == {"attempt_id", "attempt_index", "outcome"}
        assert envelope["attempt_index"] == index
        assert envelope["attempt_id"] == attempts[index]["attempt_id"]
        record = envelope["outcome"]
        kind = ReplayAdapterResult if "replay_result_id" in record else ReplayAdapterRefusal
        outcome = loads(json.dumps(record).encode(), kind)
        if isinstance(outcome, ReplayAdapterResult):
            assert record["attempt_id"] == replay_input["attempt_id"]
            assert outcome.replay_result_id == ref.result_id(outcome)
        dispositions.append(record["replay_disposition"])
    assert dispositions == [
        "contract_and_proof_closed", "contract_refused", "contract_closed_but_proof_refused",
        "contract_and_proof_closed", "unsupported_replay_policy",
        "unsupported_proof_obligation", "contract_replay_unavailable",
        "candidate_identity_mismatch",
    ]
    assert result.stdout.startswith("8 attempts (run order)\n")
    assert result.stderr.startswith("verdict: FAIL integrity (exit 3): 8 attempts")


def test_replay_to_stdout_equals_the_file_and_is_deterministic(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.jsonl"
    first = runner.invoke(app, ["replay", str(EXAMPLES / "bundle.json"), "-q", "-f", "jsonl"])
    second = runner.invoke(app, ["replay", str(EXAMPLES / "bundle.json"), "-q", "--out", "-"])
    third = runner.invoke(app, ["replay", str(EXAMPLES / "bundle.json"), "-q", "-o", str(out)])
    assert first.exit_code == second.exit_code == third.exit_code == 3
    assert first.stdout == second.stdout == out.read_text()
    assert first.stderr == second.stderr == third.stderr == third.stdout == ""


def test_a_bundle_with_a_missing_input_is_refused_whole(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "bundle.json").read_text())
    doc["inputs"] = doc["inputs"][:-1]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["replay", str(path), "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: bundle_shape_invalid: ")
    assert not (tmp_path / "o.jsonl").exists()


def test_help_documents_the_exit_codes() -> None:
    for command in (["replay", "--help"], ["digest", "--help"], ["--help"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0
        assert "Exit codes" in result.stdout


@pytest.mark.parametrize("command", ["digest", "replay"])
def test_a_device_or_directory_is_refused_without_reading_it(tmp_path: Path,
                                                             command: str) -> None:
    for path in ("/dev/zero", str(tmp_path)):
        result = runner.invoke(app, [command, path])
        assert result.exit_code == 2
        assert result.stderr.startswith("error: not_a_regular_file: ")
