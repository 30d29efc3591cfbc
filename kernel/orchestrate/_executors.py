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
  never joins a worker that is still waiting for work (issue 20). A pool
  that a worker's death has broken is replaced by a fresh one at the next
  submit, at most ``MAX_POOL_RESTARTS`` times (``_process_pool``, ADR-0008).
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
  loaded machine); the
  executor is ``client.get_executor(pure=False)`` (``pure=False``: every
  attempt runs, none is answered from a cache of earlier identical tasks).
  ``dask``/``distributed`` are imported only here, only for this choice.
- A local cluster starts whole and closes in order (``local_client``, also
  for sharded replay): a SIGINT or SIGTERM during its start is held until
  the start is over; the close, with both ignored and each step bounded,
  closes the client, then every nanny (so none restarts a worker), then the
  scheduler and its event loop, then kills any worker still alive, sparing
  multiprocessing's resource tracker (issue 20, ADR-0008 "Interrupts").
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
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Final, assert_never, final

import attrs

from kernel.orchestrate._children import (
    KILL_SECONDS,
    interrupts_held,
    is_child,
    kill,
    second_interrupts_ignored,
    sigint_blocked,
    wait_gone,
)
from kernel.orchestrate._process_pool import process_pool
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
# A local Dask cluster's close, per step (client, nannies, scheduler): each
# nanny asks its worker to stop, waits 0.8 of this, then kills it.
_CLOSE_SECONDS: Final = 5.0
# After an interrupt or an error the close is cut shorter: the run is over and
# its workers must be gone within the command's bound (issue 20: 10 s). Each
# step gets at most 2 s and the client, nannies and scheduler together at most
# 5 s (their step bounds alone add up to 9 s, which a loaded machine reached),
# then the sweep's SIGKILL ends whatever is left.
_INTERRUPTED_CLOSE_SECONDS: Final = 2.0
_INTERRUPTED_CLOSE_BUDGET: Final = 5.0


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
class TlsFiles:
    """The PEM files this side presents to a ``tls://`` scheduler (Dask's ``Security``).

    ``ca_file`` is the authority both the scheduler's and this client's
    certificates are checked against; ``cert`` and ``key`` are this client's.
    Encryption is then required: nothing falls back to plain TCP.
    """

    ca_file: str = attrs.field(validator=attrs.validators.instance_of(str))
    cert: str = attrs.field(validator=attrs.validators.instance_of(str))
    key: str = attrs.field(validator=attrs.validators.instance_of(str))


@final
@attrs.frozen
class ExecutorSpec:
    """An executor choice, checked by ``open_executor`` (not here, so the CLI can refuse it).

    ``workers`` is the pool size (``process``) or the number of local Dask
    workers (``dask`` without ``scheduler``); ``scheduler`` is a Dask
    scheduler address (``tcp://host:8786``, or ``tls://`` with ``tls``);
    ``connect_seconds`` bounds the connection to it.
    """

    kind: ExecutorKind = attrs.field(validator=attrs.validators.instance_of(ExecutorKind))
    workers: int | None = None
    scheduler: str | None = None
    connect_seconds: float = attrs.field(
        default=_DEFAULT_CONNECT_SECONDS, validator=_positive_seconds
    )
    tls: TlsFiles | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(TlsFiles))
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
    if spec.tls is not None:
        if spec.scheduler is None or not spec.scheduler.startswith("tls://"):
            raise ExecutorSetupError(
                "option_conflict", "TLS files are for a tls:// scheduler address "
                f"(--scheduler tls://HOST:PORT), got {spec.scheduler!r}")
        for name, path in (("CA", spec.tls.ca_file), ("certificate", spec.tls.cert),
                           ("key", spec.tls.key)):
            if not os.access(path, os.R_OK) or not os.path.isfile(path):
                raise ExecutorSetupError("tls_unreadable", f"TLS {name} file {path}: not a "
                                         "readable file")


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
            with process_pool(spec.workers) as pool:
                yield pool
        case ExecutorKind.DASK:
            with _dask(spec) as executor:
                yield executor
        case _:
            assert_never(spec.kind)


