"""What the verification adapter says when it refuses, word for word (issue 12.6).

Mutation testing (``make mutate``, RELIABILITY.md) showed that the other
verification tests check *which* code a refusal carries but not *what it
says*: a refusal whose message became ``None``, upper case or another
sentence still passed them. A refusal is read by an operator, so its one-line
message is public behaviour. Each test here reaches one refusal through the
public API (altered records, resealed with the test's own hasher, misbehaving
backends, invalid values handed to the public constructors) and asserts the
code and the exact message, plus the fields of the value returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from kernel.verification import (
    Activation,
    Authority,
    BackendCatalog,
    BackendEntry,
    BackendGap,
    BackendInactive,
    BackendOperation,
    BackendReady,
    BackendVerdict,
    Candidate,
    Claim,
    ClaimLevel,
    ClosureReason,
    CommandConfiguration,
    GapCode,
    GateDecision,
    GateReason,
    OperationKind,
    Proceed,
    Producer,
    ProfileSnapshot,
    RejectionCode,
    RepairHistory,
    Rereview,
    Role,
    Selection,
    Setting,
    Stage,
    Status,
    VerificationReceipt,
    VerificationRequest,
    close_post_repair,
    evaluate_activation,
    evaluate_gate,
    integrate_selections,
    plan_post_repair_reruns,
    plan_verification,
    seal_verification,
    select_backend,
)
from kernel.verification import PostRepairClosure as Closure
from tests import verification_strategies as vs
from tests.support.reference import sha as ref_sha

NO_HISTORY = RepairHistory(prior_candidates=(), pre_repair_evidence_digests=())
A, B, C, D = "a" * 64, "b" * 64, "c" * 64, "d" * 64


# --- the gate: one exact (reason, message) per check ---------------------------------


def _judge(
    receipt: VerificationReceipt,
    request: VerificationRequest | None = None,
    history: RepairHistory = NO_HISTORY,
) -> tuple[GateReason | None, str]:
    request = request or vs.plan().request
    decision = evaluate_gate(receipt, request, vs.candidate(), history)
    # The decision carries the ids as the judged records carry them.
    assert decision.receipt_id == receipt.receipt_id
    assert decision.request_id == request.request_id
    assert decision.candidate == vs.CANDIDATE_DIGEST
    assert decision.gate_eligible is (decision.reason is None)
    return decision.reason, decision.message


def test_gate_messages_for_tampered_ids() -> None:
    p = vs.plan()
    receipt = vs.seal(p)
    edited = attrs.evolve(receipt, backend_version="reverify 0.0.1")
    assert _judge(edited) == (GateReason.RECEIPT_TAMPERED, "receipt_id does not recompute")
    request = attrs.evolve(p.request, expected_result=Status.REFUTED)
    assert _judge(receipt, request) == (
        GateReason.REQUEST_TAMPERED,
        "request_id does not recompute",
    )


def test_gate_messages_for_a_request_its_stage_would_not_have_issued() -> None:
    p = vs.plan()
    receipt = vs.seal(p)
    diagnostic = vs.resealed_request(p.request, authority=Authority.DIAGNOSTIC)
    assert _judge(receipt, diagnostic) == (
        GateReason.REQUEST_AUTHORITY_STAGE_MISMATCH,
        "request names diagnostic authority at stage assurance, which allows assurance",
    )
    routed = vs.resealed_request(p.request, requested_by=Role.ORCHESTRATOR)
    assert _judge(receipt, routed) == (
        GateReason.REQUEST_REQUESTER_NOT_PERMITTED,
        "orchestrator may not request a run at stage assurance",
    )


def test_gate_messages_for_authority() -> None:
    receipt = vs.seal(vs.plan())
    diagnostic = vs.resealed_receipt(receipt, authority=Authority.DIAGNOSTIC)
    assert _judge(diagnostic) == (
        GateReason.DIAGNOSTIC_AUTHORITY,
        "a diagnostic receipt never passes a gate",
    )
    p = vs.plan(Stage.INTEGRATION)
    relabelled = vs.resealed_receipt(
        vs.seal(p, Producer(Role.INTEGRATION_ENGINEER, "session-dev")),
        authority=Authority.ASSURANCE,
        produced_by=vs.tester("session-independent"),
    )
    assert _judge(relabelled, p.request) == (
        GateReason.RECEIPT_AUTHORITY_MISMATCH,
        "receipt is labelled assurance; stage integration allows diagnostic",
    )


@pytest.mark.parametrize(
    ("producer", "shown"),
    [
        (Producer(Role.TEST_ENGINEER, vs.AUTHOR), "test_engineer in session 'session-author'"),
        (Producer(Role.REVIEWER, "session-r"), "reviewer in session 'session-r'"),
    ],
)
def test_gate_message_for_a_producer_that_is_not_independent(
    producer: Producer, shown: str
) -> None:
    receipt = vs.resealed_receipt(vs.seal(vs.plan()), produced_by=producer)
    assert _judge(receipt) == (
        GateReason.PRODUCER_NOT_INDEPENDENT,
        f"{shown} is not an independent Test Engineer session",
    )


def test_gate_messages_for_stale_and_foreign_candidates() -> None:
    old = vs.seal(vs.plan(candidate=vs.candidate(vs.PRIOR_DIGEST)))
    history = RepairHistory(prior_candidates=(vs.PRIOR_DIGEST,), pre_repair_evidence_digests=())
    assert _judge(old, history=history) == (
        GateReason.STALE_PRIOR_CANDIDATE,
        f"receipt binds replaced candidate {vs.PRIOR_DIGEST}",
    )
    assert _judge(old) == (
        GateReason.CANDIDATE_MISMATCH,
        "receipt or request does not bind the current candidate",
    )
    # The request alone binding another candidate is refused the same way.
    other = vs.plan(candidate=vs.candidate(D))
    assert _judge(vs.seal(vs.plan()), other.request)[0] is GateReason.CANDIDATE_MISMATCH
    receipt = vs.seal(vs.plan())
    stale = RepairHistory(
        prior_candidates=(), pre_repair_evidence_digests=(receipt.evidence_digest,)
    )
    assert _judge(receipt, history=stale) == (
        GateReason.STALE_PRE_REPAIR_EVIDENCE,
        f"evidence {receipt.evidence_digest} predates the repair",
    )


def test_gate_messages_for_bindings() -> None:
    claim = vs.seal(vs.plan(claim=vs.binary_claim("claim-other")))
    assert _judge(claim) == (GateReason.CLAIM_MISMATCH, "receipt binds another claim")
    cbmc = vs.seal(
        vs.plan(backend="cbmc", command_configuration=vs.configuration("check-property")),
        backend="cbmc",
    )
    assert _judge(cbmc) == (GateReason.BACKEND_MISMATCH, "receipt binds backend 'cbmc'")
    configured = vs.seal(vs.plan(command_configuration=vs.configuration("replay-evidence")))
    assert _judge(configured) == (
        GateReason.COMMAND_CONFIGURATION_MISMATCH,
        "receipt command/configuration differs from the request's",
    )
    staged = vs.seal(vs.plan(Stage.POST_REPAIR_CLOSURE))
    assert _judge(staged) == (
        GateReason.RECEIPT_STAGE_MISMATCH,
        "receipt names stage post_repair_closure, the request assurance",
    )
    other_request = vs.seal(vs.plan(expected_result=Status.REFUTED), verdict="refuted")
    assert _judge(other_request) == (
        GateReason.REQUEST_MISMATCH,
        "receipt was sealed for another request",
    )


def test_gate_messages_for_statuses() -> None:
    p = vs.plan()
    assert _judge(vs.seal(p, verdict="error")) == (
        GateReason.STATUS_ERROR,
        "ERROR never passes a gate",
    )
    assert _judge(vs.seal(p, verdict="unknown")) == (
        GateReason.STATUS_INCONCLUSIVE,
        "INCONCLUSIVE never passes a gate",
    )
    assert _judge(vs.seal(p, verdict="refuted")) == (
        GateReason.STATUS_MISMATCH,
        "status REFUTED is not the expected VERIFIED",
    )
    assert _judge(vs.seal(p)) == (
        None,
        "independent assurance receipt VERIFIED as expected for claim claim-exit-code",
    )


ONE_REASON = "an eligible decision has no reason; a refused one has one"


def _decision(**changes: Any) -> GateDecision:
    fields: dict[str, Any] = {
        "gate_eligible": False,
        "reason": GateReason.STATUS_ERROR,
        "message": "ERROR never passes a gate",
        "receipt_id": A,
        "request_id": B,
        "candidate": C,
    }
    fields.update(changes)
    return GateDecision(**fields)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"gate_eligible": 0}, TypeError, "gate_eligible must be bool"),
        ({"gate_eligible": True}, ValueError, ONE_REASON),
        ({"reason": None}, ValueError, ONE_REASON),
        ({"reason": "status_error"}, TypeError, "reason must be a GateReason or None"),
        ({"message": ""}, TypeError, "message must be one non-empty line of text"),
        ({"message": "two\nlines"}, TypeError, "message must be one non-empty line of text"),
        ({"message": b"bytes"}, TypeError, "message must be one non-empty line of text"),
        ({"receipt_id": "A" * 64}, TypeError, "receipt_id must be a SHA-256 digest"),
        ({"request_id": "b" * 63}, TypeError, "request_id must be a SHA-256 digest"),
        ({"candidate": None}, TypeError, "candidate must be a SHA-256 digest"),
    ],
)
def test_a_gate_decision_refuses_inconsistent_fields_with_a_message(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    _decision()  # the unchanged fields are a valid refusal
    with pytest.raises(error) as raised:
        _decision(**changes)
    assert str(raised.value) == message


@pytest.mark.parametrize("field", ["prior_candidates", "pre_repair_evidence_digests"])
@pytest.mark.parametrize("value", [[A], (A, "not a digest"), (A.upper(),)])
def test_repair_history_names_the_field_it_refuses(field: str, value: object) -> None:
    fields: dict[str, object] = {"prior_candidates": (A,), "pre_repair_evidence_digests": (B,)}
    fields[field] = value
    with pytest.raises(TypeError) as raised:
        RepairHistory(**fields)  # type: ignore[arg-type]  # deliberately wrong types
    assert str(raised.value) == f"{field} must be a tuple of SHA-256 digests"


# --- the catalog: public constructors refuse what could disarm planning ---------------


CHECK = BackendOperation("check", OperationKind.CHECK)


@pytest.mark.parametrize(
    ("operations", "error", "message"),
    [
        ([CHECK], TypeError, "operations must be a tuple of BackendOperation"),
        ((CHECK, "check"), TypeError, "operations must be a tuple of BackendOperation"),
        (
            (CHECK, BackendOperation("check", OperationKind.GENERATIVE)),
            ValueError,
            "operation names must be unique",
        ),
    ],
)
def test_a_backend_entry_refuses_malformed_operations(
    operations: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        BackendEntry(backend="tool", program="tool", operations=operations)  # type: ignore[arg-type]
    assert str(raised.value) == message


@pytest.mark.parametrize("name", ["reviewer", "Test Engineer", " plan-integrator "])
def test_a_backend_entry_named_after_a_role_is_refused(name: str) -> None:
    with pytest.raises(ValueError) as raised:
        BackendEntry(backend=name, program="tool", operations=(CHECK,))
    assert str(raised.value) == f"backend {name!r} is a role name; a backend is never a role"


def test_a_valid_catalog_answers_exactly_what_it_lists() -> None:
    generate = BackendOperation("generate", OperationKind.GENERATIVE)
    entry = BackendEntry(backend="tool", program="/opt/tool", operations=(CHECK, generate))
    other = BackendEntry(backend="other", program="other", operations=(CHECK,))
    catalog = BackendCatalog(entries=(entry, other))
    assert catalog.entry("tool") is entry
    assert catalog.entry("other") is other
    assert catalog.entry("Tool") is None
    assert entry.operation("generate") is generate
    assert entry.operation("check") is CHECK
    assert entry.operation("missing") is None


@pytest.mark.parametrize(
    ("entries", "error", "message"),
    [
        ("not a tuple", TypeError, "entries must be a tuple of BackendEntry"),
        ((CHECK,), TypeError, "entries must be a tuple of BackendEntry"),
        (
            (
                BackendEntry(backend="tool", program="a", operations=(CHECK,)),
                BackendEntry(backend="tool", program="b", operations=()),
            ),
            ValueError,
            "backend identities must be unique",
        ),
    ],
)
def test_a_catalog_refuses_malformed_entries(
    entries: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        BackendCatalog(entries=entries)  # type: ignore[arg-type]
    assert str(raised.value) == message


# --- activation: selections, snapshots and gaps ----------------------------------------


def _selection(
    backend: str = "reverify",
    claim: Claim | None = None,
    activation: Activation = Activation.REQUIRED,
) -> Selection:
    return Selection(
        claim=claim or vs.binary_claim(),
        backend=backend,
        activation=activation,
        selected_by=Role.PLANNING_TEST_ENGINEER,
    )


SOURCE_CLAIM = Claim(claim_id="claim-src", level=ClaimLevel.SOURCE, statement="x > 0")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"activation": Activation.INACTIVE},
            "a selection activates its backend: selected or required",
        ),
        (
            {"selected_by": Role.PLAN_INTEGRATOR},
            "only the Planning Test Engineer selects backends",
        ),
        ({"backend": "unlisted"}, "backend 'unlisted' is not catalogued"),
        ({"claim": SOURCE_CLAIM}, "reverify is selected on binary-level claims only"),
    ],
)
def test_a_selection_built_directly_states_the_rule_it_breaks(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        attrs.evolve(_selection(), **changes)
    assert str(raised.value) == message


def test_select_backend_messages() -> None:
    claim = vs.binary_claim()
    cases = [
        (
            (Role.PLAN_INTEGRATOR, claim, "reverify", Activation.REQUIRED),
            RejectionCode.SELECTION_ROLE_NOT_PERMITTED,
            "plan_integrator may not select backends; the Planning Test Engineer does",
        ),
        (
            (Role.PLANNING_TEST_ENGINEER, claim, "reverify", Activation.INACTIVE),
            RejectionCode.BACKEND_NOT_ACTIVATED,
            "a selection is selected or required",
        ),
        (
            (Role.PLANNING_TEST_ENGINEER, claim, "Reviewer", Activation.SELECTED),
            RejectionCode.BACKEND_IS_A_ROLE,
            "'Reviewer' names a role; a backend is never a role",
        ),
        (
            (Role.PLANNING_TEST_ENGINEER, claim, "unlisted", Activation.SELECTED),
            RejectionCode.BACKEND_UNKNOWN,
            "backend 'unlisted' is not in the catalog",
        ),
        (
            (Role.PLANNING_TEST_ENGINEER, SOURCE_CLAIM, "reverify", Activation.SELECTED),
            RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE,
            "reverify applies to binary-level claims, not source",
        ),
    ]
    for args, code, message in cases:
        refused = vs.rejection(select_backend(*args))
        assert (refused.code, refused.message, refused.backend_detail) == (code, message, None)
    chosen = select_backend(Role.PLANNING_TEST_ENGINEER, claim, "cbmc", Activation.SELECTED)
    assert chosen == _selection("cbmc", activation=Activation.SELECTED)


def test_integrate_selections_messages() -> None:
    planned = (_selection("cbmc"), _selection())
    invented = _selection("vkit-smt", claim=vs.binary_claim("claim-2"))
    refused = vs.rejection(integrate_selections(planned, (*planned, invented)))
    assert (refused.code, refused.message) == (
        RejectionCode.SELECTION_INVENTED,
        "vkit-smt for claim claim-2 was not selected by the Planning Test Engineer",
    )
    refused = vs.rejection(integrate_selections(planned, planned[:1]))
    assert (refused.code, refused.message) == (
        RejectionCode.SELECTION_DROPPED,
        "reverify for claim claim-exit-code was selected but not copied",
    )
    # An exact copy, in any order, integrates to the sorted selections.
    assert integrate_selections(planned, planned[::-1]) == (planned[0], planned[1])


UNIQUE_SORTED = "available_backends must be unique and sorted"


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        ("reverify_enabled", 1, TypeError, "reverify_enabled must be bool"),
        ("available_backends", ["cbmc"], TypeError, "available_backends must be a tuple of str"),
        ("available_backends", ("cbmc", 1), TypeError, "available_backends must be a tuple of str"),
        ("available_backends", ("cbmc", "cbmc"), ValueError, UNIQUE_SORTED),
        ("available_backends", ("reverify", "cbmc"), ValueError, UNIQUE_SORTED),
        ("selections", [], TypeError, "selections must be a tuple of Selection"),
        ("selections", ("cbmc",), TypeError, "selections must be a tuple of Selection"),
        ("selections", "sel", TypeError, "selections must be a tuple of Selection"),
    ],
)
def test_a_profile_snapshot_refuses_malformed_fields(
    field: str, value: object, error: type[Exception], message: str
) -> None:
    fields: dict[str, object] = {
        "reverify_enabled": False,
        "available_backends": ("cbmc", "reverify"),
        "selections": (_selection("cbmc"), _selection()),
    }
    ProfileSnapshot(**fields)  # type: ignore[arg-type]  # the unchanged fields are valid
    fields[field] = value
    with pytest.raises(error) as raised:
        ProfileSnapshot(**fields)  # type: ignore[arg-type]  # deliberately wrong types
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "selections",
    [
        (_selection(), _selection("cbmc")),  # unsorted
        (_selection("cbmc"), _selection("cbmc", activation=Activation.SELECTED)),  # same key
    ],
)
def test_a_profile_snapshot_refuses_unsorted_or_duplicate_selections(
    selections: tuple[Selection, ...],
) -> None:
    with pytest.raises(ValueError) as raised:
        ProfileSnapshot(reverify_enabled=True, available_backends=(), selections=selections)
    assert str(raised.value) == "selections must be unique per (claim_id, backend) and sorted"


def test_activation_decisions_carry_the_claim_backend_and_activation() -> None:
    snapshot = ProfileSnapshot(
        reverify_enabled=True,
        available_backends=("reverify",),
        selections=(_selection("cbmc", activation=Activation.SELECTED), _selection()),
    )
    claim_id = vs.binary_claim().claim_id
    assert evaluate_activation(snapshot, claim_id, "reverify") == BackendReady(
        claim_id=claim_id, backend="reverify", activation=Activation.REQUIRED
    )
    assert evaluate_activation(snapshot, claim_id, "vkit-smt") == BackendInactive(
        claim_id=claim_id, backend="vkit-smt"
    )
    gap = evaluate_activation(snapshot, claim_id, "cbmc")
    assert isinstance(gap, BackendGap)
    assert (gap.claim_id, gap.backend, gap.activation, gap.status) == (
        claim_id,
        "cbmc",
        Activation.SELECTED,
        Status.ERROR,
    )
    assert gap.message == "selected backend cbmc is unavailable in the snapshot"
    missing = ProfileSnapshot(
        reverify_enabled=False, available_backends=(), selections=(_selection(),)
    )
    halt = evaluate_activation(missing, claim_id, "reverify")
    assert isinstance(halt, BackendGap)
    assert halt.message == "required backend reverify is unavailable in the snapshot"


def test_a_backend_gap_is_always_error() -> None:
    with pytest.raises(ValueError) as raised:
        BackendGap(
            claim_id="c",
            backend="cbmc",
            activation=Activation.SELECTED,
            status=Status.INCONCLUSIVE,
            code=GapCode.BACKEND_UNAVAILABLE,
            proceed=Proceed.PROCEED_WITH_NOTE,
            message="m",
        )
    assert str(raised.value) == "a backend gap is always ERROR"


# --- post-repair closure -----------------------------------------------------------------


REPAIRED = vs.candidate(D)


def _rerun_plans(*requests: VerificationRequest) -> tuple[Any, ...]:
    return plan_post_repair_reruns(REPAIRED, requests)


def test_only_required_requests_are_rerun_in_order() -> None:
    selected = vs.plan(activation=Activation.SELECTED).request
    required_cbmc = vs.plan(
        backend="cbmc", command_configuration=vs.configuration("check-property")
    ).request
    required = vs.plan().request
    # A selected request between two required ones is skipped, not an end.
    plans = _rerun_plans(required, selected, required_cbmc)
    assert [p.request.backend for p in plans] == ["reverify", "cbmc"]
    for p in plans:
        assert p.request.candidate == REPAIRED
        assert p.request.stage is Stage.POST_REPAIR_CLOSURE
        assert p.request.requested_by is Role.TEST_ENGINEER


def _rerun_receipt(plan: Any, **changes: Any) -> VerificationReceipt:
    return vs.seal(plan, vs.tester("session-rerun"), **changes)


def test_closure_items_name_their_request_claim_and_decisions() -> None:
    (rerun,) = _rerun_plans(vs.plan().request)
    receipt = _rerun_receipt(rerun)
    closure = close_post_repair(REPAIRED, (rerun,), (receipt,), NO_HISTORY)
    (item,) = closure.items
    assert closure.closed is True
    assert closure.candidate == D
    assert closure.rereview is Rereview.PROHIBITED
    assert (item.request_id, item.claim_id, item.backend) == (
        rerun.request.request_id,
        "claim-exit-code",
        "reverify",
    )
    assert item.receipt_id == receipt.receipt_id
    assert [d.receipt_id for d in item.decisions] == [receipt.receipt_id]


def test_a_plan_that_is_not_a_post_repair_rerun_has_no_decisions() -> None:
    ordinary = vs.plan()
    closure = close_post_repair(REPAIRED, (ordinary,), (vs.seal(ordinary),), NO_HISTORY)
    (item,) = closure.items
    assert (item.closed, item.reason, item.receipt_id, item.decisions) == (
        False,
        ClosureReason.NOT_A_POST_REPAIR_RERUN,
        None,
        (),
    )
    assert (item.request_id, item.claim_id, item.backend) == (
        ordinary.request.request_id,
        "claim-exit-code",
        "reverify",
    )


def test_only_receipts_of_the_same_claim_and_backend_are_judged() -> None:
    (rerun,) = _rerun_plans(vs.plan().request)
    other_claim = vs.plan(Stage.POST_REPAIR_CLOSURE, candidate=REPAIRED, claim=vs.binary_claim("x"))
    other_backend = vs.plan(
        Stage.POST_REPAIR_CLOSURE,
        candidate=REPAIRED,
        backend="cbmc",
        command_configuration=vs.configuration("check-property"),
    )
    receipts = (
        _rerun_receipt(other_claim),
        vs.seal(other_backend, vs.tester("session-rerun"), backend="cbmc"),
    )
    closure = close_post_repair(REPAIRED, (rerun,), receipts, NO_HISTORY)
    (item,) = closure.items
    assert (item.reason, item.decisions) == (ClosureReason.RERUN_MISSING, ())


@pytest.mark.parametrize(
    "changes",
    [
        {"closed": True, "reason": None, "receipt_id": None},
        {"closed": True, "reason": ClosureReason.GATE_REFUSED, "receipt_id": A},
        {"closed": False, "reason": None, "receipt_id": None},
        # Each half of the invariant alone: an open item naming a receipt.
        {"closed": False, "reason": ClosureReason.GATE_REFUSED, "receipt_id": A},
    ],
)
def test_a_closure_item_refuses_an_inconsistent_state(changes: dict[str, Any]) -> None:
    (rerun,) = _rerun_plans(vs.plan().request)
    item = close_post_repair(REPAIRED, (rerun,), (_rerun_receipt(rerun),), NO_HISTORY).items[0]
    with pytest.raises(ValueError) as raised:
        attrs.evolve(item, **changes)
    assert str(raised.value) == "a closed item names its receipt and no reason"


def test_a_closure_refuses_an_inconsistent_state() -> None:
    with pytest.raises(ValueError) as raised:
        Closure(candidate=D, closed=True, items=(), rereview=Rereview.PROHIBITED)
    assert str(raised.value) == "closed exactly when there are items and every one is closed"
    with pytest.raises(ValueError) as raised:
        Closure(candidate=D, closed=False, items=(), rereview="rereview")  # type: ignore[arg-type]
    assert str(raised.value) == "post-repair closure never schedules a review round"


# --- the bridge: planning and sealing refusals, word for word ---------------------------


def _planned(stage: Stage = Stage.ASSURANCE, **changes: Any) -> tuple[RejectionCode, str]:
    refused = vs.rejection(plan_verification(vs.spec(stage, **changes)))
    assert refused.backend_detail is None
    return refused.code, refused.message


def test_planning_messages() -> None:
    assert _planned(requested_by=Role.ORCHESTRATOR) == (
        RejectionCode.REQUESTER_NOT_PERMITTED,
        "orchestrator may not request a run at stage assurance",
    )
    assert _planned(Stage.INTEGRATION, authority=Authority.ASSURANCE) == (
        RejectionCode.AUTHORITY_STAGE_MISMATCH,
        "stage integration carries diagnostic authority, not assurance",
    )
    assert _planned(activation=Activation.INACTIVE) == (
        RejectionCode.BACKEND_NOT_ACTIVATED,
        "backend reverify is inactive for claim claim-exit-code; "
        "a request binds a selected or required backend",
    )
    assert _planned(expected_result=Status.INCONCLUSIVE) == (
        RejectionCode.EXPECTED_RESULT_INVALID,
        "expected result INCONCLUSIVE is not VERIFIED or REFUTED",
    )
    assert _planned(backend="test-engineer") == (
        RejectionCode.BACKEND_IS_A_ROLE,
        "'test-engineer' names a role; a backend is never a role",
    )
    assert _planned(backend="klee") == (
        RejectionCode.BACKEND_UNKNOWN,
        "backend 'klee' is not in the catalog",
    )
    assert _planned(command_configuration=vs.configuration("fuzz")) == (
        RejectionCode.BACKEND_OPERATION_UNSUPPORTED,
        "backend reverify lists no operation 'fuzz'",
    )
    assert _planned(command_configuration=vs.configuration("propose-claims")) == (
        RejectionCode.GENERATIVE_BACKEND_OPERATION_DENIED,
        "reverify propose-claims proposes claims; verifying its own proposals is circular",
    )
    assert _planned(claim=SOURCE_CLAIM) == (
        RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE,
        "reverify applies to binary-level claims, not source",
    )


def test_a_plan_carries_the_spec_and_its_own_argv() -> None:
    p = vs.plan(backend="cbmc", command_configuration=vs.configuration("check-property"))
    assert p.request.request_id == ref_sha(vs.request_json_without_id(p.request))
    assert p.argv == (
        "cbmc",
        "check-property",
        f"--candidate={vs.CANDIDATE_DIGEST}",
        "--claim-id=claim-exit-code",
        "--claim-level=binary",
        "--claim=main returns 0",
        "--timeout=30",
        "--unwind=8",
        "--",
        "build/app.bin",
    )


def _sealed(
    plan: Any, output: Any, producer: Producer | None = None
) -> tuple[RejectionCode, str, str | None]:
    refused = vs.rejection(seal_verification(plan, output, producer or vs.tester()))
    return refused.code, refused.message, refused.backend_detail


def test_sealing_refuses_a_tampered_plan_with_its_reason() -> None:
    p = vs.plan()
    edited = attrs.evolve(p, request=attrs.evolve(p.request, backend="cbmc"))
    assert _sealed(edited, vs.output(p)) == (
        RejectionCode.PLAN_TAMPERED,
        "request_id does not recompute",
        None,
    )
    argv = attrs.evolve(p, argv=(*p.argv, "--extra"))
    assert _sealed(argv, vs.output(p)) == (
        RejectionCode.PLAN_TAMPERED,
        "argv is not the one planned for the request",
        None,
    )
    # A resealed request that planning would refuse is refused with planning's code.
    routed = attrs.evolve(p, request=vs.resealed_request(p.request, requested_by=Role.REVIEWER))
    assert _sealed(routed, vs.output(p))[:2] == (
        RejectionCode.REQUESTER_NOT_PERMITTED,
        "reviewer may not request a run at stage assurance",
    )


def test_sealing_refuses_the_wrong_producer_with_its_reason() -> None:
    p = vs.plan()
    out = vs.output(p)
    assert _sealed(p, out, Producer(Role.ORCHESTRATOR, "s")) == (
        RejectionCode.PRODUCER_ROLE_CANNOT_EXECUTE,
        "orchestrator never executes a backend",
        None,
    )
    assert _sealed(p, out, Producer(Role.IMPLEMENTER, "s")) == (
        RejectionCode.AUTHORITY_PRODUCER_MISMATCH,
        "the plan carries assurance authority but a run by implementer is diagnostic",
        None,
    )
    assert _sealed(p, out, vs.tester(vs.AUTHOR)) == (
        RejectionCode.ASSURANCE_NOT_INDEPENDENT,
        "session 'session-author' authored the candidate; assurance needs "
        "an independent session",
        None,
    )
    # A diagnostic run in the author's own session is sealed: only assurance needs
    # independence.
    d = vs.plan(Stage.IMPLEMENTATION)
    receipt = seal_verification(d, vs.output(d), Producer(Role.IMPLEMENTER, vs.AUTHOR))
    assert isinstance(receipt, VerificationReceipt)
    assert receipt.authority is Authority.DIAGNOSTIC


def _malformed_output(p: Any, output: Any) -> str:
    code, message, detail = _sealed(p, output)
    assert (code, detail) == (RejectionCode.BACKEND_OUTPUT_MALFORMED, None)
    return message


def test_sealing_refuses_malformed_output_with_its_reason() -> None:
    p = vs.plan()
    assert _malformed_output(p, ["verified"]) == "output is not a JSON object"
    assert _malformed_output(p, {**vs.output(p), "score": 0.5}).startswith(
        "output is outside canonical JSON: "
    )
    out = vs.output(p, extra="x", zzz="y")
    del out["detail"], out["claim_id"]
    assert _malformed_output(p, out) == (
        "output keys differ: missing ['claim_id', 'detail'], unexpected ['extra', 'zzz']"
    )
    assert _malformed_output(p, vs.output(p, detail=None, verdict=1)) == (
        "output field detail is not a string"
    )
    # ``evidence`` is any JSON; the others are strings.
    anything = seal_verification(p, vs.output(p, evidence=None), vs.tester())
    assert isinstance(anything, VerificationReceipt)
    for version in ("", "reverify\x002", "\x00"):
        assert _malformed_output(p, vs.output(p, backend_version=version)) == (
            "output field backend_version is empty or contains NUL"
        )
    assert _malformed_output(p, vs.output(p, verdict="proved")) == (
        "'proved' is not a valid BackendVerdict"
    )
    assert _malformed_output(p, vs.output(p, evidence_tier="guessed")) == (
        "'guessed' is not a valid EvidenceTier"
    )


def test_sealing_refuses_output_about_something_else() -> None:
    p = vs.plan()
    for key, value, want in (
        ("backend", "cbmc", "reverify"),
        ("candidate", D, vs.CANDIDATE_DIGEST),
        ("claim_id", "claim-other", "claim-exit-code"),
    ):
        assert _sealed(p, vs.output(p, **{key: value})) == (
            RejectionCode.BACKEND_OUTPUT_MISMATCH,
            f"output {key} {value!r} is not the plan's {want!r}",
            None,
        )


def test_a_malformed_claim_carries_the_backends_detail() -> None:
    p = vs.plan()
    out = vs.output(p, verdict="claim_malformed", detail="line 1: unexpected token")
    assert _sealed(p, out) == (
        RejectionCode.CLAIM_MALFORMED,
        "reverify could not parse claim claim-exit-code",
        "line 1: unexpected token",
    )


def test_a_sealed_receipt_binds_the_plan_and_the_whole_output() -> None:
    p = vs.plan()
    out = vs.output(p, backend_version="reverify 9", evidence_tier="derived")
    receipt = seal_verification(p, out, vs.tester())
    assert isinstance(receipt, VerificationReceipt)
    assert receipt.receipt_id == ref_sha(vs.receipt_json_without_id(receipt))
    assert receipt.evidence_digest == ref_sha(out)
    assert (receipt.request_id, receipt.backend_version, receipt.status) == (
        p.request.request_id,
        "reverify 9",
        Status.INCONCLUSIVE,
    )
    assert receipt.command_configuration is p.request.command_configuration


def test_status_for_a_malformed_claim_is_refused() -> None:
    # A receipt cannot even be built around a claim_malformed verdict.
    receipt = vs.seal(vs.plan())
    with pytest.raises(ValueError) as raised:
        attrs.evolve(receipt, backend_verdict=BackendVerdict.CLAIM_MALFORMED)
    assert str(raised.value) == "a malformed claim is rejected, never sealed"


PATTERN = "must match [a-z][a-z0-9-]*"
DIGEST = "digest must be a lowercase hex SHA-256 digest"


# --- records: what no caller may build --------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Setting("Timeout", "1"), ValueError, f"setting name {'Timeout'!r} {PATTERN}"),
        (lambda: Setting("1st", "1"), ValueError, f"setting name {'1st'!r} {PATTERN}"),
        (lambda: Setting("time_out", "1"), ValueError, f"setting name {'time_out'!r} {PATTERN}"),
        (lambda: Setting("", "1"), ValueError, "name must not be empty"),
        (lambda: Setting("t", "a\x00b"), ValueError, "value must not contain NUL"),
        (lambda: Setting(7, "1"), TypeError, "name must be str, got int"),  # type: ignore[arg-type]
        (lambda: Setting("t", "\ud800"), ValueError, "value contains a lone surrogate"),
        (lambda: Candidate("A" * 64, "s"), ValueError, DIGEST),
        (lambda: Candidate("a" * 63, "s"), ValueError, DIGEST),
        (
            lambda: CommandConfiguration("op", [Setting("a", "1")], ()),  # type: ignore[arg-type]
            TypeError,
            "settings must be a tuple",
        ),
        (
            lambda: CommandConfiguration("op", (("a", "1"),), ()),  # type: ignore[arg-type]
            TypeError,
            "settings must hold Setting records",
        ),
        (
            lambda: CommandConfiguration("op", (Setting("b", "1"), Setting("a", "1")), ()),
            ValueError,
            "setting names must be unique and sorted",
        ),
        (
            lambda: CommandConfiguration("op", (Setting("a", "1"), Setting("a", "2")), ()),
            ValueError,
            "setting names must be unique and sorted",
        ),
        (
            lambda: CommandConfiguration("verify-claim", (), ["x"]),  # type: ignore[arg-type]
            TypeError,
            "arguments must be a tuple",
        ),
        (
            lambda: CommandConfiguration("verify-claim", (), ("x", "\x00")),
            ValueError,
            "arguments[1] must not contain NUL",
        ),
        (
            lambda: attrs.evolve(vs.plan().request, activation=Activation.INACTIVE),
            ValueError,
            "a request's backend is selected or required, never inactive",
        ),
        (
            lambda: attrs.evolve(vs.plan().request, expected_result=Status.ERROR),
            ValueError,
            "expected_result is VERIFIED or REFUTED",
        ),
        (lambda: attrs.evolve(vs.plan(), argv=()), ValueError, "argv needs a program"),
        (lambda: attrs.evolve(vs.plan(), argv=("", "v")), ValueError, "argv needs a program"),
        (lambda: attrs.evolve(vs.plan(), argv=("a\x00",)), ValueError, "argv[0] must not contain NUL"),  # noqa: E501
        (
            lambda: attrs.evolve(vs.plan(), argv=["reverify"]),  # type: ignore[arg-type]
            TypeError,
            "argv must be a tuple",
        ),
    ],
)
def test_records_refuse_what_no_caller_may_build(
    build: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        build()
    assert str(raised.value) == message


def test_records_accept_the_edges_their_rules_allow() -> None:
    assert Setting("a-1", "x").name == "a-1"
    assert CommandConfiguration("op", (), ("", "x")).arguments == ("", "x")
    # Only the program must be non-empty; later argv elements may be empty.
    assert attrs.evolve(vs.plan(), argv=("reverify", "")).argv == ("reverify", "")
