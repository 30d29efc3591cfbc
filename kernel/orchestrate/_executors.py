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
  cancelled and the workers are sent ``SIGINT`` (a running certification
  then kills its producer/checker group), joined, and killed if they have
  not exited after a few seconds.
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
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
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
_STOP_SECONDS: Final = 5.0  # after an interrupt: SIGINT, then this long, then SIGKILL
# A local Dask cluster's close: each nanny asks its worker to stop, waits 4 s,
# then kills it; past this bound the workers are killed here.
_CLOSE_SECONDS: Final = 20.0


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


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued tasks and stop running ones now, rather than wait for their deadlines.

    The pool keeps its workers and its manager thread in private attributes
    that ``shutdown`` clears, so they are read first. Each worker gets
    ``SIGINT``: a running certification then kills its producer/checker
    group on the way out (``kernel.external``), and the manager thread joins
    the workers. Whatever is still alive after ``_STOP_SECONDS`` is killed.
    """
    processes: object = getattr(pool, "_processes", None)
    workers = list(processes.values()) if isinstance(processes, dict) else []
    manager: object = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    if not isinstance(manager, threading.Thread):
        return
    for process in workers:
        _signal(process, signal.SIGINT)
    manager.join(_STOP_SECONDS)
    if manager.is_alive():  # the manager has not reaped them: their pids are still theirs
        for process in workers:
            _signal(process, signal.SIGKILL)
        manager.join()


def _signal(process: object, signum: signal.Signals) -> None:
    pid = getattr(process, "pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


@contextlib.contextmanager
def _process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn")
    )
    try:
        yield pool
    except BaseException:
        _stop_pool(pool)
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


def _close_cluster(cluster: Any) -> None:
    """Close a local cluster; never raise over the run's own result or exception."""
    pids = [getattr(nanny, "pid", None) for nanny in dict(cluster.workers).values()]
    try:
        cluster.close(timeout=_CLOSE_SECONDS)
    except Exception:  # a close that times out must not hide the outcome or the interrupt
        for pid in pids:
            if isinstance(pid, int) and _is_child(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


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
            try:
                with _local_worker_config():
                    cluster = _local_cluster(spec.workers)
            except Exception as exc:
                raise ExecutorSetupError(
                    "cluster_start_failed", f"{type(exc).__name__}: {exc}"
                ) from exc
            stack.callback(_close_cluster, cluster)
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
            executor.shutdown(wait=False)  # cancels what has not finished
            raise
        executor.shutdown(wait=True)


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

    return dask.config.set({"distributed.worker.profile.enabled": False})


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
