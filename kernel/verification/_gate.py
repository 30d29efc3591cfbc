"""The assurance gate: is this receipt evidence that closes this request, now?

Theory of operation (the deterministic verification adapter seed, "Gates"):
only an independent assurance receipt whose candidate, claim, backend,
version, command/configuration and evidence digest bind the current candidate
and request, and whose status equals the expected result, is
``gate_eligible``. The backend version and evidence digest bind through the
receipt's own content address (``receipt_id`` covers both), and the evidence
digest must not be one recorded before a repair.

Authority binds through the request's own stage, never through a label the
receipt carries (ADR-0003 "Gate binding"): a request id that recomputes only
proves the request was not edited after sealing, not that planning could have
issued it, so the gate re-derives from ``STAGE_AUTHORITY`` and
``STAGE_REQUESTERS`` the authority and requesters the request's stage allows,
and holds the receipt to that authority. A receipt relabelled ``assurance``
(and resealed) for a request issued at a diagnostic stage is therefore
refused, whatever producer it names.

Checks, in order (first failure wins; each is one ``GateReason``):

1. ``receipt_tampered`` / ``request_tampered``: an id does not recompute;
2. ``request_authority_stage_mismatch``: the request names an authority its
   stage does not allow (a request planning would have refused);
3. ``request_requester_not_permitted``: the request's role may not request
   at its stage;
4. ``diagnostic_authority``: diagnostic receipts never pass;
5. ``receipt_authority_mismatch``: the receipt's authority is not the one the
   request's stage allows (an ``assurance`` label on a receipt for a request
   issued at a diagnostic stage);
6. ``producer_not_independent``: not a Test Engineer, or the candidate
   author's own session;
7. ``stale_prior_candidate``: the receipt binds a candidate the history marks
   as replaced;
8. ``candidate_mismatch``: receipt or request bind another candidate (fails
   closed, whatever the reason);
9. ``stale_pre_repair_evidence``: the evidence digest predates a repair;
10. ``claim_mismatch`` / ``backend_mismatch`` /
    ``command_configuration_mismatch`` / ``receipt_stage_mismatch`` /
    ``request_mismatch``: a binding differs from the request being gated
    (``receipt_stage_mismatch``: the receipt names another stage;
    ``request_mismatch``: it names another ``request_id``);
11. ``status_error`` / ``status_inconclusive``: never a PASS;
12. ``status_mismatch``: the status is not the expected result.
"""

from __future__ import annotations

from typing import Any, assert_never, final

import attrs

from kernel.identity import is_digest
from kernel.verification._records import (
    Candidate,
    VerificationReceipt,
    VerificationRequest,
    receipt_id_of,
    request_id_of,
)
from kernel.verification._vocabulary import (
    STAGE_AUTHORITY,
    STAGE_REQUESTERS,
    Authority,
    GateReason,
    Role,
    Status,
)

__all__ = ["GateDecision", "RepairHistory", "evaluate_gate"]


