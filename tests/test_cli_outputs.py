"""Outputs that never destroy (issue 20, finding 1; adr/0013 "Outputs").

``-o`` used to write a temporary file and rename it over whatever the path
named: run as root, ``kernel bundle DRAFT -o /dev/null`` replaced the
machine's ``/dev/null`` with a regular file; a FIFO was replaced (its reader
hung), a symlink replaced (its target untouched), and ``kernel replay
same.json -o same.json`` overwrote its own input. Every test runs the real
command line (``tests/support/cli.py``).

The tests that write to the real ``/dev/null`` and ``/dev/stdout`` first
prove, on a pseudo terminal of their own, that the command writes through a
character device; only then do they touch the machine's (a regression must
never replace them). Against the old code they fail at that guard.
"""

from __future__ import annotations

import os
import pty
import stat
import subprocess
import sys
import threading
import tty
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN, kernel

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"


def _one_line_error(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {code}: "), done.stderr


def _sealed(tmp_path: Path) -> bytes:
    done = kernel("bundle", DRAFT)
    assert done.returncode == 0, done.stderr
    return done.stdout.encode()


def _commands(tmp_path: Path) -> dict[str, tuple[tuple[str | Path, ...], bytes]]:
    """Each writing command's arguments (before ``-o``) and the bytes it writes."""
    outcomes = tmp_path / "expected.jsonl"
    done = kernel("replay", EXAMPLE, "-q", "-o", outcomes)
    assert done.returncode == 3, done.stderr  # the example holds one tampered attempt
    return {
        "bundle": (("bundle", DRAFT), _sealed(tmp_path)),
        "replay": (("replay", EXAMPLE, "-q"), outcomes.read_bytes()),
    }


@pytest.mark.parametrize("command", ["bundle", "replay"])
def test_out_onto_a_fifo_writes_through_to_its_reader(tmp_path: Path, command: str) -> None:
    args, expected = _commands(tmp_path)[command]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE) as reader:
        try:
            done = kernel(*args, "-o", fifo)
            # Before: the FIFO was replaced by a regular file and cat waited forever.
            received, _ = reader.communicate(timeout=20)
        finally:
            reader.kill()
    assert done.returncode in (0, 3), done.stderr
    assert received == expected
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _through_a_terminal(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """Run the command with ``-o`` a pseudo terminal's device; what its other end read."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # the bytes pass unchanged (no \n -> \r\n)
    device = os.ttyname(slave)
    received: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = kernel(*args, "-o", device)
        assert stat.S_ISCHR(os.stat(device).st_mode)
    finally:
        os.close(slave)
        reader.join(timeout=20)
        os.close(master)
    return done, b"".join(received)


@pytest.mark.parametrize("command", ["bundle", "replay"])
def test_out_onto_a_character_device_writes_through(tmp_path: Path, command: str) -> None:
    args, expected = _commands(tmp_path)[command]
    done, received = _through_a_terminal(*args)
    assert done.returncode in (0, 3), done.stderr  # before: unwritable_output, exit 2
    assert received == expected


def _writes_through_devices(tmp_path: Path) -> None:
    """Fail unless the command writes through a device of this test's own.

    Checked before a test points it at the machine's /dev/null or
    /dev/stdout: a regression (a rename over the path) must fail here, on a
    pseudo terminal, and never replace the machine's device or symlink.
    """
    probe, received = _through_a_terminal("bundle", DRAFT)
    assert probe.returncode == 0 and received == _sealed(tmp_path), (
        f"not written through a device; the machine's devices left alone: {probe.stderr}")


def test_out_onto_dev_stdout_writes_to_the_pipe_stdout_is(tmp_path: Path) -> None:
    # /dev/stdout -> /proc/self/fd/1 -> pipe:[N]: a device path with no real path.
    _writes_through_devices(tmp_path)
    done = kernel("bundle", DRAFT, "-o", "/dev/stdout")
    assert done.returncode == 0, done.stderr
    assert done.stdout == kernel("bundle", DRAFT).stdout


def test_out_onto_dev_null_leaves_it_a_character_device(tmp_path: Path) -> None:
    # Guard first: on a device of this test's own, the command must write
    # through; only then may it be pointed at the machine's /dev/null.
    _writes_through_devices(tmp_path)
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    for args in (("bundle", DRAFT), ("replay", EXAMPLE, "-q")):
        done = kernel(*args, "-o", "/dev/null")
        assert done.returncode in (0, 3), done.stderr
        after = os.stat("/dev/null")
        assert stat.S_ISCHR(after.st_mode)
        assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.parametrize("command", ["bundle", "replay"])
def test_out_onto_a_symlink_replaces_its_target_and_keeps_the_link(
    tmp_path: Path, command: str
) -> None:
    args, expected = _commands(tmp_path)[command]
    target = tmp_path / "real.out"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.out"
    link.symlink_to(target.name)
    done = kernel(*args, "-o", link)
    assert done.returncode in (0, 3), done.stderr
    assert link.is_symlink() and os.readlink(link) == target.name  # before: replaced
    assert target.read_bytes() == expected  # before: untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected.jsonl", "link.out",
                                                          "real.out"]


def test_out_onto_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    done = kernel("bundle", DRAFT, "-o", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert (tmp_path / "made.json").read_bytes() == _sealed(tmp_path)


def test_out_onto_a_directory_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    directory = tmp_path / "outdir"
    directory.mkdir()
    done = kernel("bundle", DRAFT, "-o", directory)
    assert done.returncode == 2
    _one_line_error(done, "output_not_writable")  # before: unwritable_output after sealing
    assert list(directory.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outdir"]


def test_out_onto_a_regular_file_still_replaces_it_atomically(tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    out.write_bytes(b"old\n")
    inode = out.stat().st_ino
    done = kernel("bundle", DRAFT, "-o", out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == _sealed(tmp_path)
    assert out.stat().st_ino != inode  # a new file renamed into place, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.json"]


# --- an output that is one of the inputs ---------------------------------------------


def _same_file_forms(tmp_path: Path, source: Path) -> dict[str, tuple[Path, Path]]:
    """(input, output) pairs naming one file: itself, a hard link, a symlink, ./ spelled."""
    data = tmp_path / source.name
    data.write_bytes(source.read_bytes())
    hard = tmp_path / f"hard-{source.name}"
    os.link(data, hard)
    soft = tmp_path / f"soft-{source.name}"
    soft.symlink_to(data.name)
    return {
        "same path": (data, data),
        "hard link": (data, hard),
        "symlink": (data, soft),
        "other spelling": (data, tmp_path / "." / data.name),
    }


@pytest.mark.parametrize("form", ["same path", "hard link", "symlink", "other spelling"])
def test_replay_onto_its_own_bundle_is_refused_before_anything_runs(
    tmp_path: Path, form: str
) -> None:
    source, out = _same_file_forms(tmp_path, EXAMPLE)[form]
    done = kernel("replay", source, "-o", out)
    assert done.returncode == 2  # before: exit 3, the bundle replaced by its outcomes
    _one_line_error(done, "output_is_input")
    assert source.read_bytes() == EXAMPLE.read_bytes()
    assert done.stdout == ""


@pytest.mark.parametrize("form", ["same path", "hard link", "symlink"])
def test_bundle_onto_its_own_draft_is_refused(tmp_path: Path, form: str) -> None:
    source, out = _same_file_forms(tmp_path, DRAFT)[form]
    done = kernel("bundle", source, "-o", out)
    assert done.returncode == 2  # before: exit 0, the draft replaced by its bundle
    _one_line_error(done, "output_is_input")
    assert source.read_bytes() == DRAFT.read_bytes()


def test_run_onto_its_own_bundle_is_refused_before_anything_runs(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(EXAMPLE.read_bytes())
    work = tmp_path / "work"
    done = kernel("run", bundle, "--work-dir", work, "-o", bundle)
    assert done.returncode == 2
    _one_line_error(done, "output_is_input")
    assert bundle.read_bytes() == EXAMPLE.read_bytes()
    assert not work.exists()  # nothing ran


def test_stdout_and_stdin_are_never_the_same_file(tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", f'"$0" -c "$1" bundle - -o - < "{DRAFT}"', sys.executable,
         "import sys; from kernel.cli import main; sys.argv[0] = 'kernel'; main()"],
        capture_output=True, check=False, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == _sealed(tmp_path)


def test_replay_of_stdin_redirected_from_its_output_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(EXAMPLE.read_bytes())
    with bundle.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", KERNEL_MAIN, "replay", "-", "-o", str(bundle)],
            stdin=stdin, capture_output=True, text=True, check=False, timeout=120,
        )
    assert done.returncode == 2  # before: exit 3, the bundle replaced by its outcomes
    _one_line_error(done, "output_is_input")
    assert bundle.read_bytes() == EXAMPLE.read_bytes()


def test_stdin_from_another_file_is_not_the_output(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.jsonl"
    with EXAMPLE.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", KERNEL_MAIN, "replay", "-", "-q", "-o", str(out)],
            stdin=stdin, capture_output=True, text=True, check=False, timeout=120,
        )
    assert done.returncode == 3, done.stderr  # the example's one tampered attempt
    assert out.read_bytes().count(b"\n") == 8
