"""Issue 35, item 2: a command its environment stopped exits 4, in one line.

Seen: ``kernel replay B -o full/out.jsonl`` on a 64 KiB tmpfs printed a
``Traceback ... OSError: [Errno 28] No space left on device`` and exited 1,
which a pipeline reads as a negative verdict; ``discard()`` failed again
inside ``close()``. Here each command writes onto a real, nearly full tmpfs
(mounted for the test, unmounted after; skipped where mounting is not
permitted) and must exit 4 with one ``error: no_space:`` line, no traceback,
and no file at its ``-o`` path.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import kernel

BUNDLE = ROOT / "examples" / "replay" / "bundle.json"
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with 4 KiB left, mounted at ``tmp_path/full``."""
    where = tmp_path / "full"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (where / "filler").write_bytes(b"\0" * 60 * 1024)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _one_environment_line(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {code}: "), done.stderr


def _left(where: Path) -> list[str]:
    return sorted(name for name in os.listdir(where) if name != "filler")


def test_replay_onto_a_full_disk_exits_4_and_leaves_no_file(full_disk: Path) -> None:
    out = full_disk / "out.jsonl"
    done = kernel("replay", BUNDLE, "-o", out, "-q")
    _one_environment_line(done, "no_space")
    assert str(out) in done.stderr
    assert _left(full_disk) == []  # neither the output nor its temporary file


def test_bundle_onto_a_full_disk_exits_4_and_leaves_no_file(full_disk: Path) -> None:
    out = full_disk / "bundle.json"
    done = kernel("bundle", DRAFT, "--manifest", "builtin.v1", "-o", out)
    _one_environment_line(done, "no_space")
    assert _left(full_disk) == []


def test_run_with_its_work_directory_on_a_full_disk_exits_4(
    full_disk: Path, tmp_path: Path
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = kernel("run", BUNDLE, "--work-dir", full_disk / "W", "-o", out, "-q")
    _one_environment_line(done, "no_space")
    assert not out.exists()


def test_a_full_disk_is_not_a_verdict_even_where_the_verdict_would_be_a_pass(
    full_disk: Path,
) -> None:
    # The same draft sealed and replayed elsewhere passes (exit 0): on the full
    # disk the answer is the machine's, 4, never 0 with a missing file.
    sealed = full_disk.parent / "sealed.json"
    assert kernel("bundle", DRAFT, "--manifest", "builtin.v1", "-o", sealed).returncode == 0
    assert kernel("replay", sealed, "-o", full_disk.parent / "ok.jsonl", "-q").returncode == 0
    done = kernel("replay", sealed, "-o", full_disk / "out.jsonl", "-q")
    _one_environment_line(done, "no_space")
