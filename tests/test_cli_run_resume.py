"""`kernel run` interrupted for real (SIGINT, SIGTERM) and continued with --resume.

A real run of real certifications (z3 -> cvc5) is signalled once it has
recorded some outcomes; it must leave a marker and exit 130 / 143; --resume
must keep what was recorded (the certification files are not touched
again), redo the rest, and give exactly the bytes of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel.cli import app
from tests.orchestrate_helpers import ROOT
from tests.test_external_helpers import assert_no_leftover

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
MAIN = "import sys; from kernel.cli import main; sys.argv[0] = 'kernel'; main()"
runner = CliRunner()
ATTEMPTS = 6


def _closing_bundle(tmp_path: Path) -> Path:
    """Six attempts whose contracts all close: six certifications."""
    doc = json.loads(DRAFT.read_text())
    closing = [doc["candidates"][0], doc["candidates"][3]]
    doc["candidates"] = [closing[i % 2] for i in range(ATTEMPTS)]
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(doc))
    out = tmp_path / "bundle.json"
    result = runner.invoke(app, ["bundle", str(draft), "--manifest", "certified.v1",
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _run(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", MAIN, "run", *map(str, args)],
                          capture_output=True, timeout=300, check=False)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def _interrupt(bundle: Path, work: Path, signum: int) -> subprocess.CompletedProcess[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", MAIN, "run", str(bundle), "--work-dir", str(work), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(_lines(work / "outcomes.jsonl")) < 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "name"),
                         [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_run_leaves_a_marker_and_resumes_to_the_uninterrupted_bytes(
    tmp_path: Path, signum: int, code: int, name: str
) -> None:
    bundle = _closing_bundle(tmp_path)
    reference = _run(bundle, "--work-dir", tmp_path / "whole", "-q", "-f", "jsonl")
    assert reference.returncode == 0, reference.stderr
    assert len(reference.stdout.splitlines()) == ATTEMPTS

    work = tmp_path / "work"
    stopped = _interrupt(bundle, work, signum)
    assert stopped.returncode == code, stopped.stderr
    assert stopped.stderr.decode().startswith(f"error: interrupted: {name} after ")
    assert "Traceback" not in stopped.stderr.decode()
    marker = json.loads((work / "INTERRUPTED").read_text())
    recorded = _lines(work / "outcomes.jsonl")
    assert marker == {"signal": name, "outcomes_recorded": len(recorded)}
    assert 2 <= len(recorded) < ATTEMPTS
    kept = {json.loads(line)["attempt_id"] for line in recorded}
    before = {a: os.stat(work / a / "certification.json") for a in kept}

    again = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work)])
    assert again.exit_code == 2 and again.stderr.startswith("error: work_dir_not_empty: ")

    out = tmp_path / "outcomes.jsonl"
    resumed = _run(bundle, "--work-dir", work, "--resume", "--out", out, "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == reference.stdout  # every attempt once, in order, same bytes
    assert (work / "outcomes.jsonl").read_bytes() == reference.stdout
    assert not (work / "INTERRUPTED").exists()
    for attempt, stat in before.items():  # recorded attempts were not certified again
        now = os.stat(work / attempt / "certification.json")
        assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert_no_leftover(tmp_path)


def test_resume_refuses_a_work_directory_of_another_run(tmp_path: Path) -> None:
    bundle = _closing_bundle(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "run-state.json").write_text('{"format": "something else"}\n')
    result = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work), "--resume"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: resume_other_run: ")


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    bundle = _closing_bundle(tmp_path)
    result = runner.invoke(app, ["run", str(bundle), "--work-dir", str(tmp_path / "none"),
                                 "--resume"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: resume_not_a_run: ")
