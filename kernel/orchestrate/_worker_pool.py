"""Spawned worker processes, each with its own pipe: a worker's death is an end of file.

Why not ``concurrent.futures.ProcessPoolExecutor`` (which sharded replay
used first): its workers all write results into one shared pipe that the
parent holds open at both ends. A worker killed halfway through writing a
result larger than the pipe's buffer (a shard's outcome lines are tens of
kilobytes) leaves a partial message, and the pool's manager thread waits for
the rest for ever: no end of file can come while the parent and the other
workers hold the write end. ``kernel replay --workers 2`` hung that way in
CI after a worker was SIGKILLed (``tests/test_shard_workers.py`` kills a
worker exactly there).

Theory of operation:

- each worker is a spawned interpreter holding one end of its own duplex
  pipe; the parent closes its copy of that end at once, so the worker is the
  only writer: if it dies, a read in the parent returns what was complete
  and then ``EOFError``, never blocks; a write to it fails with
  ``BrokenPipeError``;
- a worker runs one task at a time and holds at most ``DEPTH`` (2): the
  next one is sent while the current one runs, so a worker never idles
  while the parent is busy with an earlier result; a reader thread in the
  worker takes each message off the pipe at once, so a send never waits on
  a busy worker. ``submit`` queues a task; ``result(task)`` serves the pool
  (reads finished results, sends queued tasks) until that task has ended;
  a worker's results come back in the order of its tasks;
- a worker that dies (end of file, a broken pipe, its process exited) is
  replaced by a fresh one, and the tasks it held go back to the front of
  the queue, in order; ``on_death(cause)``, called first, may raise instead
  (the caller's bound on deaths);
- a task that raises in the worker ends with ``TaskFailed`` carrying its
  type and message; so does a result that cannot be pickled;
- a worker starts as its ``Start`` says: a **spawned** interpreter (the
  default; what it needs comes through its initializer's arguments, which
  must be small, see ``_shards``), or a **fork** of the caller, which then
  shares the caller's memory as it was (a parsed run costs a spawned worker
  a pickle and an unpickle; ADR 0020). A fork is taken only on Linux from a
  process running no other thread (no lock can be held by a thread the
  child lacks); otherwise, and for every replacement of a dead worker, the
  pool asks ``again`` for a spawned start. A forked worker keeps nothing of
  the caller but memory: it closes its copies of the caller's ends of the
  workers' pipes, its own included (a worker stops on the end of file of
  its pipe, which a copy of the caller's end held elsewhere would delay for
  ever), points stdout at ``/dev/null`` (multiprocessing flushes the
  caller's stdout before the fork and the child's copy at its exit: bytes a
  failed flush left buffered are not written twice) and sets every signal
  the caller handled back to its default. The pool's workers are started before the
  caller opens an output file (``kernel replay``), so no other descriptor
  it holds means anything to a reader;
- workers start with SIGINT ignored from birth (a terminal's Ctrl-C
  reaches the whole group; the caller decides) and with SIGINT and SIGTERM
  held in the parent meanwhile (a handler raising between the spawn and the
  write of the child's start-up data left it printing ``EOFError``);
- ``close`` ends the workers: an end of file and a bounded wait after a
  complete run, SIGTERM then SIGKILL after ``stop_seconds`` otherwise.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Final, Literal, cast, final

import attrs

from kernel.orchestrate._children import held_interrupts

__all__ = ["Start", "Task", "TaskFailed", "WorkerPool", "fork_is_safe"]

#: Tasks a worker holds at once: the one it runs and the next.
DEPTH: Final = 2


@final
@attrs.frozen
class Start:
    """How a worker begins: a process started by ``method`` runs ``initializer(*initargs)``.

    For ``spawn`` the arguments are pickled into the new interpreter's start-up
    pipe, so they must be small; for ``fork`` they are the caller's objects
    themselves, in the child's copy of its memory.
    """

    method: Literal["spawn", "fork"]
    initializer: Callable[..., None]
    initargs: tuple[object, ...] = ()


def fork_is_safe() -> bool:
    """Whether a worker may be forked from this process now: Linux, and no other thread.

    A thread that holds a lock (an allocator's, a stream's, the logging
    module's) at the fork leaves it held for ever in the child, which has no
    such thread; with one thread, none is held by anyone else.
    """
    return sys.platform == "linux" and threading.active_count() == 1


class TaskFailed(Exception):
    """A task raised in its worker (or its result could not be sent back)."""


@final
class Task:
    """One call ``fn(*args)`` to run on some worker; ``done`` once its outcome is known."""

    __slots__ = ("args", "done", "error", "fn", "value")

    def __init__(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self.fn = fn
        self.args = args
        self.done = False
        self.value: object = None
        self.error: str | None = None


@final
class _Worker:
    __slots__ = ("connection", "method", "process", "tasks")

    def __init__(self, process: BaseProcess, connection: Connection, method: str) -> None:
        self.process = process
        self.connection = connection
        self.method = method
        self.tasks: deque[Task] = deque()  # sent, in order; results come back in this order


def _forget_the_caller(others: tuple[int, ...]) -> None:
    """In a forked worker: keep the caller's memory, drop what would act on its behalf.

    ``others`` are the caller's end of this worker's pipe and its
    descriptors of the workers started before this one (their pipes' ends and
    sentinels): a copy of the caller's end of a pipe held here would keep
    that pipe's worker from ever seeing the end of file it stops on. Not
    every descriptor: multiprocessing's fork keeps one unnamed pipe end open
    in the child, the sentinel the caller waits on, and closing it reads as
    the worker's death.
    stdout becomes ``/dev/null``: multiprocessing flushes the caller's
    stdout before it forks and the child's copy at its exit, so bytes a
    failed flush left in the buffer would otherwise be written twice.
    Handlers the caller installed (its SIGTERM, the handler that holds
    interrupts while a worker starts) would run in the child with the
    caller's state: every one goes back to the default.
    """
    for descriptor in others:
        with contextlib.suppress(OSError):
            os.close(descriptor)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)


def _serve(
    connection: Connection,
    initializer: Callable[..., None],
    initargs: tuple[object, ...],
    forked: tuple[int, ...] | None = None,
) -> None:
    """A worker's life: initialize, then run one task per message until the pipe ends.

    ``forked``: this worker is a fork of the caller, and these are the
    caller's descriptors it must close (``_forget_the_caller``).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    try:
        if forked is not None:
            _forget_the_caller(forked)
        initializer(*initargs)
    except Exception:  # the parent sees this worker die and counts it
        os._exit(1)
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()

    def read() -> None:  # off the pipe at once: the parent's send never waits on a task
        while True:
            try:
                inbox.put(connection.recv())
            except (EOFError, OSError):
                inbox.put(None)
                return

    threading.Thread(target=read, daemon=True).start()
    while True:
        message = inbox.get()
        if message is None:
            return
        fn, args = cast(tuple[Callable[..., object], tuple[object, ...]], message)
        try:
            reply: tuple[bool, object] = (True, fn(*args))
        except Exception as exc:
            reply = (False, f"{type(exc).__name__}: {exc}")
        try:
            connection.send(reply)
        except (BrokenPipeError, ConnectionResetError):
            return
        except Exception as exc:  # the result cannot be pickled: nothing was written
            connection.send((False, f"{type(exc).__name__}: {exc}"))


@final
class WorkerPool:
    """``workers`` processes, each begun as ``first`` says; replacements as ``again()`` says.

    ``again`` is called for each replacement of a dead worker, and for a
    first worker when ``first`` is a fork that ``fork_is_safe`` refuses: it
    must give a spawned start (mid-run, the caller may run other threads).
    """

    def __init__(
        self,
        workers: int,
        first: Start,
        *,
        again: Callable[[], Start],
        on_death: Callable[[BaseException], None],
        stop_seconds: float,
    ) -> None:
        self._again = again
        self._on_death = on_death
        self._stop_seconds = stop_seconds
        self._queue: deque[Task] = deque()
        self._workers: list[_Worker] = []
        try:
            for _ in range(workers):
                start = first
                if start.method == "fork" and not fork_is_safe():
                    start = self._again()
                self._workers.append(self._spawn(start))
        except BaseException:
            self.close(failed=True)
            raise

    @property
    def methods(self) -> tuple[str, ...]:
        """How each live worker was started (``fork`` or ``spawn``), in pool order."""
        return tuple(worker.method for worker in self._workers)

    def _spawn(self, start: Start) -> _Worker:
        """A fresh worker begun as ``start`` says (raises ``OSError`` if it cannot be started)."""
        forked = start.method == "fork"
        context = (multiprocessing.get_context("fork") if forked
                   else multiprocessing.get_context("spawn"))
        ours, theirs = context.Pipe(duplex=True)
        others = (ours.fileno(), *(descriptor for worker in self._workers
                                   for descriptor in (worker.connection.fileno(),
                                                      worker.process.sentinel)))
        process = context.Process(
            target=_serve,
            args=(theirs, start.initializer, start.initargs, others if forked else None),
            daemon=True,
        )
        try:
            with held_interrupts(), _sigint_ignored():
                process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker holds the only other end now
        return _Worker(process, ours, start.method)

    def submit(self, fn: Callable[..., object], args: tuple[object, ...]) -> Task:
        """Queue ``fn(*args)``; it is sent to the least loaded worker with room (``DEPTH``)."""
        task = Task(fn, args)
        self._queue.append(task)
        self._dispatch()
        return task

    def result(self, task: Task) -> object:
        """``task``'s value, once it has ended (``TaskFailed`` if it raised)."""
        while not task.done:
            self._serve_once()
        if task.error is not None:
            raise TaskFailed(task.error)
        return task.value

    def _dispatch(self) -> None:
        """Send queued tasks, the least loaded worker first, up to ``DEPTH`` each."""
        while self._queue:
            worker = min(self._workers, key=lambda w: len(w.tasks), default=None)
            if worker is None or len(worker.tasks) >= DEPTH:
                return
            task = self._queue.popleft()
            worker.tasks.append(task)
            try:
                worker.connection.send((task.fn, task.args))
            except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
                self._lost(worker, exc)

    def poll(self) -> None:
        """Take what has arrived and send what is queued, without waiting.

        A worker's result larger than the pipe's buffer is written only as
        fast as the parent reads it: a caller busy with an earlier result
        calls this now and then, so no worker stalls on its send meanwhile.
        """
        self._serve_once(timeout=0.0)

    def _serve_once(self, timeout: float | None = None) -> None:
        """Wait for one event: a result, or a worker's death; then send what is queued."""
        busy = [worker for worker in self._workers if worker.tasks]
        watched: list[Connection | int] = [worker.connection for worker in busy]
        watched += [worker.process.sentinel for worker in self._workers]
        ready = wait(watched, timeout)
        for worker in list(self._workers):
            if worker.connection in ready:
                try:
                    ok, value = worker.connection.recv()
                except (EOFError, OSError) as exc:
                    self._lost(worker, exc)
                    continue
                task = worker.tasks.popleft()
                task.done = True
                if ok:
                    task.value = value
                else:
                    task.error = str(value)
            elif worker.process.sentinel in ready:
                self._lost(worker, EOFError(f"exit code {worker.process.exitcode}"))
        self._dispatch()

    def _lost(self, worker: _Worker, cause: BaseException) -> None:
        """``worker`` died: its tasks go back to the front; a fresh worker takes its place."""
        self._workers.remove(worker)
        self._queue.extendleft(reversed(worker.tasks))
        worker.tasks.clear()
        died = OSError(f"a worker process died (pid {worker.process.pid}: {cause})")
        _end(worker, 0.0)
        while True:
            self._on_death(died)
            try:
                self._workers.append(self._spawn(self._again()))
                return
            except OSError as exc:
                died = exc

    def close(self, *, failed: bool) -> None:
        """Stop every worker: gently after a complete run, at once otherwise (bounded)."""
        workers, self._workers = self._workers, []
        self._queue.clear()
        if not failed:
            for worker in workers:
                worker.connection.close()  # an end of file: the worker returns
            deadline = time.monotonic() + self._stop_seconds
            for worker in workers:
                worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.process.is_alive():
                _signal(worker.process, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_seconds
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            _end(worker, self._stop_seconds)


def _end(worker: _Worker, within: float) -> None:
    """``worker``'s process SIGKILLed if still alive, reaped; its pipe closed."""
    if worker.process.is_alive():
        _signal(worker.process, signal.SIGKILL)
    worker.process.join(within if within > 0 else None)
    with contextlib.suppress(OSError):
        worker.connection.close()
    with contextlib.suppress(ValueError):
        worker.process.close()


def _signal(process: BaseProcess, signum: signal.Signals) -> None:
    pid = process.pid
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while a worker is spawned: a spawned interpreter keeps it ignored."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: the workers inherit what it has
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
