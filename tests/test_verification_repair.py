"""Post-repair deterministic closure: reruns on the repaired candidate, no rereview."""

from __future__ import annotations

import pytest

from kernel.verification import (
    Activation,
    Authority,
    ClosureReason,
    GateReason,
    PostRepairClosure,
    Producer,
    RepairHistory,
    Rereview,
    Role,
    Stage,
    VerificationPlan,
    VerificationReceipt,
    close_post_repair,
    plan_post_repair_reruns,
)
from tests import verification_strategies as vs
from tests.support import reference as ref

BEFORE = vs.candidate(vs.PRIOR_DIGEST)
REPAIRED = vs.candidate(vs.CANDIDATE_DIGEST)


def _pre_repair() -> tuple[VerificationPlan, VerificationReceipt]:
    p = vs.plan(candidate=BEFORE)
    return p, vs.seal(p, verdict="refuted")


def _reruns() -> tuple[VerificationPlan, ...]:
    required = vs.plan(candidate=BEFORE).request
    selected = vs.plan(
        candidate=BEFORE,
        claim=vs.binary_claim("claim-optional"),
        activation=Activation.SELECTED,
    ).request
    plans = plan_post_repair_reruns(REPAIRED, (required, selected))
    assert all(isinstance(p, VerificationPlan) for p in plans)
    return tuple(p for p in plans if isinstance(p, VerificationPlan))


def _history(*evidence: str) -> RepairHistory:
    return RepairHistory(prior_candidates=(vs.PRIOR_DIGEST,), pre_repair_evidence_digests=evidence)


def _closed(closure: PostRepairClosure) -> bool:
    assert closure.rereview is Rereview.PROHIBITED
    return closure.closed


def test_reruns_replan_only_required_checks_on_the_repaired_candidate() -> None:
    (rerun,) = _reruns()
    original = vs.plan(candidate=BEFORE).request
    r = rerun.request
    assert r.candidate == REPAIRED
    assert (r.stage, r.authority, r.requested_by, r.activation) == (
        Stage.POST_REPAIR_CLOSURE,
        Authority.ASSURANCE,
        Role.TEST_ENGINEER,
        Activation.REQUIRED,
    )
    assert (r.claim, r.backend, r.command_configuration, r.expected_result) == (
        original.claim,
        original.backend,
        original.command_configuration,
        original.expected_result,
    )
    assert r.request_id == ref.sha(vs.request_json_without_id(r))


def test_independent_rerun_on_the_repaired_candidate_closes() -> None:
    _, old_receipt = _pre_repair()
    (rerun,) = _reruns()
    receipt = vs.seal(rerun)
    closure = close_post_repair(
        REPAIRED, (rerun,), (old_receipt, receipt), _history(old_receipt.evidence_digest)
    )
    assert _closed(closure) is True
    (item,) = closure.items
    assert item.receipt_id == receipt.receipt_id
    assert closure.candidate == REPAIRED.digest


def test_author_diagnostics_cannot_close() -> None:
    (rerun,) = _reruns()
    diag_plan = vs.plan(Stage.IMPLEMENTATION, candidate=REPAIRED)
    author_run = vs.seal(diag_plan, Producer(Role.IMPLEMENTER, vs.AUTHOR))
    closure = close_post_repair(REPAIRED, (rerun,), (author_run,), _history())
    assert _closed(closure) is False
    (item,) = closure.items
    assert item.reason is ClosureReason.GATE_REFUSED
    assert [d.reason for d in item.decisions] == [GateReason.DIAGNOSTIC_AUTHORITY]


def test_stale_pre_repair_receipt_cannot_close() -> None:
    _, old_receipt = _pre_repair()
    (rerun,) = _reruns()
    closure = close_post_repair(
        REPAIRED, (rerun,), (old_receipt,), _history(old_receipt.evidence_digest)
    )
    assert _closed(closure) is False
    assert [d.reason for d in closure.items[0].decisions] == [GateReason.STALE_PRIOR_CANDIDATE]


def test_pre_repair_evidence_digest_cannot_close() -> None:
    (rerun,) = _reruns()
    receipt = vs.seal(rerun)
    closure = close_post_repair(REPAIRED, (rerun,), (receipt,), _history(receipt.evidence_digest))
    assert _closed(closure) is False
    assert [d.reason for d in closure.items[0].decisions] == [GateReason.STALE_PRE_REPAIR_EVIDENCE]


def test_missing_rerun_keeps_closure_open() -> None:
    (rerun,) = _reruns()
    closure = close_post_repair(REPAIRED, (rerun,), (), _history())
    assert _closed(closure) is False
    assert closure.items[0].reason is ClosureReason.RERUN_MISSING


def test_a_plan_that_is_not_a_post_repair_rerun_cannot_close() -> None:
    ordinary = vs.plan(candidate=REPAIRED)
    closure = close_post_repair(REPAIRED, (ordinary,), (vs.seal(ordinary),), _history())
    assert _closed(closure) is False
    assert closure.items[0].reason is ClosureReason.NOT_A_POST_REPAIR_RERUN


def test_no_reruns_proves_nothing() -> None:
    assert _closed(close_post_repair(REPAIRED, (), (), _history())) is False


def test_closure_never_schedules_a_review_round() -> None:
    assert list(Rereview) == [Rereview.PROHIBITED]
    (rerun,) = _reruns()
    closure = close_post_repair(REPAIRED, (rerun,), (vs.seal(rerun),), _history())
    assert closure.rereview is Rereview.PROHIBITED
    with pytest.raises(ValueError):
        PostRepairClosure(
            candidate=REPAIRED.digest,
            closed=True,
            items=closure.items,
            rereview="scheduled",  # type: ignore[arg-type]
        )
