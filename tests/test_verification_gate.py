"""The assurance gate: one test per reason, and a property over generated receipts."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.serde import dumps
from kernel.verification import (
    Authority,
    BackendVerdict,
    Candidate,
    EvidenceTier,
    GateDecision,
    GateReason,
    Producer,
    RepairHistory,
    Role,
    Stage,
    Status,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    evaluate_gate,
    plan_verification,
    seal_verification,
)
from tests import verification_strategies as vs
from tests.support import reference as ref
from tests.support.cli import kernel

NO_HISTORY = RepairHistory(prior_candidates=(), pre_repair_evidence_digests=())


def _gate(
    receipt: VerificationReceipt,
    request: VerificationRequest | None = None,
    history: RepairHistory = NO_HISTORY,
) -> GateDecision:
    p = vs.plan()
    return evaluate_gate(receipt, request or p.request, vs.candidate(), history)


def _refused(decision: GateDecision, reason: GateReason) -> None:
    assert decision.gate_eligible is False
    assert decision.reason is reason
    assert decision.message and "\n" not in decision.message


def test_independent_assurance_receipt_with_expected_status_is_eligible() -> None:
    p = vs.plan()
    receipt = vs.seal(p)
    decision = evaluate_gate(receipt, p.request, vs.candidate(), NO_HISTORY)
    assert decision.gate_eligible is True
    assert decision.reason is None
    assert (decision.receipt_id, decision.request_id) == (receipt.receipt_id, p.request.request_id)
    assert p.request.claim.claim_id in decision.message


def test_refuted_passes_when_refuted_is_expected() -> None:
    p = vs.plan(expected_result=Status.REFUTED)
    decision = evaluate_gate(vs.seal(p, verdict="refuted"), p.request, vs.candidate(), NO_HISTORY)
    assert decision.gate_eligible is True


def test_tampered_receipt_fails_closed() -> None:
    receipt = attrs.evolve(vs.seal(vs.plan()), backend_version="reverify 0.0.1")
    _refused(_gate(receipt), GateReason.RECEIPT_TAMPERED)


def test_tampered_request_fails_closed() -> None:
    p = vs.plan()
    request = attrs.evolve(p.request, expected_result=Status.REFUTED)
    _refused(_gate(vs.seal(p), request), GateReason.REQUEST_TAMPERED)


@pytest.mark.parametrize(
    ("stage", "role"),
    [
        (Stage.IMPLEMENTATION, Role.IMPLEMENTER),
        (Stage.IMPLEMENTATION, Role.LIGHT_IMPLEMENTER),
        (Stage.INTEGRATION, Role.INTEGRATION_ENGINEER),
    ],
)
def test_diagnostic_receipts_never_pass(stage: Stage, role: Role) -> None:
    p = vs.plan(stage)
    receipt = vs.seal(p, Producer(role, vs.TESTER))
    decision = evaluate_gate(receipt, p.request, vs.candidate(), NO_HISTORY)
    _refused(decision, GateReason.DIAGNOSTIC_AUTHORITY)


def test_forged_assurance_in_the_authors_session_is_not_independent() -> None:
    receipt = vs.resealed_receipt(
        vs.seal(vs.plan()), produced_by=Producer(Role.TEST_ENGINEER, vs.AUTHOR)
    )
    _refused(_gate(receipt), GateReason.PRODUCER_NOT_INDEPENDENT)


def test_forged_assurance_by_a_non_test_engineer_is_not_independent() -> None:
    receipt = vs.resealed_receipt(vs.seal(vs.plan()), produced_by=Producer(Role.REVIEWER, "r"))
    _refused(_gate(receipt), GateReason.PRODUCER_NOT_INDEPENDENT)


def test_receipt_for_a_prior_candidate_is_stale() -> None:
    old = vs.plan(candidate=vs.candidate(vs.PRIOR_DIGEST))
    receipt = vs.seal(old)
    history = RepairHistory(prior_candidates=(vs.PRIOR_DIGEST,), pre_repair_evidence_digests=())
    current = vs.plan()
    _refused(_gate(receipt, current.request, history), GateReason.STALE_PRIOR_CANDIDATE)


def test_candidate_mismatch_fails_closed_even_without_history() -> None:
    other = vs.plan(candidate=vs.candidate("d" * 64))
    _refused(_gate(vs.seal(other)), GateReason.CANDIDATE_MISMATCH)


def test_candidate_author_mismatch_fails_closed() -> None:
    other = vs.plan(candidate=vs.candidate(author="session-someone-else"))
    _refused(_gate(vs.seal(other)), GateReason.CANDIDATE_MISMATCH)


def test_request_for_another_candidate_fails_closed() -> None:
    p = vs.plan()
    other = vs.plan(candidate=vs.candidate("d" * 64))
    _refused(_gate(vs.seal(p), other.request), GateReason.CANDIDATE_MISMATCH)


def test_pre_repair_evidence_digest_is_stale() -> None:
    receipt = vs.seal(vs.plan())
    history = RepairHistory(
        prior_candidates=(), pre_repair_evidence_digests=(receipt.evidence_digest,)
    )
    _refused(_gate(receipt, history=history), GateReason.STALE_PRE_REPAIR_EVIDENCE)


def test_claim_mismatch_fails_closed() -> None:
    receipt = vs.seal(vs.plan(claim=vs.binary_claim("claim-other")))
    _refused(_gate(receipt), GateReason.CLAIM_MISMATCH)


def test_backend_mismatch_fails_closed() -> None:
    receipt = vs.seal(
        vs.plan(backend="cbmc", command_configuration=vs.configuration("check-property")),
        backend="cbmc",
    )
    _refused(_gate(receipt), GateReason.BACKEND_MISMATCH)


def test_command_configuration_mismatch_fails_closed() -> None:
    receipt = vs.seal(vs.plan(command_configuration=vs.configuration("replay-evidence")))
    _refused(_gate(receipt), GateReason.COMMAND_CONFIGURATION_MISMATCH)


def test_receipt_sealed_at_another_stage_fails_closed() -> None:
    # Same bindings, another assurance stage: the receipt answers another request.
    receipt = vs.seal(vs.plan(Stage.POST_REPAIR_CLOSURE))
    _refused(_gate(receipt), GateReason.RECEIPT_STAGE_MISMATCH)


def test_receipt_sealed_for_another_request_fails_closed() -> None:
    # Same stage and bindings, another expected result: another request_id.
    receipt = vs.seal(vs.plan(expected_result=Status.REFUTED))
    _refused(_gate(receipt), GateReason.REQUEST_MISMATCH)


@pytest.mark.parametrize(
    ("verdict", "tier", "reason"),
    [
        ("error", "observed", GateReason.STATUS_ERROR),
        ("unknown", "observed", GateReason.STATUS_INCONCLUSIVE),
        ("verified", "derived", GateReason.STATUS_INCONCLUSIVE),
        ("refuted", "derived", GateReason.STATUS_INCONCLUSIVE),
    ],
)
def test_error_and_inconclusive_never_pass(verdict: str, tier: str, reason: GateReason) -> None:
    _refused(_gate(vs.seal(vs.plan(), verdict=verdict, evidence_tier=tier)), reason)


def test_status_must_equal_the_expected_result() -> None:
    _refused(_gate(vs.seal(vs.plan(), verdict="refuted")), GateReason.STATUS_MISMATCH)


def test_a_decision_cannot_be_eligible_with_a_reason() -> None:
    with pytest.raises(ValueError):
        GateDecision(
            gate_eligible=True,
            reason=GateReason.STATUS_ERROR,
            message="m",
            receipt_id="a" * 64,
            request_id="b" * 64,
            candidate="c" * 64,
        )


# --- gate binding: the request's own stage decides the authority (issue 9) ------------

DIAGNOSTIC_STAGES = (Stage.IMPLEMENTATION, Stage.INTEGRATION)
ASSURANCE_STAGES = (Stage.ASSURANCE, Stage.ADJUDICATION, Stage.POST_REPAIR_CLOSURE)
# Restated from ADR-0003's table, not imported from the package.
PERMITTED_REQUESTERS = {
    Stage.IMPLEMENTATION: {Role.IMPLEMENTER, Role.LIGHT_IMPLEMENTER},
    Stage.INTEGRATION: {Role.INTEGRATION_ENGINEER},
    Stage.ASSURANCE: {Role.TEST_ENGINEER},
    Stage.ADJUDICATION: {Role.REVIEWER},
    Stage.POST_REPAIR_CLOSURE: {Role.TEST_ENGINEER},
}


def _diagnostic_run(stage: Stage) -> tuple[VerificationPlan, VerificationReceipt]:
    p = vs.plan(stage)
    executor = Role.IMPLEMENTER if stage is Stage.IMPLEMENTATION else Role.INTEGRATION_ENGINEER
    return p, vs.seal(p, Producer(executor, "session-dev"))


@pytest.mark.parametrize("stage", DIAGNOSTIC_STAGES)
def test_assurance_label_on_a_receipt_for_a_diagnostic_stage_request_is_refused(
    stage: Stage,
) -> None:
    # The attack of issue 9 point 4: relabel and reseal a diagnostic run's
    # receipt as an independent Test Engineer's assurance receipt. Every other
    # binding (candidate, claim, backend, request_id, stage, status) is honest.
    p, receipt = _diagnostic_run(stage)
    forged = vs.resealed_receipt(
        receipt, authority=Authority.ASSURANCE, produced_by=vs.tester("session-independent")
    )
    decision = evaluate_gate(forged, p.request, vs.candidate(), NO_HISTORY)
    _refused(decision, GateReason.RECEIPT_AUTHORITY_MISMATCH)
    assert stage.value in decision.message


@pytest.mark.parametrize("stage", DIAGNOSTIC_STAGES)
def test_assurance_label_on_a_diagnostic_stage_request_is_refused(stage: Stage) -> None:
    # The request, too, can be relabelled and resealed: a stage that allows
    # only diagnostic authority cannot carry an assurance request.
    p, receipt = _diagnostic_run(stage)
    request = vs.resealed_request(p.request, authority=Authority.ASSURANCE)
    forged = vs.resealed_receipt(
        receipt,
        request_id=request.request_id,
        authority=Authority.ASSURANCE,
        produced_by=vs.tester("session-independent"),
    )
    _refused(
        evaluate_gate(forged, request, vs.candidate(), NO_HISTORY),
        GateReason.REQUEST_AUTHORITY_STAGE_MISMATCH,
    )


@pytest.mark.parametrize("stage", DIAGNOSTIC_STAGES)
def test_diagnostic_request_moved_to_an_assurance_stage_is_refused(stage: Stage) -> None:
    # Stage and authority relabelled consistently: the requester still betrays it.
    p, receipt = _diagnostic_run(stage)
    request = vs.resealed_request(
        p.request, stage=Stage.ASSURANCE, authority=Authority.ASSURANCE
    )
    forged = vs.resealed_receipt(
        receipt,
        request_id=request.request_id,
        stage=Stage.ASSURANCE,
        authority=Authority.ASSURANCE,
        produced_by=vs.tester("session-independent"),
    )
    _refused(
        evaluate_gate(forged, request, vs.candidate(), NO_HISTORY),
        GateReason.REQUEST_REQUESTER_NOT_PERMITTED,
    )


@pytest.mark.parametrize("stage", ASSURANCE_STAGES)
def test_diagnostic_authority_on_an_assurance_stage_request_is_refused(stage: Stage) -> None:
    p = vs.plan(stage)
    request = vs.resealed_request(p.request, authority=Authority.DIAGNOSTIC)
    receipt = vs.resealed_receipt(vs.seal(p), request_id=request.request_id)
    _refused(
        evaluate_gate(receipt, request, vs.candidate(), NO_HISTORY),
        GateReason.REQUEST_AUTHORITY_STAGE_MISMATCH,
    )


def test_assurance_receipt_labelled_with_a_diagnostic_stage_is_refused() -> None:
    receipt = vs.resealed_receipt(vs.seal(vs.plan()), stage=Stage.IMPLEMENTATION)
    _refused(_gate(receipt), GateReason.RECEIPT_STAGE_MISMATCH)


# --- the digest check and the decision's candidate (mutation survivors) -----------------


@pytest.mark.parametrize("field", ["prior_candidates", "pre_repair_evidence_digests"])
def test_repair_history_refuses_a_list_even_of_digests(field: str) -> None:
    fields: dict[str, object] = {"prior_candidates": (), "pre_repair_evidence_digests": ()}
    fields[field] = ["a" * 64]
    with pytest.raises(TypeError, match=field):
        RepairHistory(**fields)  # type: ignore[arg-type]  # the wrong type is the test


@pytest.mark.parametrize("field", ["prior_candidates", "pre_repair_evidence_digests"])
@pytest.mark.parametrize("entry", ["A" * 64, "a" * 63, "", "g" * 64])
def test_repair_history_refuses_a_tuple_holding_a_non_digest(field: str, entry: str) -> None:
    fields: dict[str, tuple[str, ...]] = {"prior_candidates": (), "pre_repair_evidence_digests": ()}
    fields[field] = ("a" * 64, entry)
    with pytest.raises(TypeError, match=field):
        RepairHistory(**fields)


def test_repair_history_keeps_a_tuple_of_digests() -> None:
    history = RepairHistory(prior_candidates=("a" * 64,), pre_repair_evidence_digests=("b" * 64,))
    assert history.prior_candidates == ("a" * 64,)
    assert history.pre_repair_evidence_digests == ("b" * 64,)


def test_a_decision_names_the_current_candidate_it_judged_against() -> None:
    # The receipt binds candidate "c"*64; the current candidate is another one.
    current = vs.candidate("d" * 64)
    p = vs.plan()
    receipt = vs.seal(p)
    decision = evaluate_gate(receipt, p.request, current, NO_HISTORY)
    _refused(decision, GateReason.CANDIDATE_MISMATCH)
    assert decision.candidate == "d" * 64
    eligible = evaluate_gate(receipt, p.request, vs.candidate(), NO_HISTORY)
    assert eligible.gate_eligible is True
    assert eligible.candidate == vs.CANDIDATE_DIGEST


@pytest.mark.parametrize("field", ["receipt_id", "request_id", "candidate", "message"])
@pytest.mark.parametrize("value", [None, "", "c" * 63 + "\n"])
def test_a_decision_without_a_candidate_id_or_message_cannot_be_built(
    field: str, value: str | None
) -> None:
    fields: dict[str, object] = {
        "gate_eligible": False,
        "reason": GateReason.STATUS_ERROR,
        "message": "m",
        "receipt_id": "a" * 64,
        "request_id": "b" * 64,
        "candidate": "c" * 64,
    }
    fields[field] = value
    with pytest.raises(TypeError, match=field):
        GateDecision(**fields)  # type: ignore[arg-type]  # the wrong type is the test


# --- the property ------------------------------------------------------------------


@st.composite
def gate_cases(
    draw: st.DrawFn,
) -> tuple[VerificationReceipt, VerificationRequest, Candidate, RepairHistory]:
    """A sealed eligible-looking scenario, then arbitrary field changes, ids resealed."""
    assurance = (Stage.ASSURANCE, Stage.ADJUDICATION, Stage.POST_REPAIR_CLOSURE)
    spec = draw(vs.plannable_specs(assurance if draw(st.integers(0, 3)) else tuple(Stage)))
    p = plan_verification(spec)
    assert isinstance(p, VerificationPlan)
    request = p.request
    producer = Producer(draw(vs.executor_for(spec.authority)), "session-runner")
    receipt = seal_verification(p, draw(vs.outputs_for(p)), producer)
    assert isinstance(receipt, VerificationReceipt)

    def sometimes() -> bool:
        return draw(st.integers(0, 5)) == 0

    changes: dict[str, object] = {}
    if sometimes():
        changes["authority"] = draw(st.sampled_from(Authority))
    if sometimes():
        changes["produced_by"] = Producer(draw(st.sampled_from(Role)), draw(vs.sessions))
    if sometimes():
        changes["candidate"] = draw(vs.candidates)
    if sometimes():
        changes["claim"] = draw(vs.claims)
    if sometimes():
        changes["backend"] = draw(st.sampled_from(["reverify", "cbmc"]))
    if sometimes():
        verdict = draw(st.sampled_from([v for v in BackendVerdict if v.value != "claim_malformed"]))
        tier = draw(st.sampled_from(EvidenceTier))
        changes["backend_verdict"] = verdict
        changes["evidence_tier"] = tier
        changes["status"] = vs.expected_status(verdict, tier)
    if sometimes():
        changes["request_id"] = draw(vs.digests)
    if sometimes():
        changes["evidence_digest"] = draw(vs.digests)
    if sometimes():
        changes["stage"] = draw(st.sampled_from(Stage))
    if changes:
        receipt = vs.resealed_receipt(receipt, **changes)
    if sometimes():
        # A stray edit without resealing: tampering must be caught too.
        receipt = attrs.evolve(receipt, backend_version=receipt.backend_version + "+")
    if sometimes():
        expected = draw(st.sampled_from([Status.VERIFIED, Status.REFUTED]))
        request = vs.resealed_request(request, expected_result=expected)
    if sometimes():
        relabel: dict[str, object] = {"stage": draw(st.sampled_from(Stage))}
        if draw(st.booleans()):
            relabel["authority"] = draw(st.sampled_from(Authority))
        if draw(st.booleans()):
            relabel["requested_by"] = draw(st.sampled_from(Role))
        request = vs.resealed_request(request, **relabel)
        if draw(st.booleans()):
            # The forger keeps the receipt pointing at the relabelled request.
            receipt = vs.resealed_receipt(receipt, request_id=request.request_id)
    current = draw(vs.candidates) if sometimes() else spec.candidate
    prior = draw(st.lists(vs.digests, max_size=2, unique=True)) if sometimes() else []
    stale = (
        draw(
            st.lists(
                st.one_of(vs.digests, st.just(receipt.evidence_digest)), max_size=2, unique=True
            )
        )
        if sometimes()
        else []
    )
    history = RepairHistory(prior_candidates=tuple(prior), pre_repair_evidence_digests=tuple(stale))
    return receipt, request, current, history


def _should_pass(
    receipt: VerificationReceipt,
    request: VerificationRequest,
    current: Candidate,
    history: RepairHistory,
) -> bool:
    """The seed's gate rule, restated independently of the implementation."""
    return (
        receipt.receipt_id == ref.sha(vs.receipt_json_without_id(receipt))
        and request.request_id == ref.sha(vs.request_json_without_id(request))
        and request.stage in ASSURANCE_STAGES
        and request.authority is Authority.ASSURANCE
        and request.requested_by in PERMITTED_REQUESTERS[request.stage]
        and receipt.authority is Authority.ASSURANCE
        and receipt.produced_by.role is Role.TEST_ENGINEER
        and receipt.produced_by.session != current.author_session
        and receipt.candidate == current == request.candidate
        and receipt.candidate.digest not in history.prior_candidates
        and receipt.evidence_digest not in history.pre_repair_evidence_digests
        and receipt.claim == request.claim
        and receipt.backend == request.backend
        and receipt.command_configuration == request.command_configuration
        and receipt.request_id == request.request_id
        and receipt.stage is request.stage
        and receipt.status not in (Status.INCONCLUSIVE, Status.ERROR)
        and receipt.evidence_tier is EvidenceTier.OBSERVED
        and receipt.status is request.expected_result
    )


