"""The command line as a newcomer and a CI pipeline use it: real processes, bad input, signals.

Each test here reproduced a defect first (a PASS over tampered input, a
traceback, an exit code that said something else than what happened); the
fix is in the command named by the test. Every command is run in a fresh
interpreter, as the console script runs it (``tests/support/cli.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN

E2E_BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"
EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"


def _kernel(*args: str | bytes | Path, stdin: bytes | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    argv: list[str | bytes] = [sys.executable, "-c", KERNEL_MAIN]
    argv += [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=False,
                          cwd=cwd)


def _one_line_error(done: subprocess.CompletedProcess[bytes], code: str) -> None:
    """Stderr is one line ``error: <code>: ...``, and nothing of a traceback."""
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith(f"error: {code}: "), err


# --- kernel run --resume over a tampered work directory ----------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished `kernel run` of the shipped e2e bundle (real z3 -> cvc5)."""
    work = tmp_path_factory.mktemp("run") / "work"
    done = _kernel("run", E2E_BUNDLE, "--work-dir", work, "-q")
    assert done.returncode == 3, done.stderr  # the shipped bundle holds one tampered attempt
    return work


def test_resume_refuses_a_work_directory_whose_recorded_outcomes_were_forged(
    finished_run: Path, tmp_path: Path
) -> None:
    # Every recorded outcome that did not close is replaced by a closed one
    # (a real, self-consistent record of another attempt): a resume that
    # trusted the log would print PASS over the tampered attempt.
    work = tmp_path / "work"
    shutil.copytree(finished_run, work)
    log = work / "outcomes.jsonl"
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    closed = next(r["outcome"] for r in records
                  if r["outcome"]["replay_disposition"] == "contract_and_proof_closed")
    forged = [{**r, "outcome": closed} for r in records]
    log.write_bytes(b"".join(json.dumps(r, sort_keys=True, separators=(",", ":")).encode()
                             + b"\n" for r in forged))
    out = tmp_path / "outcomes.jsonl"
    done = _kernel("run", E2E_BUNDLE, "--work-dir", work, "--resume", "-o", out)
    assert done.returncode == 3, done.stderr
    _one_line_error(done, "resume_log_tampered")
    assert b"PASS" not in done.stdout + done.stderr
    assert not out.exists()
    assert log.read_bytes().count(b"\n") == len(records)  # nothing cleared or rewritten


def test_resume_refuses_one_recorded_outcome_given_to_another_attempt(
    finished_run: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    shutil.copytree(finished_run, work)
    log = work / "outcomes.jsonl"
    lines = log.read_bytes().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    swapped = {**second, "outcome": first["outcome"]}
    lines[1] = json.dumps(swapped, sort_keys=True, separators=(",", ":")).encode()
    log.write_bytes(b"".join(line + b"\n" for line in lines[:2]))
    done = _kernel("run", E2E_BUNDLE, "--work-dir", work, "--resume", "-q")
    assert done.returncode == 3
    _one_line_error(done, "resume_log_tampered")


def test_resume_of_an_untouched_prefix_gives_the_uninterrupted_bytes(
    finished_run: Path, tmp_path: Path
) -> None:
    # The check above must not refuse an honest log: keep three lines, resume.
    work = tmp_path / "work"
    shutil.copytree(finished_run, work)
    log = work / "outcomes.jsonl"
    whole = log.read_bytes()
    log.write_bytes(b"".join(line + b"\n" for line in whole.splitlines()[:3]))
    out = tmp_path / "outcomes.jsonl"
    done = _kernel("run", E2E_BUNDLE, "--work-dir", work, "--resume", "-q", "-o", out)
    assert done.returncode == 3, done.stderr  # the shipped tampered attempt, as before
    assert out.read_bytes() == whole


# --- kernel audit over a tampered work directory ----------------------------------


def test_audit_reports_a_deleted_manifest_copy(finished_run: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(finished_run, work)
    attempt = next(p for p in sorted(work.iterdir()) if (p / "manifest.json").exists())
    intact = _kernel("audit", work)
    assert intact.returncode == 0, intact.stdout
    (attempt / "manifest.json").unlink()
    done = _kernel("audit", work)
    assert done.returncode == 3, done.stdout
    assert b"manifest.json" in done.stdout and b"NOT intact" in done.stdout
