"""Sharded pure replay: a bundle's attempts classified in shards on workers (ADR 0020).

Theory of operation:

- A run is split into a **shared part** and **shards**. The shared part
  (``SharedRun``) is what every attempt needs: for a bundle stream, the
  header and the run as the command's reader built them from their lines
  (the chain's head and the run); for a single document, the document.
  Each worker receives it **once** and prepares it once (``_Prepared``): a
  pool worker forked from the command (``kernel replay``) has it in its copy
  of the command's memory; a spawned pool worker reads it pickled from a
  file, a Dask worker as one scattered value (unpickling a run costs a
  quarter of parsing its lines again); a document is parsed with the very
  code the serial command uses; the run's facts are examined once per worker (ADR 0011:
  facts are bound to the run object they examined and cannot cross a
  process, so each worker examines its own copy once, every record's
  validators run again).
- A shard (``Shard``) is a run of consecutive attempts: for a stream, their
  attempt lines as read (``None`` for an over-long line); for a document, an
  index range. A worker classifies a shard with ``classify_item``, the one
  loop body ``kernel replay`` uses serially too, over a stream reader
  positioned at the shard's first attempt (``BundleStreamReader.positioned``),
  and returns each attempt's outcome with its outcome line's bytes.
- ``ShardRunner.run`` submits shards as they are read, at most ``in_flight``
  at a time, and yields the results in the run's order, each shard's only
  after every earlier shard's: the caller writes the lines in canonical order
  and the bytes equal the serial run's. Memory holds the shared part and the
  shards in flight, never the run's outcomes. Underneath, a runner takes
  ``Job``s (a module-level function and its arguments, called with the
  prepared shared part) and hands results back in submission order
  (``submit``/``take``); ``kernel run``'s two half-shards
  (``_sharded_run``) are jobs too.
- Faults. Classification is pure and deterministic, so a shard may be run
  again without changing a byte; a shard's result is taken exactly once, in
  order, so nothing is lost or written twice. A process worker that died
  (even halfway through writing a result: each worker has its own pipe,
  ``_worker_pool``) is replaced and the shard it was running is run again,
  at most ``MAX_RESTARTS`` deaths per run; Dask re-runs a lost
  worker's tasks itself (its ``allowed-failures``). Past that, or when a
  shard fails for any other reason, ``ShardError`` (``worker_lost``,
  ``shard_failed``) is raised: the run fails closed, the caller writes no
  outcome file.
- Interrupts: workers ignore SIGINT (a terminal's Ctrl-C reaches the whole
  group; the caller decides); on any exception or ``KeyboardInterrupt`` the
  pool's workers are sent SIGTERM, then SIGKILL after ``STOP_SECONDS``; the
  Dask futures are cancelled and a local cluster closed (``_executors``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import pickle
import secrets
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import Any, Final, Literal, TypeVar, assert_never, cast, final

import attrs

from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleStreamReader,
    ReadRun,
    ReadyAttempt,
    RefusedAttempt,
    document_attempts,
    outcome_line,
)
from kernel.orchestrate._children import second_interrupts_ignored
from kernel.orchestrate._executors import (
    ExecutorKind,
    ExecutorSpec,
    TlsFiles,
    check_executor_spec,
    local_client,
    scheduler_client,
)
from kernel.orchestrate._worker_pool import Start, Task, TaskFailed, WorkerPool
from kernel.orchestrate.errors import ExecutorSetupError, OrchestrateError
from kernel.organs import builtin_manifest, certified_manifest
from kernel.replay import (
    AuthorityManifest,
    ReplayAdapterOutcome,
    ReplayBundle,
    RunFacts,
    facts_for,
    replay_attempt,
)
from kernel.serde import parse_json, structure

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "MAX_RESTARTS",
    "RUN_SHARD_SIZE",
    "Decided",
    "Job",
    "Shard",
    "ShardError",
    "ShardRunner",
    "ShardSummary",
    "SharedRun",
    "classify_item",
    "classify_shard",
    "dask_shards",
    "prepared_run",
    "process_shards",
    "shards_beside",
    "shared_document",
    "shared_stream",
]

# Attempts per shard: chosen by measurement (BENCHMARKS.md, "Sharded replay"):
# the per-shard cost (pickling, a round trip, the result's unpickling) is
# then well under 1% of the shard's classification.
DEFAULT_SHARD_SIZE: Final = 500
# Attempts per shard for kernel run: from 50 up the per-shard cost is within the
# noise, and a shard's outcome lines wait for its slowest certification, so a
# smaller shard keeps fewer certified attempts waiting to be recorded.
RUN_SHARD_SIZE: Final = 50
MAX_RESTARTS: Final = 3
# Lines handed to the caller between two polls of the workers (``ShardRunner.poll``).
_POLL_EVERY: Final = 64
STOP_SECONDS: Final = 3.0

Attempt = ReadyAttempt | RefusedAttempt
_Summary = TypeVar("_Summary")
#: What the caller keeps of an outcome beside its line (for ``kernel replay``:
#: what its tally and summary read, and the likely cause), computed where the
#: attempt is, on the worker; a module-level function, so it crosses to a
#: worker by reference. Only that and the line come back, never the outcome:
#: a pickled outcome is many times their size and cost (BENCHMARKS.md).
ShardSummary = Callable[[Attempt, ReplayAdapterOutcome], _Summary]
# One attempt as the caller writes it: (index, attempt id, summary, outcome line).
Decided = tuple[int, str | None, _Summary, bytes]
# What a worker returns per attempt: its id, summary and outcome line.
_Classified = tuple[str | None, object, bytes]


@final
class ShardError(OrchestrateError):
    """A shard could not be classified: its workers were lost, or it failed."""


@final
@attrs.frozen(eq=False)
class SharedRun:
    """What every attempt of a run needs, sent to each worker once.

    ``layout`` ``stream``: ``stream`` is the header and the run a
    ``BundleStreamReader`` read (``shared_stream``); ``document``:
    ``document`` is the one document's bytes. ``token`` names this shared
    part (256 random bits, one per command), so a worker prepares it once
    and a worker of a cluster that served an earlier command prepares it
    anew.
    """

    layout: Literal["stream", "document"]
    token: str
    stream: ReadRun | None = None
    document: bytes = b""


def shared_stream(reader: BundleStreamReader) -> SharedRun:
    """The shared part of a bundle stream: the header and the run ``reader`` has read.

    The parsed run, not its lines: a forked worker has it in memory, and
    unpickling it costs a spawned or Dask worker about a quarter of parsing
    and structuring its lines again (0.8 s against 3.1 s at 100,000 run lines;
    BENCHMARKS.md, "Three rounds, and the run sent parsed").
    """
    return SharedRun("stream", secrets.token_hex(32), stream=reader.read_run())


def shared_document(data: bytes) -> SharedRun:
    """The shared part of a single-document bundle: the document."""
    return SharedRun("document", secrets.token_hex(32), document=data)


@final
@attrs.frozen(eq=False)
class Shard:
    """Consecutive attempts ``start .. start + count - 1``; a stream's attempt lines as read."""

    start: int
    count: int
    lines: tuple[bytes | None, ...] = ()


