"""replay_run: re-check a retained run with the currently pinned checker only.

Theory of operation (seed 003, "Replay"):

- the retained ``metadata.json`` and ``job.json`` are read back strictly
  (regular files, no symlink), and the job must be the one the metadata
  records; ``replays/`` must be absent or a plain directory (never followed);
  the stored status, verdict and receipt are never used as a checking result;
- nothing read from the run directory is configuration (ADR 0009): the
  manifest and the repository root are the operator's (required arguments);
  the ``manifest_path`` and ``repository_root`` the run recorded are never
  opened. What is read back (metadata, job, evidence) is evidence, checked
  against each other and against the digests the run recorded;
- the *current* manifest entry (from the operator's manifest) gives the
  specification, obligations and identity; the identity is rebuilt, so every
  pin must hold now;
- the retained ``evidence/`` must still be exactly the recorded artifacts,
  byte for byte, their list digest the recorded ``evidence_digest``, and, when
  the operator gives one, that digest the operator's (``evidence_changed``
  otherwise); the artifact list must still be the one the current entry
  declares; it is refused over the size limits before it is read
  (``artifact_too_large``, ``evidence_too_large``), and capturing it (hash,
  copy, hash) stops on cancellation or the checker's deadline
  (``cancelled``, ``checker_timeout``);
- a fresh attempt directory ``run_dir/replays/<replay_id>`` receives a fresh
  snapshot of the current inputs and a copy of the retained evidence; the
  checker runs there with a fresh request naming the replay id as its run id;
- the checker runs contained exactly as in a run (ADR 0009);
- the new receipt, request and artifact digests are retained in the attempt's
  own ``metadata.json``. The producer never runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

from kernel.external._contain import ContainmentLevel
from kernel.external._files import StopWhen, list_digest, read_capped, write_new
from kernel.external._job import MAX_JOB_BYTES, Job
from kernel.external._manifest import load_manifest
from kernel.external._outcome import Reason, RunKind, RunMetadata, RunOutcome
from kernel.external._settings import Progress, RunLimits, Stage
from kernel.external._steps import (
    KEPT_EVIDENCE_REASONS,
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
    limits_for,
    require_utf8_path,
)
from kernel.external.errors import RunRecordError
from kernel.serde import SerdeError, loads

__all__ = ["read_run_metadata", "replay_run"]

_MAX_METADATA_BYTES = 4 * 1024 * 1024


def read_run_metadata(path: Path) -> RunMetadata:
    """Read a retained ``metadata.json`` strictly; raises ``RunRecordError``."""
    try:
        data = read_capped(path, _MAX_METADATA_BYTES)
    except OSError as exc:
        raise RunRecordError("metadata_unreadable", f"{path}: {exc.strerror or exc}") from exc
    try:
        return loads(data, RunMetadata, max_bytes=_MAX_METADATA_BYTES)
    except SerdeError as exc:
        raise RunRecordError(f"metadata_{exc.code}", f"{exc.path}: {exc.message}") from exc


def _read_job(path: Path, original: RunMetadata) -> tuple[Job, bytes]:
    """The retained job (no symlink, regular file) and its bytes; it must be the run's."""
    try:
        data = read_capped(path, MAX_JOB_BYTES)
    except OSError as exc:
        raise RunRecordError("retained_job_unreadable", f"{path}: {exc.strerror or exc}") from exc
    try:
        job = loads(data, Job, max_bytes=MAX_JOB_BYTES)
    except SerdeError as exc:
        raise RunRecordError(f"retained_job_{exc.code}", f"{exc.path}: {exc.message}") from exc
    if (job.job_id, job.job_digest, job.check_id) != (
        original.run.job_id,
        original.run.job_digest,
        original.run.check_id,
    ):
        raise RunRecordError(
            "retained_job_mismatch", f"{path} is not the job the run's metadata records"
        )
    return job, data


def _replays_parent(run_dir: Path) -> Path:
    """``run_dir/replays``, which must be absent or a plain directory (never followed)."""
    replays = run_dir / "replays"
    try:
        mode = os.lstat(replays).st_mode
    except FileNotFoundError:
        return replays
    if not stat.S_ISDIR(mode):
        raise RunRecordError("replays_not_directory", f"{replays} is not a plain directory")
    return replays


