"""What a replay refusal says, word for word, for each named guard (issue 12.6).

The replay adapter tests check each refusal's disposition and reason code;
mutation testing (``make mutate``, RELIABILITY.md) showed that the one-line
explanation an operator reads could be emptied, upper-cased or swapped for
another guard's without any test noticing. Each case here alters one record
through the public API (resealing with the test's own reference hasher where
the alteration must get past an earlier guard) and asserts the whole
explanation: ``disposition: reason_code: detail``. The refusal's id is
recomputed with ``tests/reference.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from kernel.frames import Binding, FrameDelta, SourceSpan
from kernel.identity import MAX_INT_DIGITS
from kernel.replay import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    AuthorityManifest,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayDisposition,
    ReplayMisuseError,
    ReplayRequest,
    RunFacts,
    dispose,
    examine_run,
    refuse_malformed_attempt,
    replay_attempt,
    replay_attempts,
    replay_bundle_attempts,
    replay_contract,
    replay_proofs,
    requests_from_bundle,
    seal_proof_outcome,
)
from kernel.upstream import (
    SearchChain,
    build_chain,
    build_reconstruction,
    seal_assessment,
    seal_budget,
    seal_gate,
    seal_run,
)
from tests.replay_fixtures import (
    CLOSING,
    CONTRACT_REFUSING,
    ORIGINAL,
    PROOF_REFUSING,
    CallLog,
    bundle_for,
    candidate,
    request_for,
    toy_assessment,
    toy_chain,
    toy_manifest,
)
from tests.support import reference as ref
from tests.test_replay_adapter import reseal_input, run, valid_request

D = ReplayDisposition
IDENTITY = D.CANDIDATE_IDENTITY_MISMATCH.value


def stated_index(request: object) -> int | None:
    """The attempt index a request states, if it states one a refusal can repeat."""
    replay_input = getattr(request, "replay_input", None)
    index = getattr(replay_input, "attempt_index", None)
    return index if type(index) is int and index >= 0 else None


def explanation(request: object) -> str:
    outcome = run(request)
    assert isinstance(outcome, ReplayAdapterRefusal), outcome
    # Even a refused attempt says which attempt it was, when the input says so.
    assert outcome.attempt_index == stated_index(request)
    assert outcome.replay_refusal_id == ref.refusal_id(outcome)
    assert outcome.replay_policy_version == CONTRACT_PROOF_REPLAY_POLICY_VERSION
    disposition, code, _ = outcome.explanation.split(": ", 2)
    # The explanation restates the structural fields it accompanies.
    assert (disposition, (code,)) == (outcome.replay_disposition.value, outcome.reason_codes)
    return outcome.explanation


def _upstream(**kwargs: Any) -> ReplayRequest:
    chain = build_chain(
        ORIGINAL,
        toy_assessment(ORIGINAL),
        [_draft(CLOSING)],
        operator_set_id="toy.ops",
        operator_set_version="v1",
        **kwargs,
    )
    return request_for(chain, toy_manifest(CallLog()))


def _draft(frame: Any) -> Any:
    from kernel.upstream import CandidateDraft

    return CandidateDraft(frame, "op.rewrite", "v1")


def _schema(name: str, version: str) -> Callable[[ReplayRequest], ReplayRequest]:
    def change(request: ReplayRequest) -> ReplayRequest:
        versions = dict(request.replay_input.schema_versions)
        versions[name] = version
        return reseal_input(request, schema_versions=tuple(sorted(versions.items())))

    return change


def _rec(**changes: Any) -> Callable[[ReplayRequest], ReplayRequest]:
    def change(request: ReplayRequest) -> ReplayRequest:
        return attrs.evolve(
            request, reconstruction=attrs.evolve(request.reconstruction, **changes)
        )

    return change


def _resealed_rec(**changes: Any) -> Callable[[ReplayRequest], ReplayRequest]:
    def change(request: ReplayRequest) -> ReplayRequest:
        rec = attrs.evolve(request.reconstruction, **changes)
        rec = attrs.evolve(rec, candidate_reconstruction_digest=ref.reconstruction_digest(rec))
        return reseal_input(
            attrs.evolve(request, reconstruction=rec),
            candidate_reconstruction_digest=rec.candidate_reconstruction_digest,
        )

    return change


def _forged_sibling(request: ReplayRequest) -> ReplayRequest:
    siblings = request.run.candidate_attempts
    forged = attrs.evolve(siblings[1], attempt_id="e" * 64)
    return attrs.evolve(
        request, run=attrs.evolve(request.run, candidate_attempts=(siblings[0], forged))
    )


def _gate_refusing_search() -> ReplayRequest:
    """A whole chain, sealed with the public sealers, whose gate did not permit search."""
    chain = toy_chain(CLOSING)
    gate = seal_gate(
        chain.assessment,
        chain.residuals,
        gate_policy_version=chain.gate.gate_policy_version,
        search_permitted=False,
    )
    budget = seal_budget(
        gate, budget_policy_version=chain.budget.budget_policy_version, max_attempts=1
    )
    run_input = attrs.evolve(
        chain.run.run_input, gate_decision_id=gate.gate_decision_id, budget_id=budget.budget_id
    )
    sealed = seal_run(
        run_input,
        [
            (a.candidate_digest, a.operator_id, a.operator_version)
            for a in chain.run.candidate_attempts
        ],
        run_policy_version=chain.run.run_policy_version,
    )
    assert ref.gate_decision_id(gate) == gate.gate_decision_id  # the chain is genuine
    assert ref.run_id(sealed) == sealed.run_id
    reconstructions = tuple(
        build_reconstruction(sealed, attempt, chain.problem_frame, CLOSING)
        for attempt in sealed.candidate_attempts
    )
    whole = SearchChain(
        chain.problem_frame, chain.assessment, chain.residuals, gate, budget, sealed,
        reconstructions,
    )
    return request_for(whole, toy_manifest(CallLog()))


def _runnable_original() -> ReplayRequest:
    """A whole chain for an original assessment that did not refuse (runnable)."""
    assessment = seal_assessment(
        problem_frame_digest=ref.frame_digest(ORIGINAL),
        candidate_organ="toy",
        runnable=True,
        missing_bindings=[],
        unresolved_hazards=[],
        evidence_spans=ORIGINAL.evidence_spans,
        explanation="runnable",
    )
    assert ref.assessment_id(assessment) == assessment.assessment_id
    return request_for(
        build_chain(
            ORIGINAL, assessment, [_draft(CLOSING)],
            operator_set_id="toy.ops", operator_set_version="v1",
        ),
        toy_manifest(CallLog()),
    )


def _spans_unlike_the_frame() -> ReplayRequest:
    """A chain sealed around a reconstruction whose spans are not its frame's."""
    chain = toy_chain(CLOSING)
    rec = chain.reconstructions[0]
    rec = attrs.evolve(rec, evidence_spans=rec.evidence_spans[:2])
    digest = ref.candidate_digest(rec)
    attempt = chain.run.candidate_attempts[0]
    sealed = seal_run(
        chain.run.run_input,
        [(digest, attempt.operator_id, attempt.operator_version)],
        run_policy_version=chain.run.run_policy_version,
    )
    rec = attrs.evolve(
        rec,
        candidate_digest=digest,
        run_id=sealed.run_id,
        attempt_id=sealed.candidate_attempts[0].attempt_id,
    )
    rec = attrs.evolve(rec, candidate_reconstruction_digest=ref.reconstruction_digest(rec))
    return request_for(
        attrs.evolve(chain, run=sealed, reconstructions=(rec,)), toy_manifest(CallLog())
    )