def classify_item(
    item: Attempt, manifest: AuthorityManifest, facts: RunFacts | None
) -> tuple[ReplayAdapterOutcome, RunFacts | None]:
    """One attempt's outcome, and the facts to pass with the next attempt of the batch.

    The loop body of ``kernel replay``, serial or in a shard: the run is
    examined once and its facts reused while attempts hold the same run
    object (ADR 0011).
    """
    match item:
        case ReadyAttempt():
            facts = facts_for(item.request, facts)
            return replay_attempt(item.request, manifest, facts=facts), facts
        case RefusedAttempt():
            return item.refusal, facts
        case _:
            assert_never(item)


@final
class _Prepared:
    """A worker's copy of the shared part, parsed once, and the facts of its run."""

    def __init__(self, shared: SharedRun) -> None:
        self.token = shared.token
        self.manifest = builtin_manifest()
        self.facts: RunFacts | None = None
        self.reader: BundleStreamReader | None = None
        self.attempts: tuple[ReadyAttempt, ...] = ()
        match shared.layout:
            case "stream":
                if shared.stream is None:
                    raise ValueError("a stream's shared part holds no run")
                self.reader = BundleStreamReader.resumed(*shared.stream)
            case "document":
                value = parse_json(shared.document, max_depth=BUNDLE_LIMITS.depth)
                self.attempts = tuple(document_attempts(structure(value, ReplayBundle)))
            case _:
                assert_never(shared.layout)

    def manifest_of(self, version: str) -> AuthorityManifest:
        """A shipped manifest by its version (``kernel run`` replays under certified.v1)."""
        for manifest in (self.manifest, certified_manifest()):
            if manifest.manifest_version == version:
                return manifest
        raise ValueError(f"no shipped manifest {version!r}")

    def item_at(self, index: int, line: bytes | None) -> Attempt:
        """Attempt ``index`` alone (its line as read, for a stream)."""
        if self.reader is None:
            return self.attempts[index]
        reader = self.reader.positioned(index)
        item = reader.feed_oversized() if line is None else reader.feed(line)
        if item is None or item.attempt_index != index:
            raise ValueError(f"the line of attempt {index} gave no such attempt")
        return item

    def items(self, shard: Shard) -> Iterator[Attempt]:
        if self.reader is None:
            yield from self.attempts[shard.start : shard.start + shard.count]
            return
        reader = self.reader.positioned(shard.start)
        for line in shard.lines:
            item = reader.feed_oversized() if line is None else reader.feed(line)
            if item is None:  # only header and run lines give none; never an attempt line
                raise ValueError("an attempt line gave no attempt")
            yield item

    def classify(
        self, shard: Shard, summary: Callable[[Attempt, ReplayAdapterOutcome], object]
    ) -> tuple[_Classified, ...]:
        found: list[_Classified] = []
        for expected, item in enumerate(self.items(shard), start=shard.start):
            if item.attempt_index != expected:
                raise ValueError(f"shard attempt {item.attempt_index}, expected {expected}")
            outcome, self.facts = classify_item(item, self.manifest, self.facts)
            found.append((item.attempt_id, summary(item, outcome),
                          outcome_line(item.attempt_index, item.attempt_id, outcome)))
        if len(found) != shard.count:
            raise ValueError(f"shard of {shard.count} attempts gave {len(found)}")
        return tuple(found)


