"""ADR-0229 §16 (every row) and §17 (every item) against the replay adapter.

Each test builds a valid chain with the toy organ (tests/replay_fixtures.py),
breaks exactly one thing, and checks the disposition *and* the reason code of
the first failing check. Identities are recomputed by tests/reference.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from kernel.frames import SourceSpan, frame_digest
from kernel.replay import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ContractClosed,
    NoProofObligationsApplicable,
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofsReplayed,
    ProofStatus,
    ReasonCode,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayMisuseError,
    ReplayRequest,
    Validated,
    dispose,
    replay_attempt,
    replay_contract,
    replay_proofs,
    seal_proof_outcome,
    validate,
)
from kernel.serde import dumps
from kernel.upstream import (
    SearchRunInput,
    build_chain,
    build_reconstruction,
    residuals_for,
    seal_assessment,
    seal_budget,
    seal_gate,
    seal_run,
)
from tests import reference as ref
from tests.replay_fixtures import (
    CLOSING,
    CONTRACT_REFUSING,
    ORIGINAL,
    PROOF_REFUSING,
    PROOF_UNAVAILABLE,
    REFS,
    TOY,
    CallLog,
    candidate,
    request_for,
    toy_assessment,
    toy_chain,
    toy_manifest,
)

D = ReplayDisposition
RC = ReasonCode


def reseal_input(request: ReplayRequest, **changes: Any) -> ReplayRequest:
    """Change input fields and recompute input_digest with the reference code."""
    changed = attrs.evolve(request.replay_input, **changes)
    return attrs.evolve(
        request, replay_input=attrs.evolve(changed, input_digest=ref.replay_input_digest(changed))
    )


def check_refusal(
    outcome: ReplayAdapterOutcome, disposition: ReplayDisposition, code: ReasonCode,
    *, identities: bool,
) -> ReplayAdapterRefusal:
    assert isinstance(outcome, ReplayAdapterRefusal), outcome
    assert outcome.replay_disposition is disposition
    assert outcome.reason_codes == (code.value,)
    assert outcome.replay_refusal_id == ref.refusal_id(outcome)
    assert outcome.replay_policy_version == CONTRACT_PROOF_REPLAY_POLICY_VERSION
    fields = (outcome.input_digest, outcome.run_id, outcome.attempt_id, outcome.candidate_digest)
    assert all(f is not None for f in fields) if identities else all(f is None for f in fields)
    return outcome


def check_result(outcome: ReplayAdapterOutcome, disposition: ReplayDisposition
                 ) -> ReplayAdapterResult:
    assert isinstance(outcome, ReplayAdapterResult), outcome
    assert outcome.replay_disposition is disposition
    assert outcome.replay_result_id == ref.result_id(outcome)
    return outcome


def run(request: object, log: CallLog | None = None, **manifest: Any) -> ReplayAdapterOutcome:
    log = log if log is not None else CallLog()
    return replay_attempt(request, toy_manifest(log, **manifest))


def valid_request(*candidates: Any, index: int = 0) -> ReplayRequest:
    return request_for(toy_chain(*candidates), toy_manifest(CallLog()), index)


# --- §16: malformed replay input --------------------------------------------------


@pytest.mark.parametrize("garbage", [None, "request", 42, {"replay_input": {}}, CLOSING])
def test_a_non_request_is_refused_as_invalid_input_not_raised(garbage: object) -> None:
    log = CallLog()
    check_refusal(run(garbage, log), D.INVALID_REPLAY_INPUT, RC.REQUEST_NOT_A_REPLAY_REQUEST,
                  identities=False)
    assert log.calls == []


def test_a_request_field_of_the_wrong_type_is_invalid_input() -> None:
    request = attrs.evolve(valid_request(), attempt="attempt")  # type: ignore[arg-type]
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.REQUEST_FIELD_WRONG_TYPE,
                  identities=False)
    request = attrs.evolve(valid_request(), residuals=["r"])  # type: ignore[arg-type]
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.REQUEST_FIELD_WRONG_TYPE,
                  identities=False)


def test_a_record_altered_behind_attrs_back_is_invalid_input() -> None:
    request = valid_request()
    object.__setattr__(request.attempt, "attempt_index", -1)
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.RECORD_STRUCTURE_INVALID,
                  identities=False)


def test_a_lone_surrogate_in_a_record_is_invalid_input_not_a_crash() -> None:
    request = valid_request()
    text = request.problem_frame.source_text + "\ud800"  # spans stay inside the text
    bad_frame = attrs.evolve(request.problem_frame, source_text=text)
    check_refusal(run(attrs.evolve(request, problem_frame=bad_frame)), D.INVALID_REPLAY_INPUT,
                  RC.RECORD_NOT_CANONICAL, identities=False)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda sv: tuple(reversed(sv)),
        lambda sv: (*sv, sv[0]),
        lambda sv: (sv[0], sv[0], *sv[1:]),
    ],
    ids=["reordered", "duplicated-at-end", "duplicated"],
)
def test_schema_versions_must_be_unique_and_ascending(mutate: Any) -> None:
    request = valid_request()
    request = reseal_input(request, schema_versions=mutate(request.replay_input.schema_versions))
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.SCHEMA_VERSIONS_NOT_CANONICAL,
                  identities=False)


def test_a_missing_schema_version_is_invalid_input() -> None:
    request = valid_request()
    request = reseal_input(request, schema_versions=request.replay_input.schema_versions[1:])
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.SCHEMA_VERSION_MISSING,
                  identities=False)


# --- §16: unsupported policy and schema --------------------------------------------


def test_an_unsupported_replay_policy_is_refused_before_any_authority() -> None:
    log = CallLog()
    request = reseal_input(valid_request(), replay_policy_version="contract_proof_replay.v2")
    check_refusal(run(request, log), D.UNSUPPORTED_REPLAY_POLICY, RC.REPLAY_POLICY_UNSUPPORTED,
                  identities=False)
    assert log.calls == []


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"gate_policy_version": "search_gate.v9"}, RC.GATE_POLICY_UNSUPPORTED),
        ({"budget_policy_version": "compute_budget.v9"}, RC.BUDGET_POLICY_UNSUPPORTED),
        ({"run_policy_version": "geometric_search_run.v9"}, RC.RUN_POLICY_UNSUPPORTED),
    ],
)
def test_unsupported_upstream_policies_are_refused(kwargs: dict[str, Any], code: ReasonCode
                                                   ) -> None:
    chain = build_chain(ORIGINAL, toy_assessment(ORIGINAL), [_draft(CLOSING)],
                        operator_set_id="toy.ops", operator_set_version="v1", **kwargs)
    request = request_for(chain, toy_manifest(CallLog()))
    check_refusal(run(request), D.UNSUPPORTED_REPLAY_POLICY, code, identities=False)


def _draft(frame: Any) -> Any:
    from kernel.upstream import CandidateDraft

    return CandidateDraft(frame, "op.rewrite", "v1")


@pytest.mark.parametrize(
    ("pair", "code"),
    [
        (("candidate_attempt", "v2"), RC.SCHEMA_VERSION_UNSUPPORTED),
        (("zz_unknown_record", "v1"), RC.SCHEMA_UNKNOWN),
    ],
)
def test_an_unsupported_schema_version_is_refused(pair: tuple[str, str], code: ReasonCode
                                                  ) -> None:
    request = valid_request()
    versions = dict(request.replay_input.schema_versions)
    versions[pair[0]] = pair[1]
    request = reseal_input(request, schema_versions=tuple(sorted(versions.items())))
    check_refusal(run(request), D.UNSUPPORTED_SCHEMA_VERSION, code, identities=False)


# --- §16: identity chain -------------------------------------------------------------


def test_attempt_index_out_of_range_is_an_identity_mismatch() -> None:
    request = reseal_input(valid_request(), attempt_index=5)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.ATTEMPT_INDEX_OUT_OF_RANGE,
                  identities=False)


def test_an_attempt_claimed_at_another_position_is_an_identity_mismatch() -> None:
    request = valid_request(CLOSING, CONTRACT_REFUSING, index=0)
    request = reseal_input(request, attempt_index=1)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.ATTEMPT_NOT_AT_INDEX,
                  identities=False)


def test_a_run_whose_id_does_not_reproduce_is_an_identity_mismatch() -> None:
    request = valid_request()
    run_value = attrs.evolve(request.run, run_policy_version="geometric_search_run.v1",
                             run_id="f" * 64)
    check_refusal(run(attrs.evolve(request, run=run_value)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.RUN_ID_MISMATCH, identities=False)


def test_an_input_naming_another_run_is_an_identity_mismatch() -> None:
    other = valid_request(PROOF_REFUSING)
    request = reseal_input(valid_request(), run_id=other.run.run_id)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.RUN_ID_MISMATCH,
                  identities=False)


def test_an_attempt_from_another_run_does_not_belong() -> None:
    # The attempt is copied with its own (valid) id from a different run of
    # the same candidate; the run being replayed is then resealed around it.
    request = valid_request()
    other = valid_request(CLOSING, CLOSING)
    foreign = other.attempt
    check_refusal(run(attrs.evolve(request, attempt=foreign)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.ATTEMPT_NOT_AT_INDEX, identities=False)


def test_a_forged_sibling_attempt_in_the_run_is_an_identity_mismatch() -> None:
    # Found by the deep stateful run: replaying attempt 0 of a run whose
    # attempt 1 carries a forged id must not yield a result.
    request = valid_request(CLOSING, CLOSING, index=0)
    siblings = request.run.candidate_attempts
    forged = attrs.evolve(siblings[1], attempt_id="e" * 64)
    run_value = attrs.evolve(request.run, candidate_attempts=(siblings[0], forged))
    assert ref.run_id(run_value) == run_value.run_id  # the run id alone cannot see it
    check_refusal(run(attrs.evolve(request, run=run_value)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.RUN_ATTEMPTS_INCONSISTENT, identities=False)


def test_an_input_naming_another_attempt_id_is_an_identity_mismatch() -> None:
    request = valid_request(CLOSING, CLOSING, index=0)
    other_id = request.run.candidate_attempts[1].attempt_id
    check_refusal(run(reseal_input(request, attempt_id=other_id)),
                  D.CANDIDATE_IDENTITY_MISMATCH, RC.ATTEMPT_ID_MISMATCH, identities=False)


def test_a_replayed_attempt_whose_id_does_not_reproduce_is_an_identity_mismatch() -> None:
    request = valid_request()
    forged = attrs.evolve(request.attempt, attempt_id="e" * 64)
    run_value = attrs.evolve(request.run, candidate_attempts=(forged,))
    request = attrs.evolve(request, attempt=forged, run=run_value)
    request = reseal_input(request, attempt_id="e" * 64)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.RUN_ATTEMPTS_INCONSISTENT,
                  identities=False)


def test_a_candidate_digest_mismatch_is_refused_without_calling_authorities() -> None:
    log = CallLog()
    request = valid_request()
    rec = attrs.evolve(request.reconstruction, candidate_digest="d" * 64)
    check_refusal(run(attrs.evolve(request, reconstruction=rec), log),
                  D.CANDIDATE_IDENTITY_MISMATCH, RC.CANDIDATE_DIGEST_MISMATCH, identities=False)
    assert log.calls == []


def test_a_swapped_candidate_frame_is_a_candidate_digest_mismatch() -> None:
    request = valid_request()
    other = PROOF_REFUSING
    rec = attrs.evolve(
        request.reconstruction,
        candidate_problem_frame=other,
        candidate_problem_frame_digest=ref.frame_digest(other),
        candidate_bindings=other.bindings,
    )
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.CANDIDATE_DIGEST_MISMATCH, identities=False)


def test_a_reconstruction_digest_mismatch_is_an_identity_mismatch() -> None:
    request = valid_request()
    rec = attrs.evolve(request.reconstruction, candidate_reconstruction_digest="c" * 64)
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.RECONSTRUCTION_DIGEST_MISMATCH, identities=False)


def test_a_frame_digest_that_does_not_reproduce_is_an_identity_mismatch() -> None:
    request = valid_request()
    rec = attrs.evolve(request.reconstruction, candidate_problem_frame_digest="b" * 64)
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.CANDIDATE_FRAME_DIGEST_MISMATCH, identities=False)


def test_a_candidate_that_alters_the_source_text_is_an_identity_mismatch() -> None:
    altered = attrs.evolve(CLOSING, source_text=CLOSING.source_text + " And 9 plums.")
    request = valid_request(altered)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.CANDIDATE_SOURCE_TEXT_ALTERED, identities=False)


def test_a_reconstruction_bound_to_another_original_frame_is_refused() -> None:
    request = valid_request()
    rec = attrs.evolve(request.reconstruction, original_problem_frame_digest="a" * 64)
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.ORIGINAL_FRAME_MISMATCH, identities=False)


def _with_spans(request: ReplayRequest, spans: tuple[SourceSpan, ...]) -> ReplayRequest:
    return attrs.evolve(request, reconstruction=attrs.evolve(request.reconstruction,
                                                             evidence_spans=spans))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: (s[1], s[0], *s[2:]),                # reorder
        lambda s: tuple(dict.fromkeys(s)),             # deduplicate
        lambda s: (*s, SourceSpan(0, 3)),              # synthesize
        lambda s: s[:-1],                              # drop
        lambda s: (SourceSpan(0, 1), *s[1:]),          # widen/replace
    ],
    ids=["reorder", "deduplicate", "synthesize", "drop", "replace"],
)
def test_evidence_span_tampering_is_an_identity_mismatch(mutate: Any) -> None:
    request = valid_request()
    spans = request.reconstruction.evidence_spans
    assert len(spans) == 3 and spans[0] == spans[2]  # the fixture carries a duplicate
    assert mutate(spans) != spans
    outcome = run(_with_spans(request, mutate(spans)))
    # The spans are part of the candidate content, so the recomputed
    # candidate digest already disagrees: the candidate is not the one the
    # attempt names.
    check_refusal(outcome, D.CANDIDATE_IDENTITY_MISMATCH, RC.CANDIDATE_DIGEST_MISMATCH,
                  identities=False)


def test_spans_resealed_into_the_envelope_still_differ_from_the_frame() -> None:
    # A forger who also recomputes every digest over reordered spans is
    # caught by the span check itself: the frame's own spans disagree.
    chain = toy_chain(CLOSING)
    request = request_for(chain, toy_manifest(CallLog()))
    rec = request.reconstruction
    spans = (rec.evidence_spans[1], rec.evidence_spans[0], *rec.evidence_spans[2:])
    forged = attrs.evolve(rec, evidence_spans=spans)
    forged = attrs.evolve(forged, candidate_digest=ref.candidate_digest(forged))
    forged = attrs.evolve(forged,
                          candidate_reconstruction_digest=ref.reconstruction_digest(forged))
    attempt = attrs.evolve(request.attempt, candidate_digest=forged.candidate_digest)
    runv = attrs.evolve(request.run, candidate_attempts=(attempt,))
    runv = attrs.evolve(runv, run_id=ref.run_id(runv))
    attempt = attrs.evolve(attempt, run_id=runv.run_id)
    attempt = attrs.evolve(attempt, attempt_id=ref.attempt_id(attempt))
    runv = attrs.evolve(runv, candidate_attempts=(attempt,))
    forged = attrs.evolve(forged, run_id=runv.run_id, attempt_id=attempt.attempt_id)
    forged = attrs.evolve(forged,
                          candidate_reconstruction_digest=ref.reconstruction_digest(forged))
    request = attrs.evolve(request, run=runv, attempt=attempt, reconstruction=forged)
    request = reseal_input(request, run_id=runv.run_id, attempt_id=attempt.attempt_id,
                           candidate_digest=forged.candidate_digest,
                           candidate_reconstruction_digest=forged.candidate_reconstruction_digest)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.EVIDENCE_SPANS_MISMATCH,
                  identities=False)


def test_duplicate_spans_are_preserved_in_the_result_and_its_identity() -> None:
    with_dup = candidate(spans=(SourceSpan(8, 9), SourceSpan(8, 9)))
    without = candidate(spans=(SourceSpan(8, 9),))
    a = check_result(run(valid_request(with_dup)), D.CONTRACT_AND_PROOF_CLOSED)
    b = check_result(run(valid_request(without)), D.CONTRACT_AND_PROOF_CLOSED)
    assert a.evidence_spans == (SourceSpan(8, 9), SourceSpan(8, 9))
    assert b.evidence_spans == (SourceSpan(8, 9),)
    assert a.replay_result_id != b.replay_result_id
    assert a.candidate_digest != b.candidate_digest


def test_operator_provenance_must_match_the_attempt() -> None:
    request = valid_request()
    rec = attrs.evolve(request.reconstruction, operator_version="v2")
    rec = attrs.evolve(rec, candidate_reconstruction_digest=ref.reconstruction_digest(rec))
    request = reseal_input(attrs.evolve(request, reconstruction=rec),
                           candidate_reconstruction_digest=rec.candidate_reconstruction_digest)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.OPERATOR_MISMATCH,
                  identities=False)


def test_operator_set_must_match_the_run() -> None:
    request = reseal_input(valid_request(), operator_set_version="v9")
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.OPERATOR_SET_MISMATCH,
                  identities=False)


@pytest.mark.parametrize(
    ("tamper", "code"),
    [
        (lambda r: attrs.evolve(r, problem_frame=attrs.evolve(r.problem_frame,
                                                              targets=())),
         RC.ORIGINAL_FRAME_MISMATCH),
        (lambda r: attrs.evolve(r, assessment=attrs.evolve(r.assessment, runnable=True)),
         RC.ASSESSMENT_ID_MISMATCH),
        (lambda r: attrs.evolve(r, residuals=r.residuals[:-1]), RC.RESIDUAL_CHAIN_MISMATCH),
        (lambda r: attrs.evolve(r, residuals=(*r.residuals, r.residuals[0])),
         RC.RESIDUAL_CHAIN_MISMATCH),
        (lambda r: attrs.evolve(r, gate=attrs.evolve(r.gate, search_permitted=False)),
         RC.GATE_CHAIN_MISMATCH),
        (lambda r: attrs.evolve(r, budget=attrs.evolve(r.budget, max_attempts=9)),
         RC.BUDGET_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, problem_frame_digest="a" * 64),
         RC.PROBLEM_FRAME_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, original_contract_assessment_id="a" * 64),
         RC.ASSESSMENT_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, residual_ids=()), RC.RESIDUAL_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, gate_decision_id="a" * 64), RC.GATE_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, budget_id="a" * 64), RC.BUDGET_CHAIN_MISMATCH),
        (lambda r: reseal_input(r, candidate_organ="other"), RC.CANDIDATE_ORGAN_MISMATCH),
        (lambda r: attrs.evolve(r, replay_input=attrs.evolve(r.replay_input,
                                                             input_digest="a" * 64)),
         RC.INPUT_DIGEST_MISMATCH),
    ],
)
def test_upstream_chain_tampering_is_an_identity_mismatch(tamper: Any, code: ReasonCode) -> None:
    log = CallLog()
    check_refusal(run(tamper(valid_request()), log), D.CANDIDATE_IDENTITY_MISMATCH, code,
                  identities=False)
    assert log.calls == []


def _chain_with_gate(permitted: bool) -> ReplayRequest:
    assessment = toy_assessment(ORIGINAL)
    residuals = residuals_for(assessment)
    gate = seal_gate(assessment, residuals, gate_policy_version="search_gate.v1",
                     search_permitted=permitted)
    budget = seal_budget(gate, budget_policy_version="compute_budget.v1", max_attempts=1)
    run_input = SearchRunInput(frame_digest(ORIGINAL), assessment.assessment_id,
                               tuple(r.residual_id for r in residuals), gate.gate_decision_id,
                               budget.budget_id, "toy.ops", "v1")
    honest = toy_chain(CLOSING)
    run_value = seal_run(run_input, [(honest.run.candidate_attempts[0].candidate_digest,
                                      "op.rewrite", "v1")],
                         run_policy_version="geometric_search_run.v1")
    rec = build_reconstruction(run_value, run_value.candidate_attempts[0], ORIGINAL, CLOSING)
    chain = attrs.evolve(honest, residuals=residuals, gate=gate, budget=budget, run=run_value,
                         reconstructions=(rec,))
    return request_for(chain, toy_manifest(CallLog()))


def test_a_run_under_a_gate_that_refused_search_is_refused() -> None:
    assert isinstance(run(_chain_with_gate(True)), ReplayAdapterResult)
    check_refusal(run(_chain_with_gate(False)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.GATE_DID_NOT_PERMIT_SEARCH, identities=False)


def test_a_run_over_its_budget_is_refused() -> None:
    chain = build_chain(ORIGINAL, toy_assessment(ORIGINAL), [_draft(CLOSING), _draft(CLOSING)],
                        operator_set_id="toy.ops", operator_set_version="v1", max_attempts=1)
    check_refusal(run(request_for(chain, toy_manifest(CallLog()))), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.RUN_EXCEEDS_BUDGET, identities=False)


def test_an_original_assessment_that_was_runnable_is_refused() -> None:
    closed_original = attrs.evolve(ORIGINAL, bindings=CLOSING.bindings)
    assessment = toy_assessment(closed_original)
    assert assessment.runnable
    chain = build_chain(closed_original, assessment, [_draft(CLOSING)],
                        operator_set_id="toy.ops", operator_set_version="v1")
    check_refusal(run(request_for(chain, toy_manifest(CallLog()))), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.ORIGINAL_ASSESSMENT_NOT_REFUSED, identities=False)


# --- §16: contract replay ------------------------------------------------------------


def test_an_organ_without_contract_authority_is_contract_replay_unavailable() -> None:
    chain = toy_chain(CLOSING, organ="unknown_organ")
    manifest = toy_manifest(CallLog())
    request = request_for(toy_chain(CLOSING), manifest)
    request = attrs.evolve(request, assessment=chain.assessment, residuals=chain.residuals,
                           gate=chain.gate, budget=chain.budget, run=chain.run,
                           attempt=chain.run.candidate_attempts[0],
                           reconstruction=chain.reconstructions[0])
    request = reseal_input(
        request, candidate_organ="unknown_organ", run_id=chain.run.run_id,
        attempt_id=chain.run.candidate_attempts[0].attempt_id,
        original_contract_assessment_id=chain.assessment.assessment_id,
        residual_ids=tuple(r.residual_id for r in chain.residuals),
        gate_decision_id=chain.gate.gate_decision_id, budget_id=chain.budget.budget_id,
        candidate_reconstruction_digest=chain.reconstructions[0].candidate_reconstruction_digest,
    )
    check_refusal(run(request), D.CONTRACT_REPLAY_UNAVAILABLE, RC.CONTRACT_AUTHORITY_MISSING,
                  identities=True)


def test_a_target_that_is_not_the_allowlisted_one_is_contract_replay_unavailable() -> None:
    log = CallLog()
    request = reseal_input(valid_request(), contract_replay_target="toy.contract@v0")
    check_refusal(run(request, log), D.CONTRACT_REPLAY_UNAVAILABLE,
                  RC.CONTRACT_TARGET_NOT_ALLOWLISTED, identities=True)
    assert log.calls == []


def _raising(*_: object) -> Any:
    raise RuntimeError("authority crashed")


@pytest.mark.parametrize(
    ("contract", "code"),
    [
        (_raising, RC.CONTRACT_AUTHORITY_RAISED),
        (lambda frame: None, RC.CONTRACT_OUTCOME_MALFORMED),
        (lambda frame: {"runnable": True}, RC.CONTRACT_OUTCOME_MALFORMED),
        (lambda frame: toy_assessment(frame, organ="other"), RC.CONTRACT_OUTCOME_WRONG_ORGAN),
        (lambda frame: toy_assessment(ORIGINAL), RC.CONTRACT_OUTCOME_NOT_BOUND),
        (lambda frame: attrs.evolve(toy_assessment(frame), assessment_id="9" * 64),
         RC.CONTRACT_OUTCOME_ID_INVALID),
        (lambda frame: seal_assessment(
            problem_frame_digest=ref.frame_digest(frame), candidate_organ=TOY, runnable=True,
            unresolved_hazards=("still_blocked",)),
         RC.CONTRACT_OUTCOME_INCONSISTENT),
    ],
    ids=["raises", "returns-none", "returns-dict", "wrong-organ", "other-frame", "forged-id",
         "runnable-with-blockers"],
)
def test_a_failing_contract_authority_is_adapter_refusal_not_a_verdict(
    contract: Any, code: ReasonCode
) -> None:
    log = CallLog()
    outcome = run(valid_request(), log, contract=contract)
    check_refusal(outcome, D.CONTRACT_REPLAY_UNAVAILABLE, code, identities=True)
    assert log.proof_calls() == []


def test_contract_refusal_yields_contract_refused_and_never_calls_proofs() -> None:
    log = CallLog()
    result = check_result(run(valid_request(CONTRACT_REFUSING), log), D.CONTRACT_REFUSED)
    assert log.calls == ["contract"]
    assert result.proof_replay_refs == ()
    assert result.reason_codes == ("hazard:blocked:x0",)
    assert result.contract_replay_assessment_id == ref.assessment_id(
        toy_assessment(CONTRACT_REFUSING))


def test_missing_bindings_and_hazards_are_kept_in_authority_order() -> None:
    frame = attrs.evolve(
        ORIGINAL,
        targets=(*ORIGINAL.targets, attrs.evolve(ORIGINAL.targets[0], name="zeta"),
                 attrs.evolve(ORIGINAL.targets[0], name="alpha")),
        bindings=(*ORIGINAL.bindings,
                  attrs.evolve(ORIGINAL.bindings[0], name="b2", unit="blocker"),
                  attrs.evolve(ORIGINAL.bindings[0], name="b1", unit="blocker")),
    )
    result = check_result(run(valid_request(frame)), D.CONTRACT_REFUSED)
    assert result.reason_codes == ("missing_binding:total", "missing_binding:zeta",
                                   "missing_binding:alpha", "hazard:blocked:b2",
                                   "hazard:blocked:b1")


# --- §16: proof replay -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("proof", "code"),
    [
        (_raising, RC.PROOF_AUTHORITY_RAISED),
        (lambda ctx: "closed", RC.PROOF_OUTCOME_MALFORMED),
        (lambda ctx: seal_proof_outcome(
            context=attrs.evolve(ctx, obligation_ref="toy.p2"), authority_id="toy.p1",
            authority_version="v1", status=ProofStatus.CLOSED), RC.PROOF_OUTCOME_NOT_BOUND),
        (lambda ctx: seal_proof_outcome(
            context=attrs.evolve(ctx, candidate_digest="0" * 64), authority_id="toy.p1",
            authority_version="v1", status=ProofStatus.CLOSED), RC.PROOF_OUTCOME_NOT_BOUND),
        (lambda ctx: seal_proof_outcome(
            context=ctx, authority_id="toy.p2", authority_version="v1",
            status=ProofStatus.CLOSED), RC.PROOF_OUTCOME_WRONG_AUTHORITY),
        (lambda ctx: attrs.evolve(seal_proof_outcome(
            context=ctx, authority_id="toy.p1", authority_version="v1",
            status=ProofStatus.REFUSED), status=ProofStatus.CLOSED),
         RC.PROOF_OUTCOME_ID_INVALID),
    ],
    ids=["raises", "returns-str", "other-obligation", "other-candidate", "other-authority",
         "forged-status"],
)
def test_a_failing_proof_authority_is_proof_replay_unavailable(proof: Any, code: ReasonCode
                                                               ) -> None:
    outcome = run(valid_request(), proofs={"toy.p1": proof})
    check_refusal(outcome, D.PROOF_REPLAY_UNAVAILABLE, code, identities=True)


def test_a_later_proof_failure_discards_earlier_outcomes_no_partial_result() -> None:
    log = CallLog()
    outcome = run(valid_request(), log, proofs={"toy.p2": _raising})
    check_refusal(outcome, D.PROOF_REPLAY_UNAVAILABLE, RC.PROOF_AUTHORITY_RAISED,
                  identities=True)
    assert log.proof_calls() == ["proof:toy.p1"]


@pytest.mark.parametrize("frame", [PROOF_REFUSING, PROOF_UNAVAILABLE],
                         ids=["refused", "unavailable"])
def test_a_typed_refused_or_unavailable_obligation_is_contract_closed_but_proof_refused(
    frame: Any,
) -> None:
    log = CallLog()
    result = check_result(run(valid_request(frame), log), D.CONTRACT_CLOSED_BUT_PROOF_REFUSED)
    assert log.proof_calls() == ["proof:toy.p1", "proof:toy.p2"]  # every obligation, in order
    assert len(result.proof_replay_refs) == len(REFS)


def test_every_obligation_closing_is_contract_and_proof_closed_with_one_ref_each() -> None:
    log = CallLog()
    request = valid_request()
    result = check_result(run(request, log), D.CONTRACT_AND_PROOF_CLOSED)
    assert result.proof_obligation_refs == REFS
    manifest = toy_manifest(CallLog())
    expected = []
    for ref_name in REFS:
        ctx = ProofContext(ref_name, request.replay_input.candidate_digest, CLOSING,
                           toy_assessment(CLOSING))
        expected.append(ref.proof_outcome_id(manifest.proof_authorities[ref_name].prove(ctx)))
    assert result.proof_replay_refs == tuple(expected)
    assert result.reason_codes == ()
    assert result.evidence_spans == request.reconstruction.evidence_spans


def test_an_empty_obligation_list_closes_only_under_an_explicit_declaration() -> None:
    declared = NoProofObligationsApplicable("toy.no_proof.v1")
    manifest = toy_manifest(CallLog(), policy=declared)
    request = request_for(toy_chain(CLOSING), manifest)
    assert request.replay_input.proof_obligation_refs == ()
    result = check_result(replay_attempt(request, manifest), D.CONTRACT_AND_PROOF_CLOSED)
    assert result.reason_codes == ("no_proof_obligation_applicable:toy.no_proof.v1",)
    # Without the declaration, the same empty list is not the policy.
    check_refusal(replay_attempt(request, toy_manifest(CallLog())),
                  D.UNSUPPORTED_PROOF_OBLIGATION, RC.PROOF_OBLIGATIONS_NOT_POLICY,
                  identities=True)
    # And with no policy at all, nothing is assumed.
    check_refusal(replay_attempt(request, toy_manifest(CallLog(), include_policy=False)),
                  D.UNSUPPORTED_PROOF_OBLIGATION, RC.PROOF_POLICY_MISSING, identities=True)


@pytest.mark.parametrize(
    ("refs", "code"),
    [
        (("toy.p1", "toy.p2", "toy.p3"), RC.PROOF_OBLIGATION_UNKNOWN),
        (("toy.p2", "toy.p1"), RC.PROOF_OBLIGATIONS_NOT_POLICY),
        (("toy.p1",), RC.PROOF_OBLIGATIONS_NOT_POLICY),
        (("toy.p1", "toy.p1", "toy.p2"), RC.PROOF_OBLIGATIONS_NOT_POLICY),
        ((), RC.PROOF_OBLIGATIONS_NOT_POLICY),
    ],
    ids=["unknown", "reordered", "dropped", "duplicated", "emptied"],
)
def test_obligations_that_are_not_exactly_the_policy_are_unsupported(
    refs: tuple[str, ...], code: ReasonCode
) -> None:
    log = CallLog()
    request = reseal_input(valid_request(), proof_obligation_refs=refs)
    check_refusal(run(request, log), D.UNSUPPORTED_PROOF_OBLIGATION, code, identities=True)
    assert log.calls == []


# --- §17: outputs, identities, isolation ----------------------------------------------------


def test_ids_are_canonical_and_exclude_prose() -> None:
    request = valid_request()
    a = run(request)
    prose = attrs.evolve(request, assessment=attrs.evolve(request.assessment,
                                                          explanation="other words"))
    b = run(prose)
    assert isinstance(a, ReplayAdapterResult) and isinstance(b, ReplayAdapterResult)
    assert a.replay_result_id == b.replay_result_id == ref.result_id(a)
    assert dumps(attrs.evolve(a, explanation="")) == dumps(attrs.evolve(b, explanation=""))


def test_equal_inputs_give_byte_equal_outcomes_and_inputs_are_not_mutated() -> None:
    request = valid_request(CLOSING, CONTRACT_REFUSING, PROOF_REFUSING)
    before = dumps(request)
    first = dumps(run(request))
    assert dumps(run(request)) == first
    assert dumps(request) == before


def test_two_conflicting_closed_candidates_are_both_reported_and_none_selected() -> None:
    other = attrs.evolve(CLOSING, bindings=(*ORIGINAL.bindings,
                                            attrs.evolve(CLOSING.bindings[2], value=8)))
    manifest = toy_manifest(CallLog())
    chain = toy_chain(CLOSING, other)
    outcomes = [replay_attempt(request_for(chain, manifest, i), manifest) for i in (0, 1)]
    results = [check_result(o, D.CONTRACT_AND_PROOF_CLOSED) for o in outcomes]
    assert results[0].candidate_digest != results[1].candidate_digest
    assert results[0].replay_result_id != results[1].replay_result_id
    forbidden = {"answer", "final_answer", "selected_candidate", "rank", "score", "priority",
                 "confidence", "serving_allowed"}
    for result in results:
        assert forbidden.isdisjoint(attrs.fields_dict(type(result)))
    import kernel.replay as api

    assert not any(word in name.lower() for name in api.__all__
                   for word in ("select", "rank", "best", "answer", "vote", "winner"))


def test_transitions_called_with_the_wrong_state_are_misuse() -> None:
    request = valid_request()
    with pytest.raises(ReplayMisuseError):
        replay_contract(request)  # type: ignore[arg-type]
    with pytest.raises(ReplayMisuseError):
        replay_proofs(request)  # type: ignore[arg-type]
    with pytest.raises(ReplayMisuseError):
        dispose(request)  # type: ignore[arg-type]


def test_the_transitions_step_by_step_equal_the_driver() -> None:
    manifest = toy_manifest(CallLog())
    request = request_for(toy_chain(CLOSING), manifest)
    validated = validate(request, manifest)
    assert isinstance(validated, Validated)
    closed = replay_contract(validated)
    assert isinstance(closed, ContractClosed)
    proofs = replay_proofs(closed)
    assert isinstance(proofs, ProofsReplayed)
    assert dumps(dispose(proofs)) == dumps(replay_attempt(request, manifest))


def test_proof_policy_requires_unique_nonempty_refs() -> None:
    with pytest.raises(ValueError):
        ProofObligations(())
    with pytest.raises(ValueError):
        ProofObligations(("a", "a"))


def test_a_proof_outcome_carries_no_answer_field() -> None:
    assert set(attrs.fields_dict(ProofOutcome)) == {
        "proof_outcome_id", "obligation_ref", "authority_id", "authority_version",
        "candidate_digest", "status", "reason_codes", "evidence_spans", "explanation",
    }


def test_the_fixture_organ_is_what_the_tests_assume() -> None:
    assert TOY == "toy"
    assert not toy_assessment(ORIGINAL).runnable
    assert toy_assessment(CLOSING).runnable


# --- evidence gathered outside the pure core ----------------------------------------------


def _seen_by(log: CallLog) -> Callable[[ProofContext], ProofOutcome]:
    def prove(context: ProofContext) -> ProofOutcome:
        log.calls.append("proof:toy.p1:" + ",".join(e.document.decode() for e in context.evidence))
        return seal_proof_outcome(context=context, authority_id="toy.p1", authority_version="v1",
                                  status=ProofStatus.CLOSED)

    return prove


def test_evidence_reaches_only_its_own_obligation_in_order() -> None:
    log = CallLog()
    evidence = (ProofEvidence("toy.p1", "text/plain", b"a"),
                ProofEvidence("toy.p2", "text/plain", b"x"),
                ProofEvidence("toy.p1", "text/plain", b"b"))
    manifest = toy_manifest(log, proofs={"toy.p1": _seen_by(log)})
    outcome = replay_attempt(valid_request(), manifest, evidence)
    check_result(outcome, D.CONTRACT_AND_PROOF_CLOSED)
    assert "proof:toy.p1:a,b" in log.calls


@pytest.mark.parametrize(
    ("evidence", "code"),
    [
        (("not evidence",), RC.PROOF_EVIDENCE_MALFORMED),
        ("abc", RC.PROOF_EVIDENCE_MALFORMED),
        ((ProofEvidence("toy.p9", "text/plain", b"x"),), RC.PROOF_EVIDENCE_UNEXPECTED),
    ],
    ids=["wrong-item-type", "not-a-sequence", "undeclared-obligation"],
)
def test_malformed_or_stray_evidence_is_proof_replay_unavailable(evidence: Any,
                                                                 code: ReasonCode) -> None:
    log = CallLog()
    outcome = replay_attempt(valid_request(), toy_manifest(log), evidence)
    check_refusal(outcome, D.PROOF_REPLAY_UNAVAILABLE, code, identities=True)
    assert log.proof_calls() == []


def test_evidence_is_never_consulted_after_contract_refusal() -> None:
    log = CallLog()
    stray = (ProofEvidence("toy.p9", "text/plain", b"x"),)
    result = check_result(replay_attempt(valid_request(CONTRACT_REFUSING), toy_manifest(log),
                                         stray), D.CONTRACT_REFUSED)
    assert result.proof_replay_refs == ()
    assert log.proof_calls() == []


# --- the remaining identity checks, each reached on its own ----------------------------------


def _reseal_run(request: ReplayRequest, **changes: Any) -> ReplayRequest:
    run_value = attrs.evolve(request.run, **changes)
    run_value = attrs.evolve(run_value, run_id=ref.run_id(run_value))
    return reseal_input(attrs.evolve(request, run=run_value), run_id=run_value.run_id)


def test_a_run_whose_input_digest_does_not_reproduce_is_an_identity_mismatch() -> None:
    request = _reseal_run(valid_request(), input_digest="a" * 64)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.RUN_INPUT_DIGEST_MISMATCH,
                  identities=False)


def test_an_input_naming_another_run_policy_than_the_run_is_an_identity_mismatch() -> None:
    request = _reseal_run(valid_request(), run_policy_version="geometric_search_run.v0")
    assert request.replay_input.run_policy_version == "geometric_search_run.v1"
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.RUN_POLICY_VERSION_MISMATCH,
                  identities=False)


def _delta_request() -> ReplayRequest:
    from kernel.frames import FrameDelta

    delta = FrameDelta(ref.frame_digest(ORIGINAL), (), CLOSING.bindings[2:], (), (), (), (),
                       CLOSING.evidence_spans)
    request = valid_request(delta)
    assert request.reconstruction.frame_delta == delta
    return request


def test_a_delta_candidate_replays_like_the_frame_it_reconstructs() -> None:
    result = check_result(run(_delta_request()), D.CONTRACT_AND_PROOF_CLOSED)
    assert result.evidence_spans == CLOSING.evidence_spans


def test_a_frame_delta_digest_that_does_not_reproduce_is_an_identity_mismatch() -> None:
    request = _delta_request()
    rec = attrs.evolve(request.reconstruction, frame_delta_digest="b" * 64)
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.FRAME_DELTA_DIGEST_MISMATCH, identities=False)


def test_a_frame_delta_that_reconstructs_no_frame_is_an_identity_mismatch() -> None:
    request = _delta_request()
    assert request.reconstruction.frame_delta is not None
    ghost = attrs.evolve(request.reconstruction.frame_delta, removed_bindings=("ghost",))
    rec = attrs.evolve(request.reconstruction, frame_delta=ghost,
                       frame_delta_digest=ref.delta_digest(ghost))
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.FRAME_DELTA_DOES_NOT_RECONSTRUCT, identities=False)


def test_reconstruction_content_that_differs_from_its_frame_is_an_identity_mismatch() -> None:
    request = valid_request()
    rec = attrs.evolve(request.reconstruction,
                       candidate_bindings=request.reconstruction.candidate_bindings[:-1])
    check_refusal(run(attrs.evolve(request, reconstruction=rec)), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.CANDIDATE_CONTENT_MISMATCH, identities=False)


def test_a_resealed_reconstruction_for_another_attempt_is_an_identity_mismatch() -> None:
    request = valid_request(CLOSING, CLOSING, index=0)
    other = request.run.candidate_attempts[1]
    rec = attrs.evolve(request.reconstruction, attempt_id=other.attempt_id)
    rec = attrs.evolve(rec, candidate_reconstruction_digest=ref.reconstruction_digest(rec))
    request = reseal_input(attrs.evolve(request, reconstruction=rec),
                           candidate_reconstruction_digest=rec.candidate_reconstruction_digest)
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH,
                  RC.RECONSTRUCTION_NOT_FOR_ATTEMPT, identities=False)


def test_the_run_check_cache_never_serves_a_run_altered_after_a_replay() -> None:
    # Run-wide checks are memoised by the run's value; altering the very same
    # run object behind attrs' back must not reuse the earlier verdict.
    request = valid_request(CLOSING, CLOSING, index=0)
    check_result(run(request), D.CONTRACT_AND_PROOF_CLOSED)
    siblings = request.run.candidate_attempts
    object.__setattr__(request.run, "candidate_attempts",
                       (siblings[0], attrs.evolve(siblings[1], attempt_id="e" * 64)))
    check_refusal(run(request), D.CANDIDATE_IDENTITY_MISMATCH, RC.RUN_ATTEMPTS_INCONSISTENT,
                  identities=False)


def test_an_unhashable_run_is_examined_not_crashed() -> None:
    request = valid_request()
    object.__setattr__(request.run, "candidate_attempts", [request.attempt])
    check_refusal(run(request), D.INVALID_REPLAY_INPUT, RC.RECORD_STRUCTURE_INVALID,
                  identities=False)