def _delta_request() -> ReplayRequest:
    """The closing candidate supplied as a delta of the original frame."""
    delta = FrameDelta(
        ref.frame_digest(ORIGINAL),
        (),
        (Binding("total", 7, "fruit", SourceSpan(0, 3)),),
        (),
        (),
        (),
        (),
        ORIGINAL.evidence_spans,
    )
    chain = build_chain(
        ORIGINAL,
        toy_assessment(ORIGINAL),
        [_draft(delta)],
        operator_set_id="toy.ops",
        operator_set_version="v1",
    )
    return request_for(chain, toy_manifest(CallLog()))


def _run_input_digest_forged(request: ReplayRequest) -> ReplayRequest:
    """The run resealed (its id recomputed) around an input_digest that is not its input's."""
    forged = attrs.evolve(request.run, input_digest="a" * 64)
    forged = attrs.evolve(forged, run_id=ref.run_id(forged))
    return reseal_input(attrs.evolve(request, run=forged), run_id=forged.run_id)


def _delta_not_applying(request: ReplayRequest) -> ReplayRequest:
    """A delta that removes a binding the original does not have, its digest resealed."""
    assert request.reconstruction.frame_delta is not None
    bad = attrs.evolve(request.reconstruction.frame_delta, removed_bindings=("ghost",))
    return _rec(frame_delta=bad, frame_delta_digest=ref.delta_digest(bad))(request)


INVALID = D.INVALID_REPLAY_INPUT.value
POLICY = D.UNSUPPORTED_REPLAY_POLICY.value
SCHEMA = D.UNSUPPORTED_SCHEMA_VERSION.value