_PREPARED: list[_Prepared] = []  # this worker's one prepared run (the latest token)
_LOCK = threading.Lock()


def _prepared(shared: SharedRun | None) -> _Prepared:
    with _LOCK:
        if shared is None:
            if not _PREPARED:
                raise ValueError("this worker was given no run")
            return _PREPARED[0]
        if not _PREPARED or _PREPARED[0].token != shared.token:
            _PREPARED[:] = [_Prepared(shared)]
            # The run lives as long as the worker: moved out of the collector's
            # generations, it is not walked again at every full collection
            # that the outcomes built for each shard set off.
            gc.freeze()
        return _PREPARED[0]


def prepared_run(shared: SharedRun | None) -> _Prepared:
    """This worker's prepared run (see ``classify_shard`` for ``shared``)."""
    return _prepared(shared)


def classify_shard(
    shared: SharedRun | None, shard: Shard,
    summary: Callable[[Attempt, ReplayAdapterOutcome], object],
) -> tuple[_Classified, ...]:
    """A shard's outcomes, in order (the task a worker runs).

    ``shared`` is ``None`` in a process pool worker, whose initializer
    prepared the run; a Dask worker is handed the scattered shared part
    (the same object for every task) and prepares it on its first shard.
    """
    prepared = _prepared(shared)
    return prepared.classify(shard, summary)


def _initialize(path: str, digest: str) -> None:
    """A spawned pool worker's start: read the shared part from ``path``, prepare it once.

    It is read from a file, not passed as an initializer argument: the spawn
    start method writes those arguments into a pipe that the parent keeps
    open at both ends until it has written them all, so a worker killed while
    starting would leave the parent blocked forever on a shared part larger
    than the pipe's buffer. The bytes must have the SHA-256 the caller named
    before they are unpickled.
    """
    with open(path, "rb") as handle:
        data = handle.read()  # a file this run wrote, in a 0700 directory
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"{path}: not the shared part this run wrote")
    shared = pickle.loads(data)
    if type(shared) is not SharedRun:
        raise ValueError(f"{path}: not a shared part")
    _prepared(shared)


def _begin_forked(shared: SharedRun) -> None:
    """A forked pool worker's start: the shared part is the command's own, in this copy of
    its memory; prepared once, as a spawned worker's."""
    _prepared(shared)


