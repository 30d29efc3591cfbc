"""Outcomes, reason codes and the retained run metadata.

Rules (seed 003, "Verdict semantics"):

- PASS only for an accepting, fully valid receipt from a checker that exited 0;
- every other ending is BLOCKED with exactly one ``Reason``: inconclusive,
  never a counterexample (the protocol has no FAIL);
- ``reason`` is None exactly when the status is PASS.

``RunMetadata`` is four grouped records (ADR 0017) written as one flat
``metadata.json`` object.
"""

from __future__ import annotations

import enum
from typing import Final, final

import attrs

from kernel.external._contain import ContainmentLevel, ContainmentPart
from kernel.external._process import ProcessResult, ProcessStatus
from kernel.external._sandbox import StepLimits
from kernel.identity import is_digest, sha256_hex
from kernel.serde import FLATTENED

__all__ = [
    "METADATA_SCHEMA_VERSION",
    "CheckedDigests",
    "Decision",
    "Execution",
    "FileDigest",
    "ProcessSummary",
    "Reason",
    "RunIdentity",
    "RunKind",
    "RunMetadata",
    "RunOutcome",
    "Status",
    "Verdict",
    "summarize_process",
]

METADATA_SCHEMA_VERSION: Final = 4


#: The one detail a PASS records (the audit refuses any other: nothing else binds it).
PASS_DETAIL: Final = "accepted by a valid receipt"


@final
class Status(enum.Enum):
    """The only two outcomes of the external protocol."""

    PASS = "PASS"
    BLOCKED = "BLOCKED"


@final
class Verdict(enum.Enum):
    """A checker's verdict, top-level or per obligation."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"
    UNKNOWN = "unknown"


@final
class RunKind(enum.Enum):
    """A first run (producer + checker) or a replay (checker only)."""

    RUN = "run"
    REPLAY = "replay"


@final
class Reason(enum.Enum):
    """Why a run is BLOCKED. Closed: the ADR's reason-code table lists each."""

    # before execution
    JOB_DIGEST_MISMATCH = "job_digest_mismatch"
    JOB_CHECK_MISMATCH = "job_check_mismatch"
    PIN_MISMATCH = "pin_mismatch"
    INPUT_MISSING = "input_missing"
    INPUT_ESCAPES_ROOT = "input_escapes_root"
    SNAPSHOT_MISMATCH = "snapshot_mismatch"
    CONTAINMENT_UNAVAILABLE = "containment_unavailable"
    # around each launch
    PIN_CHANGED_BEFORE_LAUNCH = "pin_changed_before_launch"
    PIN_CHANGED_DURING_RUN = "pin_changed_during_run"
    LAUNCH_FAILED = "launch_failed"
    CANCELLED = "cancelled"
    PRODUCER_TIMEOUT = "producer_timeout"
    PRODUCER_FAILED = "producer_failed"
    CHECKER_TIMEOUT = "checker_timeout"
    CHECKER_FAILED = "checker_failed"
    MEMORY_LIMIT_REACHED = "memory_limit_reached"
    PROCESS_LIMIT_REACHED = "process_limit_reached"
    DISK_LIMIT_REACHED = "disk_limit_reached"
    ENTRIES_LIMIT_REACHED = "entries_limit_reached"
    SNAPSHOT_CHANGED = "snapshot_changed"
    RUN_DIR_TAMPERED = "run_dir_tampered"
    # evidence
    ARTIFACT_MISSING = "artifact_missing"
    ARTIFACT_SYMLINK = "artifact_symlink"
    ARTIFACT_NOT_REGULAR = "artifact_not_regular"
    ARTIFACT_UNDECLARED = "artifact_undeclared"
    ARTIFACT_TOO_LARGE = "artifact_too_large"
    EVIDENCE_TOO_LARGE = "evidence_too_large"
    EVIDENCE_CHANGED = "evidence_changed"
    # the receipt, field by field
    RECEIPT_MISSING = "receipt_missing"
    RECEIPT_NOT_REGULAR = "receipt_not_regular"
    RECEIPT_TOO_LARGE = "receipt_too_large"
    RECEIPT_NOT_UTF8 = "receipt_not_utf8"
    RECEIPT_MALFORMED = "receipt_malformed"
    RECEIPT_NOT_OBJECT = "receipt_not_object"
    RECEIPT_MISSING_FIELD = "receipt_missing_field"
    RECEIPT_EXTRA_FIELD = "receipt_extra_field"
    RECEIPT_SCHEMA_VERSION = "receipt_schema_version"
    RECEIPT_JOB_MISMATCH = "receipt_job_mismatch"
    RECEIPT_RUN_MISMATCH = "receipt_run_mismatch"
    RECEIPT_CHECK_ID_MISMATCH = "receipt_check_id_mismatch"
    RECEIPT_CHECK_DIGEST_MISMATCH = "receipt_check_digest_mismatch"
    RECEIPT_SPECIFICATION_MISMATCH = "receipt_specification_mismatch"
    RECEIPT_IDENTITY_MISMATCH = "receipt_identity_mismatch"
    RECEIPT_EVIDENCE_DIGEST_MISMATCH = "receipt_evidence_digest_mismatch"
    RECEIPT_VERDICT_INVALID = "receipt_verdict_invalid"
    RECEIPT_OBLIGATION_INVALID = "receipt_obligation_invalid"
    RECEIPT_OBLIGATIONS_MISMATCH = "receipt_obligations_mismatch"
    RECEIPT_OBLIGATION_EVIDENCE = "receipt_obligation_evidence"
    RECEIPT_VERDICT_DISAGREES = "receipt_verdict_disagrees"
    # a valid receipt that does not accept
    CHECKER_REJECTED = "checker_rejected"
    CHECKER_UNKNOWN = "checker_unknown"
    # the shell itself
    IO_ERROR = "io_error"


