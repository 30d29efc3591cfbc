"""The certification pool: a worker killed while it returns a large result.

``kernel run --executor process`` certifies on a ``ProcessPoolExecutor``
(``kernel/orchestrate/_process_pool.py``), whose workers all write their
results into one pipe that the parent holds open at both ends. A result
carries the attempt's whole directory (ADR 0022: tens of kilobytes, up to
the evidence limit), more than the pipe's buffer: a worker SIGKILLed halfway
through writing one left a partial message that the pool's manager thread
waited on for ever (no end of file can come), so the pool was never seen
broken and the run hung (issue 35, item 11). The shard workers had the same
hang (``tests/test_shard_workers.py``).

Here the worker kills itself in that window: a thread of the worker sends it
SIGKILL as soon as the worker's thread is blocked inside a large write(2)
(the result pipe, ``/proc/self/task/<tid>/syscall``) or the pool's result
file appears (where a large result goes instead). The pool must break, be
started afresh on the next submit, and hand back every result whole, within
a bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.processes import finished_within, in_a_large_write

_RESULT_BYTES = 48 * 1024 * 1024


def _a_result_file(temporary: Path) -> bool:
    return any(temporary.glob("kernel-results-*/*"))


def large_result_dying_once(marker: str, number: int) -> bytes:
    """A task (run on a pool worker): ``number`` repeated; the first call of the run dies
    while its result is on its way back to the parent."""
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return bytes([number]) * _RESULT_BYTES
    worker, temporary = threading.get_native_id(), Path(os.environ["TMPDIR"])

    def kill_while_returning() -> None:
        while not (in_a_large_write(worker) or _a_result_file(temporary)):
            time.sleep(0.0002)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=kill_while_returning, daemon=True).start()
    return bytes([number]) * _RESULT_BYTES


_RUN = """
import sys
from concurrent.futures.process import BrokenProcessPool
from kernel.orchestrate._process_pool import process_pool
from tests.test_pool_results import large_result_dying_once
with process_pool(2) as pool:
    futures = [pool.submit(large_result_dying_once, sys.argv[1], n) for n in range(4)]
    for number, future in enumerate(futures):
        try:
            result = future.result()
        except BrokenProcessPool:  # sent again, as the driver does (lost_to_a_broken_pool)
            result = pool.submit(large_result_dying_once, sys.argv[1], number).result()
        assert result == bytes([number]) * len(result) and len(result) > 0
        print(number, len(result), flush=True)
    print("restarts", pool.restarts, flush=True)
"""


@pytest.mark.usefixtures("no_leftovers")
def test_a_certification_worker_killed_while_returning_its_result_hangs_nothing(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "died-once"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    stdout, stderr = finished_within(
        process, 60, "the pool hung after its worker died returning a result")
    assert marker.exists()  # the first task did arm its kill
    assert stdout.decode().splitlines() == [
        f"{number} {_RESULT_BYTES}" for number in range(4)
    ] + ["restarts 1"], stderr.decode(errors="replace")[-3000:]
    assert process.returncode == 0, stderr.decode(errors="replace")[-3000:]
    assert list(temporary.iterdir()) == []  # no result file outlives its pool


_NO_ROOM = """
import os, shutil
from kernel.orchestrate._process_pool import process_pool
with process_pool(1) as pool:
    shutil.rmtree(pool.pool.spill)  # its workers can no longer write a result file
    results = [pool.submit(bytes, n).result() for n in (16, 4096, 1 << 20)]
    assert [len(r) for r in results] == [16, 4096, 1 << 20] and not any(map(any, results))
    try:
        pool.submit(bytes.fromhex, "zz" * 2048).result()
    except ValueError as exc:
        print("raised", type(exc).__name__, flush=True)
    print("ok", pool.restarts, flush=True)
"""


def test_a_result_with_no_room_for_its_file_still_comes_back(tmp_path: Path) -> None:
    # A full or vanished temporary directory must not cost a certification: the result
    # comes through the pipe, as it did before results had files, and a raise stays a raise.
    done = subprocess.run(
        [sys.executable, "-c", _NO_ROOM], capture_output=True, text=True, timeout=120,
        cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["raised ValueError", "ok 0"], done.stderr[-3000:]