# name -> (how to build the request, the whole expected explanation)
CASES: dict[str, tuple[Callable[[], object], str]] = {
    "not_a_request": (
        lambda: 42,
        f"{INVALID}: request_not_a_replay_request: expected a ReplayRequest, got int",
    ),
    "field_wrong_type": (
        lambda: attrs.evolve(valid_request(), gate="gate"),  # type: ignore[arg-type]  # the defect
        f"{INVALID}: request_field_wrong_type: gate must be SearchGateDecision, got str",
    ),
    "residuals_a_list": (
        lambda: attrs.evolve(
            valid_request(), residuals=list(valid_request().residuals)  # type: ignore[arg-type]
        ),
        f"{INVALID}: request_field_wrong_type: residuals must be a tuple of ContractResidual",
    ),
    "schema_versions_unsorted": (
        lambda: reseal_input(
            valid_request(),
            schema_versions=tuple(reversed(valid_request().replay_input.schema_versions)),
        ),
        f"{INVALID}: schema_versions_not_canonical: "
        "schema_versions must hold unique names in ascending order",
    ),
    "schema_versions_missing": (
        lambda: reseal_input(
            valid_request(), schema_versions=valid_request().replay_input.schema_versions[2:]
        ),
        f"{INVALID}: schema_version_missing: schema_versions lacks "
        + ", ".join(name for name, _ in valid_request().replay_input.schema_versions[:2]),
    ),
    "replay_policy": (
        lambda: reseal_input(valid_request(), replay_policy_version="contract_proof_replay.v2"),
        f"{POLICY}: replay_policy_unsupported: "
        "replay policy 'contract_proof_replay.v2' is not supported",
    ),
    "run_policy": (
        lambda: _upstream(run_policy_version="geometric_search_run.v9"),
        f"{POLICY}: run_policy_unsupported: "
        "run policy 'geometric_search_run.v9' is not supported",
    ),
    "gate_policy": (
        lambda: _upstream(gate_policy_version="search_gate.v9"),
        f"{POLICY}: gate_policy_unsupported: gate policy 'search_gate.v9' is not supported",
    ),
    "budget_policy": (
        lambda: _upstream(budget_policy_version="compute_budget.v9"),
        f"{POLICY}: budget_policy_unsupported: "
        "budget policy 'compute_budget.v9' is not supported",
    ),
    "schema_unknown": (
        lambda: _schema("zz_unknown_record", "v1")(valid_request()),
        f"{SCHEMA}: schema_unknown: schema 'zz_unknown_record' is not known to this adapter",
    ),
    "schema_version": (
        lambda: _schema("candidate_attempt", "v2")(valid_request()),
        f"{SCHEMA}: schema_version_unsupported: "
        "schema 'candidate_attempt' version 'v2' is not supported",
    ),
    "run_id": (
        lambda: reseal_input(valid_request(), run_id=valid_request(PROOF_REFUSING).run.run_id),
        f"{IDENTITY}: run_id_mismatch: run_id does not reproduce from the supplied run",
    ),
    "run_attempts": (
        lambda: _forged_sibling(valid_request(CLOSING, CLOSING)),
        f"{IDENTITY}: run_attempts_inconsistent: "
        "an attempt of the run does not reproduce its id, position, run or input",
    ),
    "index_out_of_range": (
        lambda: reseal_input(valid_request(), attempt_index=5),
        f"{IDENTITY}: attempt_index_out_of_range: attempt_index 5 is outside the run's 1 attempts",
    ),
    "not_at_index": (
        lambda: reseal_input(valid_request(CLOSING, CONTRACT_REFUSING), attempt_index=1),
        f"{IDENTITY}: attempt_not_at_index: the attempt at index 1 is not the supplied attempt",
    ),
    "attempt_id": (
        lambda: reseal_input(
            valid_request(CLOSING, CLOSING),
            attempt_id=valid_request(CLOSING, CLOSING).run.candidate_attempts[1].attempt_id,
        ),
        f"{IDENTITY}: attempt_id_mismatch: "
        "the input's attempt_id is not the supplied attempt's reproduced id",
    ),
    "original_frame": (
        lambda: _rec(original_problem_frame_digest="a" * 64)(valid_request()),
        f"{IDENTITY}: original_frame_mismatch: "
        "reconstruction does not bind back to the original problem frame",
    ),
    "frame_digest": (
        lambda: _rec(candidate_problem_frame_digest="b" * 64)(valid_request()),
        f"{IDENTITY}: candidate_frame_digest_mismatch: "
        "candidate_problem_frame_digest does not reproduce",
    ),
    "source_text": (
        lambda: valid_request(
            attrs.evolve(CLOSING, source_text=CLOSING.source_text + " And 9 plums.")
        ),
        f"{IDENTITY}: candidate_source_text_altered: the candidate alters the source text",
    ),
    "frame_delta_digest": (
        lambda: _rec(frame_delta_digest="b" * 64)(_delta_request()),
        f"{IDENTITY}: frame_delta_digest_mismatch: frame_delta_digest does not reproduce",
    ),
    "reconstruction_other_attempt": (
        lambda: _resealed_rec(attempt_id="e" * 64)(valid_request()),
        f"{IDENTITY}: reconstruction_not_for_attempt: "
        "the reconstruction names another run or attempt",
    ),
    "reconstruction_other_run": (
        lambda: _resealed_rec(run_id="e" * 64)(valid_request()),
        f"{IDENTITY}: reconstruction_not_for_attempt: "
        "the reconstruction names another run or attempt",
    ),
    "evidence_spans": (
        _spans_unlike_the_frame,
        f"{IDENTITY}: evidence_spans_mismatch: "
        "reconstruction spans differ from the candidate frame's (order and duplicates count)",
    ),
    "run_input_digest": (
        lambda: _run_input_digest_forged(valid_request()),
        f"{IDENTITY}: run_input_digest_mismatch: "
        "the run's input_digest does not reproduce from its input",
    ),
    "run_policy_differs": (
        lambda: reseal_input(
            _upstream(run_policy_version="geometric_search_run.v9"),
            run_policy_version="geometric_search_run.v1",
        ),
        f"{IDENTITY}: run_policy_version_mismatch: run_policy_version differs from the run's",
    ),
    "index_one_past_the_end": (
        lambda: reseal_input(valid_request(), attempt_index=1),
        f"{IDENTITY}: attempt_index_out_of_range: attempt_index 1 is outside the run's 1 attempts",
    ),
    "candidate_content": (
        lambda: _rec(candidate_bindings=())(valid_request()),
        f"{IDENTITY}: candidate_content_mismatch: "
        "candidate bindings/relations/targets differ from the reconstructed frame",
    ),
    "delta_not_applying": (
        lambda: _delta_not_applying(_delta_request()),
        f"{IDENTITY}: frame_delta_does_not_reconstruct: delta removes unknown binding 'ghost'",
    ),
    "candidate_digest": (
        lambda: _rec(candidate_digest="d" * 64)(valid_request()),
        f"{IDENTITY}: candidate_digest_mismatch: "
        "candidate_digest does not reproduce from the candidate content",
    ),
    "reconstruction_digest": (
        lambda: _rec(candidate_reconstruction_digest="c" * 64)(valid_request()),
        f"{IDENTITY}: reconstruction_digest_mismatch: "
        "candidate_reconstruction_digest does not reproduce",
    ),
    "operator": (
        lambda: _resealed_rec(operator_version="v2")(valid_request()),
        f"{IDENTITY}: operator_mismatch: operator id/version differ from the attempt's",
    ),
    "operator_set": (
        lambda: reseal_input(valid_request(), operator_set_version="v9"),
        f"{IDENTITY}: operator_set_mismatch: operator set differs from the run's",
    ),
    "problem_frame_chain": (
        lambda: reseal_input(valid_request(), problem_frame_digest="a" * 64),
        f"{IDENTITY}: problem_frame_chain_mismatch: "
        "problem frame identity differs along the chain",
    ),
    "assessment_id": (
        lambda: attrs.evolve(
            valid_request(), assessment=attrs.evolve(valid_request().assessment, runnable=True)
        ),
        f"{IDENTITY}: assessment_id_mismatch: the original assessment's id does not reproduce",
    ),
    "assessment_chain": (
        lambda: reseal_input(valid_request(), original_contract_assessment_id="a" * 64),
        f"{IDENTITY}: assessment_chain_mismatch: assessment identity differs along the chain",
    ),
    "residual_chain": (
        lambda: reseal_input(valid_request(), residual_ids=()),
        f"{IDENTITY}: residual_chain_mismatch: "
        "residuals do not reproduce from the assessment or differ along the chain",
    ),
    "gate_chain": (
        lambda: reseal_input(valid_request(), gate_decision_id="a" * 64),
        f"{IDENTITY}: gate_chain_mismatch: gate decision does not reproduce or bind the chain",
    ),
    "budget_chain": (
        lambda: reseal_input(valid_request(), budget_id="a" * 64),
        f"{IDENTITY}: budget_chain_mismatch: "
        "budget decision does not reproduce or bind the gate",
    ),
    "over_budget": (
        lambda: request_for(
            build_chain(
                ORIGINAL,
                toy_assessment(ORIGINAL),
                [_draft(CLOSING), _draft(CLOSING)],
                operator_set_id="toy.ops",
                operator_set_version="v1",
                max_attempts=1,
            ),
            toy_manifest(CallLog()),
        ),
        f"{IDENTITY}: run_exceeds_budget: the run holds more attempts than its budget granted",
    ),
    "gate_refused_search": (
        _gate_refusing_search,
        f"{IDENTITY}: gate_did_not_permit_search: the gate decision did not permit search",
    ),
    "original_runnable": (
        _runnable_original,
        f"{IDENTITY}: original_assessment_not_refused: "
        "the original assessment is runnable, so there is nothing to replay",
    ),
    "organ": (
        lambda: reseal_input(valid_request(), candidate_organ="other"),
        f"{IDENTITY}: candidate_organ_mismatch: candidate_organ differs from the assessment's",
    ),
    "input_digest": (
        lambda: attrs.evolve(
            valid_request(),
            replay_input=attrs.evolve(valid_request().replay_input, input_digest="a" * 64),
        ),
        f"{IDENTITY}: input_digest_mismatch: input_digest does not reproduce",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_guard_explains_its_refusal(case: str) -> None:
    build, expected = CASES[case]
    assert explanation(build()) == expected


def test_a_malformed_attempt_is_refused_at_its_index_with_the_detail() -> None:
    refusal = refuse_malformed_attempt(3, "inputs[3]: missing field run_id")
    assert refusal.attempt_index == 3
    assert refusal.replay_refusal_id == ref.refusal_id(refusal)
    assert refusal.explanation == (
        f"{INVALID}: attempt_malformed: attempt 3: inputs[3]: missing field run_id"
    )
    assert (refusal.input_digest, refusal.run_id, refusal.attempt_id) == (None, None, None)


# --- the authority manifest and proof records refuse what could disarm replay -----------


def _contract() -> ContractAuthority:
    return ContractAuthority("toy.contract", "v1", lambda frame: toy_assessment(frame))


def _prover() -> ProofAuthority:
    return ProofAuthority("toy.prover", "v1", lambda context: _never(context))


def _never(context: ProofContext) -> ProofOutcome:
    raise AssertionError("a manifest under construction never proves anything")


def _manifest(**changes: Any) -> AuthorityManifest:
    fields: dict[str, Any] = {
        "manifest_version": "m.v1",
        "contract_authorities": {"toy": _contract()},
        "proof_policies": {"toy": ProofObligations(("p1", "p2")), "bare": NO_PROOFS},
        "proof_authorities": {"p1": _prover(), "p2": _prover()},
    }
    fields.update(changes)
    return AuthorityManifest(**fields)


NO_PROOFS = NoProofObligationsApplicable("none.v1")


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        (
            {"proof_authorities": {"p1": _prover()}},
            ValueError,
            "organ 'toy' declares 'p2' with no authority",
        ),
        (
            {"contract_authorities": {"toy": _prover()}},
            TypeError,
            "contract authority for 'toy' is ProofAuthority",
        ),
        (
            {"contract_authorities": {1: _contract()}},
            TypeError,
            "contract authority for 1 is ContractAuthority",
        ),
        (
            {"proof_policies": {"toy": ("p1",)}},
            TypeError,
            "proof policy for 'toy' is tuple",
        ),
        (
            {"proof_authorities": {"p1": _prover(), "p2": _contract()}},
            TypeError,
            "proof authority for 'p2' is ContractAuthority",
        ),
    ],
)
def test_an_authority_manifest_refuses_what_it_cannot_honour(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    manifest = _manifest()  # the unchanged fields are a valid manifest
    assert manifest.contract_authorities["toy"].target == "toy.contract@v1"
    with pytest.raises(error) as raised:
        _manifest(**changes)
    assert str(raised.value) == message


def test_a_proof_policy_is_a_non_empty_list_of_distinct_refs() -> None:
    with pytest.raises(ValueError) as raised:
        ProofObligations(())
    assert str(raised.value) == "use NoProofObligationsApplicable to declare an empty policy"
    with pytest.raises(ValueError) as raised:
        ProofObligations(("p1", "p2", "p1"))
    assert str(raised.value) == "obligation refs must be unique"
    assert ProofObligations(("p2", "p1")).refs == ("p2", "p1")


def test_proof_evidence_is_opaque_bytes() -> None:
    with pytest.raises(TypeError) as raised:
        ProofEvidence("p1", "application/json", "{}")  # type: ignore[arg-type]  # the defect
    assert str(raised.value) == "document must be bytes, got str"
    assert ProofEvidence("p1", "application/json", b"{}").document == b"{}"


def test_a_sealed_proof_outcome_binds_its_context() -> None:
    request = valid_request()
    context = ProofContext(
        obligation_ref="toy.p1",
        candidate_digest=request.reconstruction.candidate_digest,
        candidate_frame=CLOSING,
        contract_replay=toy_assessment(CLOSING),
    )
    outcome = seal_proof_outcome(
        context=context,
        authority_id="toy.prover",
        authority_version="v3",
        status=ProofStatus.REFUSED,
        reason_codes=("counterexample",),
        explanation="x = 2 refutes it",
    )
    assert (outcome.obligation_ref, outcome.candidate_digest) == (
        "toy.p1",
        request.reconstruction.candidate_digest,
    )
    assert (outcome.authority_id, outcome.authority_version, outcome.status) == (
        "toy.prover",
        "v3",
        ProofStatus.REFUSED,
    )
    assert (outcome.reason_codes, outcome.evidence_spans, outcome.explanation) == (
        ("counterexample",),
        (),
        "x = 2 refutes it",
    )
    assert outcome.proof_outcome_id == ref.proof_outcome_id(outcome)


def test_a_bundle_with_unequal_parts_is_refused_with_the_counts() -> None:
    chain = toy_chain(CLOSING, CLOSING)
    bundle = bundle_for(chain, toy_manifest(CallLog()))
    short = ReplayBundle(chain, bundle.inputs[:1])
    expected = "bundle holds 2 attempts, 2 reconstructions and 1 inputs; they must be equal"
    with pytest.raises(ValueError) as raised:
        requests_from_bundle(short)
    assert str(raised.value) == expected
    with pytest.raises(ValueError) as raised:
        replay_bundle_attempts(short, toy_manifest(CallLog()))
    assert str(raised.value) == expected
    # The equal bundle pairs each input with its own attempt, in the run's order.
    requests = requests_from_bundle(bundle)
    assert [r.attempt.attempt_id for r in requests] == [
        a.attempt_id for a in chain.run.candidate_attempts
    ]
    assert [r.replay_input.attempt_index for r in requests] == [0, 1]


@pytest.mark.parametrize("versions", [[("run", "v1")], (("run",),), (("run", 1),), "run"])
def test_an_adapter_input_refuses_malformed_schema_versions(versions: object) -> None:
    replay_input = valid_request().replay_input
    with pytest.raises(TypeError) as raised:
        attrs.evolve(replay_input, schema_versions=versions)  # type: ignore[arg-type]  # the defect
    assert str(raised.value) == "schema_versions must be a tuple of (name, version) str pairs"


# --- misbehaving authorities: adapter failure, explained --------------------------------


def _crash(*_: object) -> Any:
    raise RuntimeError("authority crashed")


CONTRACT_UNAVAILABLE = D.CONTRACT_REPLAY_UNAVAILABLE.value
PROOF_UNAVAILABLE = D.PROOF_REPLAY_UNAVAILABLE.value
OBLIGATION = D.UNSUPPORTED_PROOF_OBLIGATION.value


def _sealed_proof(ctx: ProofContext, ref: str = "toy.p1", **changes: Any) -> ProofOutcome:
    return seal_proof_outcome(
        context=attrs.evolve(ctx, **changes),
        authority_id=ref,
        authority_version="v1",
        status=ProofStatus.CLOSED,
    )


AUTHORITY_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "contract_raises": (
        {"contract": _crash},
        f"{CONTRACT_UNAVAILABLE}: contract_authority_raised: "
        "toy.contract@v1 raised RuntimeError: authority crashed",
    ),
    "contract_returns_none": (
        {"contract": lambda frame: None},
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_malformed: "
        "toy.contract@v1 returned NoneType, not a ContractAssessment",
    ),
    "contract_wrong_organ": (
        {"contract": lambda frame: toy_assessment(frame, organ="other")},
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_wrong_organ: "
        "toy.contract@v1 assessed organ 'other', not 'toy'",
    ),
    "contract_other_frame": (
        {"contract": lambda frame: toy_assessment(ORIGINAL)},
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_not_bound: "
        "toy.contract@v1 assessed another frame than the candidate",
    ),
    "contract_forged_id": (
        {"contract": lambda frame: attrs.evolve(toy_assessment(frame), assessment_id="9" * 64)},
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_id_invalid: "
        "toy.contract@v1 returned an assessment whose id does not reproduce",
    ),
    "proof_raises": (
        {"proofs": {"toy.p2": _crash}},
        f"{PROOF_UNAVAILABLE}: proof_authority_raised: "
        "toy.p2@v1 for 'toy.p2' raised RuntimeError: authority crashed",
    ),
    "proof_returns_text": (
        {"proofs": {"toy.p1": lambda ctx: "closed"}},
        f"{PROOF_UNAVAILABLE}: proof_outcome_malformed: "
        "toy.p1@v1 for 'toy.p1' returned str, not a ProofOutcome",
    ),
    "proof_other_obligation": (
        {"proofs": {"toy.p1": lambda ctx: _sealed_proof(ctx, obligation_ref="toy.p2")}},
        f"{PROOF_UNAVAILABLE}: proof_outcome_not_bound: "
        "toy.p1@v1 for 'toy.p1' returned an outcome for another obligation or candidate",
    ),
    "proof_other_authority": (
        {"proofs": {"toy.p1": lambda ctx: _sealed_proof(ctx, "toy.p2")}},
        f"{PROOF_UNAVAILABLE}: proof_outcome_wrong_authority: "
        "toy.p1@v1 for 'toy.p1' returned an outcome signed by another authority",
    ),
    "proof_forged_id": (
        {
            "proofs": {
                "toy.p1": lambda ctx: attrs.evolve(
                    _sealed_proof(ctx), status=ProofStatus.REFUSED
                )
            }
        },
        f"{PROOF_UNAVAILABLE}: proof_outcome_id_invalid: "
        "toy.p1@v1 for 'toy.p1' returned an outcome whose id does not reproduce",
    ),
}


