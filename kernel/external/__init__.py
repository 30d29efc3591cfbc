"""The external verifier protocol (seed 003): pinned producer and checker.

The impure edge of the kernel: it reads manifests and jobs, copies files,
launches processes and writes run directories. It imports ``kernel.identity``
and ``kernel.serde``; nothing pure imports it.

- ``load_manifest`` / ``load_job`` refuse bad input with typed errors;
- ``check_identity`` builds identity(check) after checking every pin;
- ``run_check`` runs producer then checker in a fresh run directory;
- ``replay_run`` re-runs only the currently pinned checker on retained evidence;
- both return a ``RunOutcome``: PASS only for an accepting valid receipt,
  otherwise BLOCKED with a ``Reason``.
"""

from kernel.external._closure import ClosureError, PinClosure, pin_closure
from kernel.external._contain import (
    ContainmentLevel,
    ContainmentPart,
    available_level,
    available_parts,
    sandbox_shortfall,
)
from kernel.external._identity import (
    CheckIdentity,
    check_identity,
    content_digest,
    content_identity_object,
    identity_object,
)
from kernel.external._job import Job, job_digest_of, load_job, read_job, seal_job
from kernel.external._manifest import (
    PLACEHOLDERS,
    CheckEntry,
    Claim,
    Command,
    Manifest,
    Pin,
    load_manifest,
    parse_manifest,
)
from kernel.external._outcome import (
    PASS_DETAIL,
    CheckedDigests,
    Decision,
    Execution,
    FileDigest,
    ProcessSummary,
    Reason,
    RunIdentity,
    RunKind,
    RunMetadata,
    RunOutcome,
    Status,
    Verdict,
)
from kernel.external._pin_cache import PinCache, process_pin_cache
from kernel.external._process import Cancellation, ProcessResult, ProcessStatus, run_process
from kernel.external._receipt import (
    RECEIPT_FIELDS,
    ReceiptCheck,
    ReceiptExpectation,
    reason_for,
    recorded_expectation,
    validate_receipt,
)
from kernel.external._replay import read_run_metadata, replay_run
from kernel.external._run import run_check
from kernel.external._sandbox import DEFAULT_STEP_LIMITS, StepLimits, StepView
from kernel.external._settings import (
    MAX_DEADLINE_SECONDS,
    RunLimits,
    Stage,
    default_environment,
    expand_argv,
)
from kernel.external.errors import (
    ExternalError,
    JobError,
    ManifestError,
    PinMismatchError,
    RunDirectoryError,
    RunRecordError,
)

__all__ = [
    "Cancellation",
    "CheckEntry",
    "CheckIdentity",
    "CheckedDigests",
    "Claim",
    "ClosureError",
    "Command",
    "ContainmentLevel",
    "ContainmentPart",
    "DEFAULT_STEP_LIMITS",
    "Decision",
    "Execution",
    "ExternalError",
    "FileDigest",
    "Job",
    "JobError",
    "MAX_DEADLINE_SECONDS",
    "Manifest",
    "ManifestError",
    "PASS_DETAIL",
    "PLACEHOLDERS",
    "Pin",
    "PinCache",
    "PinClosure",
    "PinMismatchError",
    "ProcessResult",
    "ProcessStatus",
    "ProcessSummary",
    "RECEIPT_FIELDS",
    "Reason",
    "ReceiptCheck",
    "ReceiptExpectation",
    "RunDirectoryError",
    "RunIdentity",
    "RunKind",
    "RunLimits",
    "RunMetadata",
    "RunOutcome",
    "RunRecordError",
    "Stage",
    "Status",
    "StepLimits",
    "StepView",
    "Verdict",
    "available_level",
    "available_parts",
    "check_identity",
    "content_digest",
    "content_identity_object",
    "default_environment",
    "expand_argv",
    "identity_object",
    "job_digest_of",
    "load_job",
    "load_manifest",
    "parse_manifest",
    "pin_closure",
    "process_pin_cache",
    "read_job",
    "read_run_metadata",
    "reason_for",
    "recorded_expectation",
    "replay_run",
    "run_check",
    "run_process",
    "sandbox_shortfall",
    "seal_job",
    "validate_receipt",
]