# --- the runners -------------------------------------------------------------------


@final
@attrs.frozen(eq=False)
class Job:
    """One unit of work for the workers: ``fn(shared, *args)`` (``fn`` picklable by reference).

    A worker calls ``fn`` with its prepared shared part (``None`` in a pool
    worker, whose initializer prepared it; the scattered value on Dask). The
    work must be pure: a job not yet taken may be run again after a worker
    died, and its result must then be the same.
    """

    fn: Callable[..., object]
    args: tuple[object, ...]


class ShardRunner:
    """Jobs on workers, results taken in submission order; ``close`` stops the workers."""

    def __init__(self, workers: int, in_flight: int | None = None) -> None:
        self.workers = workers
        self.in_flight = in_flight or 2 * workers + 1
        self.restarts = 0
        self._pending: deque[tuple[Job, Any]] = deque()

    def _submit(self, job: Job) -> Any:
        raise NotImplementedError

    def _take(self, handle: Any) -> object:
        raise NotImplementedError

    def poll(self) -> None:
        """Serve the workers without waiting (while the caller writes a shard's lines)."""

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet taken."""
        return len(self._pending)

    def submit(self, job: Job) -> None:
        """Queue ``job``; its result is taken by ``take`` after every earlier job's."""
        self._pending.append((job, self._submit(job)))

    def take(self) -> tuple[Job, object]:
        """The oldest job not yet taken and its result (waits for it); ``ShardError`` if lost."""
        job, handle = self._pending[0]
        result = self._take(handle)
        self._pending.popleft()
        return job, result

    def run(
        self, shards: Iterable[Shard], summary: ShardSummary[_Summary]
    ) -> Iterator[Decided[_Summary]]:
        """Every attempt of ``shards``, in order, with ``summary`` of its outcome (computed
        on the worker); raises ``ShardError`` when a shard is lost."""
        source = iter(shards)
        exhausted = False
        while True:
            while not exhausted and self.pending < self.in_flight:
                shard = next(source, None)
                if shard is None:
                    exhausted = True
                    break
                self.submit(Job(classify_shard, (shard, summary)))
            if not self.pending:
                return
            job, found = self.take()
            taken = job.args[0]
            assert isinstance(taken, Shard)
            results = cast(tuple[_Classified, ...], found)
            for offset, (attempt_id, kept, line) in enumerate(results):
                if offset % _POLL_EVERY == _POLL_EVERY - 1:
                    self.poll()
                yield taken.start + offset, attempt_id, cast(_Summary, kept), line


@final
class _ProcessShards(ShardRunner):
    """Shards on worker processes with a pipe each (``_worker_pool``): a worker that dies,
    even halfway through writing a result, is replaced and its shard run again.

    With ``fork``, the first workers are forks of this process, which hand
    them the shared part in memory (no pickle, no interpreter start-up);
    replacements, and every worker when a fork is not safe here, are spawned
    and read the shared part pickled from a file, written when first needed.
    """

    def __init__(
        self, shared: SharedRun, workers: int, in_flight: int | None, fork: bool
    ) -> None:
        super().__init__(workers, in_flight)
        self._shared = shared
        self._spawned: Start | None = None
        self._directory: str | None = None
        self._path = ""
        first = Start("fork", _begin_forked, (shared,)) if fork else self._spawned_start()
        try:
            self._pool = WorkerPool(
                workers, first, again=self._spawned_start,
                on_death=self._count_restart, stop_seconds=STOP_SECONDS,
            )
        except BaseException:
            self._remove()
            raise

    def _spawned_start(self) -> Start:
        """A spawned worker's start; the shared part's file is written on the first call."""
        if self._spawned is None:
            data = pickle.dumps(self._shared, pickle.HIGHEST_PROTOCOL)
            try:
                self._directory = tempfile.mkdtemp(prefix="kernel-shards-")  # mode 0700
                self._path = os.path.join(self._directory, "shared.pickle")
                with open(self._path, "xb") as handle:
                    handle.write(data)
            except BaseException:
                self._remove()
                raise
            self._spawned = Start(
                "spawn", _initialize, (self._path, hashlib.sha256(data).hexdigest()))
        return self._spawned

    @property
    def methods(self) -> tuple[str, ...]:
        """How each live worker was started (``fork`` or ``spawn``)."""
        return self._pool.methods

    def _remove(self) -> None:
        if self._directory is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._path)
        with contextlib.suppress(OSError):
            os.rmdir(self._directory)

    def _submit(self, job: Job) -> Task:
        return self._pool.submit(job.fn, (None, *job.args))

    def _take(self, handle: Any) -> object:
        try:
            return self._pool.result(handle)
        except TaskFailed as exc:
            raise ShardError("shard_failed", str(exc)) from exc

    def poll(self) -> None:
        self._pool.poll()

    def _count_restart(self, cause: BaseException) -> None:
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise ShardError(
                "worker_lost",
                f"a worker process died {self.restarts} times ({cause}); the run is incomplete",
            ) from cause

    def close(self, *, failed: bool) -> None:
        try:
            if failed:
                self._pool.close(failed=True)
            else:
                with second_interrupts_ignored():  # every shard is in: not cut short
                    self._pool.close(failed=False)
        finally:
            self._remove()