@pytest.mark.parametrize("case", sorted(AUTHORITY_CASES))
def test_each_misbehaving_authority_is_explained(case: str) -> None:
    manifest, expected = AUTHORITY_CASES[case]
    request = valid_request(CLOSING, CLOSING, index=1)
    outcome = run(request, **manifest)
    assert isinstance(outcome, ReplayAdapterRefusal)
    # Validated before any authority ran: every identity of the input is reported.
    bound = request.replay_input
    assert (outcome.attempt_index, outcome.input_digest, outcome.run_id) == (
        1,
        bound.input_digest,
        bound.run_id,
    )
    assert (outcome.attempt_id, outcome.candidate_digest) == (
        bound.attempt_id,
        bound.candidate_digest,
    )
    assert outcome.replay_refusal_id == ref.refusal_id(outcome)
    assert outcome.explanation == expected


def test_contract_target_and_obligation_refusals_are_explained() -> None:
    target = reseal_input(valid_request(), contract_replay_target="toy.contract@v0")
    assert explanation(target) == (
        f"{CONTRACT_UNAVAILABLE}: contract_target_not_allowlisted: "
        "target 'toy.contract@v0' is not the allowlisted 'toy.contract@v1' for organ 'toy'"
    )
    toy = toy_manifest(CallLog())
    no_contract = AuthorityManifest(
        manifest_version=toy.manifest_version,
        contract_authorities={},
        proof_policies=toy.proof_policies,
        proof_authorities=toy.proof_authorities,
    )
    missing = replay_attempt(valid_request(), no_contract)
    assert isinstance(missing, ReplayAdapterRefusal)
    assert missing.explanation == (
        f"{CONTRACT_UNAVAILABLE}: contract_authority_missing: "
        "no contract authority is allowlisted for organ 'toy'"
    )
    swapped = reseal_input(valid_request(), proof_obligation_refs=("toy.p2", "toy.p1"))
    assert explanation(swapped) == (
        f"{OBLIGATION}: proof_obligations_not_policy: "
        "obligations ['toy.p2', 'toy.p1'] are not exactly the policy's ['toy.p1', 'toy.p2']"
    )
    unknown = reseal_input(valid_request(), proof_obligation_refs=("toy.p1", "toy.p9"))
    assert explanation(unknown) == (
        f"{OBLIGATION}: proof_obligation_unknown: obligation 'toy.p9' is not supported"
    )
    no_policy = run(valid_request(), include_policy=False)
    assert isinstance(no_policy, ReplayAdapterRefusal)
    assert no_policy.explanation == (
        f"{OBLIGATION}: proof_policy_missing: "
        "organ 'toy' has no proof policy, not even a 'none applicable' one"
    )


