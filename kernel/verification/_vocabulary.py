"""Closed vocabularies of the verification adapter.

Every vocabulary is a plain ``enum.Enum`` whose values are ``str``: the JSON
form is the value, and canonical JSON never sees an ``Enum`` instance (owners
convert with ``.value`` before hashing).

The role and stage tables at the bottom are the adapter's authority model in
one place:

- ``STAGE_AUTHORITY``: the only authority a request at a stage may name;
- ``STAGE_REQUESTERS``: the roles that may request a run at a stage;
- ``EXECUTOR_AUTHORITY``: the authority an execution by a role produces.
  A role absent from it never executes a backend (Reviewer requests,
  Orchestrator routes and records, Planning Test Engineer selects, Plan
  Integrator copies).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Final, final

__all__ = [
    "EXECUTOR_AUTHORITY",
    "STAGE_AUTHORITY",
    "STAGE_REQUESTERS",
    "Activation",
    "Authority",
    "BackendVerdict",
    "ClaimLevel",
    "ClosureReason",
    "EvidenceTier",
    "GapCode",
    "GateReason",
    "OperationKind",
    "Proceed",
    "RejectionCode",
    "Rereview",
    "Role",
    "Stage",
    "Status",
]


@final
class Status(Enum):
    """The status a receipt seals."""

    VERIFIED = "VERIFIED"
    REFUTED = "REFUTED"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"


@final
class Authority(Enum):
    """What a receipt may be used for. Never defaulted."""

    DIAGNOSTIC = "diagnostic"
    ASSURANCE = "assurance"


@final
class Activation(Enum):
    """How a backend is activated for a claim; only ``inactive`` absence is benign."""

    SELECTED = "selected"
    REQUIRED = "required"
    INACTIVE = "inactive"


@final
class EvidenceTier(Enum):
    """Whether the backend read its evidence or recovered it by analysis."""

    OBSERVED = "observed"
    DERIVED = "derived"


@final
class BackendVerdict(Enum):
    """The raw verdict word a backend reports in its output."""

    VERIFIED = "verified"
    REFUTED = "refuted"
    UNKNOWN = "unknown"
    ERROR = "error"
    CLAIM_MALFORMED = "claim_malformed"


@final
class Role(Enum):
    """The roles the seed names. A backend is never one of them."""

    IMPLEMENTER = "implementer"
    LIGHT_IMPLEMENTER = "light_implementer"
    INTEGRATION_ENGINEER = "integration_engineer"
    TEST_ENGINEER = "test_engineer"
    REVIEWER = "reviewer"
    ORCHESTRATOR = "orchestrator"
    PLANNING_TEST_ENGINEER = "planning_test_engineer"
    PLAN_INTEGRATOR = "plan_integrator"


@final
class Stage(Enum):
    """The lifecycle stage a request names."""

    IMPLEMENTATION = "implementation"
    INTEGRATION = "integration"
    ASSURANCE = "assurance"
    ADJUDICATION = "adjudication"
    POST_REPAIR_CLOSURE = "post_repair_closure"


@final
class ClaimLevel(Enum):
    """The level a claim is stated at; Reverify applies to ``binary`` only."""

    SOURCE = "source"
    BINARY = "binary"
    SYSTEM = "system"


@final
class OperationKind(Enum):
    """A catalogued backend operation either checks a given claim or proposes claims."""

    CHECK = "check"
    GENERATIVE = "generative"


@final
class Proceed(Enum):
    """What the lifecycle does after a backend gap."""

    HALT = "halt"
    PROCEED_WITH_NOTE = "proceed-with-note"


@final
class GapCode(Enum):
    """Why an activated backend produced a gap instead of a receipt."""

    BACKEND_UNAVAILABLE = "backend_unavailable"


@final
class Rereview(Enum):
    """Post-repair closure never schedules a second review round: one member only."""

    PROHIBITED = "prohibited"


@final
class RejectionCode(Enum):
    """Typed refusals of planning, sealing and selection (see ADR-0003)."""

    # plan_verification
    REQUESTER_NOT_PERMITTED = "requester_not_permitted"
    AUTHORITY_STAGE_MISMATCH = "authority_stage_mismatch"
    BACKEND_NOT_ACTIVATED = "backend_not_activated"
    EXPECTED_RESULT_INVALID = "expected_result_invalid"
    BACKEND_IS_A_ROLE = "backend_is_a_role"
    BACKEND_UNKNOWN = "backend_unknown"
    GENERATIVE_BACKEND_OPERATION_DENIED = "generative_backend_operation_denied"
    BACKEND_OPERATION_UNSUPPORTED = "backend_operation_unsupported"
    REVERIFY_CLAIM_NOT_APPLICABLE = "reverify_claim_not_applicable"
    # seal_verification
    PLAN_TAMPERED = "plan_tampered"
    PRODUCER_ROLE_CANNOT_EXECUTE = "producer_role_cannot_execute"
    AUTHORITY_PRODUCER_MISMATCH = "authority_producer_mismatch"
    ASSURANCE_NOT_INDEPENDENT = "assurance_not_independent"
    BACKEND_OUTPUT_MALFORMED = "backend_output_malformed"
    BACKEND_OUTPUT_MISMATCH = "backend_output_mismatch"
    CLAIM_MALFORMED = "claim_malformed"
    # select_backend / integrate_selections
    SELECTION_ROLE_NOT_PERMITTED = "selection_role_not_permitted"
    SELECTION_INVENTED = "selection_invented"
    SELECTION_DROPPED = "selection_dropped"


@final
class GateReason(Enum):
    """Why a receipt is not gate-eligible; checked in this order (first wins)."""

    RECEIPT_TAMPERED = "receipt_tampered"
    REQUEST_TAMPERED = "request_tampered"
    REQUEST_AUTHORITY_STAGE_MISMATCH = "request_authority_stage_mismatch"
    REQUEST_REQUESTER_NOT_PERMITTED = "request_requester_not_permitted"
    DIAGNOSTIC_AUTHORITY = "diagnostic_authority"
    RECEIPT_AUTHORITY_MISMATCH = "receipt_authority_mismatch"
    PRODUCER_NOT_INDEPENDENT = "producer_not_independent"
    STALE_PRIOR_CANDIDATE = "stale_prior_candidate"
    CANDIDATE_MISMATCH = "candidate_mismatch"
    STALE_PRE_REPAIR_EVIDENCE = "stale_pre_repair_evidence"
    CLAIM_MISMATCH = "claim_mismatch"
    BACKEND_MISMATCH = "backend_mismatch"
    COMMAND_CONFIGURATION_MISMATCH = "command_configuration_mismatch"
    RECEIPT_STAGE_MISMATCH = "receipt_stage_mismatch"
    REQUEST_MISMATCH = "request_mismatch"
    STATUS_ERROR = "status_error"
    STATUS_INCONCLUSIVE = "status_inconclusive"
    STATUS_MISMATCH = "status_mismatch"


@final
class ClosureReason(Enum):
    """Why one required check of a post-repair closure is still open."""

    NOT_A_POST_REPAIR_RERUN = "not_a_post_repair_rerun"
    RERUN_MISSING = "rerun_missing"
    GATE_REFUSED = "gate_refused"


STAGE_AUTHORITY: Final[Mapping[Stage, Authority]] = MappingProxyType(
    {
        Stage.IMPLEMENTATION: Authority.DIAGNOSTIC,
        Stage.INTEGRATION: Authority.DIAGNOSTIC,
        Stage.ASSURANCE: Authority.ASSURANCE,
        Stage.ADJUDICATION: Authority.ASSURANCE,
        Stage.POST_REPAIR_CLOSURE: Authority.ASSURANCE,
    }
)

STAGE_REQUESTERS: Final[Mapping[Stage, frozenset[Role]]] = MappingProxyType(
    {
        Stage.IMPLEMENTATION: frozenset({Role.IMPLEMENTER, Role.LIGHT_IMPLEMENTER}),
        Stage.INTEGRATION: frozenset({Role.INTEGRATION_ENGINEER}),
        Stage.ASSURANCE: frozenset({Role.TEST_ENGINEER}),
        # The Reviewer may ask for a run to adjudicate a suspected defect; an
        # independent Test Engineer session still executes it.
        Stage.ADJUDICATION: frozenset({Role.REVIEWER}),
        Stage.POST_REPAIR_CLOSURE: frozenset({Role.TEST_ENGINEER}),
    }
)

EXECUTOR_AUTHORITY: Final[Mapping[Role, Authority]] = MappingProxyType(
    {
        Role.IMPLEMENTER: Authority.DIAGNOSTIC,
        Role.LIGHT_IMPLEMENTER: Authority.DIAGNOSTIC,
        Role.INTEGRATION_ENGINEER: Authority.DIAGNOSTIC,
        Role.TEST_ENGINEER: Authority.ASSURANCE,
    }
)