@contextlib.contextmanager
def process_shards(
    shared: SharedRun, workers: int, in_flight: int | None = None, *, fork: bool = False
) -> Iterator[ShardRunner]:
    """A process pool of ``workers``, each given ``shared`` once; stopped on exit.

    With ``fork``, the workers are forks of this process where that is safe
    (``fork_is_safe``: Linux, no other thread), spawned interpreters otherwise;
    a replacement for a dead worker is always spawned.
    """
    runner = _ProcessShards(shared, workers, in_flight, fork)
    try:
        yield runner
    except BaseException:
        runner.close(failed=True)
        raise
    runner.close(failed=False)


@final
@attrs.frozen(eq=False)
class _Whole:
    """A job's result as Dask carries it between processes: one value, pickled whole.

    Dask sends a task's result that is a tuple, list or dict item by item
    (``distributed.protocol.serialize``: data it wraps is serialized with its
    collections iterated), one header and one pickle per item. A shard's 500
    outcomes cost about 16 ms that way against 0.3 ms pickled whole, spent in
    the worker's event loop and again in the client's (BENCHMARKS.md,
    "Dask results pickled whole, and a quieter local cluster").
    """

    value: object


def _run_whole(fn: Callable[..., object], *args: object) -> _Whole:
    """The Dask task: ``fn(*args)``, its result wrapped so that it travels as one pickle."""
    return _Whole(fn(*args))


@final
class _DaskShards(ShardRunner):
    def __init__(self, client: Any, shared: SharedRun, workers: int,
                 in_flight: int | None) -> None:
        super().__init__(workers, in_flight)
        self._client = client
        # One copy to every worker now; each task names it, none carries it.
        self._run = shared
        self._shared = client.scatter(shared, broadcast=True, hash=False)
        self._futures: list[Any] = []
        # By future key, until taken, with the scatter it named: a lost one is sent again.
        self._jobs: dict[str, tuple[Job, int]] = {}
        self._scattered = 0

    def _submit(self, job: Job) -> Any:
        future = self._client.submit(_run_whole, job.fn, self._shared, *job.args, pure=False)
        self._futures.append(future)
        self._jobs[future.key] = (job, self._scattered)
        if len(self._futures) > 4 * self.in_flight:
            self._futures = [f for f in self._futures if not f.done()]
        return future

    def _take(self, handle: Any) -> object:
        while True:
            try:
                result: object = handle.result()
                break
            except Exception as exc:
                if type(exc).__name__ != "FutureCancelledError":
                    code = "worker_lost" if type(exc).__name__ == "KilledWorker" else "shard_failed"
                    raise ShardError(code, f"{type(exc).__name__}: {exc}") from exc
                handle = self._again(handle, exc)
        self._jobs.pop(handle.key, None)
        handle.release()
        if not isinstance(result, _Whole):
            raise ShardError("shard_failed", f"a worker returned {type(result).__name__}, "
                             "not a wrapped shard result")
        return result.value

    def _again(self, handle: Any, cause: BaseException) -> Any:
        """A job whose input was lost with a worker (Dask cancels it), sent again.

        The shared run lives only where it was scattered: a worker killed
        mid-run took its copy, and Dask cancels every job that names it
        ("lost data"). Shard jobs are pure, so the job is sent again, with
        the run scattered afresh when its copy is gone. Past
        ``MAX_RESTARTS`` losses the run stops, as the process runner does.
        """
        job, scattered = self._jobs.pop(handle.key)
        if scattered == self._scattered:  # a new loss, not another job of one counted
            self.restarts += 1
            if self.restarts > MAX_RESTARTS:
                raise ShardError("worker_lost", f"a worker was lost {self.restarts} times "
                                 f"({type(cause).__name__}: {cause}); the run is incomplete"
                                 ) from cause
            self._shared = self._client.scatter(self._run, broadcast=True, hash=False)
            self._scattered += 1
        return self._submit(job)

    def cancel(self) -> None:
        with contextlib.suppress(Exception):
            self._client.cancel([*self._futures, self._shared], force=True)