def _digests(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # Both halves matter: a list would make the history mutable after the
    # decision, and a non-digest entry can never match, silently disarming it.
    if type(value) is not tuple or not all(is_digest(v) for v in value):
        raise TypeError(f"{attribute.name} must be a tuple of SHA-256 digests")


def _digest(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not is_digest(value):
        raise TypeError(f"{attribute.name} must be a SHA-256 digest")


def _one_line(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # Every decision explains itself in one readable line.
    if type(value) is not str or not value or "\n" in value:
        raise TypeError(f"{attribute.name} must be one non-empty line of text")


@final
@attrs.frozen
class RepairHistory:
    """What repairs made stale: replaced candidate digests and pre-repair evidence digests."""

    prior_candidates: tuple[str, ...] = attrs.field(validator=_digests)
    pre_repair_evidence_digests: tuple[str, ...] = attrs.field(validator=_digests)


def _reason(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not GateReason:
        raise TypeError("reason must be a GateReason or None")


@final
@attrs.frozen
class GateDecision:
    """The gate's answer: eligible with no reason, or not eligible with exactly one.

    ``receipt_id`` and ``request_id`` are the ids the judged records carry (as
    carried, even when they do not recompute); ``candidate`` is the digest of
    the current candidate the receipt was judged against.
    """

    gate_eligible: bool
    reason: GateReason | None = attrs.field(validator=_reason)
    message: str = attrs.field(validator=_one_line)
    receipt_id: str = attrs.field(validator=_digest)
    request_id: str = attrs.field(validator=_digest)
    candidate: str = attrs.field(validator=_digest)

    def __attrs_post_init__(self) -> None:
        if type(self.gate_eligible) is not bool:
            raise TypeError("gate_eligible must be bool")
        if self.gate_eligible != (self.reason is None):
            raise ValueError("an eligible decision has no reason; a refused one has one")


def _check(
    receipt: VerificationReceipt,
    request: VerificationRequest,
    current: Candidate,
    history: RepairHistory,
) -> tuple[GateReason, str] | None:
    if receipt.receipt_id != receipt_id_of(receipt):
        return GateReason.RECEIPT_TAMPERED, "receipt_id does not recompute"
    if request.request_id != request_id_of(request):
        return GateReason.REQUEST_TAMPERED, "request_id does not recompute"
    # The request's stage, not any label, decides the authority in play.
    allowed = STAGE_AUTHORITY[request.stage]
    if request.authority is not allowed:
        return (
            GateReason.REQUEST_AUTHORITY_STAGE_MISMATCH,
            f"request names {request.authority.value} authority at stage "
            f"{request.stage.value}, which allows {allowed.value}",
        )
    if request.requested_by not in STAGE_REQUESTERS[request.stage]:
        return (
            GateReason.REQUEST_REQUESTER_NOT_PERMITTED,
            f"{request.requested_by.value} may not request a run at stage {request.stage.value}",
        )
    match receipt.authority:
        case Authority.DIAGNOSTIC:
            return GateReason.DIAGNOSTIC_AUTHORITY, "a diagnostic receipt never passes a gate"
        case Authority.ASSURANCE:
            pass
        case _:
            assert_never(receipt.authority)
    if receipt.authority is not allowed:
        return (
            GateReason.RECEIPT_AUTHORITY_MISMATCH,
            f"receipt is labelled {receipt.authority.value}; stage {request.stage.value} "
            f"allows {allowed.value}",
        )
    producer = receipt.produced_by
    if producer.role is not Role.TEST_ENGINEER or producer.session == current.author_session:
        return (
            GateReason.PRODUCER_NOT_INDEPENDENT,
            f"{producer.role.value} in session {producer.session!r} is not an independent "
            "Test Engineer session",
        )
    if receipt.candidate.digest in history.prior_candidates:
        return (
            GateReason.STALE_PRIOR_CANDIDATE,
            f"receipt binds replaced candidate {receipt.candidate.digest}",
        )
    if receipt.candidate != current or request.candidate != current:
        return (
            GateReason.CANDIDATE_MISMATCH,
            "receipt or request does not bind the current candidate",
        )
    if receipt.evidence_digest in history.pre_repair_evidence_digests:
        return (
            GateReason.STALE_PRE_REPAIR_EVIDENCE,
            f"evidence {receipt.evidence_digest} predates the repair",
        )
    if receipt.claim != request.claim:
        return GateReason.CLAIM_MISMATCH, "receipt binds another claim"
    if receipt.backend != request.backend:
        return GateReason.BACKEND_MISMATCH, f"receipt binds backend {receipt.backend!r}"
    if receipt.command_configuration != request.command_configuration:
        return (
            GateReason.COMMAND_CONFIGURATION_MISMATCH,
            "receipt command/configuration differs from the request's",
        )
    if receipt.stage is not request.stage:
        return (
            GateReason.RECEIPT_STAGE_MISMATCH,
            f"receipt names stage {receipt.stage.value}, the request {request.stage.value}",
        )
    if receipt.request_id != request.request_id:
        return GateReason.REQUEST_MISMATCH, "receipt was sealed for another request"
    match receipt.status:
        case Status.ERROR:
            return GateReason.STATUS_ERROR, "ERROR never passes a gate"
        case Status.INCONCLUSIVE:
            return GateReason.STATUS_INCONCLUSIVE, "INCONCLUSIVE never passes a gate"
        case Status.VERIFIED | Status.REFUTED:
            pass
        case _:
            assert_never(receipt.status)
    if receipt.status is not request.expected_result:
        return (
            GateReason.STATUS_MISMATCH,
            f"status {receipt.status.value} is not the expected {request.expected_result.value}",
        )
    return None


def evaluate_gate(
    receipt: VerificationReceipt,
    request: VerificationRequest,
    current_candidate: Candidate,
    history: RepairHistory,
) -> GateDecision:
    """Decide whether ``receipt`` passes the assurance gate for ``request``.

    Returns a ``GateDecision``; a refusal carries the first failing
    ``GateReason`` in the order of this module's docstring. Never raises on
    bad evidence: everything that is not proven fails closed.
    """
    failed = _check(receipt, request, current_candidate, history)
    if failed is None:
        reason = None
        message = (
            f"independent assurance receipt {receipt.status.value} as expected for "
            f"claim {request.claim.claim_id}"
        )
    else:
        reason, message = failed
    return GateDecision(
        gate_eligible=reason is None,
        reason=reason,
        message=message,
        receipt_id=receipt.receipt_id,
        request_id=request.request_id,
        candidate=current_candidate.digest,
    )
