"""What every command does alike when it is stopped from outside: a signal, or a closed stdout.

- SIGINT raises ``KeyboardInterrupt`` (Python's default); SIGTERM is made to
  raise ``Terminated``, a ``KeyboardInterrupt`` too, so that the same
  ``with`` blocks unwind for both: an unfinished ``--out`` file is removed,
  never left beside the real one (README "Exit codes": 130 / 143).
- A reader that closes stdout early (``| head -1``) makes the next write fail
  with ``EPIPE``; the command stops there (exit 141, as a shell reports a
  process killed by SIGPIPE), and stdout is pointed at ``/dev/null`` so that
  the interpreter's final flush cannot print a traceback of its own.

Small on purpose: the command line installs the handler before the first
command runs, and ``kernel --help`` imports nothing of the commands.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType
from typing import Final

EXIT_SIGINT: Final = 130
EXIT_SIGPIPE: Final = 141
EXIT_SIGTERM: Final = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C (so every cleanup runs) but told apart at the top."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def terminate_as_interrupt() -> None:
    """From now on SIGTERM raises ``Terminated`` (main thread only; elsewhere a no-op)."""
    with contextlib.suppress(ValueError):  # not the main thread (an embedding test runner)
        signal.signal(signal.SIGTERM, _raise_terminated)


def interruption(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The signal's name and the exit code it gives."""
    if isinstance(exc, Terminated):
        return "SIGTERM", EXIT_SIGTERM
    return "SIGINT", EXIT_SIGINT


def silence_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a closed pipe is dropped."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (an embedding test runner)
        pass
