"""The command line as a newcomer and a CI pipeline use it: real processes, bad input, signals.

Each test here reproduced a defect first (a PASS over tampered input, a
traceback, an exit code that said something else than what happened); the
fix is in the command named by the test. Every command is run in a fresh
interpreter, as the console script runs it (``tests/support/cli.py``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import IO

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


def _copied_log(finished_run: Path, tmp_path: Path) -> Path:
    """The outcome log of a copy of ``finished_run``'s work directory."""
    work = tmp_path / "work"
    shutil.copytree(finished_run, work)
    return work / "outcomes.jsonl"


def _line(record: object) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def test_resume_refuses_a_work_directory_whose_recorded_outcomes_were_forged(
    finished_run: Path, tmp_path: Path
) -> None:
    # Every recorded outcome that did not close is replaced by a closed one
    # (a real, self-consistent record of another attempt): a resume that
    # trusted the log would print PASS over the tampered attempt.
    log = _copied_log(finished_run, tmp_path)
    work = log.parent
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    closed = next(r["outcome"] for r in records
                  if r["outcome"]["replay_disposition"] == "contract_and_proof_closed")
    forged = [{**r, "outcome": closed} for r in records]
    log.write_bytes(b"".join(_line(r) + b"\n" for r in forged))
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
    log = _copied_log(finished_run, tmp_path)
    work = log.parent
    lines = log.read_bytes().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    swapped = {**second, "outcome": first["outcome"]}
    lines[1] = _line(swapped)
    log.write_bytes(b"".join(line + b"\n" for line in lines[:2]))
    done = _kernel("run", E2E_BUNDLE, "--work-dir", work, "--resume", "-q")
    assert done.returncode == 3
    _one_line_error(done, "resume_log_tampered")


def test_resume_of_an_untouched_prefix_gives_the_uninterrupted_bytes(
    finished_run: Path, tmp_path: Path
) -> None:
    # The check above must not refuse an honest log: keep three lines, resume.
    log = _copied_log(finished_run, tmp_path)
    work = log.parent
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


# --- signals and a closed stdout ----------------------------------------------------


def _stream_bundle(tmp_path: Path) -> list[bytes]:
    """The shipped draft sealed as a bundle stream: its lines (header, run, attempts)."""
    path = tmp_path / "stream.jsonl"
    done = _kernel("bundle", DRAFT, "--layout", "stream", "-o", path)
    assert done.returncode == 0, done.stderr
    return path.read_bytes().splitlines(keepends=True)


def _unread(pipe: IO[bytes]) -> int:
    """Bytes written to ``pipe`` that its reader has not read yet."""
    (count,) = struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))
    return int(count)


def _started(argv: list[str | Path], stdin_lines: list[bytes], cwd: Path,
             ready: str | None = None) -> subprocess.Popen[bytes]:
    """A real ``kernel`` that has read all of ``stdin_lines`` (and made ``ready`` in ``cwd``).

    The pipe is left open: the command waits for the rest of its input, so a
    signal sent now finds it in the middle of its work (its handlers are in
    place: it reads stdin only once a command runs), whatever the machine's speed.
    """
    process = subprocess.Popen([sys.executable, "-c", KERNEL_MAIN, *map(str, argv)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=cwd)
    assert process.stdin is not None
    process.stdin.write(b"".join(stdin_lines))
    process.stdin.flush()
    deadline = time.monotonic() + 60
    while _unread(process.stdin) or (
            ready is not None and not any(p.name.startswith(ready) for p in cwd.iterdir())):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr
        time.sleep(0.02)
    return process


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGINT, 130, "SIGINT"),
                                                      (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_replay_removes_its_unfinished_outcome_file(
    tmp_path: Path, signum: int, code: int, name: str
) -> None:
    # SIGTERM used to kill the process outright (exit -15, no message): the
    # unfinished .outcomes.jsonl.* stayed beside where the real file goes.
    lines = _stream_bundle(tmp_path)  # header, the run's 4 attempts, then 4 inputs
    process = _started(["replay", "-", "-o", "outcomes.jsonl"], lines[:-2], tmp_path,
                       ".outcomes.jsonl.")
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert re.fullmatch(f"error: interrupted: {name} after [0-2] of 4 attempts; no summary; "
                        "no outcome file written\n", stderr.decode()), stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stream.jsonl"]


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGINT, 130, "SIGINT"),
                                                      (signal.SIGTERM, 143, "SIGTERM")])
def test_any_command_interrupted_says_so_in_one_line(
    tmp_path: Path, signum: int, code: int, name: str
) -> None:
    # `kernel bundle` has no handler of its own: SIGINT used to exit 130 in
    # silence and SIGTERM to kill it (no message, no clean-up).
    header = json.loads(DRAFT.read_bytes())
    candidates = header.pop("candidates")
    lines = [json.dumps({"format": "replay-kernel.draft-stream.v1", "header": header}).encode()
             + b"\n", json.dumps(candidates[0]).encode() + b"\n"]
    process = _started(["bundle", "-", "-o", "bundle.jsonl"], lines, tmp_path)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert stderr.decode() == (f"error: interrupted: {name}; the output is incomplete and no "
                               "output file was written\n")
    assert not (tmp_path / "bundle.jsonl").exists()


