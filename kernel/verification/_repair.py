"""Post-repair deterministic closure.

Theory of operation (the deterministic verification adapter seed, "Gates"):
after a repair, every *required* check is rerun on the repaired candidate by
an independent Test Engineer session (``plan_post_repair_reruns``), and the
closure (``close_post_repair``) holds only when each rerun has a receipt that
passes ``evaluate_gate`` against the repaired candidate. Author diagnostics
fail the gate (``diagnostic_authority``), and receipts from before the repair
fail it as stale (``stale_prior_candidate`` / ``stale_pre_repair_evidence``).

No second review round is ever scheduled: ``PostRepairClosure.rereview`` is
``Rereview.PROHIBITED``, the only member that enum has, so nothing downstream
can read a closure as a request for rereview.
"""

from __future__ import annotations

from typing import Any, assert_never, final

import attrs

from kernel.verification._bridge import plan_verification
from kernel.verification._gate import GateDecision, RepairHistory, evaluate_gate
from kernel.verification._records import (
    Candidate,
    Rejection,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
)
from kernel.verification._vocabulary import (
    Activation,
    Authority,
    ClosureReason,
    Rereview,
    Role,
    Stage,
)

__all__ = [
    "ClosureItem",
    "PostRepairClosure",
    "close_post_repair",
    "plan_post_repair_reruns",
]


def _prohibited(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not Rereview.PROHIBITED:
        raise ValueError("post-repair closure never schedules a review round")


@final
@attrs.frozen
class ClosureItem:
    """One required rerun: closed by an eligible receipt, or open with a reason."""

    request_id: str
    claim_id: str
    backend: str
    closed: bool
    reason: ClosureReason | None
    receipt_id: str | None
    decisions: tuple[GateDecision, ...]

    def __attrs_post_init__(self) -> None:
        if self.closed != (self.reason is None) or self.closed != (self.receipt_id is not None):
            raise ValueError("a closed item names its receipt and no reason")


@final
@attrs.frozen
class PostRepairClosure:
    """The closure of a repaired candidate: closed only when every required rerun is."""

    candidate: str
    closed: bool
    items: tuple[ClosureItem, ...]
    rereview: Rereview = attrs.field(validator=_prohibited)

    def __attrs_post_init__(self) -> None:
        if self.closed != (bool(self.items) and all(item.closed for item in self.items)):
            # Fail closed: nothing rerun is nothing proven.
            raise ValueError("closed exactly when there are items and every one is closed")


def plan_post_repair_reruns(
    repaired: Candidate, required: tuple[VerificationRequest, ...]
) -> tuple[VerificationPlan | Rejection, ...]:
    """Re-plan every ``required`` request against ``repaired`` for an independent rerun.

    Requests whose backend is only ``selected`` are not required checks and
    are skipped. Each rerun keeps the claim, backend, command/configuration
    and expected result, and is requested by the Test Engineer at stage
    ``post_repair_closure`` with ``assurance`` authority.
    """
    plans: list[VerificationPlan | Rejection] = []
    for request in required:
        match request.activation:
            case Activation.REQUIRED:
                pass
            case Activation.SELECTED | Activation.INACTIVE:
                continue
            case _:
                assert_never(request.activation)
        spec = VerificationSpec(
            candidate=repaired,
            claim=request.claim,
            backend=request.backend,
            stage=Stage.POST_REPAIR_CLOSURE,
            authority=Authority.ASSURANCE,
            expected_result=request.expected_result,
            command_configuration=request.command_configuration,
            activation=Activation.REQUIRED,
            requested_by=Role.TEST_ENGINEER,
        )
        plans.append(plan_verification(spec))
    return tuple(plans)


def _close_one(
    plan: VerificationPlan,
    repaired: Candidate,
    receipts: tuple[VerificationReceipt, ...],
    history: RepairHistory,
) -> ClosureItem:
    request = plan.request

    def item(
        reason: ClosureReason | None,
        receipt_id: str | None,
        decisions: tuple[GateDecision, ...],
    ) -> ClosureItem:
        return ClosureItem(
            request_id=request.request_id,
            claim_id=request.claim.claim_id,
            backend=request.backend,
            closed=reason is None,
            reason=reason,
            receipt_id=receipt_id,
            decisions=decisions,
        )

    if request.stage is not Stage.POST_REPAIR_CLOSURE or request.candidate != repaired:
        return item(ClosureReason.NOT_A_POST_REPAIR_RERUN, None, ())
    # Every receipt about this claim and backend is judged, whatever it was
    # sealed for, so an author diagnostic or a pre-repair receipt shows its
    # reason instead of silently not counting.
    relevant = tuple(
        r
        for r in receipts
        if r.claim.claim_id == request.claim.claim_id and r.backend == request.backend
    )
    decisions = tuple(evaluate_gate(r, request, repaired, history) for r in relevant)
    for decision in decisions:
        if decision.gate_eligible:
            return item(None, decision.receipt_id, decisions)
    reason = ClosureReason.GATE_REFUSED if decisions else ClosureReason.RERUN_MISSING
    return item(reason, None, decisions)


def close_post_repair(
    repaired: Candidate,
    reruns: tuple[VerificationPlan, ...],
    receipts: tuple[VerificationReceipt, ...],
    history: RepairHistory,
) -> PostRepairClosure:
    """Judge post-repair closure of ``repaired`` from the rerun plans and the receipts.

    Closed only when there is at least one rerun plan and every one has a
    gate-eligible receipt (no reruns proves nothing, so it stays open); never
    schedules a second review round.
    """
    items = tuple(_close_one(plan, repaired, receipts, history) for plan in reruns)
    return PostRepairClosure(
        candidate=repaired.digest,
        closed=bool(items) and all(item.closed for item in items),
        items=items,
        rereview=Rereview.PROHIBITED,
    )