def _unreachable(address: str, exc: Exception) -> ExecutorSetupError:
    return ExecutorSetupError("scheduler_unreachable", f"{address}: {type(exc).__name__}: {exc}")


def _probe_scheduler(address: str, seconds: float, tls: TlsFiles | None = None) -> None:
    """Open and close one connection to ``address`` within ``seconds`` (TLS with ``tls``).

    A ``Client`` that fails to connect is left half-built and, when collected,
    blocks on closing itself (a traceback on stderr, seconds later); probing
    first keeps the refusal prompt and quiet. A ``tls://`` address is probed
    with the handshake the client will make: with ``tls``, or with Dask's own
    TLS configuration; without either it is refused here. Other schemes
    (``ucx://``) are left to the ``Client``.
    """
    import asyncio

    from distributed.comm.core import connect
    from distributed.security import Security

    tls_address = address.startswith("tls://")
    if "://" in address and not (address.startswith("tcp://") or tls_address):
        return
    arguments: dict[str, object] = {}
    if tls_address:
        security = Security() if tls is None else _security(tls)  # type: ignore[no-untyped-call]
        arguments = security.get_connection_args("client")  # type: ignore[attr-defined]
        if arguments.get("ssl_context") is None:
            raise ExecutorSetupError(
                "scheduler_unreachable", f"{address}: a tls:// scheduler needs this side's "
                "TLS files: --tls-ca-file, --tls-cert and --tls-key (or Dask's "
                "distributed.comm.tls configuration)")

    async def probe() -> None:
        comm = await connect(  # type: ignore[no-untyped-call]
            address, timeout=seconds, **arguments)
        await comm.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        raise _unreachable(address, exc) from exc


