"""``--executor process``: the certification pool, started afresh when a worker's death broke it.

See ``kernel.orchestrate._executors`` (the factory, and what the process
executor promises on an error or an interrupt) and ADR-0008 ("Failure
mapping"): a ``ProcessPoolExecutor`` is broken for good by one worker's
death, so ``_HealingPool`` replaces it at the next submit, at most
``MAX_POOL_RESTARTS`` times, and the driver sends each task it failed once
more (``kernel.orchestrate._driver.lost_to_a_broken_pool``).

A pool's workers all write their results into one pipe that the parent holds
open at both ends. A worker killed halfway through writing a result larger
than the pipe's buffer (a certification's result carries its attempt
directory, tens of kilobytes and up to the evidence limit: ADR 0022) left a
partial message that the pool's manager thread waited on for ever: no end of
file can come while the parent holds the write end, so the pool was never
seen broken and ``kernel run --executor process`` hung (issue 35, item 11;
the shard workers' pool had the same hang, ``_worker_pool``). So a result
crosses that pipe only as a message of at most ``_INLINE_BYTES``, written in
one ``write(2)`` shorter than ``PIPE_BUF`` (atomic: whole or not at all); a
larger one is pickled into a file of the pool's own 0700 directory and only
its name and SHA-256 are sent. A worker killed while it writes that file
sends nothing: the pool sees it die and breaks, as for a death at any other
moment.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, InvalidStateError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool, _ExceptionWithTraceback
from types import TracebackType
from typing import Any, Final, cast, final

import attrs

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


#: A pickled result up to this size is sent through the pool's result pipe itself: its
#: message (with the pool's own framing) stays far below ``PIPE_BUF`` (4096 on Linux),
#: so its one ``write(2)`` is atomic. Anything larger travels as a ``_Spilled`` file.
_INLINE_BYTES: Final = 1024


@final
@attrs.frozen
class _Spilled:
    """A task's outcome pickled into ``path``, as ``(ok, value or exception)``; ``sha256``
    of those bytes. Read (and removed) by the parent, never trusted unchecked."""

    path: str
    sha256: str
    size: int

    def load(self) -> tuple[bool, Any]:
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(self.size + 1)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise OSError(f"{self.path}: not the result its worker wrote")
        outcome = pickle.loads(data)
        if not (isinstance(outcome, tuple) and len(outcome) == 2 and type(outcome[0]) is bool):
            raise OSError(f"{self.path}: not a task's outcome")
        return outcome


def _spill(directory: str, outcome: tuple[bool, Any]) -> Any:
    """In a worker: ``outcome`` as the parent is to get it; a large one through a file."""
    data = pickle.dumps(outcome, pickle.HIGHEST_PROTOCOL)
    if outcome[0] and len(data) <= _INLINE_BYTES:  # a raise goes by file: its traceback is long
        return outcome[1]
    path = os.path.join(directory, f"{os.getpid()}-{uuid.uuid4().hex}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return _Spilled(path, hashlib.sha256(data).hexdigest(), len(data))


def _as_a_task(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], spill: str
) -> Any:
    """``fn(*args, **kwargs)`` in a pool worker, which ends with it once SIGTERM came.

    The pool's worker loop catches whatever a task raises, ``SystemExit``
    included, sends it back as the task's result and takes the next task:
    a worker stopped by ``_worker_stop`` (the pool's SIGTERM when another
    worker died, or the command's on an interrupt) went on to begin the
    next queued certification, whose attempt directory was then used and
    its evidence lost. The task has unwound here (its producer/checker group
    killed on the way out): the worker exits now, without a result.

    What it returns or raises goes back through ``spill`` when it is large
    (see the module docstring): the result pipe only ever carries a short,
    atomic message.
    """
    try:
        try:
            outcome: tuple[bool, Any] = (True, fn(*args, **kwargs))
        except Exception as exc:
            trace = cast(TracebackType, exc.__traceback__)  # set: it was just raised
            outcome = (False, _ExceptionWithTraceback(exc, trace))
        try:
            return _spill(spill, outcome)
        except (pickle.PicklingError, TypeError, AttributeError, OSError):
            # Not picklable: the pool's own handling (a small message) says so. No room
            # for the file (a full temporary directory): the pipe, as before this module
            # had files, rather than a certification lost to the temporary directory.
            if outcome[0]:
                return outcome[1]
            raise outcome[1].exc from None
    finally:
        if _worker_stopping:
            os._exit(128 + signal.SIGTERM)


def _settle(outer: Future[Any], inner: Future[Any]) -> None:
    """``outer`` (the caller's future) ends as ``inner`` (the pool's) did, its spill read."""
    try:
        if inner.cancelled():
            if outer.cancel():
                outer.set_running_or_notify_cancel()
            return
        error = inner.exception()
        if error is not None:
            outer.set_exception(error)
            return
        value = inner.result()
        if isinstance(value, _Spilled):
            try:
                ok, value = value.load()
            except Exception as exc:  # unreadable or altered: the task failed, never a value
                outer.set_exception(exc)
                return
            if not ok:
                outer.set_exception(value)
                return
        outer.set_result(value)
    except InvalidStateError:  # the caller cancelled it meanwhile: nothing to deliver
        pass


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

    A large result comes back through a file of ``spill``, the pool's own
    0700 directory (removed with the pool), never in parts through the
    shared result pipe (the module docstring); each ``submit`` returns a
    future of its own that ends once the pool's has and its file is read.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spill = tempfile.mkdtemp(prefix="kernel-results-")
        self._remove_spill = weakref.finalize(self, shutil.rmtree, self.spill, True)

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        with held_interrupts(), sigint_blocked():
            inner = super().submit(_as_a_task, fn, args, kwargs, self.spill)
        outer: Future[Any] = Future()
        outer.add_done_callback(lambda done: inner.cancel() if done.cancelled() else None)
        inner.add_done_callback(lambda done: _settle(outer, done))
        return outer

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:  # every worker has exited: no file is being written any more
            self._remove_spill()


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
    remove: object = getattr(pool, "_remove_spill", None)
    if callable(remove):  # its workers are gone: what they left of their results goes too
        remove()


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
