"""run_check: one run of an approved entry, producer then checker.

Theory of operation (seed 003, "Production and checking sequence"; each step
is a guard from ``_steps.py``: the first that fails ends the run BLOCKED with
its ``Reason``):

1. create a fresh attempt directory ``run_root/<run_id>`` (never reused);
2. validate the job: its digest, and that it names this check; choose the
   containment level (ADR 0009), never weaker than the entry requires;
3. build identity(check): every pin must hold (with supplied evidence, every
   pin of the checker: the producer does not launch, ADR-0019);
4. copy every declared input (the specification is always one) from inside
   the repository root into ``snapshot/``, each copy hashed once; the
   snapshot holds exactly the declared inputs;
5. write the producer request; re-check the producer's pins (its executable
   and scripts through sealed copies); launch the producer, contained, in
   ``snapshot/`` with placeholders expanded per argv element (no shell);
6. after it exits (and every process it started with it): the snapshot is
   unchanged, no ``checker/`` directory appeared, and ``evidence/`` holds
   exactly the declared artifacts as regular files (missing, symlinked,
   non-regular or undeclared entries are typed failures), each within the
   size limits before any is read (``artifact_too_large``,
   ``evidence_too_large``); hash them, within the producer's deadline and
   until cancelled (``producer_timeout``, ``cancelled``); anything
   the producer wrote to its own ``{{receipt}}`` is never read; after each
   command its own role directory (``producer/``, ``checker/``) must still be
   a plain directory, or nothing more is written or read there
   (``run_dir_tampered``);
7. write a fresh checker request from the manifest and job; re-check every
   pin; launch the checker, contained;
8. after it exits: its pins, the snapshot and the evidence are unchanged;
   exit status 0 is required; the receipt is validated field by field;
9. accepted → PASS; a valid rejected/unknown receipt or any failure above →
   BLOCKED. The metadata is written atomically last, in every case.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from kernel.external._contain import ContainmentLevel
from kernel.external._files import StopWhen, list_digest, write_json_new, write_new
from kernel.external._identity import CheckIdentity
from kernel.external._job import Job
from kernel.external._manifest import CheckEntry
from kernel.external._outcome import Reason, RunKind, RunOutcome
from kernel.external._pin_cache import PinCache
from kernel.external._settings import Progress, Role, RunLimits, Stage
from kernel.external._steps import (
    Block,
    Recorder,
    build_identity,
    check_job,
    check_phase,
    choose_containment,
    finish,
    freeze_snapshot,
    fresh_attempt,
    hash_evidence,
    launch,
    limits_for,
    request_object,
    require_utf8_path,
    verify_snapshot,
)
from kernel.identity import sha256_hex
from kernel.serde import dumps

__all__ = ["run_check"]


def run_check(
    entry: CheckEntry,
    job: Job,
    *,
    repository_root: Path,
    manifest_path: Path,
    run_root: Path,
    run_id: str,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    max_containment: ContainmentLevel | None = None,
    supplied_evidence: Mapping[str, bytes] | None = None,
    pins: PinCache | None = None,
) -> RunOutcome:
    """Run the producer and the checker of ``entry`` for ``job`` in a fresh directory.

    With ``supplied_evidence`` (the artifacts a content-addressed store kept
    for this check and specification, ADR-0019) the producer does not run:
    the kernel writes exactly those bytes into ``evidence/``, the metadata
    records no producer (``producer`` and ``producer_request_sha256`` None),
    and everything after (the evidence hash, the checker with a fresh
    request, the receipt rules) is a run's. Its names must be exactly the
    entry's ``evidence_artifacts`` (``ValueError`` before anything is made).

    With ``pins`` (a run's ``PinCache``, shared by its attempts in this
    process) the pinned files are checked through the cache's ledger and the
    sealed copies are the cache's: a pinned file whose settled fingerprint
    still holds is not read again. The checks, their failures and the
    records are those of a run without it.

    Returns PASS only for an accepting valid receipt, else BLOCKED with a
    ``Reason``. Raises ``RunDirectoryError`` if ``run_root/run_id`` cannot be
    created fresh (or a path it records is not UTF-8: ``path_not_utf8``) or its
    metadata cannot be written. Both commands run at the strongest containment
    level available (at most ``max_containment``); a check requiring more ends
    BLOCKED ``containment_unavailable`` before anything runs.
    """
    if supplied_evidence is not None and sorted(supplied_evidence) != sorted(
        entry.evidence_artifacts
    ):
        raise ValueError("supplied evidence must name exactly the declared artifacts")
    require_utf8_path(os.path.abspath(manifest_path), "manifest path")
    require_utf8_path(os.path.abspath(repository_root), "repository root")
    limits = limits_for(entry, limits)
    attempt = fresh_attempt(run_root, run_id, pins)
    rec = Recorder(
        kind=RunKind.RUN,
        run_id=run_id,
        replay_of=None,
        check_id=entry.check_id,
        manifest_path=os.path.abspath(manifest_path),
        repository_root=os.path.abspath(repository_root),
        job_id=job.job_id,
        job_digest=job.job_digest,
    )

    def body() -> None:
        write_new(attempt.root / "job.json", dumps(job) + b"\n")
        check_job(job, entry)
        containment = choose_containment(entry, rec, max_containment, limits)
        identity = build_identity(entry, rec, attempt, producer=supplied_evidence is None)
        if progress is not None:
            progress(Stage.IDENTITY_BUILT)
        freeze_snapshot(entry, repository_root, rec, attempt)
        if progress is not None:
            progress(Stage.SNAPSHOT_READY)
        attempt.evidence.mkdir()
        # The producer's deadline also bounds the hash of the evidence it left.
        stop = StopWhen.within(limits.producer_timeout_seconds, cancel)
        if supplied_evidence is not None:
            _write_supplied(attempt.evidence, supplied_evidence)
        else:
            produce(identity, containment)
        rec.artifacts = hash_evidence(
            attempt.evidence,
            entry.evidence_artifacts,
            attempt.files,
            limits=limits,
            stop=stop,
            timeout_reason=Reason.PRODUCER_TIMEOUT,
        )
        rec.evidence_digest = list_digest(rec.artifacts)
        check_phase(
            RunKind.RUN,
            entry,
            job,
            identity,
            rec,
            attempt,
            limits=limits,
            environment=environment,
            cancel=cancel,
            progress=progress,
            containment=containment,
            produced=supplied_evidence is None,
        )

    def produce(identity: CheckIdentity, containment: ContainmentLevel) -> None:
        producer_dir = attempt.role_dir(Role.PRODUCER)
        producer_dir.mkdir()
        request = write_json_new(
            producer_dir / "request.json",
            request_object(Role.PRODUCER, RunKind.RUN, entry, job, identity, rec, attempt),
        )
        rec.producer_request_sha256 = sha256_hex(request)
        if progress is not None:
            progress(Stage.PRODUCER_LAUNCH)
        try:
            rec.producer = launch(
                Role.PRODUCER,
                entry,
                attempt,
                timeout_seconds=limits.producer_timeout_seconds,
                limits=limits,
                environment=environment,
                cancel=cancel,
                containment=containment,
                parts=frozenset(rec.containment_parts),
                recheck=entry.producer.pins(),
            )
        except Block as block:
            rec.producer = block.summary
            raise
        if progress is not None:
            progress(Stage.PRODUCER_EXITED)
        verify_snapshot(attempt, rec.inputs, Reason.SNAPSHOT_CHANGED, "after the producer")
        if attempt.role_dir(Role.CHECKER).exists() or attempt.role_dir(Role.CHECKER).is_symlink():
            raise Block(Reason.RUN_DIR_TAMPERED, "checker/ appeared while the producer ran")

    return finish(rec, attempt, body)


def _write_supplied(evidence: Path, artifacts: Mapping[str, bytes]) -> None:
    """The kernel, not a step, writes stored evidence (a step never writes the store)."""
    for name, data in sorted(artifacts.items()):
        target = evidence / name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_new(target, data)