@given(case=gate_cases())
def test_only_independent_bound_expected_assurance_is_ever_eligible(
    case: tuple[VerificationReceipt, VerificationRequest, Candidate, RepairHistory],
) -> None:
    receipt, request, current, history = case
    decision = evaluate_gate(receipt, request, current, history)
    assert decision.gate_eligible is _should_pass(receipt, request, current, history)
    if decision.gate_eligible:
        assert receipt.authority is Authority.ASSURANCE
        assert receipt.status in (Status.VERIFIED, Status.REFUTED)


@given(case=gate_cases())
def test_diagnostic_mismatched_inconclusive_or_error_receipts_are_never_eligible(
    case: tuple[VerificationReceipt, VerificationRequest, Candidate, RepairHistory],
) -> None:
    receipt, request, current, history = case
    decision = evaluate_gate(receipt, request, current, history)
    if (
        receipt.authority is Authority.DIAGNOSTIC
        or receipt.status in (Status.INCONCLUSIVE, Status.ERROR)
        or receipt.candidate != current
        or receipt.claim != request.claim
        or receipt.backend != request.backend
        or receipt.command_configuration != request.command_configuration
        or receipt.request_id != request.request_id
    ):
        assert decision.gate_eligible is False
        assert decision.reason is not None


@st.composite
def relabelled_diagnostic_runs(
    draw: st.DrawFn,
) -> tuple[VerificationReceipt, VerificationRequest, Candidate]:
    """A diagnostic run planned and sealed honestly, then relabelled by its author.

    The author may reseal the receipt under any authority, stage, producer and
    verdict, and may also relabel the request's stage and authority (resealing
    its id and pointing the receipt at it); the requester stays who it was.
    """
    spec = draw(vs.plannable_specs(DIAGNOSTIC_STAGES))
    p = plan_verification(spec)
    assert isinstance(p, VerificationPlan)
    producer = Producer(draw(vs.executor_for(Authority.DIAGNOSTIC)), "session-dev")
    receipt = seal_verification(p, draw(vs.outputs_for(p)), producer)
    assert isinstance(receipt, VerificationReceipt)
    request = p.request
    if draw(st.booleans()):
        request = vs.resealed_request(
            request,
            stage=draw(st.sampled_from(Stage)),
            authority=draw(st.sampled_from(Authority)),
        )
    verdict = draw(st.sampled_from([BackendVerdict.VERIFIED, BackendVerdict.REFUTED]))
    forged = vs.resealed_receipt(
        receipt,
        request_id=request.request_id,
        authority=draw(st.sampled_from(Authority)),
        stage=draw(st.sampled_from([request.stage, *Stage])),
        produced_by=Producer(
            draw(st.sampled_from(Role)), draw(st.sampled_from(["session-tester", "session-x"]))
        ),
        backend_verdict=verdict,
        evidence_tier=EvidenceTier.OBSERVED,
        status=vs.expected_status(verdict, EvidenceTier.OBSERVED),
    )
    return forged, request, spec.candidate


