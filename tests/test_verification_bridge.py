"""The receipt bridge: plan_verification and seal_verification, one test per rule."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.serde import SerdeError, dumps, structure, unstructure
from kernel.verification import (
    BACKEND_CATALOG,
    Activation,
    Authority,
    BackendVerdict,
    Claim,
    ClaimLevel,
    CommandConfiguration,
    EvidenceTier,
    OperationKind,
    Producer,
    RejectionCode,
    Role,
    Setting,
    Stage,
    Status,
    VerificationPlan,
    VerificationReceipt,
    VerificationSpec,
    plan_verification,
    seal_verification,
)
from tests import verification_strategies as vs
from tests.support import reference as ref

# --- planning ------------------------------------------------------------------


def test_plan_returns_the_request_and_a_runnable_argv() -> None:
    p = vs.plan()
    r = p.request
    assert (r.candidate, r.claim, r.backend) == (vs.candidate(), vs.binary_claim(), "reverify")
    assert (r.stage, r.authority, r.expected_result, r.activation) == (
        Stage.ASSURANCE,
        Authority.ASSURANCE,
        Status.VERIFIED,
        Activation.REQUIRED,
    )
    assert r.command_configuration == vs.configuration()
    assert p.argv == (
        "reverify",
        "verify-claim",
        "--candidate=" + "c" * 64,
        "--claim-id=claim-exit-code",
        "--claim-level=binary",
        "--claim=main returns 0",
        "--timeout=30",
        "--unwind=8",
        "--",
        "build/app.bin",
    )


def test_request_id_is_sha256_of_every_other_field() -> None:
    r = vs.plan().request
    assert r.request_id == ref.sha(vs.request_json_without_id(r))
    as_json = json.loads(dumps(r))
    del as_json["request_id"]
    assert r.request_id == ref.sha(as_json)


def test_argv_is_built_without_a_shell() -> None:
    hostile = Claim(claim_id="c; rm -rf /", level=ClaimLevel.BINARY, statement="$(reboot) && x")
    p = vs.plan(claim=hostile)
    assert "--claim-id=c; rm -rf /" in p.argv
    assert "--claim=$(reboot) && x" in p.argv
    assert all(type(a) is str for a in p.argv)


@pytest.mark.parametrize(
    ("stage", "requester"),
    [
        (Stage.ASSURANCE, Role.ORCHESTRATOR),
        (Stage.ASSURANCE, Role.IMPLEMENTER),
        (Stage.ADJUDICATION, Role.TEST_ENGINEER),
        (Stage.IMPLEMENTATION, Role.INTEGRATION_ENGINEER),
        (Stage.INTEGRATION, Role.PLAN_INTEGRATOR),
        (Stage.POST_REPAIR_CLOSURE, Role.REVIEWER),
    ],
)
def test_requester_not_permitted_for_stage(stage: Stage, requester: Role) -> None:
    refused = vs.rejection(plan_verification(vs.spec(stage, requested_by=requester)))
    assert refused.code is RejectionCode.REQUESTER_NOT_PERMITTED


def test_reviewer_may_request_adjudication_at_assurance_authority() -> None:
    p = vs.plan(Stage.ADJUDICATION)
    assert p.request.requested_by is Role.REVIEWER
    assert p.request.authority is Authority.ASSURANCE


@pytest.mark.parametrize(
    ("stage", "authority"),
    [
        (Stage.IMPLEMENTATION, Authority.ASSURANCE),
        (Stage.INTEGRATION, Authority.ASSURANCE),
        (Stage.ASSURANCE, Authority.DIAGNOSTIC),
        (Stage.POST_REPAIR_CLOSURE, Authority.DIAGNOSTIC),
    ],
)
def test_authority_must_be_the_stages_own(stage: Stage, authority: Authority) -> None:
    refused = vs.rejection(plan_verification(vs.spec(stage, authority=authority)))
    assert refused.code is RejectionCode.AUTHORITY_STAGE_MISMATCH


def test_inactive_activation_is_not_planned() -> None:
    refused = vs.rejection(plan_verification(vs.spec(activation=Activation.INACTIVE)))
    assert refused.code is RejectionCode.BACKEND_NOT_ACTIVATED


@pytest.mark.parametrize("expected", [Status.INCONCLUSIVE, Status.ERROR])
def test_only_verified_or_refuted_can_be_expected(expected: Status) -> None:
    refused = vs.rejection(plan_verification(vs.spec(expected_result=expected)))
    assert refused.code is RejectionCode.EXPECTED_RESULT_INVALID


@pytest.mark.parametrize("backend", ["orchestrator", "Test Engineer", "plan-integrator"])
def test_a_backend_is_never_a_role(backend: str) -> None:
    refused = vs.rejection(plan_verification(vs.spec(backend=backend)))
    assert refused.code is RejectionCode.BACKEND_IS_A_ROLE


@pytest.mark.parametrize("backend", ["z3", "deterministic_verification", "Reverify", "default"])
def test_uncatalogued_backends_are_unknown_not_guessed(backend: str) -> None:
    refused = vs.rejection(plan_verification(vs.spec(backend=backend)))
    assert refused.code is RejectionCode.BACKEND_UNKNOWN


_ALL_OPERATIONS = [
    (entry.backend, op.name, op.kind)
    for entry in BACKEND_CATALOG.entries
    for op in entry.operations
]


def test_catalog_lists_generative_operations() -> None:
    assert {op for _, op, kind in _ALL_OPERATIONS if kind is OperationKind.GENERATIVE} == {
        "propose-claims",
        "infer-specification",
        "generate-properties",
    }


@pytest.mark.parametrize(("backend", "operation", "kind"), _ALL_OPERATIONS)
def test_generative_operations_are_denied_and_checks_planned(
    backend: str, operation: str, kind: OperationKind
) -> None:
    outcome = plan_verification(
        vs.spec(backend=backend, command_configuration=vs.configuration(operation))
    )
    match kind:
        case OperationKind.GENERATIVE:
            assert vs.rejection(outcome).code is RejectionCode.GENERATIVE_BACKEND_OPERATION_DENIED
        case OperationKind.CHECK:
            assert isinstance(outcome, VerificationPlan)


@pytest.mark.parametrize("operation", ["verify", "VERIFY-CLAIM", "check-property", "prove"])
def test_unlisted_operations_are_unsupported(operation: str) -> None:
    # check-property is catalogued for cbmc, not for reverify.
    outcome = plan_verification(vs.spec(command_configuration=vs.configuration(operation)))
    assert vs.rejection(outcome).code is RejectionCode.BACKEND_OPERATION_UNSUPPORTED


@pytest.mark.parametrize("level", [ClaimLevel.SOURCE, ClaimLevel.SYSTEM])
def test_reverify_is_planned_only_for_binary_claims(level: ClaimLevel) -> None:
    claim = Claim(claim_id="c", level=level, statement="s")
    refused = vs.rejection(plan_verification(vs.spec(claim=claim)))
    assert refused.code is RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE
    other = plan_verification(
        vs.spec(
            claim=claim, backend="cbmc", command_configuration=vs.configuration("check-property")
        )
    )
    assert isinstance(other, VerificationPlan)


def _spec_json() -> dict[str, Any]:
    doc = unstructure(vs.spec())
    assert isinstance(doc, dict)
    return dict(doc)


@pytest.mark.parametrize("field", [f.name for f in attrs.fields(VerificationSpec)])
def test_a_spec_missing_any_field_is_refused_not_defaulted(field: str) -> None:
    doc = _spec_json()
    assert structure(doc, VerificationSpec) == vs.spec()
    del doc[field]
    with pytest.raises(SerdeError) as info:
        structure(doc, VerificationSpec)
    assert info.value.code == "schema_mismatch"
    assert field in str(info.value)


@pytest.mark.parametrize("field", ["activation", "authority", "stage", "expected_result"])
def test_a_spec_with_a_null_binding_is_refused(field: str) -> None:
    doc = _spec_json()
    doc[field] = None
    with pytest.raises(SerdeError):
        structure(doc, VerificationSpec)


def test_settings_must_be_sorted_and_unique() -> None:
    with pytest.raises(ValueError):
        CommandConfiguration(
            operation="verify-claim",
            settings=(Setting("unwind", "8"), Setting("timeout", "30")),
            arguments=(),
        )
    with pytest.raises(ValueError):
        Setting("Bad Name", "x")


def test_nul_bytes_cannot_reach_an_argv() -> None:
    with pytest.raises(ValueError):
        Claim(claim_id="c", level=ClaimLevel.BINARY, statement="a\x00b")


# --- sealing ---------------------------------------------------------------------


def test_seal_builds_the_receipt_from_the_plan_and_the_run() -> None:
    p = vs.plan()
    out = vs.output(p, backend_version="reverify 9.9.9-run")
    receipt = seal_verification(p, out, vs.tester())
    assert isinstance(receipt, VerificationReceipt)
    r = p.request
    assert receipt.request_id == r.request_id
    assert (receipt.candidate, receipt.claim, receipt.backend) == (r.candidate, r.claim, r.backend)
    assert receipt.backend_version == "reverify 9.9.9-run"  # read from the run
    assert receipt.authority is r.authority  # carried from the plan
    assert receipt.stage is r.stage
    assert receipt.command_configuration == r.command_configuration
    assert receipt.evidence_digest == ref.sha(out)
    assert receipt.status is Status.VERIFIED
    assert receipt.evidence_tier is EvidenceTier.OBSERVED
    assert receipt.backend_verdict is BackendVerdict.VERIFIED
    assert receipt.produced_by == vs.tester()
    assert receipt.receipt_id == ref.sha(vs.receipt_json_without_id(receipt))
    as_json = json.loads(dumps(receipt))
    del as_json["receipt_id"]
    assert receipt.receipt_id == ref.sha(as_json)


@pytest.mark.parametrize(
    ("verdict", "status"),
    [
        ("verified", Status.VERIFIED),
        ("refuted", Status.REFUTED),
        ("unknown", Status.INCONCLUSIVE),
        ("error", Status.ERROR),
    ],
)
def test_observed_verdicts_map_to_statuses(verdict: str, status: Status) -> None:
    assert vs.seal(vs.plan(), verdict=verdict).status is status


@pytest.mark.parametrize("verdict", ["verified", "refuted", "unknown", "error"])
def test_derived_evidence_seals_inconclusive_and_keeps_the_raw_verdict(verdict: str) -> None:
    receipt = vs.seal(vs.plan(), verdict=verdict, evidence_tier="derived")
    assert receipt.status is Status.INCONCLUSIVE
    assert receipt.evidence_tier is EvidenceTier.DERIVED
    assert receipt.backend_verdict.value == verdict


def test_a_receipt_cannot_claim_a_status_its_verdict_does_not_give() -> None:
    receipt = vs.seal(vs.plan(), evidence_tier="derived")
    with pytest.raises(ValueError):
        attrs.evolve(receipt, status=Status.VERIFIED)


def test_malformed_claim_is_a_rejection_with_backend_detail_and_no_receipt() -> None:
    p = vs.plan()
    out = vs.output(p, verdict="claim_malformed", detail="parse error at 1:7: unexpected '=='")
    refused = vs.rejection(seal_verification(p, out, vs.tester()))
    assert refused.code is RejectionCode.CLAIM_MALFORMED
    assert refused.backend_detail == "parse error at 1:7: unexpected '=='"


def test_tampered_request_id_is_refused() -> None:
    p = vs.plan()
    tampered = attrs.evolve(p, request=attrs.evolve(p.request, backend="cbmc"))
    refused = vs.rejection(seal_verification(tampered, vs.output(p), vs.tester()))
    assert refused.code is RejectionCode.PLAN_TAMPERED


def test_tampered_argv_is_refused() -> None:
    p = vs.plan()
    tampered = attrs.evolve(p, argv=(*p.argv, "--skip-proof"))
    refused = vs.rejection(seal_verification(tampered, vs.output(p), vs.tester()))
    assert refused.code is RejectionCode.PLAN_TAMPERED


def test_a_resealed_plan_still_passes_planning_rules_at_seal_time() -> None:
    p = vs.plan()
    request = vs.resealed_request(
        p.request, command_configuration=vs.configuration("propose-claims")
    )
    forged = VerificationPlan(request=request, argv=p.argv)
    refused = vs.rejection(seal_verification(forged, vs.output(p), vs.tester()))
    assert refused.code is RejectionCode.GENERATIVE_BACKEND_OPERATION_DENIED


@pytest.mark.parametrize(
    "role",
    [Role.ORCHESTRATOR, Role.REVIEWER, Role.PLANNING_TEST_ENGINEER, Role.PLAN_INTEGRATOR],
)
def test_non_executing_roles_cannot_produce_a_receipt(role: Role) -> None:
    p = vs.plan()
    refused = vs.rejection(seal_verification(p, vs.output(p), Producer(role, "s")))
    assert refused.code is RejectionCode.PRODUCER_ROLE_CANNOT_EXECUTE


@pytest.mark.parametrize(
    "role", [Role.IMPLEMENTER, Role.LIGHT_IMPLEMENTER, Role.INTEGRATION_ENGINEER]
)
def test_diagnostic_roles_cannot_produce_assurance(role: Role) -> None:
    p = vs.plan(Stage.ASSURANCE)
    refused = vs.rejection(seal_verification(p, vs.output(p), Producer(role, vs.TESTER)))
    assert refused.code is RejectionCode.AUTHORITY_PRODUCER_MISMATCH


def test_authority_is_never_downgraded_or_upgraded_by_the_producer() -> None:
    p = vs.plan(Stage.IMPLEMENTATION)
    refused = vs.rejection(seal_verification(p, vs.output(p), vs.tester()))
    assert refused.code is RejectionCode.AUTHORITY_PRODUCER_MISMATCH


@pytest.mark.parametrize(
    ("stage", "role"),
    [
        (Stage.IMPLEMENTATION, Role.IMPLEMENTER),
        (Stage.IMPLEMENTATION, Role.LIGHT_IMPLEMENTER),
        (Stage.INTEGRATION, Role.INTEGRATION_ENGINEER),
    ],
)
def test_implementation_and_integration_runs_seal_diagnostic(stage: Stage, role: Role) -> None:
    receipt = vs.seal(vs.plan(stage), Producer(role, vs.AUTHOR))
    assert receipt.authority is Authority.DIAGNOSTIC


def test_assurance_in_the_authors_session_is_refused() -> None:
    p = vs.plan()
    author_run = Producer(Role.TEST_ENGINEER, vs.AUTHOR)
    refused = vs.rejection(seal_verification(p, vs.output(p), author_run))
    assert refused.code is RejectionCode.ASSURANCE_NOT_INDEPENDENT


@pytest.mark.parametrize(
    "mangle",
    [
        lambda o: ["not", "an", "object"],
        lambda o: {k: v for k, v in o.items() if k != "backend_version"},
        lambda o: {**o, "extra": 1},
        lambda o: {**o, "backend_version": 2},
        lambda o: {**o, "backend_version": ""},
        lambda o: {**o, "verdict": "PASS"},
        lambda o: {**o, "evidence_tier": "recovered"},
        lambda o: {**o, "evidence": 1.5},
    ],
    ids=[
        "not-object",
        "missing",
        "extra",
        "non-str",
        "empty-version",
        "verdict",
        "tier",
        "float",
    ],
)
def test_malformed_backend_output_is_refused(mangle: Any) -> None:
    p = vs.plan()
    refused = vs.rejection(seal_verification(p, mangle(vs.output(p)), vs.tester()))
    assert refused.code is RejectionCode.BACKEND_OUTPUT_MALFORMED


@pytest.mark.parametrize(
    ("key", "value"),
    [("backend", "cbmc"), ("candidate", "d" * 64), ("claim_id", "another-claim")],
)
def test_output_of_another_run_is_refused(key: str, value: str) -> None:
    p = vs.plan()
    refused = vs.rejection(seal_verification(p, vs.output(p, **{key: value}), vs.tester()))
    assert refused.code is RejectionCode.BACKEND_OUTPUT_MISMATCH


# --- properties --------------------------------------------------------------------


@given(data=st.data(), spec=vs.plannable_specs())
def test_request_and_receipt_from_one_plan_share_command_configuration(
    data: st.DataObject, spec: VerificationSpec
) -> None:
    p = plan_verification(spec)
    assert isinstance(p, VerificationPlan)
    role = data.draw(vs.executor_for(spec.authority))
    session = data.draw(st.sampled_from(["session-tester", "session-other"]))
    if spec.authority is Authority.ASSURANCE and session == spec.candidate.author_session:
        session = session + "-independent"
    out = data.draw(vs.outputs_for(p))
    receipt = seal_verification(p, out, Producer(role, session))
    assert isinstance(receipt, VerificationReceipt)
    assert receipt.command_configuration == p.request.command_configuration
    assert ref.canonical(vs.config_json(receipt.command_configuration)) == ref.canonical(
        vs.config_json(p.request.command_configuration)
    )
    assert receipt.authority is p.request.authority
    assert receipt.evidence_digest == ref.sha(out)
    assert receipt.receipt_id == ref.sha(vs.receipt_json_without_id(receipt))
    assert p.request.request_id == ref.sha(vs.request_json_without_id(p.request))


@given(data=st.data(), spec=vs.plannable_specs())
def test_sealing_is_deterministic_to_the_byte(data: st.DataObject, spec: VerificationSpec) -> None:
    p = plan_verification(spec)
    assert isinstance(p, VerificationPlan)
    role = data.draw(vs.executor_for(spec.authority))
    out = data.draw(vs.outputs_for(p))
    producer = Producer(role, spec.candidate.author_session + "-runner")
    first = seal_verification(p, out, producer)
    # Same output, same plan: handed over again with keys in the reverse order.
    again = seal_verification(p, dict(reversed(list(out.items()))), producer)
    assert dumps(first) == dumps(again)
    assert plan_verification(spec) == p
    assert dumps(plan_verification(spec)) == dumps(p)
