"""Issue 35, finding 3: ``kernel run -o`` inside its own work directory is refused first.

Seen: ``-o W/mine.jsonl`` exited 0 and then ``kernel audit W`` said
``MISMATCH undeclared mine.jsonl entry`` (exit 3); ``-o W/bundle.json`` and
``-o W/run-state.json`` overwrote the bundle copy and the run state;
``-o W/sub/x.jsonl`` exited 2 but left a W that did not audit. Each is now
refused before anything is written (exit 2, ``output_in_work_dir``), so no
work directory is left at all, and a run writing elsewhere still audits.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import kernel

EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"


def _one_error_line(done: subprocess.CompletedProcess[str], code: str) -> None:
    lines = done.stderr.splitlines()
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]], done.stderr
    assert lines[-1].startswith(f"error: {code}: "), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    # (-o W/outcomes.jsonl, the run's own copy, is output_is_input, as before.)
    "inside", ["mine.jsonl", "bundle.json", "run-state.json", "sub/x.jsonl", "sub/../y.jsonl"])
def test_an_output_inside_the_work_directory_is_refused_before_anything(
    tmp_path: Path, inside: str
) -> None:
    work = tmp_path / "W"
    done = kernel("run", EXAMPLE, "--work-dir", work, "-o", f"{work}/{inside}")
    assert done.returncode == 2, done.stderr
    _one_error_line(done, "output_in_work_dir")
    assert not work.exists()  # nothing written, so nothing that fails an audit


def test_a_symlink_into_the_work_directory_is_inside_it(tmp_path: Path) -> None:
    work = tmp_path / "W"
    link = tmp_path / "elsewhere"
    work.mkdir()
    os.symlink(work, link)
    done = kernel("run", EXAMPLE, "--work-dir", work, "-o", link / "mine.jsonl")
    assert done.returncode == 2, done.stderr
    _one_error_line(done, "output_in_work_dir")
    assert list(work.iterdir()) == []


def test_an_output_beside_the_work_directory_is_fine_and_the_run_audits(
    tmp_path: Path,
) -> None:
    work = tmp_path / "W"
    out = tmp_path / "W-outcomes.jsonl"  # a sibling whose name starts like the directory's
    done = kernel("run", EXAMPLE, "--work-dir", work, "-o", out, "--fail-on", "integrity")
    assert done.returncode == 3, done.stderr  # the example's tampered attempt, as documented
    assert out.read_bytes() == (work / "outcomes.jsonl").read_bytes()
    audit = kernel("audit", work)
    assert audit.returncode == 0, audit.stdout + audit.stderr
