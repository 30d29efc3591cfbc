"""The main job over a work directory: one public entry point (ADR 0006, ADR 0023).

``MainJob(bundle, JobSettings(work_dir=...))`` is a context manager. Entering
it checks everything before anything is written: the bundle's envelope, the
deadline and shard size, the work directory (absent or empty, or with
``resume`` an earlier run of this bundle whose recorded lines the pure core
gives again), the pinned certifier, the sandbox, the executor. A refusal is
``JobRefused`` and leaves no trace. Then ``outcomes()`` yields each attempt's
outcome, in run order, once its line is on disk (appended to
``outcomes.jsonl`` and fsynced), recorded lines of an earlier run first.
Inline, attempts are decided one at a time; on a process pool or Dask, in
shards whose pure steps run on shard workers, certifications on the
executor in between (ADR 0020).

An interrupt (``KeyboardInterrupt``, or ``Terminated`` for SIGTERM) leaves
``INTERRUPTED`` (which signal, how many outcomes are recorded) and goes on
up; lost shard workers raise ``JobStopped``. Either way the recorded lines
are kept, and a job with ``resume=True`` continues after them, none decided
twice: a certification the interrupt left complete is kept once it derives
again with a verified receipt (ADR 0022), any other directory is removed
and certified anew. A run that completes keeps its bundle copy (the audit's
input) and removes ``INTERRUPTED``.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final, final

import attrs

from kernel.audit import rederive_certification
from kernel.bundles import BundleStreamError, ReadyAttempt, outcome_line
from kernel.external import (
    MAX_DEADLINE_SECONDS,
    ContainmentLevel,
    RunLimits,
    default_environment,
    sandbox_shortfall,
)
from kernel.job._bundle_input import (
    Attempt,
    BundleCopy,
    DocumentShards,
    StreamShards,
    open_bundle,
    open_sharded,
)
from kernel.job._hints import run_hint
from kernel.job._resume import check_recorded, recorded_outcome
from kernel.job.errors import JobRefused, JobStopped, RefusalKind, signal_name
from kernel.orchestrate import (
    BUNDLE_PARTIAL,
    INTERRUPTED_FILE,
    OUTCOMES_FILE,
    RUN_SHARD_SIZE,
    CertifierSetupError,
    EvidenceStore,
    EvidenceTask,
    ExecutorKind,
    ExecutorSetupError,
    ExecutorSpec,
    ExternalCertifier,
    FirstOfKey,
    ShardError,
    ShardRunner,
    WorkDirError,
    certification_entry,
    check_executor_spec,
    check_fresh_work_dir,
    clear_unrecorded,
    create_work_dir,
    discover_tools,
    holds_nothing,
    keep_bundle,
    mark_interrupted,
    open_executor,
    recorded_count,
    recorded_outcomes,
    replay_requests,
    replay_shards,
    run_state,
    shards_beside,
    still_as_left,
)
from kernel.organs import certified_manifest
from kernel.replay import AuthorityManifest, ReplayAdapterOutcome, RunFacts, facts_for

__all__ = ["MAX_SHARD_SIZE", "JobReport", "JobSettings", "MainJob", "RecordedOutcome"]

MAX_SHARD_SIZE: Final = 1_000_000


@final
@attrs.frozen
class JobSettings:
    """What a main job runs with; checked when the job is entered (``JobRefused``).

    ``executor`` decides where certifications run (inline here, a process
    pool, Dask); ``deadline`` bounds each producer and checker step, in
    seconds; ``shard_size`` is the attempts per shard on a pool or Dask
    (default ``RUN_SHARD_SIZE``); ``evidence_store`` is a store shared by
    runs (ADR 0019); ``recheck_returned`` re-runs the pinned checker here on
    what a worker returns before it counts (ADR 0022).
    """

    work_dir: Path
    executor: ExecutorSpec = attrs.field(factory=lambda: ExecutorSpec(ExecutorKind.INLINE))
    resume: bool = False
    evidence_store: Path | None = None
    deadline: float = 60.0
    shard_size: int | None = None
    recheck_returned: bool = False


@final
@attrs.frozen
class RecordedOutcome:
    """One attempt's outcome, on disk in ``outcomes.jsonl`` when it is handed out.

    ``line`` is its outcome line, byte for byte; ``hint`` the likely cause of
    a refusal when the bundle was sealed for another manifest; ``earlier``
    says an earlier run of a resumed work directory recorded it.
    """

    index: int
    attempt_id: str | None
    outcome: ReplayAdapterOutcome
    line: bytes
    hint: str | None
    earlier: bool = False


@final
@attrs.frozen
class JobReport:
    """What the job did, for a summary: which attempts an earlier run recorded, which
    certifications the interrupt had left complete and were kept, and the seconds spent
    deciding (certifying, mostly), on which executor, with how many shard-worker restarts."""

    recorded_earlier: frozenset[str]
    kept_from_interrupt: frozenset[str]
    seconds: float
    executor: ExecutorSpec
    restarts: int


def _check_settings(settings: JobSettings) -> None:
    deadline = settings.deadline
    if not (isinstance(deadline, int | float) and 0 < deadline <= MAX_DEADLINE_SECONDS):
        raise JobRefused("invalid_deadline", f"--deadline must be positive and at most "
                         f"{MAX_DEADLINE_SECONDS} seconds (7 days), got {deadline}")
    size = settings.shard_size
    if size is not None and not (type(size) is int and 1 <= size <= MAX_SHARD_SIZE):
        raise JobRefused("invalid_shard_size",
                         f"the shard size must be an integer in 1..{MAX_SHARD_SIZE}, got {size!r}")
    try:
        check_executor_spec(settings.executor)
    except ExecutorSetupError as exc:
        raise JobRefused(exc.code, exc.message) from None
    if settings.recheck_returned and settings.executor.kind is ExecutorKind.INLINE:
        raise JobRefused("option_conflict", "--recheck-returned re-checks what workers "
                         "return: it needs --executor process or dask (inline, every "
                         "certification already runs here)")


def _check_utf8(work_dir: Path) -> None:
    """A work directory whose path is not UTF-8 is refused before anything runs: the
    attempts' records name their files by path in canonical JSON, which is UTF-8 only
    (such a run used to start and then fail every certification)."""
    raw = os.fsencode(work_dir.absolute())
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise JobRefused("work_dir_not_utf8",
                         f"--work-dir {raw!r}: the path is not UTF-8, and the run's records "
                         "name their files in UTF-8; choose another directory name") from None


class MainJob:
    """The main job over one bundle and one work directory (see the module docstring)."""

    def __init__(self, bundle: Path, settings: JobSettings) -> None:
        self.bundle = bundle
        self.settings = settings
        self.root = settings.work_dir.absolute()
        self.total = 0
        #: With ``resume``, the work directory held nothing yet: the job started fresh.
        self.started_fresh = False
        #: The outcomes on disk when an interrupt or a lost shard stopped the job.
        self.recorded_at_stop: int | None = None
        self._stack = ExitStack()
        self._copy = BundleCopy()  # what the run reads, kept in the work directory
        self._attempts: Iterator[Attempt] = iter(())
        self._shards: StreamShards | DocumentShards | None = None
        self._prefix: list[Attempt] = []
        self._recorded: list[bytes] = []
        self._left: dict[str, tuple[int, int]] = {}
        self._elapsed = 0.0
        self._runner: ShardRunner | None = None
        self._pool: Executor | None = None
        self._certifier: ExternalCertifier | None = None
        self._log: BinaryIO | None = None
        self._kept: BinaryIO | None = None
        self._finished = False

    # -- entering: every check before anything is written ------------------------------

    def __enter__(self) -> MainJob:
        try:
            self._open()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            if isinstance(exc, KeyboardInterrupt):  # came while the caller held an outcome
                self.interrupted(exc)
        finally:
            self._stack.close()

    def interrupted(self, exc: KeyboardInterrupt) -> int:
        """Leave ``INTERRUPTED`` (once) for ``exc``; the outcomes recorded on disk.

        Counted on disk: what a resumed run keeps is the complete lines there
        (the signal may have come between a batch's write and the count).
        """
        if self.recorded_at_stop is None and self._log is not None:
            self._log.flush()
            self.recorded_at_stop = mark_interrupted(self.root, signal_name(exc))
        return self.recorded_at_stop or 0

    def _open(self) -> None:
        settings = self.settings
        _check_settings(settings)
        _check_utf8(settings.work_dir)
        resume = settings.resume
        if settings.executor.kind is ExecutorKind.INLINE:
            self.total, identity, self._attempts = open_bundle(self.bundle, self._copy)
        else:  # the pure steps on the workers too (ADR 0020): the lines, unparsed here
            self.total, shared, self._shards = open_sharded(
                self.bundle, settings.shard_size or RUN_SHARD_SIZE, self._copy)
            identity = self._shards.run_id
        if resume and holds_nothing(settings.work_dir):
            # Interrupted before the work directory held anything (issue 35,
            # finding 7): a wrapper that retries a resume after 130 starts fresh.
            self.started_fresh, resume = True, False
        try:
            if resume:
                self._recorded = recorded_outcomes(settings.work_dir, identity, self.total)
                # Read past the recorded attempts, but never take their outcomes on trust.
                count = len(self._recorded)
                self._prefix = (self._shards.take(count) if self._shards is not None
                                else list(itertools.islice(self._attempts, count)))
                check_recorded(settings.work_dir, self._prefix, self._recorded)
            else:
                check_fresh_work_dir(settings.work_dir)
        except WorkDirError as exc:
            raise JobRefused(exc.code, exc.message) from None
        try:
            entry = certification_entry(discover_tools(Path(sys.executable)))
        except CertifierSetupError as exc:
            raise JobRefused("certifier_unavailable", exc.message) from None
        if entry.required_containment is ContainmentLevel.SANDBOX:
            # Every certification would end BLOCKED containment_unavailable: say
            # so once, before anything runs, with what to install.
            shortfall = sandbox_shortfall()
            if shortfall is not None:
                raise JobRefused("sandbox_unavailable", "certification runs every step in a "
                                 f"sandbox: {shortfall}", RefusalKind.ENVIRONMENT)
        try:  # opened before anything is written: a refusal leaves no trace
            self._pool = self._stack.enter_context(open_executor(settings.executor))
        except ExecutorSetupError as exc:
            raise JobRefused(exc.code, exc.message) from None
        try:
            if resume:  # a certification the interrupt left complete may be kept
                self._left = clear_unrecorded(self.root, self._recorded)
            else:
                create_work_dir(self.root, run_state(identity, self.total))
        except WorkDirError as exc:
            raise JobRefused(exc.code, exc.message) from None
        store = settings.evidence_store
        self._certifier = ExternalCertifier(
            self.root, entry, RunLimits(settings.deadline, settings.deadline),
            default_environment(),
            store=None if store is None else EvidenceStore(store),
            rederive=rederive_certification,  # a worker's certification is derived here
            adopt=resume, recheck=settings.recheck_returned,
        )
        self._log = self._stack.enter_context((self.root / OUTCOMES_FILE).open("ab"))
        self._kept = self._stack.enter_context((self.root / BUNDLE_PARTIAL).open("wb"))
        self._copy.attach(self._kept)
        if self._shards is not None:
            self._runner = self._stack.enter_context(
                shards_beside(shared, settings.executor, self._pool))

    # -- running --------------------------------------------------------------------

    def outcomes(self) -> Iterator[RecordedOutcome]:
        """Every attempt's outcome in run order, each once it is recorded on disk.

        Raises ``JobRefused`` for a bundle stream found defective mid-run,
        ``JobStopped`` when shard workers are lost, and lets an interrupt go
        on up once ``INTERRUPTED`` is written; the recorded lines stay.
        """
        if self._log is None or self._certifier is None or self._finished:
            raise RuntimeError("MainJob.outcomes(): enter the job first, and once only")
        self._finished = True
        log = self._log
        try:
            for item, line in zip(self._prefix, self._recorded, strict=True):
                outcome = recorded_outcome(line)
                yield RecordedOutcome(item.attempt_index, json.loads(line)["attempt_id"],
                                      outcome, line + b"\n", run_hint(item, outcome), True)
            batches = self._batches(certified_manifest(), self._certifier)
            while True:
                started = time.monotonic()
                batch = next(batches, None)
                self._elapsed += time.monotonic() - started
                if batch is None:
                    break
                # Recorded (and flushed to disk) a batch at a time: what a resumed
                # run keeps is exactly what was decided.
                log.write(b"".join(entry.line for entry in batch))
                log.flush()
                os.fsync(log.fileno())
                yield from batch
            if self._shards is not None and self._shards.error is not None:
                self._stream_error(self._shards.error)
            assert self._kept is not None
            keep_bundle(self.root, self._kept, self._copy.stream)
        except ShardError as exc:  # a shard's workers were lost: fail closed, resumable
            log.flush()
            self.recorded_at_stop = recorded_count(self.root)
            raise JobStopped(exc.code, exc.message, self.recorded_at_stop, self.total) from None
        except KeyboardInterrupt as exc:
            self.interrupted(exc)
            raise
        (self.root / INTERRUPTED_FILE).unlink(missing_ok=True)

    def report(self) -> JobReport:
        """What the job did so far (its summary's figures)."""
        earlier = frozenset(json.loads(line)["attempt_id"] for line in self._recorded)
        return JobReport(earlier, still_as_left(self.root, self._left), self._elapsed,
                         self.settings.executor, 0 if self._runner is None
                         else self._runner.restarts)

    def _stream_error(self, exc: BundleStreamError) -> None:
        raise JobRefused(exc.code, f"{self.bundle}: {exc.message}")

    def _batches(self, manifest: AuthorityManifest,
                 certifier: ExternalCertifier) -> Iterator[list[RecordedOutcome]]:
        if self._shards is None:
            try:
                yield from _inline_batches(self._attempts, manifest, certifier)
            except BundleStreamError as exc:
                self._stream_error(exc)
            return
        assert self._runner is not None
        for batch in replay_shards(self._runner, self._shards, self._pool, certifier,
                                   manifest.manifest_version, run_hint):
            yield [RecordedOutcome(s.index, s.attempt_id, s.outcome, s.line, s.hint)
                   for s in batch]
        # Attempt lines missing at the end of the stream: the reader's refusals.
        tail = [_decided(item, item.refusal) for item in self._shards.tail]
        if tail:
            yield tail


def _decided(item: Attempt, outcome: ReplayAdapterOutcome) -> RecordedOutcome:
    return RecordedOutcome(item.attempt_index, item.attempt_id, outcome,
                           outcome_line(item.attempt_index, item.attempt_id, outcome),
                           run_hint(item, outcome))


def _inline_batches(
    attempts: Iterator[Attempt], manifest: AuthorityManifest, certifier: ExternalCertifier
) -> Iterator[list[RecordedOutcome]]:
    """Inline: each attempt decided here, one at a time (a batch of one).

    The run is examined once and its facts passed with every attempt (ADR 0011):
    examined again for each attempt, a run of n attempts cost O(n^2).
    """
    facts: RunFacts | None = None
    reuse: FirstOfKey[EvidenceTask] = FirstOfKey()  # a repeat reuses the run's first (ADR-0019)
    for item in attempts:
        if isinstance(item, ReadyAttempt):
            facts = facts_for(item.request, facts)
            (outcome,) = replay_requests(
                [item.request], manifest, certifier, facts=facts, reuse=reuse
            )
        else:
            outcome = item.refusal
        yield [_decided(item, outcome)]