@pytest.mark.parametrize(
    ("index", "detail", "error", "message"),
    [
        ("3", "bad", TypeError, "attempt_index must be int and detail str"),
        (True, "bad", TypeError, "attempt_index must be int and detail str"),
        (3, b"bad", TypeError, "attempt_index must be int and detail str"),
        (-1, "bad", ValueError, "attempt_index must be >= 0, got -1"),
    ],
)
def test_refusing_a_malformed_attempt_is_misuse_without_an_index_and_detail(
    index: object, detail: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        refuse_malformed_attempt(index, detail)  # type: ignore[arg-type]  # the misuse
    assert str(raised.value) == message


def test_a_malformed_attempts_lone_surrogate_is_escaped_in_the_explanation() -> None:
    refusal = refuse_malformed_attempt(0, "name \udcff")
    assert refusal.explanation == f"{INVALID}: attempt_malformed: attempt 0: name \\udcff"
    assert refusal.attempt_index == 0


# --- results: reason codes and explanations of the semantic dispositions ----------------


def _result_of(request: ReplayRequest, **manifest: Any) -> ReplayAdapterResult:
    outcome = run(request, **manifest)
    assert isinstance(outcome, ReplayAdapterResult), outcome
    assert outcome.replay_result_id == ref.result_id(outcome)
    return outcome


def test_every_proof_closing_is_explained_with_each_obligations_status() -> None:
    result = _result_of(valid_request())
    assert result.reason_codes == ()
    assert result.explanation == (
        "contract_and_proof_closed: contract closed; proofs: toy.p1=closed, toy.p2=closed"
    )


def test_every_refused_obligation_adds_its_reasons_in_order() -> None:
    # Both obligations refused: the reasons of the first are kept, not replaced.
    both = candidate("refute:toy.p1", "refute:toy.p2")
    result = _result_of(valid_request(both))
    assert result.replay_disposition is D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert result.reason_codes == (
        "proof_refused:toy.p1",
        "toy.p1:refuted",
        "proof_refused:toy.p2",
        "toy.p2:refuted",
    )
    assert result.explanation == (
        "contract_closed_but_proof_refused: contract closed; proofs: "
        "toy.p1=refused, toy.p2=refused"
    )
    # A closed obligation first does not end the look at the later ones.
    later = _result_of(valid_request(PROOF_REFUSING))
    assert later.reason_codes == ("proof_refused:toy.p2", "toy.p2:refuted")


def test_no_applicable_obligation_is_explained_as_such() -> None:
    policy = NoProofObligationsApplicable("toy.none.v1")
    request = request_for(toy_chain(CLOSING), toy_manifest(CallLog(), policy=policy))
    result = _result_of(request, policy=policy)
    assert result.replay_disposition is D.CONTRACT_AND_PROOF_CLOSED
    assert result.reason_codes == ("no_proof_obligation_applicable:toy.none.v1",)
    assert result.explanation == (
        "contract_and_proof_closed: contract closed; proofs: none applicable"
    )


def test_a_contract_refusal_is_explained_with_its_blockers_and_the_authoritys_words() -> None:
    result = _result_of(valid_request(CONTRACT_REFUSING))
    assert result.replay_disposition is D.CONTRACT_REFUSED
    assert result.reason_codes == ("hazard:blocked:x0",)
    assert result.explanation == (
        "contract_refused by toy.contract@v1: hazard:blocked:x0. toy contract"
    )


def test_a_proof_outcome_outside_the_identity_domain_is_malformed() -> None:
    def prove(ctx: ProofContext) -> ProofOutcome:
        return seal_proof_outcome(
            context=ctx,
            authority_id="toy.p1",
            authority_version="v1",
            status=ProofStatus.CLOSED,
            explanation="lone \udcff surrogate",
        )

    outcome = run(valid_request(), proofs={"toy.p1": prove})
    assert isinstance(outcome, ReplayAdapterRefusal)
    head = f"{PROOF_UNAVAILABLE}: proof_outcome_malformed: "
    assert outcome.explanation.startswith(head)
    assert len(outcome.explanation) > len(head)


@pytest.mark.parametrize(
    ("step", "needs"),
    [
        (replay_contract, "Validated"),
        (replay_proofs, "ContractClosed"),
        (dispose, "ProofsReplayed"),
    ],
)
def test_a_transition_called_with_the_wrong_state_is_misuse(step: Any, needs: str) -> None:
    with pytest.raises(ReplayMisuseError) as raised:
        step("state")
    assert str(raised.value) == f"{step.__name__} needs {needs}, got str"


# --- contract refusals in the authority's words; records altered behind attrs' back ----


def _assessing(**fields: Any) -> Callable[[Any], Any]:
    """A contract authority sealing ``fields`` about the very frame it is shown."""

    def assess(frame: Any) -> Any:
        return seal_assessment(
            problem_frame_digest=ref.frame_digest(frame), candidate_organ="toy", **fields
        )

    return assess


def _constructor_says(build: Callable[[], object]) -> str:
    """What a record's own constructor says about a value (the oracle for deep checks)."""
    with pytest.raises((TypeError, ValueError)) as raised:
        build()
    return str(raised.value)


def test_a_contract_refusal_lists_every_blocker_in_order_and_no_empty_sentence() -> None:
    blockers = _assessing(runnable=False, missing_bindings=["a", "b"], unresolved_hazards=["h"])
    result = _result_of(valid_request(), contract=blockers)
    assert result.reason_codes == ("missing_binding:a", "missing_binding:b", "hazard:h")
    assert result.explanation == (
        "contract_refused by toy.contract@v1: missing_binding:a, missing_binding:b, hazard:h"
    )
    bare = _result_of(valid_request(), contract=_assessing(runnable=False, explanation="why"))
    assert bare.replay_disposition is D.CONTRACT_REFUSED
    assert bare.reason_codes == ()
    assert bare.explanation == "contract_refused by toy.contract@v1: no reason given. why"


def test_a_runnable_verdict_listing_blockers_is_the_authority_failing() -> None:
    outcome = run(valid_request(), contract=_assessing(runnable=True, unresolved_hazards=["h"]))
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == (
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_inconsistent: "
        "toy.contract@v1 called the candidate runnable while listing blockers"
    )


def test_a_contract_authority_returning_text_is_named_by_its_type() -> None:
    outcome = run(valid_request(), contract=lambda frame: "runnable")
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == (
        f"{CONTRACT_UNAVAILABLE}: contract_outcome_malformed: "
        "toy.contract@v1 returned str, not a ContractAssessment"
    )


def test_outcomes_altered_behind_attrs_back_are_refused_with_the_records_own_words() -> None:
    def altered_assessment(frame: Any) -> Any:
        assessment = toy_assessment(frame)
        object.__setattr__(assessment, "candidate_organ", 5)  # past the frozen record
        return assessment

    says = _constructor_says(lambda: attrs.evolve(toy_assessment(CLOSING), candidate_organ=5))  # type: ignore[arg-type]  # the defect
    outcome = run(valid_request(), contract=altered_assessment)
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == f"{CONTRACT_UNAVAILABLE}: contract_outcome_malformed: {says}"

    def altered_proof(ctx: ProofContext) -> ProofOutcome:
        proof = _sealed_proof(ctx)
        object.__setattr__(proof, "reason_codes", ["refuted"])
        return proof

    def rebuilt() -> object:
        ctx = ProofContext("toy.p1", "a" * 64, CLOSING, toy_assessment(CLOSING))
        return attrs.evolve(_sealed_proof(ctx), reason_codes=["refuted"])  # type: ignore[arg-type]  # the defect

    says = _constructor_says(rebuilt)
    outcome = run(valid_request(), proofs={"toy.p1": altered_proof})
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == f"{PROOF_UNAVAILABLE}: proof_outcome_malformed: {says}"


def _evidence(ref_: str) -> ProofEvidence:
    return ProofEvidence(ref_, "text/plain", b"receipt")


def test_gathered_evidence_is_refused_unless_well_typed_and_declared() -> None:
    manifest = toy_manifest(CallLog())
    malformed = f"{PROOF_UNAVAILABLE}: proof_evidence_malformed: "
    for not_a_sequence in ("receipt", b"receipt", _evidence("toy.p1"), [b"receipt"]):
        outcome = replay_attempt(valid_request(), manifest, evidence=not_a_sequence)  # type: ignore[arg-type]  # the defect
        assert isinstance(outcome, ReplayAdapterRefusal)
        assert outcome.explanation == malformed + "evidence must be a sequence of ProofEvidence"
    altered = _evidence("toy.p1")
    object.__setattr__(altered, "document", "receipt")  # past the frozen record
    says = _constructor_says(lambda: attrs.evolve(_evidence("toy.p1"), document="receipt"))  # type: ignore[arg-type]  # the defect
    outcome = replay_attempt(valid_request(), manifest, evidence=[_evidence("toy.p2"), altered])
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == malformed + says
    stray = [_evidence("toy.p9"), _evidence("toy.p1"), _evidence("toy.p0")]
    outcome = replay_attempt(valid_request(), manifest, evidence=stray)
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.explanation == (
        f"{PROOF_UNAVAILABLE}: proof_evidence_unexpected: "
        "evidence names undeclared obligations ['toy.p0', 'toy.p9']"
    )


def test_a_proof_outcome_sealed_without_an_explanation_has_none() -> None:
    ctx = ProofContext("toy.p1", "a" * 64, CLOSING, toy_assessment(CLOSING))
    outcome = seal_proof_outcome(
        context=ctx, authority_id="toy.p1", authority_version="v1", status=ProofStatus.CLOSED
    )
    assert outcome.explanation == ""
    assert outcome.proof_outcome_id == ref.proof_outcome_id(outcome)


# --- records altered behind attrs' back, alone and in a batch sharing them --------------


def _altered(record: Any, **fields: Any) -> Any:
    """A copy of ``record`` with ``fields`` set past its validators (``object.__setattr__``)."""
    copy = attrs.evolve(record)
    for name, value in fields.items():
        object.__setattr__(copy, name, value)
    return copy


TOO_LARGE = 10**MAX_INT_DIGITS  # one digit more than the identity domain allows


def _altered_requests() -> dict[str, tuple[Callable[[ReplayRequest], ReplayRequest], str]]:
    r = valid_request()
    run_says = _constructor_says(lambda: attrs.evolve(r.run, run_policy_version=5))  # type: ignore[arg-type]  # the defect
    frame_says = _constructor_says(lambda: attrs.evolve(r.problem_frame, source_text=5))  # type: ignore[arg-type]  # the defect
    lone = len(r.problem_frame.source_text) - 1
    return {
        "run_invalid": (
            lambda q: attrs.evolve(q, run=_altered(q.run, run_policy_version=5)),
            f"{INVALID}: record_structure_invalid: {run_says}",
        ),
        "run_not_canonical": (
            lambda q: attrs.evolve(
                q,
                run=_altered(
                    q.run,
                    candidate_attempts=tuple(
                        _altered(a, attempt_index=TOO_LARGE) for a in q.run.candidate_attempts
                    ),
                ),
            ),
            f"{INVALID}: record_not_canonical: integer_too_large at "
            f"$.candidate_attempts[0].attempt_index: integer has more than {MAX_INT_DIGITS} digits",
        ),
        "frame_invalid": (
            lambda q: attrs.evolve(q, problem_frame=_altered(q.problem_frame, source_text=5)),
            f"{INVALID}: record_structure_invalid: {frame_says}",
        ),
        "frame_not_canonical": (
            lambda q: attrs.evolve(
                q,
                problem_frame=_altered(
                    q.problem_frame, source_text=q.problem_frame.source_text[:lone] + "\udcff"
                ),
            ),
            f"{INVALID}: record_not_canonical: lone_surrogate at $.source_text: "
            f"string contains a lone surrogate at index {lone}",
        ),
        "residuals_not_canonical": (
            lambda q: attrs.evolve(
                q, residuals=tuple(_altered(x, ordinal=TOO_LARGE) for x in q.residuals)
            ),
            f"{INVALID}: record_not_canonical: integer_too_large at $.ordinal: "
            f"integer has more than {MAX_INT_DIGITS} digits",
        ),
        "budget_not_canonical": (
            lambda q: attrs.evolve(q, budget=_altered(q.budget, max_attempts=TOO_LARGE)),
            f"{INVALID}: record_not_canonical: integer_too_large at $.max_attempts: "
            f"integer has more than {MAX_INT_DIGITS} digits",
        ),
    }


@pytest.mark.parametrize("case", sorted(_altered_requests()))
def test_a_record_altered_behind_attrs_back_is_refused_with_what_is_wrong(case: str) -> None:
    alter, expected = _altered_requests()[case]
    assert explanation(alter(valid_request())) == expected
    # A batch examines the run and the records its requests share once, then
    # refuses every attempt with the same words.
    manifest = toy_manifest(CallLog())
    shared = requests_from_bundle(bundle_for(toy_chain(CLOSING, CLOSING), manifest))
    first = alter(shared[0])
    batch = [first] + [
        attrs.evolve(
            q,
            run=first.run,
            problem_frame=first.problem_frame,
            budget=first.budget,
            residuals=first.residuals,
        )
        for q in shared[1:]
    ]
    outcomes = list(replay_attempts(batch, manifest))
    assert [o.explanation for o in outcomes] == [expected] * len(batch)
    refusals = [o for o in outcomes if isinstance(o, ReplayAdapterRefusal)]
    assert [o.attempt_index for o in refusals] == list(range(len(batch)))


def test_a_record_broken_across_fields_behind_attrs_back_is_refused_by_its_invariant() -> None:
    # Each field is valid alone; the record's cross-field invariant (exactly one
    # of candidate frame and delta) is what refuses it.
    request = valid_request()
    delta = _delta_request().reconstruction.frame_delta
    says = _constructor_says(lambda: attrs.evolve(request.reconstruction, frame_delta=delta))
    both = attrs.evolve(request, reconstruction=_altered(request.reconstruction, frame_delta=delta))
    assert explanation(both) == f"{INVALID}: record_structure_invalid: {says}"


def test_forged_or_foreign_run_facts_never_change_an_outcome() -> None:
    # Facts spare the O(run) examination of a batch; only facts examine_run built
    # for this very run object may be used, so a forgery costs time, never a verdict.
    request = _forged_sibling(valid_request(CLOSING, CLOSING))
    manifest = toy_manifest(CallLog())
    alone = replay_attempt(request, manifest)
    assert alone.explanation == (
        f"{IDENTITY}: run_attempts_inconsistent: "
        "an attempt of the run does not reproduce its id, position, run or input"
    )
    forged = RunFacts(request.run, None, None, request.run.run_id, True)
    foreign = examine_run(valid_request(CLOSING, CLOSING).run)
    genuine = examine_run(request.run)
    for facts in (forged, foreign, genuine):
        assert replay_attempt(request, manifest, facts=facts) == alone


def _too_large(binding: Any) -> Any:
    return _altered(binding, value=TOO_LARGE)


def test_a_reconstruction_outside_the_identity_domain_is_refused_where_it_is() -> None:
    # Each part the reconstruction digests is checked: its own payload, the
    # candidate frame it carries, the delta it carries.
    request = valid_request()
    rec = request.reconstruction
    too_large = f"integer has more than {MAX_INT_DIGITS} digits"
    bindings = (_too_large(rec.candidate_bindings[0]), *rec.candidate_bindings[1:])
    own = attrs.evolve(request, reconstruction=_altered(rec, candidate_bindings=bindings))
    assert explanation(own) == (
        f"{INVALID}: record_not_canonical: integer_too_large at "
        f"$.candidate.bindings[0].value: {too_large}"
    )
    frame = rec.candidate_problem_frame
    assert frame is not None
    lone = len(frame.source_text) - 1
    surrogate = _altered(frame, source_text=frame.source_text[:lone] + "\udcff")
    carried = attrs.evolve(
        request, reconstruction=_altered(rec, candidate_problem_frame=surrogate)
    )
    assert explanation(carried) == (
        f"{INVALID}: record_not_canonical: lone_surrogate at $.source_text: "
        f"string contains a lone surrogate at index {lone}"
    )
    by_delta = _delta_request()
    delta = by_delta.reconstruction.frame_delta
    assert delta is not None
    added = (_too_large(delta.added_bindings[0]), *delta.added_bindings[1:])
    altered = _altered(by_delta.reconstruction, frame_delta=_altered(delta, added_bindings=added))
    assert explanation(attrs.evolve(by_delta, reconstruction=altered)) == (
        f"{INVALID}: record_not_canonical: integer_too_large at "
        f"$.added_bindings[0].value: {too_large}"
    )