def _check_digest_or_none(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and not is_digest(value):
        raise ValueError(f"{attribute.name} is not a lowercase SHA-256")


def _check_digest(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not is_digest(value):
        raise ValueError(f"{attribute.name} is not a lowercase SHA-256")


@final
@attrs.frozen
class FileDigest:
    """A relative path and the SHA-256 of its bytes."""

    path: str
    sha256: str = attrs.field(validator=_check_digest)


@final
@attrs.frozen
class ProcessSummary:
    """What the metadata keeps of one command (output itself is in files)."""

    status: ProcessStatus
    returncode: int | None
    stdout_sha256: str = attrs.field(validator=_check_digest)
    stderr_sha256: str = attrs.field(validator=_check_digest)
    stdout_truncated: bool
    stderr_truncated: bool


def summarize_process(result: ProcessResult) -> ProcessSummary:
    """The metadata view of a process result."""
    return ProcessSummary(
        result.status,
        result.returncode,
        sha256_hex(result.stdout),
        sha256_hex(result.stderr),
        result.stdout_truncated,
        result.stderr_truncated,
    )


# --- the metadata, in four groups (ADR 0017) ---------------------------------------
#
# metadata.json stays one flat object (its bytes and its schema did not change
# when the record was grouped): each group is a field marked FLATTENED, whose
# own fields the converter of kernel.serde reads and writes as the document's
# top-level keys. Group and field order is the document's historical field
# order, so the schema's "required" list and the order of several structuring
# errors are unchanged too.


@final
@attrs.frozen
class RunIdentity:
    """Which attempt this is, and the check, job, manifest and repository it was bound to.

    Everything here is known before anything runs; ``replay_of`` is the run a
    replay re-checks (None for a first run).
    """

    kind: RunKind
    run_id: str
    replay_of: str | None
    check_id: str
    manifest_path: str
    repository_root: str
    job_id: str
    job_digest: str


@final
@attrs.frozen
class CheckedDigests:
    """The digests of what was checked: identity(check), the frozen inputs, the evidence.

    Each is None (or empty) until the step that computes it has run.
    """

    check_digest: str | None = attrs.field(validator=_check_digest_or_none)
    input_digest: str | None = attrs.field(validator=_check_digest_or_none)
    inputs: tuple[FileDigest, ...]
    specification_digest: str | None = attrs.field(validator=_check_digest_or_none)
    artifacts: tuple[FileDigest, ...]
    evidence_digest: str | None = attrs.field(validator=_check_digest_or_none)


@final
@attrs.frozen
class Execution:
    """How the two commands ran: each request's hash, each process's summary, the receipt's hash.

    A replay has no producer, so its producer fields stay None.
    """

    producer: ProcessSummary | None
    checker: ProcessSummary | None
    producer_request_sha256: str | None = attrs.field(validator=_check_digest_or_none)
    checker_request_sha256: str | None = attrs.field(validator=_check_digest_or_none)
    receipt_sha256: str | None = attrs.field(validator=_check_digest_or_none)


def _check_status_reason(instance: Decision, _a: attrs.Attribute[Status], _v: Status) -> None:
    if (instance.status is Status.PASS) != (instance.reason is None):
        raise ValueError("reason is None exactly when status is PASS")


@final
@attrs.frozen
class Decision:
    """The outcome: the receipt's verdict (if one was read), PASS or BLOCKED, why, in words.

    ``reason`` is None exactly when the status is PASS (seed 003, "Verdict
    semantics"); the rule is checked whenever a decision is built or read.
    """

    verdict: Verdict | None
    status: Status = attrs.field(validator=_check_status_reason)
    reason: Reason | None
    detail: str


def _check_schema_version(instance: RunMetadata, _a: attrs.Attribute[int], value: int) -> None:
    if value != METADATA_SCHEMA_VERSION:
        raise ValueError(f"metadata_schema_version is not {METADATA_SCHEMA_VERSION}")


_FLAT: Final = {FLATTENED: True}


@final
@attrs.frozen
class RunMetadata:
    """Everything a run or replay retains, written atomically as metadata.json.

    Four groups (``run``, ``checked``, ``execution``, ``decision``), the
    containment level the attempt ran at and, in a sandbox, the parts of it
    its steps held and their limits; the
    document is flat (ADR 0017).
    Optional fields are None when the run stopped before reaching them.
    """

    metadata_schema_version: int = attrs.field(validator=_check_schema_version)
    run: RunIdentity = attrs.field(metadata=_FLAT)
    containment: ContainmentLevel | None
    # The parts of the sandbox its steps held, sorted (ADR 0021); None below
    # the sandbox level, or when the run stopped before choosing its level.
    containment_parts: tuple[ContainmentPart, ...] | None
    # The limits a sandboxed attempt's steps ran under (ADR 0018); None below
    # the sandbox level, or when the run stopped before choosing its level.
    limits: StepLimits | None
    checked: CheckedDigests = attrs.field(metadata=_FLAT)
    execution: Execution = attrs.field(metadata=_FLAT)
    decision: Decision = attrs.field(metadata=_FLAT)


@final
@attrs.frozen
class RunOutcome:
    """What ``run_check`` and ``replay_run`` return: the attempt directory and its metadata."""

    attempt_dir: str
    metadata: RunMetadata

    @property
    def status(self) -> Status:
        """PASS or BLOCKED."""
        return self.metadata.decision.status

    @property
    def reason(self) -> Reason | None:
        """Why BLOCKED; None for PASS."""
        return self.metadata.decision.reason
