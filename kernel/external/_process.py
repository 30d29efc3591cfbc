"""Process control: run one argv vector with a deadline, cancellation and caps.

Theory of operation (seed 003, "Process control and trust limits"):

- the command starts in a new session (``start_new_session=True``), so it
  leads its own process group; its descendants inherit that group;
- we wait for the leader *without reaping it* (``waitid(..., WNOWAIT)``):
  while the leader is an unreaped zombie its pid cannot be reused, so the
  ``killpg`` that follows can only reach the command's own group;
- on exit, expiry or cancellation alike the whole group is sent SIGKILL:
  no descendant outlives the command, whatever way it ended;
- stdout and stderr are drained while the command runs, by the thread that
  waits for it (one ``poll`` on both pipes and the pidfd: a full pipe never
  stalls the child), and kept up to a cap; the rest is counted, not stored;
  after the leader's exit and the group kill they are read to EOF for at
  most ``_DRAIN_AFTER_EXIT_SECONDS`` (a descendant that left the group may
  hold them open);
- a command that timed out or was cancelled reports that status; callers never
  treat anything it wrote as a result;
- an interrupt (``KeyboardInterrupt``) that lands inside ``Popen``, after the
  fork but before the pid is returned, kills every child of this process that
  leads its own session (only ``run_process`` starts those);
- with a ``containment`` level (``kernel.external._contain``, ADR 0009) the
  command runs through the launcher: in its own user + PID namespace, or
  under a child subreaper. Then no descendant survives the step whatever it
  did (``setsid``, ``setpgid``, double fork, ignoring SIGTERM), nor the
  kernel's death: on expiry or cancellation the launcher (a child subreaper
  at every level) is told to kill everything (SIGTERM) before the group kill;
- the wait is that ``poll``, woken by the leader's exit at once (its pidfd),
  by the deadline (the poll's timeout), or by a ``Cancellation`` being set
  (its descriptor becomes readable): no periodic wake-up. Only a plain
  ``threading.Event`` (which has no descriptor) or a system without
  ``pidfd_open`` falls back to looking every ``poll_seconds``;
- without a containment level (direct use of ``run_process``), a descendant
  that calls ``setsid`` leaves the group and is not reached.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final, final

import attrs

from kernel.external._contain import ContainmentLevel, launcher_argv
from kernel.external._sandbox import StepView

__all__ = ["Cancellation", "ProcessResult", "ProcessStatus", "run_process"]

_READ_CHUNK: Final = 64 * 1024
_DRAIN_AFTER_EXIT_SECONDS: Final = 5.0
_SUBREAPER_GRACE_SECONDS: Final = 5.0


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


class Cancellation(threading.Event):
    """A cancellation event that a waiting ``run_process`` notices at once.

    ``set`` also makes ``fileno()`` readable (a non-blocking pipe), so the
    wait sleeps on the command's exit, its deadline and this descriptor
    together, with no periodic wake-up. Safe to set from a signal handler
    (the write is one non-blocking ``os.write``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        weakref.finalize(self, _close_pipe, self._read, self._write)

    def fileno(self) -> int:
        """Readable once the event is set (until ``clear``)."""
        return self._read

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full pipe: already readable
            os.write(self._write, b"x")

    def clear(self) -> None:
        super().clear()
        with contextlib.suppress(OSError):
            while os.read(self._read, 4096):
                pass


def _close_pipe(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class _Capture:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False


def _read_into(fd: int, capture: _Capture) -> bool:
    """One read of ``fd`` into ``capture`` (kept to its limit, the rest counted); False at EOF."""
    try:
        chunk = os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not chunk:
        return False
    room = capture.limit - len(capture.data)
    if room > 0:
        capture.data += chunk[:room]
    if len(chunk) > room:
        capture.truncated = True
    return True


class _Outputs:
    """The command's stdout and stderr, drained by the thread that waits for it.

    One ``poll`` watches the pipes with the leader's pidfd and the
    cancellation descriptor, so a full pipe never stalls the command and no
    reader thread is started per launch (two threads cost about as much CPU
    as the ``fork``/``exec`` itself; BENCHMARKS.md, "Target 5b").
    """

    def __init__(self, stdout: IO[bytes], stderr: IO[bytes], limits: tuple[int, int]) -> None:
        self.out, self.err = _Capture(limits[0]), _Capture(limits[1])
        self._streams = {stdout.fileno(): (stdout, self.out), stderr.fileno(): (stderr, self.err)}
        for fd in self._streams:
            os.set_blocking(fd, False)

    def register(self, poller: select.poll) -> None:
        for fd in self._streams:
            poller.register(fd, select.POLLIN)

    def read(self, poller: select.poll, ready: set[int]) -> None:
        """Read each ready pipe once; a pipe at EOF is closed and leaves ``poller``."""
        for fd in [fd for fd in self._streams if fd in ready]:
            stream, capture = self._streams[fd]
            if not _read_into(fd, capture):
                poller.unregister(fd)
                del self._streams[fd]
                stream.close()

    def finish(self, seconds: float) -> None:
        """Read to EOF for at most ``seconds`` (the command is gone); ``run_process``
        closes whatever pipe is still open, on every way out."""
        deadline = time.monotonic() + seconds
        poller = select.poll()
        self.register(poller)
        while self._streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            events = poller.poll(max(1, math.ceil(remaining * 1000)))
            self.read(poller, {fd for fd, _ in events})


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


def _wait_exit(pid: int, pidfd: int | None, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``pid`` to exit (not reaped); True once it has.

    With a pidfd this is one ``poll``; without one, a sleep of ``seconds``.
    Only the stop of a contained step waits this way; a running command's
    wait also drains its pipes (``_wait_draining``).
    """
    if pidfd is None:
        if _leader_exited(pid):
            return True
        time.sleep(seconds)
        return _leader_exited(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    # Rounded up: a timeout rounded down to 0 ms would spin until the deadline.
    events = poller.poll(max(0, math.ceil(seconds * 1000)))
    return bool(events) or _leader_exited(pid)


def _wait_draining(
    pid: int, pidfd: int | None, outputs: _Outputs, timeout_seconds: float,
    cancel: threading.Event | None, poll_seconds: float,
) -> ProcessStatus:
    """Drain the command's pipes until its leader exits (``EXITED``), the deadline passes
    or ``cancel`` is set; the leader is not reaped."""
    deadline = time.monotonic() + timeout_seconds
    # A Cancellation wakes the wait through its descriptor; a plain Event
    # cannot, so then (and without a pidfd) the wait wakes every poll_seconds.
    wake = cancel.fileno() if isinstance(cancel, Cancellation) else None
    ticking = pidfd is None or (cancel is not None and wake is None)
    poller = select.poll()
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    if wake is not None:
        poller.register(wake, select.POLLIN)
    outputs.register(poller)
    # The event is looked at now, then when its descriptor wakes the wait, or
    # (``ticking``) every poll_seconds: output arriving is no reason to look.
    look_at = time.monotonic()
    ready: set[int] = set()
    while True:
        now = time.monotonic()
        if cancel is not None and (now >= look_at or (wake is not None and wake in ready)):
            if cancel.is_set():
                return ProcessStatus.CANCELLED
            look_at = now + poll_seconds if ticking else math.inf
        remaining = deadline - now
        if remaining <= 0:
            return ProcessStatus.TIMED_OUT
        wait = min(remaining, poll_seconds) if ticking else remaining
        # Rounded up: a timeout rounded down to 0 ms would spin until the deadline.
        ready = {fd for fd, _ in poller.poll(max(0, math.ceil(wait * 1000)))}
        outputs.read(poller, ready)
        if (pidfd is not None and pidfd in ready) or (
            (pidfd is None or not ready) and _leader_exited(pid)
        ):
            return ProcessStatus.EXITED


def _close_report(report: tuple[int, int] | None, *, both: bool) -> None:
    if report is not None:
        for fd in report if both else report[:1]:
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_report(report: tuple[int, int] | None) -> str:
    """What the launcher wrote on its report pipe (a failed exec), after the step ended."""
    if report is None:
        return ""
    try:
        os.set_blocking(report[0], False)
        return os.read(report[0], 4096).decode("utf-8", "backslashreplace")
    except OSError:  # nothing written (EAGAIN) or the pipe is gone
        return ""
    finally:
        _close_report(report, both=False)


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _stop_contained(pid: int, pidfd: int | None, level: ContainmentLevel | None) -> None:
    """Before the group kill: end every process of a contained step, not only the group."""
    if level is None:
        return
    # At every level the leader is the kernel's launcher, a child subreaper:
    # SIGTERM makes it kill and reap every descendant (a namespace's PID 1,
    # whose death empties the namespace, and anything a dying wrapper
    # orphaned), then exit.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    _wait_exit(pid, pidfd, _SUBREAPER_GRACE_SECONDS)


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
    containment: ContainmentLevel | None = None,
    executable_fd: int | None = None,
    pass_fds: Sequence[int] = (),
    view: StepView | None = None,
) -> ProcessResult:
    """Run ``argv`` (no shell) in ``cwd`` with exactly ``env``.

    Returns ``TIMED_OUT`` past ``timeout_seconds``, ``CANCELLED`` once
    ``cancel`` is set, ``LAUNCH_FAILED`` if the program cannot start, else
    ``EXITED`` with the exit code. Every way out kills the process group.

    With ``containment``, ``executable_fd`` (a sealed copy of ``argv[0]``'s
    bytes) is what runs, with ``argv[0]`` unchanged, through the launcher at
    that level; ``pass_fds`` are kept open for the command (its sealed scripts);
    ``view`` is what a ``SANDBOX`` step may see, write and use.
    """
    if timeout_seconds <= 0:
        raise ValueError("timeout_seconds must be positive")
    if (containment is None) != (executable_fd is None):
        raise ValueError("containment and executable_fd go together")
    report: tuple[int, int] | None = None
    status = ProcessStatus.EXITED
    pidfd: int | None = None
    outputs: _Outputs | None = None
    proc: subprocess.Popen[bytes] | None = None
    # The group kill is armed from the moment Popen returns: the launch sits
    # inside the try whose cleanup kills the group, so an interrupt
    # (KeyboardInterrupt from Ctrl-C or kernel run's SIGTERM) on any line after
    # it never leaves the command running, nor its pipes open.
    try:
        try:
            try:
                command = list(argv)
                extra_fds: tuple[int, ...] = ()
                if containment is not None and executable_fd is not None:
                    report = os.pipe()
                    command = list(
                        launcher_argv(containment, report[1], executable_fd, argv, view)
                    )
                    extra_fds = (executable_fd, report[1])
                proc = subprocess.Popen(
                    command,
                    cwd=cwd,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=tuple(pass_fds) + extra_fds,
                    shell=False,
                )
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                _close_report(report, both=True)
                return ProcessResult(
                    ProcessStatus.LAUNCH_FAILED, None, b"", b"", False, False, str(exc)
                )
            except BaseException:
                _close_report(report, both=True)
                # Interrupted (KeyboardInterrupt) inside Popen: the child may already be
                # forked while its pid never reached us. Only run_process starts children
                # that lead their own session, so kill every such child's group.
                _kill_session_children()
                raise
            if report is not None:
                os.close(report[1])  # the launcher holds the write end now
            assert proc.stdout is not None and proc.stderr is not None
            outputs = _Outputs(proc.stdout, proc.stderr, (stdout_limit, stderr_limit))
            pidfd = _open_pidfd(proc.pid)
            status = _wait_draining(proc.pid, pidfd, outputs, timeout_seconds, cancel,
                                    poll_seconds)
        finally:
            if proc is not None:
                try:
                    if status is not ProcessStatus.EXITED or not _leader_exited(proc.pid):
                        _stop_contained(proc.pid, pidfd, containment)
                finally:
                    # With start_new_session the leader's pid is the group id.
                    _kill_group(proc.pid)
                    returncode = proc.wait()
                    if pidfd is not None:
                        os.close(pidfd)
        assert outputs is not None  # set before the wait, which returned
        outputs.finish(_DRAIN_AFTER_EXIT_SECONDS)
    finally:
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    out, err = outputs.out, outputs.err
    failure = _read_report(report)
    if failure:
        return ProcessResult(
            ProcessStatus.LAUNCH_FAILED,
            None,
            bytes(out.data),
            bytes(err.data),
            out.truncated,
            err.truncated,
            failure,
        )
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
