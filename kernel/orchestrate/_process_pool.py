"""``--executor process``: the certification pool, started afresh when a worker's death broke it.

See ``kernel.orchestrate._executors`` (the factory, and what the process
executor promises on an error or an interrupt) and ADR-0008 ("Failure
mapping"): a ``ProcessPoolExecutor`` is broken for good by one worker's
death, so ``_HealingPool`` replaces it at the next submit, at most
``MAX_POOL_RESTARTS`` times, and the driver sends each task it failed once
more (``kernel.orchestrate._driver.lost_to_a_broken_pool``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final

from kernel.orchestrate._children import (
    KILL_SECONDS,
    STOP_SECONDS,
    alive_children,
    held_interrupts,
    kill,
    second_interrupts_ignored,
    sigint_blocked,
    wait_gone,
)

__all__ = ["MAX_POOL_RESTARTS", "process_pool"]

_worker_stopping = False


def _worker_stop(signum: int, frame: object) -> None:
    """A pool worker's SIGTERM: unwind the running task (its step group is killed), then exit."""
    global _worker_stopping
    if _worker_stopping:  # already unwinding: do not raise into that cleanup again
        os._exit(128 + signum)
    _worker_stopping = True
    raise SystemExit(128 + signum)  # never printed as a traceback by multiprocessing


def _as_a_task(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` in a pool worker, which ends with it once SIGTERM came.

    The pool's worker loop catches whatever a task raises, ``SystemExit``
    included, sends it back as the task's result and takes the next task:
    a worker stopped by ``_worker_stop`` (the pool's SIGTERM when another
    worker died, or the command's on an interrupt) went on to begin the
    next queued certification, whose attempt directory was then used and
    its evidence lost. The task has unwound here (its producer/checker group
    killed on the way out): the worker exits now, without a result.
    """
    try:
        return fn(*args, **kwargs)
    finally:
        if _worker_stopping:
            os._exit(128 + signal.SIGTERM)


def _pool_worker_signals() -> None:
    """Pool worker initializer: ignore the terminal's SIGINT; SIGTERM stops the worker quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)


class _Pool(ProcessPoolExecutor):
    """A spawn pool whose workers are started (on ``submit``) with SIGINT blocked.

    A submit may spawn a worker, which writes the worker's start-up data into
    a pipe; a SIGINT or SIGTERM whose handler raised halfway through that
    write left a child reading half of it (``EOFError: Ran out of input``, a
    traceback on the run's stderr; issue 20). Both are held until the submit
    is over, then acted on (``held_interrupts``).
    """

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        with held_interrupts(), sigint_blocked():
            return super().submit(_as_a_task, fn, args, kwargs)


def _stop_pool(
    pool: ProcessPoolExecutor, others: frozenset[int] | None = frozenset(),
    *, during: Callable[[], contextlib.AbstractContextManager[None]] = second_interrupts_ignored,
) -> None:
    """Cancel queued tasks and stop running ones now, rather than wait for their deadlines.

    The pool keeps its workers and its manager thread in private attributes
    that ``shutdown`` clears, so they are read first. Each worker gets
    ``SIGTERM``: a running certification then kills its producer/checker
    group on the way out (``kernel.external``) and the worker exits. Whatever
    is still alive after ``STOP_SECONDS`` is killed; either way every worker
    has exited when this returns (a worker is signalled only while it is a
    live child of this process, so its pid is still its own). ``during``: what
    SIGINT and SIGTERM do meanwhile (after an interrupt, a second one is
    ignored; while a broken pool is replaced mid-run, one is held and acted on
    after, so a Ctrl-C then is not lost).
    """
    processes: object = getattr(pool, "_processes", None)
    workers = list(processes.values()) if isinstance(processes, dict) else []
    # A worker whose start the interrupt cut short is not in the pool's table
    # yet, but is a child that multiprocessing's exit would wait for: it too
    # (``others``: the children this process had before the pool, not its own;
    # ``None``: the pool's own workers only, as when a broken pool is replaced
    # while the command's other children, its shard workers, go on working).
    if others is not None:
        workers += [p for p in multiprocessing.active_children() if p.pid not in others]
    pids = sorted({pid for pid in (getattr(p, "pid", None) for p in workers)
                   if isinstance(pid, int)})
    manager: object = getattr(pool, "_executor_manager_thread", None)
    with during():
        pool.shutdown(wait=False, cancel_futures=True)
        for pid in alive_children(pids):
            kill(pid, signal.SIGTERM)
        for pid in wait_gone(pids, STOP_SECONDS):
            kill(pid, signal.SIGKILL)
        wait_gone(pids, KILL_SECONDS)
        if isinstance(manager, threading.Thread):
            manager.join(KILL_SECONDS)  # it reaps the workers; bounded, never hangs the exit


LOG: Final = logging.getLogger("kernel.orchestrate")
#: Pools started afresh after a worker's death; past this, the pool stays broken and
#: every later task fails closed (no evidence, a note), as a pool that cannot keep
#: a worker alive would only die again.
MAX_POOL_RESTARTS: Final = 3


class _HealingPool(Executor):
    """A spawn pool that is started afresh when a worker's death has broken it.

    ``ProcessPoolExecutor`` is broken for good once a worker dies: it fails
    every task it holds and refuses every later one, so one killed worker
    (the OOM killer, an operator) used to cost every certification left in
    the run. Here a submit that finds the pool broken stops it (its workers
    are gone already) and starts a new one, at most ``MAX_POOL_RESTARTS``
    times; the tasks the broken pool failed are submitted again by the driver
    (``lost_to_a_broken_pool``). Main thread only, as the driver is.
    """

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self.restarts = 0
        self.pool = self._start()

    def _start(self) -> _Pool:
        return _Pool(
            max_workers=self._workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_pool_worker_signals,
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        try:
            return self.pool.submit(fn, *args, **kwargs)
        except BrokenProcessPool:
            if self.restarts >= MAX_POOL_RESTARTS:
                raise
        _stop_pool(self.pool, None, during=held_interrupts)
        self.restarts += 1
        LOG.warning("a certification worker died; a fresh pool of %d worker(s) takes over "
                    "(restart %d of at most %d)", self._workers, self.restarts,
                    MAX_POOL_RESTARTS)
        self.pool = self._start()
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)


@contextlib.contextmanager
def process_pool(workers: int) -> Iterator[_HealingPool]:
    others = frozenset(
        pid for pid in (p.pid for p in multiprocessing.active_children()) if pid is not None
    )
    healing = _HealingPool(workers)
    try:
        yield healing
    except BaseException:
        _stop_pool(healing.pool, others)
        raise
    finally:
        # A no-op after _stop_pool. After a normal run the output is written: a
        # signal now must not cut the join short (it was reported as an
        # interrupted run whose output is incomplete, beside the complete file).
        with second_interrupts_ignored():
            healing.pool.shutdown(wait=True, cancel_futures=True)
