"""A signal while a pool spawns a worker never leaves that worker half-started (issue 20).

Spawning a worker writes its start-up data into a pipe. When a SIGTERM (or a
SIGINT) handler raised in the middle of that write, the child read half of
it and printed ``EOFError: Ran out of input`` with a traceback on the run's
stderr (seen in CI: ``kernel run --executor process``, SIGTERM after 1.0 s).
Here the signal is sent right after the child is spawned and before that
write, by a real process, to
both pools the kernel starts: ``kernel run``'s certification pool and the
pool of sharded replay. The signal must still be acted on (the handler's
exception reaches the caller) and no child may print anything.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.orchestrate_helpers import ROOT

_SIGNAL_DURING_SPAWN = """
import multiprocessing, multiprocessing.util as util, os, signal, sys
class Stop(Exception):
    pass
def stop(signum, frame):
    raise Stop()
signal.signal(signal.SIGTERM, stop)
original = util.spawnv_passfds
def spawn(path, args, passfds):
    # The child exists now; its start-up data is written into its pipe next.
    pid = original(path, args, passfds)
    if any("spawn_main" in str(arg) for arg in args):  # a worker (not the resource tracker)
        os.kill(os.getpid(), signal.SIGTERM)
    return pid
which = sys.argv[1]
util.spawnv_passfds = spawn
try:
    if which == "certification":
        from kernel.orchestrate._process_pool import _Pool
        pool = _Pool(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        pool.submit(os.getpid)
    else:
        from kernel.orchestrate._shards import process_shards, shared_document
        data = open(sys.argv[2], "rb").read()
        with process_shards(shared_document(data), 1):
            pass
    print("not stopped", flush=True)
except Stop:
    print("stopped", flush=True)
finally:
    util.spawnv_passfds = original
if which == "certification":
    pool.shutdown(wait=True, cancel_futures=True)
"""


@pytest.mark.parametrize("which", ["certification", "shards"])
def test_a_sigterm_while_a_worker_spawns_is_acted_on_after_it_and_no_child_complains(
    which: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_DURING_SPAWN, which,
         str(ROOT / "examples" / "replay" / "bundle.json")],
        capture_output=True, timeout=120, check=False, cwd=ROOT,
    )
    assert done.stdout == b"stopped\n", (done.stdout, done.stderr)
    assert done.stderr == b"", done.stderr.decode(errors="replace")[-2000:]
