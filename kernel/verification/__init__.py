"""The deterministic verification adapter (seed 000, ADR-0003). Pure.

- ``plan_verification(spec)`` -> ``VerificationPlan`` (request + argv) or ``Rejection``;
- the caller runs ``plan.argv`` and hands the backend output document back;
- ``seal_verification(plan, output, produced_by)`` -> ``VerificationReceipt`` or
  ``Rejection``;
- ``evaluate_gate(receipt, request, current_candidate, history)`` -> ``GateDecision``;
- ``select_backend`` / ``integrate_selections`` / ``evaluate_activation`` model
  activation over a frozen ``ProfileSnapshot``;
- ``plan_post_repair_reruns`` / ``close_post_repair`` model post-repair closure.

Nothing here reads files, runs processes, or looks at a clock or environment.
"""

from kernel.verification._activation import (
    ActivationDecision,
    BackendGap,
    BackendInactive,
    BackendReady,
    ProfileSnapshot,
    Selection,
    evaluate_activation,
    integrate_selections,
    select_backend,
)
from kernel.verification._bridge import OUTPUT_FIELDS, plan_verification, seal_verification
from kernel.verification._catalog import (
    BACKEND_CATALOG,
    REVERIFY_BACKEND,
    BackendCatalog,
    BackendEntry,
    BackendOperation,
)
from kernel.verification._gate import GateDecision, RepairHistory, evaluate_gate
from kernel.verification._records import (
    Candidate,
    Claim,
    CommandConfiguration,
    Producer,
    Rejection,
    Setting,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
    receipt_id_of,
    request_id_of,
)
from kernel.verification._repair import (
    ClosureItem,
    PostRepairClosure,
    close_post_repair,
    plan_post_repair_reruns,
)
from kernel.verification._vocabulary import (
    EXECUTOR_AUTHORITY,
    STAGE_AUTHORITY,
    STAGE_REQUESTERS,
    Activation,
    Authority,
    BackendVerdict,
    ClaimLevel,
    ClosureReason,
    EvidenceTier,
    GapCode,
    GateReason,
    OperationKind,
    Proceed,
    RejectionCode,
    Rereview,
    Role,
    Stage,
    Status,
)

__all__ = [
    "Activation",
    "ActivationDecision",
    "Authority",
    "BACKEND_CATALOG",
    "BackendCatalog",
    "BackendEntry",
    "BackendGap",
    "BackendInactive",
    "BackendOperation",
    "BackendReady",
    "BackendVerdict",
    "Candidate",
    "Claim",
    "ClaimLevel",
    "ClosureItem",
    "ClosureReason",
    "CommandConfiguration",
    "EXECUTOR_AUTHORITY",
    "EvidenceTier",
    "GapCode",
    "GateDecision",
    "GateReason",
    "OUTPUT_FIELDS",
    "OperationKind",
    "PostRepairClosure",
    "Proceed",
    "Producer",
    "ProfileSnapshot",
    "REVERIFY_BACKEND",
    "Rejection",
    "RejectionCode",
    "RepairHistory",
    "Rereview",
    "Role",
    "STAGE_AUTHORITY",
    "STAGE_REQUESTERS",
    "Selection",
    "Setting",
    "Stage",
    "Status",
    "VerificationPlan",
    "VerificationReceipt",
    "VerificationRequest",
    "VerificationSpec",
    "close_post_repair",
    "evaluate_activation",
    "evaluate_gate",
    "integrate_selections",
    "plan_post_repair_reruns",
    "plan_verification",
    "receipt_id_of",
    "request_id_of",
    "seal_verification",
    "select_backend",
]
