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
import threading
from importlib.machinery import ExtensionFileLoader
from types import FrameType
from typing import Final

# SIGTERM, unwound like Ctrl-C (so every cleanup runs) but told apart at the top; the
# main job records which of the two stopped it.
from kernel.job.errors import Terminated as Terminated

EXIT_SIGINT: Final = 130
EXIT_SIGPIPE: Final = 141
EXIT_SIGTERM: Final = 143


#: What the `kernel` launcher blocks across the interpreter's start-up (bin/kernel).
HELD_AT_START_UP: Final = frozenset({signal.SIGINT, signal.SIGTERM})


def accept_held_signals() -> None:
    """Unblock the signals the launcher held, so a pending one is raised now.

    Called once the handlers are in place: a Ctrl-C sent during start-up is
    then the same ``KeyboardInterrupt`` (or ``Terminated``) as one sent later.
    Without the launcher (``kernel-python``, ``python -m kernel``) nothing is
    blocked and this changes nothing.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_AT_START_UP)


def fragile_frame(frame: FrameType | None) -> bool:
    """Whether an exception raised in ``frame`` would be swallowed ("Exception ignored in").

    The interpreter runs weak-reference callbacks (the import system's module
    locks) and finalizers where an exception cannot propagate: it prints a
    traceback and drops the exception, and the command would go on as if
    never signalled. The signal may land any number of calls below such a
    frame (Dask's ``Future.__del__`` writes to its event loop's socket), so
    the whole stack is looked at, not only the innermost frame.

    An import in progress is not fragile in general: a ``KeyboardInterrupt``
    raised in a module's body propagates out of the ``import`` like any other
    exception. Counting every frame below an import as fragile deferred a
    start-up Ctrl-C again and again, each time into the next import, until
    the command had finished (exit 3 for a SIGINT sent 100 ms in). What is
    fragile is a C extension's initialisation, which calls back into Python
    (orjson's imports ``uuid``, ``enum``, ...) and may not check what comes
    back: an exception raised there crashed the interpreter (SIGSEGV in
    ``orjson`` at 150 ms). So an extension module being created or executed
    anywhere on the stack defers the signal too.
    """
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or _importing_internals(frame):
            return True
        frame = frame.f_back
    return False


def _importing_internals(frame: FrameType) -> bool:
    code = frame.f_code
    if not code.co_filename.startswith("<frozen importlib"):
        return False
    if code.co_name == "cb":  # a module lock's weak-reference callback
        return True
    return code.co_name in ("create_module", "exec_module") and isinstance(
        frame.f_locals.get("self"), ExtensionFileLoader)


def raise_interrupt(signum: int, frame: FrameType | None, exc: type[KeyboardInterrupt]) -> None:
    """Raise ``exc`` for ``signum`` now, or, inside a frame that would swallow it, a moment later.

    The signal is sent again to this process after 50 ms, out of that frame.
    """
    if fragile_frame(frame):
        _send_again(signum)
        return
    raise exc


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """An interrupt dropped where Python cannot raise: sent again in 50 ms, never printed.

    ``fragile_frame`` knows the finalizers and import callbacks seen so far;
    others drop an exception too (weak-reference and garbage-collector
    callbacks, C finalizers: CI saw "Exception ignored in: 'Path'" and a
    ``kernel replay`` interrupted by SIGINT exit 0). Whatever the context,
    the interrupt reaches this hook instead of the command's ``except``: it
    is re-sent, so the command still stops with 130 or 143.
    """
    kind = unraisable.exc_type
    if kind is not None and issubclass(kind, KeyboardInterrupt):
        _send_again(signal.SIGTERM if issubclass(kind, Terminated) else signal.SIGINT)
        return
    _previous_unraisablehook(unraisable)


_previous_unraisablehook = sys.unraisablehook


def _send_again(signum: int) -> None:
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise_interrupt(signum, frame, Terminated)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise_interrupt(signum, frame, KeyboardInterrupt)


def terminate_as_interrupt() -> None:
    """From now on SIGTERM raises ``Terminated`` and SIGINT ``KeyboardInterrupt``, never swallowed.

    Main thread only; elsewhere a no-op.
    """
    with contextlib.suppress(ValueError):  # not the main thread (an embedding test runner)
        signal.signal(signal.SIGTERM, _raise_terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
        sys.unraisablehook = _unraisable


def ignore_from_now() -> None:
    """The command is over (output complete, exit code decided): late SIGINT/SIGTERM ignored.

    The interpreter's exit gives every signal with a Python handler its
    default action back; a SIGTERM in those last milliseconds killed a run
    that had finished and written its output (status -15, no message;
    issue 20). Ignored, the exit status stays the command's own. Main
    thread only; elsewhere a no-op.
    """
    with contextlib.suppress(ValueError):
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


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