def _live_children() -> list[int]:
    """The live child processes of this process (Linux ``/proc``; elsewhere none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in entries if name.isdigit() and is_child(int(name))]


def _spawned_workers(before: frozenset[int]) -> list[int]:
    """The live children started since ``before`` by ``multiprocessing``'s spawn: Dask's workers.

    Never multiprocessing's resource tracker (another child, started on the
    first semaphore): killed, it is relaunched without its table, and every
    semaphore released after that is a ``KeyError`` traceback of the new one.
    """
    found = []
    for pid in _live_children():
        if pid in before:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing.spawn" in argv:
            found.append(pid)
    return found


def _sweep_workers(before: frozenset[int]) -> None:
    """SIGKILL every Dask worker process still alive, until none is left (bounded); reaped."""
    deadline = time.monotonic() + KILL_SECONDS
    while (alive := _spawned_workers(before)) and time.monotonic() < deadline:
        for pid in alive:
            kill(pid, signal.SIGKILL)
        wait_gone(alive, max(0.0, deadline - time.monotonic()))


@final
class _LocalCluster:
    """A local cluster started by ``_start_local_cluster``, with what its close needs."""

    def __init__(self, cluster: Any, before: frozenset[int]) -> None:
        self.cluster = cluster
        self.before = before  # the children this process had before: never the cluster's


def _close_nannies(cluster: Any, seconds: float, wait: float) -> None:
    """On the cluster's event loop: every nanny closed, and so its worker stopped, first.

    A nanny restarts its worker whenever the worker's process exits while
    the nanny is running, from the cluster's event loop thread in this
    process. Closed first (its status is ``closing`` from the close's first
    step), it never restarts one; its worker is asked to stop, killed after
    ``0.8 * seconds`` and joined while the worker's queues still exist; this
    thread waits ``wait`` at most. A worker killed under a running nanny was
    restarted during the command's
    exit: the new one, spawned with the real stderr, found the semaphores of
    its queues already unlinked by the exit (``FileNotFoundError``
    tracebacks, "leaked semaphore" warnings; issue 20).
    """
    import asyncio

    from distributed.utils import sync

    nannies = list(dict(cluster.workers).values())

    async def close_all() -> None:
        await asyncio.gather(*(n.close(timeout=seconds) for n in nannies),
                             return_exceptions=True)

    with contextlib.suppress(Exception):  # bounded; the sweep after it ends whatever is left
        sync(cluster.loop, close_all, callback_timeout=wait)


def _close_cluster(
    local: _LocalCluster, client: Any, seconds: float, budget: float | None = None
) -> None:
    """Close a local cluster in order; never raise over the run's own result or exception.

    SIGINT and SIGTERM are ignored meanwhile (the close is bounded; SIGKILL
    still works): an interrupt that cut the close short left nannies able to
    restart workers and Dask's exit-time close waiting 10 s (issue 20). The
    order: the client (its futures cancelled), the nannies and their workers
    (``_close_nannies``), the scheduler and the event loop (``close``), then
    any worker process still alive is killed and reaped, so none outlives
    the run and none is started once the event loop has stopped. Each step
    waits ``seconds`` at most, and the three before the sweep ``budget``
    together when one is given.
    """
    deadline = None if budget is None else time.monotonic() + budget

    def bound(step: float) -> float:
        if deadline is None:
            return step
        return max(0.1, min(step, deadline - time.monotonic()))

    with second_interrupts_ignored():
        _loop_errors_dropped(local.cluster)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=bound(seconds))
        _close_nannies(local.cluster, bound(seconds), bound(2 * seconds + 1))
        with contextlib.suppress(Exception):  # a close that times out must not hide the outcome
            local.cluster.close(timeout=bound(seconds))
        _sweep_workers(local.before)
        with contextlib.suppress(Exception):  # closed or not, Dask's exit-time close must skip it
            from distributed.deploy.spec import SpecCluster

            SpecCluster._instances.discard(local.cluster)


def _drop(loop: object, context: dict[str, Any]) -> None:
    """An asyncio exception handler that reports nothing."""


def _loop_errors_dropped(cluster: Any) -> None:
    """From now on, errors on the cluster's event loop are not printed (asyncio logs them).

    That loop runs this process's scheduler and nannies. Once the close has
    begun, a request they were serving fails because its worker is gone (an
    interrupted ``scatter``: ``KeyError`` on the worker's address), and
    asyncio printed it as "Task exception was never retrieved": about a
    cluster the run has finished with, never about an outcome.
    """
    with contextlib.suppress(Exception):  # a loop already closed reports nothing anyway
        loop = cluster.loop.asyncio_loop
        loop.call_soon_threadsafe(loop.set_exception_handler, _drop)


@contextlib.contextmanager
def local_client(workers: int) -> Iterator[Any]:
    """A ``distributed.Client`` of a local cluster of ``workers`` started here; closed in order.

    Raises ``ExecutorSetupError`` (``cluster_start_failed``) when the cluster
    cannot start. On the way out, normal or not, ``_close_cluster``: promptly
    (``_INTERRUPTED_CLOSE_SECONDS`` per step) after an error or an interrupt.
    """
    from distributed import Client

    local = _start_local_cluster(workers)
    client = None
    try:
        # Results straight from the workers (all on loopback here): through the
        # scheduler, which lives in this process, each result crossed this
        # process twice. About 15% of the command's CPU on a sharded replay of
        # 20,000 attempts (BENCHMARKS.md, "A local cluster's results straight from its workers").
        client = Client(  # type: ignore[no-untyped-call]
            local.cluster, set_as_default=False, direct_to_workers=True
        )
        yield client
    except BaseException:
        _close_cluster(local, client, _INTERRUPTED_CLOSE_SECONDS, _INTERRUPTED_CLOSE_BUDGET)
        raise
    _close_cluster(local, client, _CLOSE_SECONDS)


def scheduler_client(spec: ExecutorSpec) -> Any:
    """A ``distributed.Client`` to ``spec.scheduler`` (TLS with ``spec.tls``), or refused.

    A plain TCP address is probed first (``_probe_scheduler``). Raises
    ``ExecutorSetupError`` (``scheduler_unreachable``) when it cannot be reached,
    a TLS handshake included.
    """
    from distributed import Client

    assert spec.scheduler is not None
    _probe_scheduler(spec.scheduler, spec.connect_seconds, spec.tls)
    try:
        return Client(  # type: ignore[no-untyped-call]
            spec.scheduler, timeout=spec.connect_seconds, set_as_default=False,
            **({} if spec.tls is None else {"security": _security(spec.tls)}),
        )
    except Exception as exc:  # OSError, TimeoutError, ValueError for a bad address
        raise _unreachable(spec.scheduler, exc) from exc


def _security(tls: TlsFiles) -> object:
    """Dask's ``Security`` for ``tls``: mutual TLS, encryption required."""
    from distributed.security import Security

    return Security(  # type: ignore[no-untyped-call]
        tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key,
        require_encryption=True,
    )


@contextlib.contextmanager
def _dask(spec: ExecutorSpec) -> Iterator[Executor]:
    try:
        import distributed  # noqa: F401  (is it installed: refused here, not on first use)
    except ImportError as exc:
        raise ExecutorSetupError(
            "executor_unavailable",
            f"dask distributed is not installed ({exc}); pip install 'failclosed-replay[scale]'",
        ) from exc
    with contextlib.ExitStack() as stack:
        if spec.scheduler is None:
            assert spec.workers is not None
            client = stack.enter_context(local_client(spec.workers))
        else:
            client = stack.enter_context(scheduler_client(spec))
        executor = client.get_executor(pure=False)
        try:
            yield executor
        except BaseException:
            with second_interrupts_ignored():
                executor.shutdown(wait=False)  # cancels what has not finished
            raise
        # The run is over and its output written: a signal now must not cut the close short.
        with second_interrupts_ignored():
            executor.shutdown(wait=True)


def _start_local_cluster(workers: int) -> _LocalCluster:
    """A started local cluster; ``ExecutorSetupError`` if it fails to start.

    Its worker processes start with SIGINT blocked (inherited from the
    thread that starts them, as a terminal's Ctrl-C reaches the whole
    group), ignore it from ``dask_setup`` on, and have /dev/null as stderr
    (``_children_stderr_silenced``). SIGINT and SIGTERM that arrive while
    it starts are held (``interrupts_held``) and acted on once the start is
    over, on a whole cluster closed in order: a start cut short left
    nannies spawning workers in the event loop thread that nothing could
    close any more, and the sweep of its children killed multiprocessing's
    resource tracker (``KeyError`` tracebacks at the exit; issue 20).
    """
    from multiprocessing import resource_tracker

    # Started here, before SIGINT is blocked: the tracker's start unblocks
    # SIGINT in the thread that starts it (the cluster's event loop, at the
    # first worker's queues), and every worker spawned from there on then
    # died of a terminal's Ctrl-C while it started (``cluster_start_failed``).
    resource_tracker.ensure_running()
    before = frozenset(_live_children())
    held: list[int] = []
    with interrupts_held(held):
        try:
            with _local_worker_config(), sigint_blocked(), _children_stderr_silenced():
                cluster = _local_cluster(workers)
        except Exception as exc:
            # LocalCluster closed itself; no half-built cluster at exit, no worker left.
            with contextlib.suppress(Exception):
                from distributed.deploy.spec import SpecCluster

                SpecCluster._instances.clear()  # the kernel starts one cluster per run
            _sweep_workers(before)
            raise ExecutorSetupError(
                "cluster_start_failed", f"{type(exc).__name__}: {exc}"
            ) from exc
    local = _LocalCluster(cluster, before)
    try:
        for signum in held:  # acted on now, by the handler the caller had installed
            signal.raise_signal(signum)
    except BaseException:
        _close_cluster(local, None, _INTERRUPTED_CLOSE_SECONDS, _INTERRUPTED_CLOSE_BUDGET)
        raise
    return local


def _local_worker_config() -> contextlib.AbstractContextManager[object]:
    """Dask settings for the workers of a local cluster (each nanny keeps a copy).

    No statistical profiler (a thread in every worker walking every stack
    each 10 ms, for a dashboard never served here), and the tick and the
    monitors wake less often: each wake-up takes the GIL from the checks or
    the classification, here (scheduler, nannies) and in each worker (ADR
    0008 has the measurements). A cluster given by address keeps its own.
    """
    import dask.config

    return dask.config.set({
        "distributed.worker.profile.enabled": False,
        "distributed.admin.tick.interval": "1s",
        "distributed.admin.system-monitor.interval": "5s",
        "distributed.worker.memory.monitor-interval": "1s",
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