@given(case=relabelled_diagnostic_runs())
def test_no_relabelled_diagnostic_receipt_ever_passes(
    case: tuple[VerificationReceipt, VerificationRequest, Candidate],
) -> None:
    receipt, request, current = case
    decision = evaluate_gate(receipt, request, current, NO_HISTORY)
    assert decision.gate_eligible is False
    assert decision.reason in {
        GateReason.REQUEST_AUTHORITY_STAGE_MISMATCH,
        GateReason.REQUEST_REQUESTER_NOT_PERMITTED,
        GateReason.DIAGNOSTIC_AUTHORITY,
        GateReason.RECEIPT_AUTHORITY_MISMATCH,
    }


# --- the attack through the command line -------------------------------------------------


def test_kernel_verify_gate_refuses_a_relabelled_receipt(tmp_path: Path) -> None:
    # The reproduction, end to end: a diagnostic plan and its
    # receipt as files, the receipt relabelled assurance by an independent
    # Test Engineer and its id recomputed with the test's own hasher.
    p, receipt = _diagnostic_run(Stage.IMPLEMENTATION)
    forged = vs.resealed_receipt(
        receipt, authority=Authority.ASSURANCE, produced_by=vs.tester("session-independent")
    )
    plan_file, receipt_file = tmp_path / "plan.json", tmp_path / "receipt.json"
    plan_file.write_bytes(dumps(p))
    receipt_file.write_bytes(dumps(forged))
    done = kernel(
        "verify", "gate", plan_file, receipt_file,
        "--candidate", vs.CANDIDATE_DIGEST, "--author-session", vs.AUTHOR,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    decision = json.loads(done.stdout)
    assert decision["gate_eligible"] is False
    assert decision["reason"] == "receipt_authority_mismatch"
