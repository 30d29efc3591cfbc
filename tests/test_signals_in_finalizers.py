"""A signal that lands below a finalizer is acted on, never swallowed (``_signals``).

Python drops an exception raised inside ``__del__`` (and in the import
system's weak-reference callbacks) after printing "Exception ignored in":
a SIGTERM raised there as ``Terminated`` would be lost, and the command
would go on and exit 0. ``make interrupts`` saw it with the signal landing
two calls below Dask's ``Future.__del__``; these tests put it there on
purpose, in a real process.
"""

from __future__ import annotations

import subprocess
import sys

from tests.orchestrate_helpers import ROOT

_BELOW_A_FINALIZER = """
import os, signal, sys, time
from kernel.commands._signals import Terminated, terminate_as_interrupt
terminate_as_interrupt()
def deeper():
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # the handler runs on one of these lines, two calls below __del__
        pass
def helper():
    deeper()
class Held:
    def __del__(self):
        helper()
try:
    Held()
    time.sleep(5)  # the signal, sent again out of the finalizer, arrives here
except Terminated:
    print("terminated")
    sys.exit(143)
print("never signalled")
"""


def _terminated(script: str) -> subprocess.CompletedProcess[bytes]:
    """``script`` run in its own interpreter; it must have ended by SIGTERM, as 143."""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=30
    )
    assert done.stdout == b"terminated\n", (done.stdout, done.stderr)
    assert done.returncode == 143
    return done


def test_a_sigterm_landing_below_a_finalizer_still_terminates() -> None:
    done = _terminated(_BELOW_A_FINALIZER)
    assert b"Exception ignored" not in done.stderr and b"Traceback" not in done.stderr


def test_a_sigterm_outside_any_finalizer_is_raised_at_once() -> None:
    # The control: without a finalizer on the stack nothing is deferred.
    _terminated(_BELOW_A_FINALIZER.replace("    Held()\n", "    helper()\n"))


_IN_A_WEAKREF_CALLBACK = """
import os, signal, sys, time, weakref
from kernel.commands._signals import Terminated, terminate_as_interrupt
terminate_as_interrupt()
class Target:
    pass
def callback(ref):  # a plain function: no frame fragile_frame knows
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass
target = Target()
ref = weakref.ref(target, callback)
try:
    del target  # the callback runs here; an exception raised in it is dropped
    time.sleep(5)  # the interrupt, sent again by the unraisable hook, arrives here
except Terminated:
    print("terminated")
    sys.exit(143)
print("never signalled")
"""


def test_a_sigterm_dropped_in_a_weakref_callback_is_sent_again_and_terminates() -> None:
    # CI: "Exception ignored in: 'Path'", then kernel replay exited 0 after a SIGINT.
    done = _terminated(_IN_A_WEAKREF_CALLBACK)
    assert b"Exception ignored" not in done.stderr and b"Traceback" not in done.stderr
