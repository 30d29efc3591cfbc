"""The command's child processes and the signals around starting and stopping them.

Shared by the certification pool (``_process_pool``), the local Dask cluster
(``_executors``) and the shard workers (``_worker_pool``, ``_shards``):

- ``held_interrupts``: SIGINT and SIGTERM that arrive during a block (a
  worker's start, which writes its start-up data into a pipe) are acted on
  when it ends, so the block is never cut halfway (issue 20);
- ``sigint_blocked``: what a thread starts meanwhile inherits SIGINT blocked
  (a pool worker ignores the terminal's Ctrl-C; the command stops it);
- ``second_interrupts_ignored``: while workers are being stopped, a second
  Ctrl-C or SIGTERM cannot cut the bounded stop short;
- ``is_child`` / ``alive_children`` / ``wait_gone`` / ``kill``: a process is
  signalled only while ``/proc`` shows it as a live child of this process,
  so its pid is still its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Final

__all__ = [
    "KILL_SECONDS",
    "STOP_SECONDS",
    "alive_children",
    "held_interrupts",
    "interrupts_held",
    "is_child",
    "kill",
    "second_interrupts_ignored",
    "sigint_blocked",
    "wait_gone",
]

STOP_SECONDS: Final = 4.0  # after an interrupt: SIGTERM, then this long, then SIGKILL
KILL_SECONDS: Final = 2.0  # then this long for the killed to be gone (SIGKILL is not ignored)


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile: what it starts (threads, processes) inherits that.

    A signal that arrives meanwhile stays pending and is delivered here when
    the block ends, so no Ctrl-C is lost.
    """
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask here: nothing to do
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def second_interrupts_ignored() -> contextlib.AbstractContextManager[None]:
    """While the workers are stopped: SIGINT and SIGTERM ignored, so the bounded stop completes."""
    return _interrupts_handled_by(signal.SIG_IGN)


def alive_children(pids: list[int]) -> list[int]:
    return [pid for pid in pids if is_child(pid)]


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` (children of this process) to exit; those still alive."""
    deadline = time.monotonic() + seconds
    while (alive := alive_children(pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


def kill(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def is_child(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()  # Linux; elsewhere nothing is killed
    except OSError:
        return False
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0] not in (b"Z", b"X") and int(fields[1]) == os.getpid()


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive meanwhile are acted on at the end, by the handlers the
    caller had installed: the block is never cut halfway (main thread only)."""
    held: list[int] = []
    with interrupts_held(held):
        yield
    for signum in held:
        signal.raise_signal(signum)


def interrupts_held(held: list[int]) -> contextlib.AbstractContextManager[None]:
    """SIGINT and SIGTERM recorded in ``held`` meanwhile, not acted on (main thread only)."""

    def hold(signum: int, frame: object) -> None:
        if signum not in held:
            held.append(signum)

    return _interrupts_handled_by(hold)


@contextlib.contextmanager
def _interrupts_handled_by(
    handler: Callable[[int, FrameType | None], object] | signal.Handlers,
) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` meanwhile, then to the handlers they had.

    Only the main thread may set a handler; elsewhere (an embedding test
    runner's thread) nothing changes, and no signal is delivered there anyway.
    """
    previous: list[tuple[signal.Signals, Any]] = []
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous.append((signum, signal.signal(signum, handler)))
    except ValueError:
        pass
    try:
        yield
    finally:
        for signum, handler_before in previous:
            signal.signal(signum, handler_before)