@contextlib.contextmanager
def dask_shards(
    shared: SharedRun, *, workers: int | None, scheduler: str | None,
    connect_seconds: float = 10.0, in_flight: int | None = None, tls: TlsFiles | None = None,
) -> Iterator[ShardRunner]:
    """Shards on Dask: the cluster at ``scheduler``, or a local one of ``workers``.

    Raises ``ExecutorSetupError`` as ``open_executor`` does when the cluster
    cannot be reached or started.
    """
    spec = ExecutorSpec(ExecutorKind.DASK, workers, scheduler, connect_seconds, tls)
    check_executor_spec(spec)
    with _dask_client(spec) as client, _dask_runner(client, shared, workers, in_flight) as runner:
        yield runner


@contextlib.contextmanager
def _dask_runner(
    client: Any, shared: SharedRun, workers: int | None, in_flight: int | None
) -> Iterator[ShardRunner]:
    """Shards on ``client``'s cluster (``workers``, else as many as it has); cancelled on error."""
    count = workers or max(1, len(client.scheduler_info().get("workers", {})))
    runner = _DaskShards(client, shared, count, in_flight)
    try:
        yield runner
    except BaseException:
        runner.cancel()
        raise


@contextlib.contextmanager
def shards_beside(
    shared: SharedRun, spec: ExecutorSpec, executor: Executor | None,
    in_flight: int | None = None,
) -> Iterator[ShardRunner]:
    """Shard workers next to ``executor``, the one ``open_executor(spec)`` yielded (``kernel run``).

    ``process``: a second spawn pool of ``spec.workers``, given ``shared``
    once; the certification pool stays as it is (its workers' SIGTERM
    handling stops a running step group). ``dask``: the executor's own client
    (one cluster for the run), the shared part scattered to its workers.
    ``inline`` has no workers: it is never sharded.
    """
    match spec.kind:
        case ExecutorKind.PROCESS:
            assert spec.workers is not None
            with process_shards(shared, spec.workers, in_flight) as runner:
                yield runner
        case ExecutorKind.DASK:
            # distributed's ClientExecutor keeps its client as ``_client``.
            client: Any = getattr(executor, "_client", None)
            if client is None:
                raise ExecutorSetupError("executor_unavailable",
                                         "the Dask executor holds no client to shard on")
            with _dask_runner(client, shared, spec.workers, in_flight) as runner:
                yield runner
        case ExecutorKind.INLINE:
            raise AssertionError("inline is not sharded")
        case _:
            assert_never(spec.kind)


@contextlib.contextmanager
def _dask_client(spec: ExecutorSpec) -> Iterator[Any]:
    """A ``distributed.Client``: to ``spec.scheduler``, or to a local cluster started here.

    The same set-up as ``open_executor``'s (the helpers of ``_executors``:
    a TCP probe first, a loopback cluster without dashboard or profiler,
    closed within a bound), but the client itself is yielded: the shared
    part is scattered to every worker once, which an ``Executor`` cannot do.
    """
    try:
        import distributed  # noqa: F401  (is it installed: refused here, not on first use)
    except ImportError as exc:
        raise ExecutorSetupError(
            "executor_unavailable",
            f"dask distributed is not installed ({exc}); install failclosed-replay[scale]",
        ) from exc
    with contextlib.ExitStack() as stack:
        if spec.scheduler is None:
            assert spec.workers is not None
            client = stack.enter_context(local_client(spec.workers))
        else:
            client = stack.enter_context(scheduler_client(spec))
        yield client
