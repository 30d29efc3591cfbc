"""Executors for the driver's seam: inline, a process pool, or Dask distributed.

Theory of operation (ARCHITECTURE.md "Scale"; ADR-0006; ADR-0008):

- ``open_executor(spec)`` is the one factory. It is a context manager that
  yields the ``concurrent.futures.Executor`` to hand to ``replay_requests``
  (``None`` for ``inline``: the driver then gathers in the caller, in order)
  and closes it on the way out, whether the body returned, raised, or was
  interrupted (``KeyboardInterrupt``).
- ``process``: a ``ProcessPoolExecutor`` of ``workers`` processes started with
  the ``spawn`` context, so no lock, thread or file descriptor state of the
  driver is inherited. On an error or an interrupt, queued tasks are
  cancelled and the workers are sent ``SIGTERM`` (a running certification
  then kills its producer/checker group and the worker exits quietly),
  waited for, and killed if they have not exited after a few seconds: every
  worker is gone before the executor is left, so the interpreter's exit
  never joins a worker that is still waiting for work (issue 20).
- Ctrl-C at a terminal is sent to the whole foreground process group. A
  pool worker is started with ``SIGINT`` blocked (inherited from the thread
  that starts it) and ignores it; a local Dask worker ignores it from its
  preload hook (``dask_setup``) on, and starts with /dev/null as stderr. So
  the terminal's SIGINT is acted on by this process only, which then stops
  the workers itself; no worker prints a ``KeyboardInterrupt`` traceback. While the
  workers are being stopped, a second SIGINT is ignored (the stop is
  bounded; SIGKILL still works).
- ``dask``: ``Client(scheduler)`` when an address is given (a plain TCP
  probe first, bounded by ``connect_seconds``), else a
  ``distributed.LocalCluster`` of ``workers`` single-threaded worker
  processes started here on loopback, without a dashboard or the workers'
  statistical profiler (it only feeds the dashboard and costs CPU on a
  loaded machine), and closed with
  a short grace period (its nannies then terminate the workers); the
  executor is ``client.get_executor(pure=False)`` (``pure=False``: every
  attempt runs, none is answered from a cache of earlier identical tasks).
  ``dask``/``distributed`` are imported only here, only for this choice.
- What runs where never changes an outcome: the executor carries only
  evidence gathering; the verdict is computed in the caller (ADR-0008).
- Failures to set an executor up are ``ExecutorSetupError`` with a stable
  code, before any attempt runs: ``invalid_worker_count``,
  ``option_conflict``, ``executor_unavailable``, ``scheduler_unreachable``,
  ``cluster_start_failed``.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Final, assert_never, final

import attrs

from kernel.orchestrate.errors import ExecutorSetupError

__all__ = [
    "MAX_WORKERS",
    "ExecutorKind",
    "ExecutorSpec",
    "check_executor_spec",
    "open_executor",
]

MAX_WORKERS: Final = 1024
_DEFAULT_CONNECT_SECONDS: Final = 10.0
_STOP_SECONDS: Final = 4.0  # after an interrupt: SIGTERM, then this long, then SIGKILL
_KILL_SECONDS: Final = 2.0  # then this long for the killed to be gone (SIGKILL is not ignored)
# A local Dask cluster's close: each nanny asks its worker to stop, waits 4 s,
# then kills it; past this bound the workers are killed here.
_CLOSE_SECONDS: Final = 20.0
# After an interrupt the close is cut shorter: the run is over and its
# workers must be gone within the command's bound (issue 20: 10 s).
_INTERRUPTED_CLOSE_SECONDS: Final = 5.0


class ExecutorKind(enum.Enum):
    """Where evidence gathering runs."""

    INLINE = "inline"
    PROCESS = "process"
    DASK = "dask"


def _positive_seconds(_: object, attribute: attrs.Attribute[float], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds")


@final
@attrs.frozen
class ExecutorSpec:
    """An executor choice, checked by ``open_executor`` (not here, so the CLI can refuse it).

    ``workers`` is the pool size (``process``) or the number of local Dask
    workers (``dask`` without ``scheduler``); ``scheduler`` is a Dask
    scheduler address (``tcp://host:8786``); ``connect_seconds`` bounds the
    connection to it.
    """

    kind: ExecutorKind = attrs.field(validator=attrs.validators.instance_of(ExecutorKind))
    workers: int | None = None
    scheduler: str | None = None
    connect_seconds: float = attrs.field(
        default=_DEFAULT_CONNECT_SECONDS, validator=_positive_seconds
    )


def check_executor_spec(spec: ExecutorSpec) -> None:
    """Refuse a spec that cannot be opened; raises ``ExecutorSetupError``."""
    workers = spec.workers
    if workers is not None and (type(workers) is not int or not 1 <= workers <= MAX_WORKERS):
        raise ExecutorSetupError(
            "invalid_worker_count",
            f"the worker count must be an integer in 1..{MAX_WORKERS}, got {workers!r}",
        )
    match spec.kind:
        case ExecutorKind.INLINE:
            if workers is not None or spec.scheduler is not None:
                raise ExecutorSetupError(
                    "option_conflict", "inline runs in this process: no workers or scheduler"
                )
        case ExecutorKind.PROCESS:
            if spec.scheduler is not None:
                raise ExecutorSetupError(
                    "option_conflict", "a scheduler address applies to the dask executor only"
                )
            if workers is None:
                raise ExecutorSetupError("invalid_worker_count", "process needs a worker count")
        case ExecutorKind.DASK:
            if spec.scheduler is not None and workers is not None:
                raise ExecutorSetupError(
                    "option_conflict",
                    "with a scheduler address the cluster's own workers run the attempts",
                )
            if spec.scheduler is None and workers is None:
                raise ExecutorSetupError("invalid_worker_count", "a local cluster needs a count")
            if spec.scheduler is not None and not spec.scheduler.strip():
                raise ExecutorSetupError("scheduler_unreachable", "empty scheduler address")
        case _:
            assert_never(spec.kind)


@contextlib.contextmanager
def open_executor(spec: ExecutorSpec) -> Iterator[Executor | None]:
    """The executor ``spec`` describes, closed on exit (also on errors and interrupts).

    Yields ``None`` for ``inline``. Raises ``ExecutorSetupError`` before
    yielding when the spec is inconsistent, ``dask``/``distributed`` are not
    installed, the scheduler cannot be reached within ``connect_seconds``, or
    a local cluster fails to start.
    """
    check_executor_spec(spec)
    match spec.kind:
        case ExecutorKind.INLINE:
            yield None
        case ExecutorKind.PROCESS:
            assert spec.workers is not None
            with _process_pool(spec.workers) as pool:
                yield pool
        case ExecutorKind.DASK:
            with _dask(spec) as executor:
                yield executor
        case _:
            assert_never(spec.kind)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
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


@contextlib.contextmanager
def _second_interrupts_ignored() -> Iterator[None]:
    """While the workers are stopped: SIGINT and SIGTERM ignored, so the bounded stop completes."""
    previous: list[tuple[signal.Signals, Any]] = []
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous.append((signum, signal.signal(signum, signal.SIG_IGN)))
    except ValueError:  # not the main thread (an embedding test runner): nothing to do
        pass
    try:
        yield
    finally:
        for signum, handler in previous:
            signal.signal(signum, handler)


_worker_stopping = False


def _worker_stop(signum: int, frame: object) -> None:
    """A pool worker's SIGTERM: unwind the running task (its step group is killed), then exit."""
    global _worker_stopping
    if _worker_stopping:  # already unwinding: do not raise into that cleanup again
        os._exit(128 + signum)
    _worker_stopping = True
    raise SystemExit(128 + signum)  # never printed as a traceback by multiprocessing


def _pool_worker_signals() -> None:
    """Pool worker initializer: ignore the terminal's SIGINT; SIGTERM stops the worker quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)


class _Pool(ProcessPoolExecutor):
    """A spawn pool whose workers are started (on ``submit``) with SIGINT blocked."""

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        with _sigint_blocked():
            return super().submit(fn, *args, **kwargs)


def _alive_children(pids: list[int]) -> list[int]:
    return [pid for pid in pids if _is_child(pid)]


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` (children of this process) to exit; those still alive."""
    deadline = time.monotonic() + seconds
    while (alive := _alive_children(pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return alive


def _stop_pool(pool: ProcessPoolExecutor, others: frozenset[int] = frozenset()) -> None:
    """Cancel queued tasks and stop running ones now, rather than wait for their deadlines.

    The pool keeps its workers and its manager thread in private attributes
    that ``shutdown`` clears, so they are read first. Each worker gets
    ``SIGTERM``: a running certification then kills its producer/checker
    group on the way out (``kernel.external``) and the worker exits. Whatever
    is still alive after ``_STOP_SECONDS`` is killed; either way every worker
    has exited when this returns (a worker is signalled only while it is a
    live child of this process, so its pid is still its own).
    """
    processes: object = getattr(pool, "_processes", None)
    workers = list(processes.values()) if isinstance(processes, dict) else []
    # A worker whose start the interrupt cut short is not in the pool's table
    # yet, but is a child that multiprocessing's exit would wait for: it too
    # (``others``: the children this process had before the pool, not its own).
    workers += [p for p in multiprocessing.active_children() if p.pid not in others]
    pids = sorted({pid for pid in (getattr(p, "pid", None) for p in workers)
                   if isinstance(pid, int)})
    manager: object = getattr(pool, "_executor_manager_thread", None)
    with _second_interrupts_ignored():
        pool.shutdown(wait=False, cancel_futures=True)
        for pid in _alive_children(pids):
            _kill(pid, signal.SIGTERM)
        for pid in _wait_gone(pids, _STOP_SECONDS):
            _kill(pid, signal.SIGKILL)
        _wait_gone(pids, _KILL_SECONDS)
        if isinstance(manager, threading.Thread):
            manager.join(_KILL_SECONDS)  # it reaps the workers; bounded, never hangs the exit


def _kill(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


@contextlib.contextmanager
def _process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    others = frozenset(
        pid for pid in (p.pid for p in multiprocessing.active_children()) if pid is not None
    )
    pool = _Pool(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=_pool_worker_signals,
    )
    try:
        yield pool
    except BaseException:
        _stop_pool(pool, others)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a no-op after _stop_pool


def _unreachable(address: str, exc: Exception) -> ExecutorSetupError:
    return ExecutorSetupError("scheduler_unreachable", f"{address}: {type(exc).__name__}: {exc}")


def _probe_scheduler(address: str, seconds: float) -> None:
    """Open and close one plain TCP connection to ``address`` within ``seconds``.

    A ``Client`` that fails to connect is left half-built and, when collected,
    blocks on closing itself; probing first keeps the refusal prompt and
    quiet. Other schemes (``tls://``, ``ucx://``) need the security
    configuration and are left to the ``Client``.
    """
    import asyncio

    from distributed.comm.core import connect

    if "://" in address and not address.startswith("tcp://"):
        return

    async def probe() -> None:
        comm = await connect(address, timeout=seconds)  # type: ignore[no-untyped-call]
        await comm.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        raise _unreachable(address, exc) from exc


def _close_cluster(cluster: Any, seconds: float = _CLOSE_SECONDS) -> None:
    """Close a local cluster; never raise over the run's own result or exception.

    Whatever worker process is still alive afterwards (a close that timed
    out, or was cut short) is killed and waited for, so none outlives the run.
    """
    nannies = dict(cluster.workers).values()
    pids = [pid for pid in (getattr(n, "pid", None) for n in nannies) if isinstance(pid, int)]
    # A close that times out must not hide the outcome or the interrupt.
    with contextlib.suppress(Exception):
        cluster.close(timeout=seconds)
    for pid in _alive_children(pids):
        _kill(pid, signal.SIGKILL)
    _wait_gone(pids, _KILL_SECONDS)
    with contextlib.suppress(Exception):  # closed or not, Dask's exit-time close must skip it
        from distributed.deploy.spec import SpecCluster

        SpecCluster._instances.discard(cluster)


def _is_child(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()  # Linux; elsewhere nothing is killed
    except OSError:
        return False
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0] not in (b"Z", b"X") and int(fields[1]) == os.getpid()


@contextlib.contextmanager
def _dask(spec: ExecutorSpec) -> Iterator[Executor]:
    try:
        from distributed import Client
    except ImportError as exc:
        raise ExecutorSetupError(
            "executor_unavailable",
            f"dask distributed is not installed ({exc}); pip install 'failclosed-replay[scale]'",
        ) from exc
    with contextlib.ExitStack() as stack:
        if spec.scheduler is None:
            assert spec.workers is not None
            cluster = _start_local_cluster(spec.workers)
            stack.enter_context(_ClusterCloser(cluster))
            client = stack.enter_context(
                Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]
            )
        else:
            _probe_scheduler(spec.scheduler, spec.connect_seconds)
            try:
                client = stack.enter_context(
                    Client(  # type: ignore[no-untyped-call]
                        spec.scheduler, timeout=spec.connect_seconds, set_as_default=False
                    )
                )
            except Exception as exc:  # OSError, TimeoutError, ValueError for a bad address
                raise _unreachable(spec.scheduler, exc) from exc
        executor = client.get_executor(pure=False)
        try:
            yield executor
        except BaseException:
            with _second_interrupts_ignored():
                executor.shutdown(wait=False)  # cancels what has not finished
            raise
        executor.shutdown(wait=True)


def _start_local_cluster(workers: int) -> Any:
    """A started local cluster; ``ExecutorSetupError`` if it fails to start.

    Its worker processes ignore SIGINT once started (``dask_setup``) and
    print nothing while they start (``_children_stderr_silenced``); SIGINT
    is blocked here meanwhile, so a Ctrl-C is taken when the start is over.
    Interrupted while it starts (SIGTERM, or the Ctrl-C delivered
    when the block ends), the cluster is closed promptly, or, half-built,
    dropped from Dask's exit-time close (which would print a traceback over
    it) and its worker processes killed.
    """
    before = set(_live_children())
    cluster: Any = None
    try:
        with _local_worker_config(), _sigint_blocked(), _children_stderr_silenced():
            cluster = _local_cluster(workers)
    except Exception as exc:
        _abandon_cluster_start(before)
        raise ExecutorSetupError("cluster_start_failed", f"{type(exc).__name__}: {exc}") from exc
    except BaseException:
        with _second_interrupts_ignored():
            if cluster is not None:
                _close_cluster(cluster, _INTERRUPTED_CLOSE_SECONDS)
            else:
                _abandon_cluster_start(before)
        raise
    return cluster


def _abandon_cluster_start(before: set[int]) -> None:
    """After a failed or interrupted start: no half-built cluster closed at exit, no worker left."""
    with contextlib.suppress(Exception):
        from distributed.deploy.spec import SpecCluster

        SpecCluster._instances.clear()  # the kernel starts one cluster per run: this one
    started = [pid for pid in _live_children() if pid not in before]
    for pid in started:
        _kill(pid, signal.SIGKILL)
    _wait_gone(started, _KILL_SECONDS)


def _live_children() -> list[int]:
    """The live child processes of this process (Linux ``/proc``; elsewhere none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in entries if name.isdigit() and _is_child(int(name))]


class _ClusterCloser:
    """Closes a local cluster on the way out: promptly after an error or an interrupt."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def __enter__(self) -> _ClusterCloser:
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            _close_cluster(self.cluster)
            return
        with _second_interrupts_ignored():
            _close_cluster(self.cluster, _INTERRUPTED_CLOSE_SECONDS)


def _local_worker_config() -> contextlib.AbstractContextManager[object]:
    """Dask settings for the workers of a local cluster (each nanny keeps a copy).

    The statistical profiler is off: it wakes a thread in every worker every
    10 ms to walk every thread's stack, for a dashboard that is never served
    here. On two shared cores that thread competes with the checks; with it
    off, 60 certifications on 2 workers took a median 14.4 s instead of 18.6 s
    (four interleaved pairs at load average 9; BENCHMARKS.md, issue 10 item 6).
    A cluster given by address keeps its own workers' settings.
    """
    import dask.config

    return dask.config.set({
        "distributed.worker.profile.enabled": False,
        # Each worker runs dask_setup below when it starts: it ignores SIGINT.
        "distributed.worker.preload": [__name__],
    })


def dask_setup(worker: object) -> None:
    """Dask preload hook, run in each worker of a local cluster: ignore the terminal's SIGINT.

    Ctrl-C reaches the whole foreground process group; this process stops
    the cluster itself, and a worker that raised ``KeyboardInterrupt`` would
    print a traceback (and could lose its attempt before the run stops).
    """
    with contextlib.suppress(ValueError):  # the worker's loop runs in its main thread
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _children_stderr_silenced() -> Iterator[None]:
    """While a local cluster starts: its worker processes get /dev/null as their stderr.

    Until ``dask_setup`` runs, a starting worker still takes SIGINT as
    ``KeyboardInterrupt``, and would print a traceback of its imports. Its
    logs are silenced anyway (``silence_logs``); what a worker finds goes
    back to the driver as a note. This process's own stderr is restored when
    the start is over (nothing is printed meanwhile).
    """
    try:
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _local_cluster(workers: int) -> Any:
    from distributed import LocalCluster

    return LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",  # the local scheduler listens on loopback only
        dashboard_address=None,
        # no dashboard; its bare HTTP server on any free loopback port, not 8787
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        # Lost workers and failed tasks become per-attempt notes.
        silence_logs=logging.CRITICAL,
    )