def _with_closed_stdout(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    """The command with a stdout whose reader is gone (``| head -1`` after its line)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                              stdout=write_end, stderr=subprocess.PIPE, timeout=120,
                              check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["replay", EXAMPLE, "-f", "jsonl"], ["replay", EXAMPLE],
                                  ["digest", EXAMPLE], ["schema", "--list"],
                                  ["bundle", DRAFT]])
def test_a_closed_stdout_is_exit_141_in_one_line_never_exit_1(args: list[str | Path]) -> None:
    # It used to exit 1 ("the policy does not hold") in silence, hiding the
    # shipped bundle's integrity failure (exit 3) behind a policy verdict.
    done = _with_closed_stdout(*args)
    assert done.returncode == 141, done.stderr
    assert done.stderr == (b"error: broken_pipe: stdout was closed by its reader; "
                           b"the output is incomplete\n")


def test_a_closed_stdout_leaves_no_outcome_file(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = _with_closed_stdout("replay", EXAMPLE, "-f", "jsonl", "-o", out)
    assert done.returncode == 141
    assert list(tmp_path.iterdir()) == []


# --- paths and help ------------------------------------------------------------------


def test_check_pins_refuses_a_path_that_is_not_utf8_in_one_line(tmp_path: Path) -> None:
    # It used to end in a traceback (IdentityError: lone_surrogate), exit 1.
    name = os.fsencode(tmp_path) + b"/tool-\xff\xfe"
    with open(name, "wb") as handle:
        handle.write(b"#!/bin/sh\n")
    done = _kernel("check", "pins", name)
    assert done.returncode == 2 and done.stdout == b""
    _one_line_error(done, "path_not_utf8")


def test_digest_names_a_bundle_stream_instead_of_calling_it_malformed(tmp_path: Path) -> None:
    # A stream was refused as "malformed_json: line 2 column 1: Extra data".
    stream = b"".join(_stream_bundle(tmp_path))
    for args, stdin in ((["digest", tmp_path / "stream.jsonl"], None), (["digest", "-"], stream)):
        done = _kernel(*args, stdin=stdin)
        assert done.returncode == 2 and done.stdout == b""
        _one_line_error(done, "bundle_stream_not_supported")
        assert b"kernel replay reads streams" in done.stderr


def test_audit_names_a_bundle_stream_given_as_its_bundle(
    finished_run: Path, tmp_path: Path
) -> None:
    _stream_bundle(tmp_path)
    done = _kernel("audit", finished_run, "--outcomes", finished_run / "outcomes.jsonl",
                   "--bundle", tmp_path / "stream.jsonl")
    assert done.returncode == 2 and done.stdout == b""
    _one_line_error(done, "bundle_stream_not_supported")


def _subcommands() -> list[list[str]]:
    from kernel.cli import COMMANDS

    groups = {"check": ["run", "replay", "identity", "pins"], "verify": ["plan", "seal", "gate"]}
    return [[name, *([sub] if sub else [])] for name in sorted(COMMANDS)
            for sub in groups.get(name, [""])]


@pytest.mark.parametrize("command", _subcommands(), ids=" ".join)
def test_every_command_s_help_gives_exit_codes_and_an_example_in_plain_text(
    command: list[str],
) -> None:
    # `check` and `verify` were drawn in rich boxes that cut long option help
    # with an ellipsis ("containment_unavailab…"); no command gave an example.
    done = _kernel(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert text.startswith(f"Usage: kernel {' '.join(command)} ")
    assert "Exit" in text and f"Example: kernel {' '.join(command)}" in " ".join(text.split())
    assert not any(mark in text for mark in "…╭│╰"), text


def test_audit_reports_an_outcomes_file_cut_short_without_a_bundle(
    finished_run: Path, tmp_path: Path
) -> None:
    # Each remaining line is sound, so this audited intact (exit 0) unless
    # --bundle was given: an interrupted run's log passed as the run's outcomes.
    lines = (finished_run / "outcomes.jsonl").read_bytes().splitlines(keepends=True)
    cut = tmp_path / "outcomes.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    whole = _kernel("audit", finished_run, "--outcomes", finished_run / "outcomes.jsonl")
    assert whole.returncode == 0, whole.stdout
    done = _kernel("audit", finished_run, "--outcomes", cut)
    assert done.returncode == 3, done.stdout
    assert b"outcome_mismatch outcomes.jsonl outcome count" in done.stdout


def test_audit_of_a_missing_directory_says_it_is_missing(tmp_path: Path) -> None:
    done = _kernel("audit", tmp_path / "nowhere")
    assert done.returncode == 2
    _one_line_error(done, "not_a_directory")
    assert done.stderr.endswith(b"nowhere: no such directory\n")


def test_schema_write_onto_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    # It used to end in a traceback (FileExistsError from mkdir), exit 1.
    taken = tmp_path / "schemas"
    taken.write_bytes(b"")
    done = _kernel("schema", "--write", taken)
    assert done.returncode == 2 and done.stdout == b""
    _one_line_error(done, "unwritable_output")


@pytest.mark.parametrize("args", [["check", "identity", "-", "CHECK"], ["audit", "-"],
                                  ["attest", "RUN", "--key", "-"],
                                  ["attest-keygen", "-", "key.pub"],
                                  ["check", "replay", "-", "--manifest", "m", "--repo", "."]])
def test_dash_where_a_named_file_is_needed_is_refused_as_such(
    args: list[str], tmp_path: Path
) -> None:
    # '-' was looked up as a file named '-' ("No such file or directory").
    done = _kernel(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == b""
    _one_line_error(done, "stdin_not_supported")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_command_line_is_imported_is_one_line_exit_130() -> None:
    # A Ctrl-C in the first few hundred milliseconds (typer, the command
    # modules being imported) ended in a traceback. Made deterministic here:
    # the import of typer itself is interrupted.
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def interrupted(name, *args, **kwargs):\n"
            "    if name == 'typer':\n"
            "        raise KeyboardInterrupt\n"
            "    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = interrupted\n"
            "from kernel.cli import main\n"
            "sys.argv = ['kernel', 'replay', '--help']\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          check=False)
    assert done.returncode == 130
    assert done.stderr == b"error: interrupted: SIGINT; nothing was done\n"