def replay_run(
    run_dir: Path,
    *,
    manifest_path: Path,
    repository_root: Path,
    replay_id: str,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    max_containment: ContainmentLevel | None = None,
    expected_evidence_digest: str | None = None,
) -> RunOutcome:
    """Replay the run retained in ``run_dir`` (checker only) in a fresh attempt.

    ``manifest_path`` and ``repository_root`` come from the operator, never
    from the run directory. ``expected_evidence_digest``, when given (the
    ``evidence_digest`` the operator kept from the run's own output), must be
    the retained evidence's, else BLOCKED ``evidence_changed``: a run store
    rewritten consistently (evidence and metadata) is then caught too.

    Raises ``RunRecordError`` if the retained run cannot be read back,
    ``ManifestError`` if the current manifest or entry is refused, and
    ``RunDirectoryError`` if the attempt directory cannot be created.
    """
    run_dir = Path(os.path.realpath(run_dir))
    original = read_run_metadata(run_dir / "metadata.json")
    if original.run.kind is not RunKind.RUN:
        raise RunRecordError(
            "not_a_run", f"{run_dir} holds a {original.run.kind.value}, not a run"
        )
    job, job_bytes = _read_job(run_dir / "job.json", original)
    manifest_file, root = manifest_path, repository_root
    entry = load_manifest(manifest_file, repository_root=root).entry(original.run.check_id)
    require_utf8_path(os.path.abspath(manifest_file), "manifest path")
    require_utf8_path(os.path.abspath(root), "repository root")
    limits = limits_for(entry, limits)
    attempt = fresh_attempt(_replays_parent(run_dir), replay_id)
    rec = Recorder(
        kind=RunKind.REPLAY,
        run_id=replay_id,
        replay_of=original.run.run_id,
        check_id=entry.check_id,
        manifest_path=os.path.abspath(manifest_file),
        repository_root=os.path.abspath(root),
        job_id=job.job_id,
        job_digest=job.job_digest,
    )

    def body() -> None:
        write_new(attempt.root / "job.json", job_bytes)
        check_job(job, entry)
        containment = choose_containment(entry, rec, max_containment, limits)
        identity = build_identity(entry, rec, attempt)
        if progress is not None:
            progress(Stage.IDENTITY_BUILT)
        freeze_snapshot(entry, root, rec, attempt)
        if progress is not None:
            progress(Stage.SNAPSHOT_READY)
        recorded = original.checked  # what the run says it produced: checked, never trusted
        if recorded.evidence_digest is None or not recorded.artifacts:
            raise Block(Reason.EVIDENCE_CHANGED, "the run retained no complete evidence")
        # Capturing the evidence (hash, copy, hash) shares the checker's deadline.
        stop = StopWhen.within(limits.checker_timeout_seconds, cancel)
        try:
            retained = hash_evidence(
                run_dir / "evidence",
                entry.evidence_artifacts,
                limits=limits,
                stop=stop,
                timeout_reason=Reason.CHECKER_TIMEOUT,
            )
        except Block as block:
            reason = (
                block.reason if block.reason in KEPT_EVIDENCE_REASONS else Reason.EVIDENCE_CHANGED
            )
            raise Block(reason, f"retained evidence: {block.detail}") from block
        if retained != recorded.artifacts or list_digest(retained) != recorded.evidence_digest:
            raise Block(
                Reason.EVIDENCE_CHANGED,
                "retained evidence differs from the digests recorded by the run",
            )
        if expected_evidence_digest is not None and recorded.evidence_digest != (
            expected_evidence_digest
        ):
            raise Block(
                Reason.EVIDENCE_CHANGED,
                f"retained evidence digest {recorded.evidence_digest} is not the "
                f"operator's {expected_evidence_digest}",
            )
        attempt.evidence.mkdir()
        for item in retained:
            target = attempt.evidence / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / "evidence" / item.path, target, follow_symlinks=False)
        rec.artifacts = hash_evidence(
            attempt.evidence,
            entry.evidence_artifacts,
            attempt.files,
            limits=limits,
            stop=stop,
            timeout_reason=Reason.CHECKER_TIMEOUT,
        )
        if rec.artifacts != retained:
            raise Block(Reason.EVIDENCE_CHANGED, "evidence changed while it was copied")
        rec.evidence_digest = list_digest(rec.artifacts)
        check_phase(
            RunKind.REPLAY,
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
        )

    return finish(rec, attempt, body)
