"""`kernel attest --out` follows the rules of every other output (issue 20, finding 1).

The attestation used to be written by a writer of its own: a temporary file
renamed over whatever ``--out`` named. A FIFO became a regular file (its
reader never got the envelope), a symlink was replaced instead of followed,
and ``--out`` naming the ``--outcomes`` file replaced the very outcomes the
envelope's subjects had just hashed. ``kernel attest`` writes two files (the
envelope, and the verification summary beside it), so a device or FIFO,
which has no "beside", is refused before anything is signed; the other
rules are ADR 0013's ("Outputs").
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.orchestrate_helpers import stored_main_job
from tests.support.cli import kernel

ENVELOPE = "attestation.dsse.json"
SUMMARY = "verification-summary.dsse.json"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A real `kernel run` work directory, its outcomes file, and a signing key."""
    work, out = stored_main_job(tmp_path_factory.mktemp("e2e"))
    keys = tmp_path_factory.mktemp("keys")
    done = kernel("attest-keygen", keys / "signer.pem", keys / "signer.pub")
    assert done.returncode == 0, done.stderr
    return work, out, keys / "signer.pem"


@pytest.fixture
def run(stored: tuple[Path, Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    work, outcomes, key = stored
    target = tmp_path / "work"
    shutil.copytree(work, target, symlinks=True)
    copy = tmp_path / "outcomes.jsonl"
    shutil.copyfile(outcomes, copy)
    return target, copy, key


def _one_line_error(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {code}: "), done.stderr


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_out_onto_the_outcomes_it_attests_is_refused_and_the_outcomes_survive(
    run: tuple[Path, Path, Path],
) -> None:
    work, outcomes, key = run
    before = outcomes.read_bytes()
    done = kernel("attest", work, "--key", key, "--outcomes", outcomes, "--out", outcomes)
    assert done.returncode == 2, done.stderr  # before: 0, the outcomes replaced by the envelope
    _one_line_error(done, "output_is_input")
    assert outcomes.read_bytes() == before
    assert not (work / ENVELOPE).exists() and not (outcomes.parent / SUMMARY).exists()


def test_out_onto_the_key_is_refused_and_the_key_survives(run: tuple[Path, Path, Path]) -> None:
    work, _, key = run
    before = key.read_bytes()
    done = kernel("attest", work, "--key", key, "--out", key)
    assert done.returncode == 2, done.stderr
    _one_line_error(done, "output_is_input")
    assert key.read_bytes() == before


def test_the_summary_beside_out_never_lands_on_an_input(run: tuple[Path, Path, Path]) -> None:
    # --out elsewhere/x.json puts the summary at elsewhere/verification-summary.dsse.json;
    # when that is the --outcomes file, it is an input too.
    work, outcomes, key = run
    hostage = outcomes.parent / SUMMARY
    shutil.copyfile(outcomes, hostage)
    before = hostage.read_bytes()
    done = kernel("attest", work, "--key", key, "--outcomes", hostage,
                  "--out", outcomes.parent / "envelope.json")
    assert done.returncode == 2, done.stderr
    _one_line_error(done, "output_is_input")
    assert hostage.read_bytes() == before
    assert not (outcomes.parent / "envelope.json").exists()


def test_out_onto_a_fifo_is_refused_before_anything_is_signed(
    run: tuple[Path, Path, Path], tmp_path: Path,
) -> None:
    work, _, key = run
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = _listing(tmp_path)
    done = kernel("attest", work, "--key", key, "--out", fifo)
    assert done.returncode == 2, done.stderr  # before: 0 and the FIFO replaced by a file
    _one_line_error(done, "output_not_writable")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _listing(tmp_path) == before
    assert not (work / ENVELOPE).exists()


def test_out_onto_a_directory_is_refused(run: tuple[Path, Path, Path], tmp_path: Path) -> None:
    work, _, key = run
    (tmp_path / "dir").mkdir()
    done = kernel("attest", work, "--key", key, "--out", tmp_path / "dir")
    assert done.returncode == 2, done.stderr
    _one_line_error(done, "output_not_writable")


def test_out_onto_a_symlink_replaces_its_target_and_keeps_the_link(
    run: tuple[Path, Path, Path], tmp_path: Path,
) -> None:
    work, outcomes, key = run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "signed.json"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    done = kernel("attest", work, "--key", key, "--outcomes", outcomes, "--out", link)
    assert done.returncode == 0, done.stderr  # before: the link replaced, its target untouched
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes().startswith(b'{"payload":')
    assert done.stdout.strip() == str(target)
    # The summary sits beside the envelope itself, where `kernel audit` looks for it.
    assert (elsewhere / SUMMARY).read_bytes().startswith(b'{"payload":')
    assert not (tmp_path / SUMMARY).exists()
    pub = key.with_suffix(".pub")
    verified = kernel("audit", work, "--outcomes", outcomes, "--verify-key", pub,
                      "--attestation", target)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_summary_onto_a_symlink_is_followed(
    run: tuple[Path, Path, Path], tmp_path: Path,
) -> None:
    work, outcomes, key = run
    real = tmp_path / "real-summary.json"
    real.write_bytes(b"old\n")
    (tmp_path / SUMMARY).symlink_to(real)
    done = kernel("attest", work, "--key", key, "--outcomes", outcomes,
                  "--out", tmp_path / "envelope.json")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / SUMMARY).is_symlink()
    assert real.read_bytes().startswith(b'{"payload":')
