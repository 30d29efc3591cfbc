"""Sharded replay's process workers: a worker that dies while it returns a result.

CI saw ``kernel replay --workers 2`` hang for good after one worker was
SIGKILLed (``test_replay_sharded``, about 1 run in 40): the command and one
original worker alive, no replacement. CPython's ``ProcessPoolExecutor``
reads every worker's result from one shared pipe; a worker killed halfway
through writing a result leaves a partial message that the pool's manager
thread waits on for ever, since the surviving workers and the parent itself
keep the pipe's write end open, so no end of file ever comes. A shard's
result is tens of kilobytes (its outcome lines), larger than a pipe's
buffer, so the window was real.

Here the worker kills itself deterministically in that window: its job
returns a large result, and a thread of the same worker sends it SIGKILL as
soon as the worker's thread is inside the write(2) of the result
(``/proc/self/task/<tid>/syscall``), i.e. in the middle of the result's
write. The runner must replace the worker,
run the job again, hand back both results exactly once, in order, and
finish within a bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.processes import finished_within, in_a_large_write

_RESULT_BYTES = 48 * 1024 * 1024


def large_result_dying_once(shared: object, marker: str, number: int) -> bytes:
    """A job (run on a worker): ``number`` repeated; the first call of the run dies
    while its result is being written to the parent."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return bytes([number]) * _RESULT_BYTES
    worker = threading.get_native_id()

    def kill_mid_write() -> None:
        # The pipe holds 64 KiB: the write of a 48 MiB result blocks in the
        # kernel until the parent has read nearly all of it.
        while not in_a_large_write(worker):
            time.sleep(0.0002)
        time.sleep(0.002)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=kill_mid_write, daemon=True).start()
    return bytes([number]) * _RESULT_BYTES


_RUN = """
import sys
from kernel.orchestrate._shards import Job, process_shards, shared_document
from tests.test_shard_workers import large_result_dying_once
data = open(sys.argv[1], "rb").read()
with process_shards(shared_document(data), 2, fork=sys.argv[3] == "fork") as runner:
    print("started", *runner.methods, flush=True)
    for number in range(4):
        runner.submit(Job(large_result_dying_once, (sys.argv[2], number)))
    for number in range(4):
        job, result = runner.take()
        assert job.args[1] == number, job.args
        assert result == bytes([number]) * len(result) and len(result) > 0
        print(number, len(result), flush=True)
    print("restarts", runner.restarts, *runner.methods, flush=True)
"""


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_worker_killed_while_writing_its_result_is_replaced_and_its_job_run_again(
    tmp_path: Path, method: str
) -> None:
    marker = tmp_path / "died-once"
    process = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(ROOT / "examples" / "replay" / "bundle.json"),
         str(marker), method],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True,
    )
    stdout, stderr = finished_within(
        process, 60, "the runner hung after its worker died mid-write")
    assert marker.exists()  # the first job did arm its kill
    size = _RESULT_BYTES
    # The dead worker's replacement is spawned, whatever the first ones were.
    assert stdout.decode().splitlines() == [f"started {method} {method}"] + [
        f"{number} {size}" for number in range(4)
    ] + [f"restarts 1 {method} spawn"], stderr.decode(errors="replace")[-3000:]
    assert process.returncode == 0, stderr.decode(errors="replace")[-3000:]


# --- forked workers ---------------------------------------------------------------------


def what_a_worker_holds(shared: object) -> dict[str, object]:
    """A job: this worker's descriptors (their targets), stdout and SIGTERM handler."""
    held = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            held[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return {"fds": held, "pid": os.getpid(), "sigterm": repr(signal.getsignal(signal.SIGTERM))}


_HOLDS = """
import json, os, signal, sys, threading
from kernel.orchestrate._shards import Job, process_shards, shared_document
from tests.test_shard_workers import what_a_worker_holds
signal.signal(signal.SIGTERM, lambda *_: None)  # a handler of the caller's own
sys.stdout.write("buffered before the workers\\n")  # a pipe: block-buffered, not yet written
if sys.argv[2] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
data = open(sys.argv[1], "rb").read()
with process_shards(shared_document(data), 2, fork=True) as runner:
    mine = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            mine[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    for _ in range(4):
        runner.submit(Job(what_a_worker_holds, ()))
    held = [runner.take()[1] for _ in range(4)]
    methods = runner.methods
sys.stderr.write(json.dumps({"methods": methods, "mine": mine, "held": held}))
"""


def _holds(tmp_path: Path, thread: str) -> tuple[bytes, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", _HOLDS, str(ROOT / "examples" / "replay" / "bundle.json"),
         thread],
        capture_output=True, cwd=ROOT, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return done.stdout, cast(dict[str, Any], json.loads(done.stderr))


@pytest.mark.usefixtures("no_leftovers")
@pytest.mark.parametrize(("caller", "method"), [("alone", "fork"), ("thread", "spawn")],
                         ids=["forked", "spawned-beside-a-thread"])
def test_a_pool_worker_keeps_no_pipe_end_of_the_caller_nor_its_handlers(
    tmp_path: Path, caller: str, method: str
) -> None:
    # Forked only from a caller running no other thread (a lock another
    # thread held at the fork would stay held for ever in the child).
    stdout, found = _holds(tmp_path, caller)
    assert found["methods"] == [method, method]
    # What the caller had buffered on stdout is written once, by the caller
    # (multiprocessing flushes it before the fork, and a forked worker's
    # stdout is /dev/null should a flush have failed).
    assert stdout == b"buffered before the workers\n"
    ours = {target for target in found["mine"].values() if target.startswith("socket:")}
    assert len(ours) >= 2  # the caller's end of each worker's pipe
    assert len({held["pid"] for held in found["held"]}) == 2
    for held in found["held"]:
        # Its own pipe end only: none of the caller's ends, its own pipe's included.
        assert not set(held["fds"].values()) & ours, held
        assert held["sigterm"] == repr(signal.SIG_DFL), held
        if method == "fork":
            assert held["fds"]["1"] == os.devnull, held
