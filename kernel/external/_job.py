"""The job: one unit of work bound to one approved check, sealed by its digest.

Rules:

- ``job_digest`` is the canonical digest of the job with ``job_digest`` set
  to ``""`` (a self-sealing id); the run recomputes it before execution;
- ``check_id`` binds the job to exactly one manifest entry;
- the job file is strict JSON and structures exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Final, final

import attrs

from kernel.external._files import read_capped
from kernel.external._manifest import check_identifier
from kernel.external.errors import JobError, ManifestError
from kernel.identity import digest
from kernel.serde import SerdeError, loads, unstructure

__all__ = ["JOB_SCHEMA_VERSION", "Job", "job_digest_of", "load_job", "read_job", "seal_job"]

JOB_SCHEMA_VERSION: Final = 1
MAX_JOB_BYTES: Final = 1024 * 1024


def _validate_job(instance: Job, _a: attrs.Attribute[int], _v: int) -> None:
    if instance.schema_version != JOB_SCHEMA_VERSION:
        raise ValueError(
            f"job schema_version {instance.schema_version} is not {JOB_SCHEMA_VERSION}"
        )
    try:
        check_identifier(instance.job_id, "job_id")
        check_identifier(instance.check_id, "check_id")
    except ManifestError as exc:
        raise ValueError(exc.message) from exc


@final
@attrs.frozen
class Job:
    """A job key bound to one check id, sealed by ``job_digest``."""

    schema_version: int = attrs.field(validator=_validate_job)
    job_id: str
    check_id: str
    description: str
    job_digest: str


def job_digest_of(job: Job) -> str:
    """The digest ``job.job_digest`` must equal (computed with the field blanked)."""
    return digest(unstructure(attrs.evolve(job, job_digest="")))


def seal_job(job_id: str, check_id: str, description: str) -> Job:
    """A new job whose ``job_digest`` is correct."""
    unsealed = Job(JOB_SCHEMA_VERSION, job_id, check_id, description, "")
    return attrs.evolve(unsealed, job_digest=job_digest_of(unsealed))


def load_job(path: Path) -> Job:
    """Read and structure a job file strictly; raises ``JobError``.

    The digest is *not* checked here: a wrong digest is a BLOCKED run
    (``job_digest_mismatch``), not a malformed document.
    """
    try:
        data = read_capped(path, MAX_JOB_BYTES, follow_symlinks=True)
    except OSError as exc:  # also a FIFO, device or directory: refused, never read
        raise JobError("job_unreadable", f"{path}: {exc.strerror or exc}") from exc
    return _structure_job(data, str(path))


def read_job(stream: BinaryIO, source: str) -> Job:
    """A job read from a stream (``kernel check run --job -``: stdin); raises ``JobError``.

    Reads at most one byte past ``MAX_JOB_BYTES``, so an endless stream is
    refused as too large; ``source`` names the stream in errors.
    """
    try:
        data = stream.read(MAX_JOB_BYTES + 1)
    except OSError as exc:
        raise JobError("job_unreadable", f"{source}: {exc.strerror or exc}") from exc
    return _structure_job(data, source)


def _structure_job(data: bytes, source: str) -> Job:
    try:
        return loads(data, Job, max_bytes=MAX_JOB_BYTES)
    except SerdeError as exc:
        raise JobError(f"job_{exc.code}", f"{source}: {exc.path}: {exc.message}") from exc
