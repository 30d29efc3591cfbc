"""Process control: run one argv vector with a deadline, cancellation and caps.

Theory of operation (seed 003, "Process control and trust limits"):

- the command starts in a new session (``start_new_session=True``), so it
  leads its own process group; its descendants inherit that group;
- we wait for the leader *without reaping it* (``waitid(..., WNOWAIT)``):
  while the leader is an unreaped zombie its pid cannot be reused, so the
  ``killpg`` that follows can only reach the command's own group;
- on exit, expiry or cancellation alike the whole group is sent SIGKILL:
  no descendant outlives the command, whatever way it ended;
- stdout and stderr are drained concurrently (a full pipe never stalls the
  child) and kept up to a cap; the rest is counted, not stored;
- a command that timed out or was cancelled reports that status; callers never
  treat anything it wrote as a result;
- an interrupt (``KeyboardInterrupt``) that lands inside ``Popen``, after the
  fork but before the pid is returned, kills every child of this process that
  leads its own session (only ``run_process`` starts those);
- limits: a descendant that calls ``setsid`` itself leaves the group and is
  not reached. There is no OS sandbox.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final, final

import attrs

__all__ = ["ProcessResult", "ProcessStatus", "run_process"]

_READ_CHUNK: Final = 64 * 1024
_READER_JOIN_SECONDS: Final = 5.0


@final
class ProcessStatus(enum.Enum):
    """How a command ended."""

    EXITED = "exited"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LAUNCH_FAILED = "launch_failed"


@final
@attrs.frozen
class ProcessResult:
    """Outcome of one command: status, exit code and capped output."""

    status: ProcessStatus
    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    detail: str


class _Capture:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False


def _drain(stream: IO[bytes], capture: _Capture) -> None:
    try:
        while chunk := os.read(stream.fileno(), _READ_CHUNK):
            room = capture.limit - len(capture.data)
            if room > 0:
                capture.data += chunk[:room]
            if len(chunk) > room:
                capture.truncated = True
    except OSError:
        pass
    finally:
        stream.close()


def _leader_exited(pid: int) -> bool:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _kill_session_children() -> None:
    """SIGKILL the group of each live child of this process that leads its own session.

    Linux (``/proc``); elsewhere nothing is found. A child still between
    ``fork`` and ``setsid`` is not yet a session leader and is missed.
    """
    me = os.getpid()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                data = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            fields = data[data.rindex(b")") + 2 :].split()
            # fields: state, ppid, pgrp, session, ...
            pid = int(entry.name)
            if fields[0] not in (b"Z", b"X") and int(fields[1]) == me and int(fields[3]) == pid:
                _kill_group(pid)


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_seconds: float,
    cancel: threading.Event | None,
    stdout_limit: int,
    stderr_limit: int,
    poll_seconds: float = 0.02,
) -> ProcessResult:
    """Run ``argv`` (no shell) in ``cwd`` with exactly ``env``.

    Returns ``TIMED_OUT`` past ``timeout_seconds``, ``CANCELLED`` once
    ``cancel`` is set, ``LAUNCH_FAILED`` if the program cannot start, else
    ``EXITED`` with the exit code. Every way out kills the process group.
    """
    if timeout_seconds <= 0:
        raise ValueError("timeout_seconds must be positive")
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            shell=False,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return ProcessResult(ProcessStatus.LAUNCH_FAILED, None, b"", b"", False, False, str(exc))
    except BaseException:
        # Interrupted (KeyboardInterrupt) inside Popen: the child may already be
        # forked while its pid never reached us. Only run_process starts children
        # that lead their own session, so kill every such child's group.
        _kill_session_children()
        raise
    status = ProcessStatus.EXITED
    # From here on the group kill is armed: an interrupt (KeyboardInterrupt from
    # Ctrl-C or kernel run's SIGTERM) can land on any line, even while the
    # reader threads start, and must never leave the command running.
    try:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = _Capture(stdout_limit), _Capture(stderr_limit)
        readers = [
            threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True),
        ]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + timeout_seconds
        while not _leader_exited(proc.pid):
            if cancel is not None and cancel.is_set():
                status = ProcessStatus.CANCELLED
                break
            if time.monotonic() >= deadline:
                status = ProcessStatus.TIMED_OUT
                break
            if cancel is not None:
                cancel.wait(poll_seconds)
            else:
                time.sleep(poll_seconds)
    finally:
        # With start_new_session the leader's pid is the group id.
        _kill_group(proc.pid)
        returncode = proc.wait()
    for reader in readers:
        reader.join(_READER_JOIN_SECONDS)
    detail = {
        ProcessStatus.EXITED: f"exited with status {returncode}",
        ProcessStatus.TIMED_OUT: f"still running after {timeout_seconds:g}s; process group killed",
        ProcessStatus.CANCELLED: "cancelled; process group killed",
    }[status]
    return ProcessResult(
        status,
        returncode if status is ProcessStatus.EXITED else None,
        bytes(out.data),
        bytes(err.data),
        out.truncated,
        err.truncated,
        detail,
    )
