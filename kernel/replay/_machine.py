"""The replay classification state machine (ADR-0229 §6, §9-§11, §13, §16).

Theory of operation
-------------------

One candidate attempt goes in; one content-addressed outcome comes out.

    ReplayRequest --validate--> Validated --replay_contract--> ContractClosed
        --replay_proofs--> ProofsReplayed --dispose--> ReplayAdapterResult

Every arrow may instead end in a terminal ``ReplayAdapterRefusal``;
``replay_contract`` may also end in ``ReplayAdapterResult(contract_refused)``.
This module is the only one that builds states, results and refusals.

- ``validate`` runs the §6 checks in a fixed order, first failure wins, and
  calls no authority: structure (``invalid_replay_input``), replay and
  upstream policy versions (``unsupported_replay_policy``), schema versions
  (``unsupported_schema_version``), the identity chain recomputed from values
  (``candidate_identity_mismatch``, §11), the statically allowlisted contract
  target (``contract_replay_unavailable``), and the organ's exact obligation
  list (``unsupported_proof_obligation``). Each check has its own stable
  reason code (``ReasonCode``).
- ``replay_contract`` runs the organ's contract authority over the exact
  reconstructed candidate frame (§9). Raising, a wrong return type, a wrong
  organ, an assessment of another frame or an id that does not reproduce is
  adapter failure (``contract_replay_unavailable``), never a verdict.
  ``runnable == False`` is ``contract_refused`` and proof replay never runs.
- ``replay_proofs`` discharges every declared obligation in order (§10); any
  authority failure refuses the whole attempt (``proof_replay_unavailable``),
  never a partial result. An empty policy closes only under an explicit
  ``NoProofObligationsApplicable`` declaration.
- ``dispose`` maps the typed proof outcomes to a disposition.
- Identities are populated on a refusal only once the whole identity chain
  has been validated (§7.2: "without guessing"); earlier refusals carry
  ``None``.
- Calling a transition with the wrong state is programmer misuse and raises
  ``ReplayMisuseError``; every defect of the input is a refusal value.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from enum import Enum
from typing import Final, assert_never, cast, final

import attrs
from attrs import AttrsInstance

from kernel.frames import DeltaRefusal, ProblemFrame, apply_delta, delta_digest, frame_digest
from kernel.identity import IdentityError, check_domain
from kernel.replay._authority import (
    AuthorityManifest,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    proof_outcome_id_of,
)
from kernel.replay._records import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayRequest,
    input_digest_of,
    refusal_id_of,
    result_id_of,
)
from kernel.upstream import (
    SCHEMA_VERSIONS,
    CandidateAttempt,
    CandidateReconstruction,
    ComputeBudgetDecision,
    ContractAssessment,
    ContractResidual,
    GeometricSearchRun,
    SearchGateDecision,
    assessment_id_of,
    attempt_id_of,
    budget_id_of,
    candidate_digest_of,
    gate_decision_id_of,
    reconstruction_digest_of,
    residual_id_of,
    residuals_for,
    run_id_of,
    run_input_digest,
)

__all__ = [
    "SUPPORTED_UPSTREAM_POLICIES",
    "ContractClosed",
    "ProofsReplayed",
    "ReasonCode",
    "ReplayMisuseError",
    "Validated",
    "dispose",
    "refuse_malformed_attempt",
    "replay_attempt",
    "replay_contract",
    "replay_proofs",
    "validate",
]

# Upstream policy versions this adapter knows how to read (§6: every policy
# version is supported explicitly).
SUPPORTED_UPSTREAM_POLICIES: Final = {
    "run": frozenset({"geometric_search_run.v1"}),
    "gate": frozenset({"search_gate.v1"}),
    "budget": frozenset({"compute_budget.v1"}),
}
_SUPPORTED_SCHEMAS: Final = dict(SCHEMA_VERSIONS)
D = ReplayDisposition


class ReasonCode(Enum):
    """Stable reason codes; each names the one check that failed or the verdict's cause."""

    # invalid_replay_input: structure
    REQUEST_NOT_A_REPLAY_REQUEST = "request_not_a_replay_request"
    ATTEMPT_MALFORMED = "attempt_malformed"
    REQUEST_FIELD_WRONG_TYPE = "request_field_wrong_type"
    RECORD_STRUCTURE_INVALID = "record_structure_invalid"
    RECORD_NOT_CANONICAL = "record_not_canonical"
    SCHEMA_VERSIONS_NOT_CANONICAL = "schema_versions_not_canonical"
    SCHEMA_VERSION_MISSING = "schema_version_missing"
    # unsupported_replay_policy
    REPLAY_POLICY_UNSUPPORTED = "replay_policy_unsupported"
    RUN_POLICY_UNSUPPORTED = "run_policy_unsupported"
    GATE_POLICY_UNSUPPORTED = "gate_policy_unsupported"
    BUDGET_POLICY_UNSUPPORTED = "budget_policy_unsupported"
    # unsupported_schema_version
    SCHEMA_UNKNOWN = "schema_unknown"
    SCHEMA_VERSION_UNSUPPORTED = "schema_version_unsupported"
    # candidate_identity_mismatch (§6 order, then §11)
    RUN_ID_MISMATCH = "run_id_mismatch"
    RUN_INPUT_DIGEST_MISMATCH = "run_input_digest_mismatch"
    RUN_POLICY_VERSION_MISMATCH = "run_policy_version_mismatch"
    RUN_ATTEMPTS_INCONSISTENT = "run_attempts_inconsistent"
    ATTEMPT_INDEX_OUT_OF_RANGE = "attempt_index_out_of_range"
    ATTEMPT_NOT_AT_INDEX = "attempt_not_at_index"
    ATTEMPT_ID_MISMATCH = "attempt_id_mismatch"
    ORIGINAL_FRAME_MISMATCH = "original_frame_mismatch"
    CANDIDATE_FRAME_DIGEST_MISMATCH = "candidate_frame_digest_mismatch"
    FRAME_DELTA_DIGEST_MISMATCH = "frame_delta_digest_mismatch"
    FRAME_DELTA_DOES_NOT_RECONSTRUCT = "frame_delta_does_not_reconstruct"
    CANDIDATE_SOURCE_TEXT_ALTERED = "candidate_source_text_altered"
    CANDIDATE_CONTENT_MISMATCH = "candidate_content_mismatch"
    CANDIDATE_DIGEST_MISMATCH = "candidate_digest_mismatch"
    RECONSTRUCTION_DIGEST_MISMATCH = "reconstruction_digest_mismatch"
    RECONSTRUCTION_NOT_FOR_ATTEMPT = "reconstruction_not_for_attempt"
    EVIDENCE_SPANS_MISMATCH = "evidence_spans_mismatch"
    OPERATOR_MISMATCH = "operator_mismatch"
    OPERATOR_SET_MISMATCH = "operator_set_mismatch"
    PROBLEM_FRAME_CHAIN_MISMATCH = "problem_frame_chain_mismatch"
    ASSESSMENT_CHAIN_MISMATCH = "assessment_chain_mismatch"
    RESIDUAL_CHAIN_MISMATCH = "residual_chain_mismatch"
    GATE_CHAIN_MISMATCH = "gate_chain_mismatch"
    GATE_DID_NOT_PERMIT_SEARCH = "gate_did_not_permit_search"
    BUDGET_CHAIN_MISMATCH = "budget_chain_mismatch"
    RUN_EXCEEDS_BUDGET = "run_exceeds_budget"
    ASSESSMENT_ID_MISMATCH = "assessment_id_mismatch"
    ORIGINAL_ASSESSMENT_NOT_REFUSED = "original_assessment_not_refused"
    CANDIDATE_ORGAN_MISMATCH = "candidate_organ_mismatch"
    INPUT_DIGEST_MISMATCH = "input_digest_mismatch"
    # contract_replay_unavailable
    CONTRACT_AUTHORITY_MISSING = "contract_authority_missing"
    CONTRACT_TARGET_NOT_ALLOWLISTED = "contract_target_not_allowlisted"
    CONTRACT_AUTHORITY_RAISED = "contract_authority_raised"
    CONTRACT_OUTCOME_MALFORMED = "contract_outcome_malformed"
    CONTRACT_OUTCOME_WRONG_ORGAN = "contract_outcome_wrong_organ"
    CONTRACT_OUTCOME_NOT_BOUND = "contract_outcome_not_bound"
    CONTRACT_OUTCOME_ID_INVALID = "contract_outcome_id_invalid"
    CONTRACT_OUTCOME_INCONSISTENT = "contract_outcome_inconsistent"
    # unsupported_proof_obligation
    PROOF_POLICY_MISSING = "proof_policy_missing"
    PROOF_OBLIGATION_UNKNOWN = "proof_obligation_unknown"
    PROOF_OBLIGATIONS_NOT_POLICY = "proof_obligations_not_policy"
    # proof_replay_unavailable
    PROOF_AUTHORITY_RAISED = "proof_authority_raised"
    PROOF_OUTCOME_MALFORMED = "proof_outcome_malformed"
    PROOF_OUTCOME_NOT_BOUND = "proof_outcome_not_bound"
    PROOF_OUTCOME_WRONG_AUTHORITY = "proof_outcome_wrong_authority"
    PROOF_OUTCOME_ID_INVALID = "proof_outcome_id_invalid"
    PROOF_EVIDENCE_MALFORMED = "proof_evidence_malformed"
    PROOF_EVIDENCE_UNEXPECTED = "proof_evidence_unexpected"
    # semantic results
    NO_PROOF_OBLIGATION_APPLICABLE = "no_proof_obligation_applicable"


@final
class ReplayMisuseError(TypeError):
    """A transition was called with a value that is not its input state."""


# --- states ------------------------------------------------------------------


@final
@attrs.frozen
class Validated:
    """The request passed every §6 check; authorities are resolved from the manifest."""

    request: ReplayRequest
    candidate_frame: ProblemFrame
    contract_authority: ContractAuthority
    proof_policy: ProofObligations | NoProofObligationsApplicable
    proof_authorities: tuple[ProofAuthority, ...]


@final
@attrs.frozen
class ContractClosed:
    """Contract replay ran over the exact candidate and found it runnable."""

    validated: Validated
    contract_replay: ContractAssessment


@final
@attrs.frozen
class ProofsReplayed:
    """Every declared obligation returned a lawful, bound outcome, in order."""

    contract_closed: ContractClosed
    outcomes: tuple[ProofOutcome, ...]


# --- output builders (the only place outcomes are made) -----------------------


class _Refuse(Exception):
    """Internal: a failed check, carrying its disposition and reason."""

    def __init__(self, disposition: ReplayDisposition, code: ReasonCode, detail: str) -> None:
        super().__init__(detail)
        self.disposition = disposition
        self.code = code
        self.detail = detail


def _refusal(
    disposition: ReplayDisposition,
    code: ReasonCode,
    detail: str,
    bound: ReplayAdapterInput | None = None,
) -> ReplayAdapterRefusal:
    draft = ReplayAdapterRefusal(
        replay_refusal_id="0" * 64,
        replay_policy_version=CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        input_digest=bound.input_digest if bound else None,
        run_id=bound.run_id if bound else None,
        attempt_id=bound.attempt_id if bound else None,
        candidate_digest=bound.candidate_digest if bound else None,
        replay_disposition=disposition,
        reason_codes=(code.value,),
        explanation=f"{disposition.value}: {code.value}: {detail}",
    )
    return attrs.evolve(draft, replay_refusal_id=refusal_id_of(draft))


def _result(
    validated: Validated,
    contract_replay: ContractAssessment,
    disposition: ReplayDisposition,
    reason_codes: Sequence[str],
    proof_replay_refs: Sequence[str],
    explanation: str,
) -> ReplayAdapterResult:
    replay_input = validated.request.replay_input
    draft = ReplayAdapterResult(
        replay_result_id="0" * 64,
        replay_policy_version=CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        input_digest=replay_input.input_digest,
        run_id=replay_input.run_id,
        attempt_id=replay_input.attempt_id,
        candidate_digest=replay_input.candidate_digest,
        contract_replay_assessment_id=contract_replay.assessment_id,
        proof_obligation_refs=replay_input.proof_obligation_refs,
        proof_replay_refs=tuple(proof_replay_refs),
        replay_disposition=disposition,
        reason_codes=tuple(reason_codes),
        # §7.1: the reconstruction's exact ordered spans, never merged or sorted.
        evidence_spans=validated.request.reconstruction.evidence_spans,
        explanation=explanation,
    )
    return attrs.evolve(draft, replay_result_id=result_id_of(draft))


def refuse_malformed_attempt(attempt_index: int, detail: str) -> ReplayAdapterRefusal:
    """The typed refusal for the attempt at ``attempt_index`` that could not be read.

    For a bundle whose envelope (the run and its upstream chain) is sound but
    one of whose attempts (its input or reconstruction) is malformed: that
    attempt alone is ``invalid_replay_input`` (ADR-0229 §16) and the others are
    still classified. No identity of the attempt was validated, so none is
    reported (§7.2). ``detail`` says what was wrong; characters outside the
    identity domain (a lone surrogate quoted from hostile input) are escaped.
    Raises ``TypeError``/``ValueError`` for a non-int or negative index
    (caller misuse).
    """
    if type(attempt_index) is not int or type(detail) is not str:
        raise TypeError("attempt_index must be int and detail str")
    if attempt_index < 0:
        raise ValueError(f"attempt_index must be >= 0, got {attempt_index}")
    safe = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return _refusal(
        D.INVALID_REPLAY_INPUT,
        ReasonCode.ATTEMPT_MALFORMED,
        f"attempt {attempt_index}: {safe}",
    )


# --- validate ------------------------------------------------------------------


def _require(
    condition: bool, disposition: ReplayDisposition, code: ReasonCode, detail: str
) -> None:
    if not condition:
        raise _Refuse(disposition, code, detail)


_REQUEST_FIELDS: Final = (
    ("replay_input", ReplayAdapterInput),
    ("problem_frame", ProblemFrame),
    ("assessment", ContractAssessment),
    ("gate", SearchGateDecision),
    ("budget", ComputeBudgetDecision),
    ("run", GeometricSearchRun),
    ("attempt", CandidateAttempt),
    ("reconstruction", CandidateReconstruction),
)


def _check_structure(request: object) -> tuple[ReplayRequest, _RunFacts]:
    bad = D.INVALID_REPLAY_INPUT
    # Exactly the type: a subclass could answer each field read differently.
    _require(
        type(request) is ReplayRequest,
        bad,
        ReasonCode.REQUEST_NOT_A_REPLAY_REQUEST,
        f"expected a ReplayRequest, got {type(request).__name__}",
    )
    assert isinstance(request, ReplayRequest)
    for name, kind in _REQUEST_FIELDS:
        value = getattr(request, name)
        _require(
            type(value) is kind,
            bad,
            ReasonCode.REQUEST_FIELD_WRONG_TYPE,
            f"{name} must be {kind.__name__}, got {type(value).__name__}",
        )
    _require(
        type(request.residuals) is tuple
        and all(type(r) is ContractResidual for r in request.residuals),
        bad,
        ReasonCode.REQUEST_FIELD_WRONG_TYPE,
        "residuals must be a tuple of ContractResidual",
    )
    # Records are validated on construction; re-run the validators in case a
    # frozen value was altered behind attrs' back (object.__setattr__).
    run_facts = _examine_run(request.run)
    if run_facts.structure_error is not None:
        raise _Refuse(bad, ReasonCode.RECORD_STRUCTURE_INVALID, run_facts.structure_error)
    try:
        for name, _ in _REQUEST_FIELDS:
            if name != "run":
                _validate_deep(getattr(request, name))
        for residual in request.residuals:
            _validate_deep(residual)
    except (TypeError, ValueError) as exc:
        raise _Refuse(bad, ReasonCode.RECORD_STRUCTURE_INVALID, str(exc)) from exc
    # Every record must lie in the identity domain (a str field may still hold
    # a lone surrogate when built in memory); later digests then cannot raise.
    if run_facts.canonical_error is not None:
        raise _Refuse(bad, ReasonCode.RECORD_NOT_CANONICAL, run_facts.canonical_error)
    try:
        for name, _ in _REQUEST_FIELDS:
            if name != "run":
                _canonical_payloads(getattr(request, name))
        for residual in request.residuals:
            _canonical_payloads(residual)
    except IdentityError as exc:
        raise _Refuse(bad, ReasonCode.RECORD_NOT_CANONICAL, str(exc)) from exc
    names = [name for name, _ in request.replay_input.schema_versions]
    _require(
        names == sorted(set(names)),
        bad,
        ReasonCode.SCHEMA_VERSIONS_NOT_CANONICAL,
        "schema_versions must hold unique names in ascending order",
    )
    missing = sorted(set(_SUPPORTED_SCHEMAS) - set(names))
    _require(
        not missing,
        bad,
        ReasonCode.SCHEMA_VERSION_MISSING,
        f"schema_versions lacks {', '.join(missing)}",
    )
    return request, run_facts


def _canonical_payloads(record: object) -> None:
    if isinstance(record, ProblemFrame):
        frame_digest(record)
    elif isinstance(record, CandidateReconstruction):
        reconstruction_digest_of(record)
        if record.candidate_problem_frame is not None:
            frame_digest(record.candidate_problem_frame)
        if record.frame_delta is not None:
            delta_digest(record.frame_delta)
    elif isinstance(
        record,
        ReplayAdapterInput
        | ContractAssessment
        | ContractResidual
        | SearchGateDecision
        | ComputeBudgetDecision
        | CandidateAttempt,
    ):
        check_domain(record.payload())


@final
@attrs.frozen
class _RunFacts:
    """What validation needs to know about a run, all of it a function of its value."""

    structure_error: str | None
    canonical_error: str | None
    run_id: str | None
    attempts_consistent: bool


def _compute_run_facts(run: GeometricSearchRun) -> _RunFacts:
    try:
        _validate_deep(run)
    except (TypeError, ValueError) as exc:
        return _RunFacts(str(exc), None, None, False)
    try:
        run_id = run_id_of(run)
    except IdentityError as exc:
        return _RunFacts(None, str(exc), None, False)
    # The run id covers each attempt's content but not the derived attempt
    # ids, so every attempt in the run is checked too: a run carrying one
    # forged sibling attempt is not the immutable run the search recorded.
    consistent = all(
        a.attempt_index == position
        and a.run_id == run.run_id
        and a.input_digest == run.input_digest
        and attempt_id_of(a) == a.attempt_id
        for position, a in enumerate(run.candidate_attempts)
    )
    return _RunFacts(None, None, run_id, consistent)


_cached_run_facts = functools.lru_cache(maxsize=16)(_compute_run_facts)


def _examine_run(run: GeometricSearchRun) -> _RunFacts:
    """Run-wide checks, memoised by the run's value.

    Classifying every attempt of one run would otherwise repeat these O(run)
    checks per attempt (quadratic in the run's size). Frozen records hash and
    compare by content, so a changed run is a different key; a run that cannot
    be hashed (altered behind attrs' back) is examined uncached.
    """
    try:
        return _cached_run_facts(run)
    except TypeError:  # unhashable: lru_cache cannot key it
        return _compute_run_facts(run)


def _validate_deep(value: object) -> None:
    kind = type(value)
    if attrs.has(kind):
        attrs.validate(cast("AttrsInstance", value))
        for field in attrs.fields(kind):
            _validate_deep(getattr(value, field.name))
    elif isinstance(value, tuple):
        for item in value:
            _validate_deep(item)


def _check_policies(request: ReplayRequest) -> None:
    bad = D.UNSUPPORTED_REPLAY_POLICY
    replay_input = request.replay_input
    _require(
        replay_input.replay_policy_version == CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        bad,
        ReasonCode.REPLAY_POLICY_UNSUPPORTED,
        f"replay policy {replay_input.replay_policy_version!r} is not supported",
    )
    _require(
        replay_input.run_policy_version in SUPPORTED_UPSTREAM_POLICIES["run"],
        bad,
        ReasonCode.RUN_POLICY_UNSUPPORTED,
        f"run policy {replay_input.run_policy_version!r} is not supported",
    )
    _require(
        request.gate.gate_policy_version in SUPPORTED_UPSTREAM_POLICIES["gate"],
        bad,
        ReasonCode.GATE_POLICY_UNSUPPORTED,
        f"gate policy {request.gate.gate_policy_version!r} is not supported",
    )
    _require(
        request.budget.budget_policy_version in SUPPORTED_UPSTREAM_POLICIES["budget"],
        bad,
        ReasonCode.BUDGET_POLICY_UNSUPPORTED,
        f"budget policy {request.budget.budget_policy_version!r} is not supported",
    )


def _check_schemas(request: ReplayRequest) -> None:
    bad = D.UNSUPPORTED_SCHEMA_VERSION
    for name, version in request.replay_input.schema_versions:
        _require(
            name in _SUPPORTED_SCHEMAS,
            bad,
            ReasonCode.SCHEMA_UNKNOWN,
            f"schema {name!r} is not known to this adapter",
        )
        _require(
            _SUPPORTED_SCHEMAS[name] == version,
            bad,
            ReasonCode.SCHEMA_VERSION_UNSUPPORTED,
            f"schema {name!r} version {version!r} is not supported",
        )


def _reconstruct_candidate(request: ReplayRequest) -> ProblemFrame:
    """§6.1/§11: the one exact candidate frame, recomputed from the values supplied."""
    mismatch = D.CANDIDATE_IDENTITY_MISMATCH
    rec, original = request.reconstruction, request.problem_frame
    _require(
        rec.original_problem_frame_digest == frame_digest(original),
        mismatch,
        ReasonCode.ORIGINAL_FRAME_MISMATCH,
        "reconstruction does not bind back to the original problem frame",
    )
    frame: ProblemFrame
    if rec.candidate_problem_frame is not None:
        frame = rec.candidate_problem_frame
        _require(
            rec.candidate_problem_frame_digest == frame_digest(frame),
            mismatch,
            ReasonCode.CANDIDATE_FRAME_DIGEST_MISMATCH,
            "candidate_problem_frame_digest does not reproduce",
        )
    else:
        delta = rec.frame_delta
        assert delta is not None  # the constructor guarantees exactly one
        _require(
            rec.frame_delta_digest == delta_digest(delta),
            mismatch,
            ReasonCode.FRAME_DELTA_DIGEST_MISMATCH,
            "frame_delta_digest does not reproduce",
        )
        applied = apply_delta(original, delta)
        if isinstance(applied, DeltaRefusal):
            raise _Refuse(mismatch, ReasonCode.FRAME_DELTA_DOES_NOT_RECONSTRUCT, applied.detail)
        frame = applied
    _require(
        frame.source_text == original.source_text,
        mismatch,
        ReasonCode.CANDIDATE_SOURCE_TEXT_ALTERED,
        "the candidate alters the source text",
    )
    _require(
        (rec.candidate_bindings, rec.candidate_relations, rec.candidate_targets)
        == (frame.bindings, frame.relations, frame.targets),
        mismatch,
        ReasonCode.CANDIDATE_CONTENT_MISMATCH,
        "candidate bindings/relations/targets differ from the reconstructed frame",
    )
    return frame


def _check_identity_chain(request: ReplayRequest, run_facts: _RunFacts) -> ProblemFrame:
    """§6 items 1-10 and 15, §11; every identity is recomputed, never compared alone."""
    mismatch = D.CANDIDATE_IDENTITY_MISMATCH
    replay_input, run, attempt = request.replay_input, request.run, request.attempt
    rec = request.reconstruction

    def need(condition: bool, code: ReasonCode, detail: str) -> None:
        _require(condition, mismatch, code, detail)

    # 1. run_id reproduces from the supplied immutable run.
    need(
        run_facts.run_id == run.run_id == replay_input.run_id,
        ReasonCode.RUN_ID_MISMATCH,
        "run_id does not reproduce from the supplied run",
    )
    need(
        run_input_digest(run.run_input) == run.input_digest,
        ReasonCode.RUN_INPUT_DIGEST_MISMATCH,
        "the run's input_digest does not reproduce from its input",
    )
    need(
        run.run_policy_version == replay_input.run_policy_version,
        ReasonCode.RUN_POLICY_VERSION_MISMATCH,
        "run_policy_version differs from the run's",
    )
    # The run id covers each attempt's content but not the derived attempt
    # ids, so every attempt in the run is checked too: a run carrying one
    # forged sibling attempt is not the immutable run the search recorded.
    need(
        run_facts.attempts_consistent,
        ReasonCode.RUN_ATTEMPTS_INCONSISTENT,
        "an attempt of the run does not reproduce its id, position, run or input",
    )
    # 2. attempt_index addresses exactly the supplied attempt.
    index = replay_input.attempt_index
    need(
        index < len(run.candidate_attempts),
        ReasonCode.ATTEMPT_INDEX_OUT_OF_RANGE,
        f"attempt_index {index} is outside the run's {len(run.candidate_attempts)} attempts",
    )
    need(
        run.candidate_attempts[index] == attempt and attempt.attempt_index == index,
        ReasonCode.ATTEMPT_NOT_AT_INDEX,
        f"the attempt at index {index} is not the supplied attempt",
    )
    # 3-4. The supplied attempt is the run's attempt at that index, and every
    # run attempt already reproduced its id, belongs to run_id and carries
    # the run's input digest (run_attempts_inconsistent above); what is left
    # is that the input names this attempt.
    need(
        attempt_id_of(attempt) == attempt.attempt_id == replay_input.attempt_id,
        ReasonCode.ATTEMPT_ID_MISMATCH,
        "the input's attempt_id is not the supplied attempt's reproduced id",
    )
    # 5. candidate_digest: recomputed from the candidate content itself.
    candidate_frame = _reconstruct_candidate(request)
    recomputed = candidate_digest_of(rec)
    need(
        recomputed
        == rec.candidate_digest
        == attempt.candidate_digest
        == replay_input.candidate_digest,
        ReasonCode.CANDIDATE_DIGEST_MISMATCH,
        "candidate_digest does not reproduce from the candidate content",
    )
    # 6. the reconstruction envelope self-seals and names this run and attempt.
    need(
        reconstruction_digest_of(rec)
        == rec.candidate_reconstruction_digest
        == replay_input.candidate_reconstruction_digest,
        ReasonCode.RECONSTRUCTION_DIGEST_MISMATCH,
        "candidate_reconstruction_digest does not reproduce",
    )
    need(
        rec.run_id == run.run_id and rec.attempt_id == attempt.attempt_id,
        ReasonCode.RECONSTRUCTION_NOT_FOR_ATTEMPT,
        "the reconstruction names another run or attempt",
    )
    # 7. spans: exact, ordered, duplicates kept (tuple equality, no set logic).
    need(
        rec.evidence_spans == candidate_frame.evidence_spans,
        ReasonCode.EVIDENCE_SPANS_MISMATCH,
        "reconstruction spans differ from the candidate frame's (order and duplicates count)",
    )
    # 8. operator provenance.
    need(
        (rec.operator_id, rec.operator_version) == (attempt.operator_id, attempt.operator_version),
        ReasonCode.OPERATOR_MISMATCH,
        "operator id/version differ from the attempt's",
    )
    run_ops = (run.run_input.operator_set_id, run.run_input.operator_set_version)
    need(
        (rec.operator_set_id, rec.operator_set_version)
        == run_ops
        == (replay_input.operator_set_id, replay_input.operator_set_version),
        ReasonCode.OPERATOR_SET_MISMATCH,
        "operator set differs from the run's",
    )
    # 9. the original chain bound into the run input.
    _check_upstream_chain(request)
    # 15. input_digest reproduces from the complete structural payload.
    need(
        input_digest_of(replay_input) == replay_input.input_digest,
        ReasonCode.INPUT_DIGEST_MISMATCH,
        "input_digest does not reproduce",
    )
    return candidate_frame


def _check_upstream_chain(request: ReplayRequest) -> None:
    """§6 items 9-10: frame, assessment, residuals, gate and budget as bound into the run."""
    mismatch = D.CANDIDATE_IDENTITY_MISMATCH
    replay_input, run_input = request.replay_input, request.run.run_input
    assessment, gate, budget = request.assessment, request.gate, request.budget

    def need(condition: bool, code: ReasonCode, detail: str) -> None:
        _require(condition, mismatch, code, detail)

    frame_id = frame_digest(request.problem_frame)
    need(
        frame_id
        == run_input.problem_frame_digest
        == replay_input.problem_frame_digest
        == assessment.problem_frame_digest,
        ReasonCode.PROBLEM_FRAME_CHAIN_MISMATCH,
        "problem frame identity differs along the chain",
    )
    need(
        assessment_id_of(assessment) == assessment.assessment_id,
        ReasonCode.ASSESSMENT_ID_MISMATCH,
        "the original assessment's id does not reproduce",
    )
    need(
        assessment.assessment_id
        == run_input.original_contract_assessment_id
        == replay_input.original_contract_assessment_id,
        ReasonCode.ASSESSMENT_CHAIN_MISMATCH,
        "assessment identity differs along the chain",
    )
    expected_residuals = residuals_for(assessment)
    supplied_ids = tuple(r.residual_id for r in request.residuals)
    need(
        all(residual_id_of(r) == r.residual_id for r in request.residuals)
        and request.residuals == expected_residuals
        and supplied_ids == run_input.residual_ids == replay_input.residual_ids,
        ReasonCode.RESIDUAL_CHAIN_MISMATCH,
        "residuals do not reproduce from the assessment or differ along the chain",
    )
    need(
        gate_decision_id_of(gate)
        == gate.gate_decision_id
        == run_input.gate_decision_id
        == replay_input.gate_decision_id
        and gate.assessment_id == assessment.assessment_id
        and gate.residual_ids == supplied_ids,
        ReasonCode.GATE_CHAIN_MISMATCH,
        "gate decision does not reproduce or bind the chain",
    )
    need(
        gate.search_permitted,
        ReasonCode.GATE_DID_NOT_PERMIT_SEARCH,
        "the gate decision did not permit search",
    )
    need(
        budget_id_of(budget) == budget.budget_id == run_input.budget_id == replay_input.budget_id
        and budget.gate_decision_id == gate.gate_decision_id,
        ReasonCode.BUDGET_CHAIN_MISMATCH,
        "budget decision does not reproduce or bind the gate",
    )
    need(
        len(request.run.candidate_attempts) <= budget.max_attempts,
        ReasonCode.RUN_EXCEEDS_BUDGET,
        "the run holds more attempts than its budget granted",
    )
    need(
        not assessment.runnable,
        ReasonCode.ORIGINAL_ASSESSMENT_NOT_REFUSED,
        "the original assessment is runnable, so there is nothing to replay",
    )
    need(
        assessment.candidate_organ == replay_input.candidate_organ,
        ReasonCode.CANDIDATE_ORGAN_MISMATCH,
        "candidate_organ differs from the assessment's",
    )


def _resolve_contract(request: ReplayRequest, manifest: AuthorityManifest) -> ContractAuthority:
    """§6 item 11, §9: the static allowlist, no dynamic lookup, no fallback."""
    organ = request.replay_input.candidate_organ
    authority = manifest.contract_authorities.get(organ)
    if authority is None:
        raise _Refuse(
            D.CONTRACT_REPLAY_UNAVAILABLE,
            ReasonCode.CONTRACT_AUTHORITY_MISSING,
            f"no contract authority is allowlisted for organ {organ!r}",
        )
    _require(
        request.replay_input.contract_replay_target == authority.target,
        D.CONTRACT_REPLAY_UNAVAILABLE,
        ReasonCode.CONTRACT_TARGET_NOT_ALLOWLISTED,
        f"target {request.replay_input.contract_replay_target!r} is not the allowlisted "
        f"{authority.target!r} for organ {organ!r}",
    )
    return authority


def _resolve_proofs(
    request: ReplayRequest, manifest: AuthorityManifest
) -> tuple[ProofObligations | NoProofObligationsApplicable, tuple[ProofAuthority, ...]]:
    """§6 item 12, §10: exactly the policy's list; nothing added, dropped or reordered."""
    bad = D.UNSUPPORTED_PROOF_OBLIGATION
    organ = request.replay_input.candidate_organ
    refs = request.replay_input.proof_obligation_refs
    policy = manifest.proof_policies.get(organ)
    if policy is None:
        raise _Refuse(
            bad,
            ReasonCode.PROOF_POLICY_MISSING,
            f"organ {organ!r} has no proof policy, not even a 'none applicable' one",
        )
    for ref in refs:
        _require(
            ref in manifest.proof_authorities,
            bad,
            ReasonCode.PROOF_OBLIGATION_UNKNOWN,
            f"obligation {ref!r} is not supported",
        )
    declared: tuple[str, ...]
    match policy:
        case ProofObligations():
            declared = policy.refs
        case NoProofObligationsApplicable():
            declared = ()
        case _:
            assert_never(policy)
    _require(
        refs == declared,
        bad,
        ReasonCode.PROOF_OBLIGATIONS_NOT_POLICY,
        f"obligations {list(refs)} are not exactly the policy's {list(declared)}",
    )
    return policy, tuple(manifest.proof_authorities[ref] for ref in declared)


def validate(request: object, manifest: AuthorityManifest) -> Validated | ReplayAdapterRefusal:
    """Run every §6 check in order; the first failure is the refusal. Calls no authority."""
    try:
        checked, run_facts = _check_structure(request)
        _check_policies(checked)
        _check_schemas(checked)
        candidate_frame = _check_identity_chain(checked, run_facts)
    except _Refuse as refused:
        return _refusal(refused.disposition, refused.code, refused.detail)
    # From here on every identity in the input has been recomputed and may be
    # reported on the refusal.
    try:
        contract = _resolve_contract(checked, manifest)
        policy, proof_authorities = _resolve_proofs(checked, manifest)
    except _Refuse as refused:
        return _refusal(refused.disposition, refused.code, refused.detail, checked.replay_input)
    return Validated(checked, candidate_frame, contract, policy, proof_authorities)


# --- replay_contract -----------------------------------------------------------


def _contract_outcome(state: Validated) -> ContractAssessment:
    unavailable = D.CONTRACT_REPLAY_UNAVAILABLE
    authority = state.contract_authority
    try:
        outcome: object = authority.assess(state.candidate_frame)
    except Exception as exc:  # any failure of the authority is adapter failure (§8)
        raise _Refuse(
            unavailable,
            ReasonCode.CONTRACT_AUTHORITY_RAISED,
            f"{authority.target} raised {type(exc).__name__}: {exc}",
        ) from exc
    _require(
        type(outcome) is ContractAssessment,
        unavailable,
        ReasonCode.CONTRACT_OUTCOME_MALFORMED,
        f"{authority.target} returned {type(outcome).__name__}, not a ContractAssessment",
    )
    assert isinstance(outcome, ContractAssessment)
    try:
        _validate_deep(outcome)
        check_domain(outcome.payload())
    except (TypeError, ValueError) as exc:  # IdentityError is a ValueError
        raise _Refuse(unavailable, ReasonCode.CONTRACT_OUTCOME_MALFORMED, str(exc)) from exc
    organ = state.request.replay_input.candidate_organ
    _require(
        outcome.candidate_organ == organ,
        unavailable,
        ReasonCode.CONTRACT_OUTCOME_WRONG_ORGAN,
        f"{authority.target} assessed organ {outcome.candidate_organ!r}, not {organ!r}",
    )
    _require(
        outcome.problem_frame_digest == frame_digest(state.candidate_frame),
        unavailable,
        ReasonCode.CONTRACT_OUTCOME_NOT_BOUND,
        f"{authority.target} assessed another frame than the candidate",
    )
    _require(
        assessment_id_of(outcome) == outcome.assessment_id,
        unavailable,
        ReasonCode.CONTRACT_OUTCOME_ID_INVALID,
        f"{authority.target} returned an assessment whose id does not reproduce",
    )
    # A runnable verdict that still lists blockers contradicts itself; it is
    # the authority failing, not a closure (and not a refusal to trust either).
    _require(
        not (outcome.runnable and (outcome.missing_bindings or outcome.unresolved_hazards)),
        unavailable,
        ReasonCode.CONTRACT_OUTCOME_INCONSISTENT,
        f"{authority.target} called the candidate runnable while listing blockers",
    )
    return outcome


def replay_contract(
    state: Validated,
) -> ContractClosed | ReplayAdapterResult | ReplayAdapterRefusal:
    """§9: replay the organ's contract over the exact candidate frame."""
    if not isinstance(state, Validated):
        raise ReplayMisuseError(f"replay_contract needs Validated, got {type(state).__name__}")
    try:
        outcome = _contract_outcome(state)
    except _Refuse as refused:
        return _refusal(
            refused.disposition, refused.code, refused.detail, state.request.replay_input
        )
    if outcome.runnable:
        return ContractClosed(state, outcome)
    # §9: refusal evidence in the authority's own order; proofs never run.
    reasons = [f"missing_binding:{m}" for m in outcome.missing_bindings]
    reasons += [f"hazard:{h}" for h in outcome.unresolved_hazards]
    return _result(
        state,
        outcome,
        D.CONTRACT_REFUSED,
        reasons,
        (),
        f"contract_refused by {state.contract_authority.target}: "
        + (", ".join(reasons) or "no reason given")
        + (f". {outcome.explanation}" if outcome.explanation else ""),
    )


# --- replay_proofs ---------------------------------------------------------------


def _proof_outcome(
    state: ContractClosed,
    ref: str,
    authority: ProofAuthority,
    evidence: tuple[ProofEvidence, ...],
) -> ProofOutcome:
    unavailable = D.PROOF_REPLAY_UNAVAILABLE
    replay_input = state.validated.request.replay_input
    context = ProofContext(
        ref,
        replay_input.candidate_digest,
        state.validated.candidate_frame,
        state.contract_replay,
        tuple(item for item in evidence if item.obligation_ref == ref),
    )
    label = f"{authority.authority_id}@{authority.authority_version} for {ref!r}"
    try:
        outcome: object = authority.prove(context)
    except Exception as exc:  # any failure of the authority is adapter failure (§10)
        raise _Refuse(
            unavailable,
            ReasonCode.PROOF_AUTHORITY_RAISED,
            f"{label} raised {type(exc).__name__}: {exc}",
        ) from exc
    _require(
        type(outcome) is ProofOutcome,
        unavailable,
        ReasonCode.PROOF_OUTCOME_MALFORMED,
        f"{label} returned {type(outcome).__name__}, not a ProofOutcome",
    )
    assert isinstance(outcome, ProofOutcome)
    try:
        _validate_deep(outcome)
        check_domain(outcome.payload())
    except (TypeError, ValueError) as exc:  # IdentityError is a ValueError
        raise _Refuse(unavailable, ReasonCode.PROOF_OUTCOME_MALFORMED, str(exc)) from exc
    _require(
        outcome.obligation_ref == ref and outcome.candidate_digest == replay_input.candidate_digest,
        unavailable,
        ReasonCode.PROOF_OUTCOME_NOT_BOUND,
        f"{label} returned an outcome for another obligation or candidate",
    )
    _require(
        (outcome.authority_id, outcome.authority_version)
        == (authority.authority_id, authority.authority_version),
        unavailable,
        ReasonCode.PROOF_OUTCOME_WRONG_AUTHORITY,
        f"{label} returned an outcome signed by another authority",
    )
    _require(
        proof_outcome_id_of(outcome) == outcome.proof_outcome_id,
        unavailable,
        ReasonCode.PROOF_OUTCOME_ID_INVALID,
        f"{label} returned an outcome whose id does not reproduce",
    )
    return outcome


def _check_evidence(evidence: object, refs: tuple[str, ...]) -> tuple[ProofEvidence, ...]:
    unavailable = D.PROOF_REPLAY_UNAVAILABLE
    _require(
        isinstance(evidence, tuple | list)
        and all(type(item) is ProofEvidence for item in evidence),
        unavailable,
        ReasonCode.PROOF_EVIDENCE_MALFORMED,
        "evidence must be a sequence of ProofEvidence",
    )
    assert isinstance(evidence, tuple | list)
    items = tuple(evidence)
    try:
        for item in items:
            _validate_deep(item)
    except (TypeError, ValueError) as exc:
        raise _Refuse(unavailable, ReasonCode.PROOF_EVIDENCE_MALFORMED, str(exc)) from exc
    # Evidence for an obligation the policy does not declare is a wiring
    # error upstream; it is refused rather than silently dropped.
    stray = sorted({item.obligation_ref for item in items} - set(refs))
    _require(
        not stray,
        unavailable,
        ReasonCode.PROOF_EVIDENCE_UNEXPECTED,
        f"evidence names undeclared obligations {stray}",
    )
    return items


def replay_proofs(
    state: ContractClosed, evidence: Sequence[ProofEvidence] = ()
) -> ProofsReplayed | ReplayAdapterRefusal:
    """§10: discharge every declared obligation, in order, through its authority.

    ``evidence`` is what the caller gathered outside the pure core for the
    declared obligations; each authority sees only the items for its ref.
    """
    if not isinstance(state, ContractClosed):
        raise ReplayMisuseError(f"replay_proofs needs ContractClosed, got {type(state).__name__}")
    refs = state.validated.request.replay_input.proof_obligation_refs
    outcomes = []
    try:
        items = _check_evidence(evidence, refs)
        for ref, authority in zip(refs, state.validated.proof_authorities, strict=True):
            outcomes.append(_proof_outcome(state, ref, authority, items))
    except _Refuse as refused:
        return _refusal(
            refused.disposition, refused.code, refused.detail, state.validated.request.replay_input
        )
    return ProofsReplayed(state, tuple(outcomes))


# --- dispose ---------------------------------------------------------------------


def dispose(state: ProofsReplayed) -> ReplayAdapterResult:
    """Map the ordered proof outcomes to a semantic disposition."""
    if not isinstance(state, ProofsReplayed):
        raise ReplayMisuseError(f"dispose needs ProofsReplayed, got {type(state).__name__}")
    validated = state.contract_closed.validated
    reasons: list[str] = []
    match validated.proof_policy:
        case NoProofObligationsApplicable(policy_version=version):
            reasons.append(f"{ReasonCode.NO_PROOF_OBLIGATION_APPLICABLE.value}:{version}")
        case ProofObligations():
            pass
        case _:
            assert_never(validated.proof_policy)
    for outcome in state.outcomes:
        match outcome.status:
            case ProofStatus.CLOSED:
                continue
            case ProofStatus.REFUSED | ProofStatus.UNAVAILABLE:
                reasons.append(f"proof_{outcome.status.value}:{outcome.obligation_ref}")
                reasons += [f"{outcome.obligation_ref}:{code}" for code in outcome.reason_codes]
            case _:
                assert_never(outcome.status)
    closed = all(o.status is ProofStatus.CLOSED for o in state.outcomes)
    disposition = D.CONTRACT_AND_PROOF_CLOSED if closed else D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    summary = ", ".join(f"{o.obligation_ref}={o.status.value}" for o in state.outcomes)
    return _result(
        validated,
        state.contract_closed.contract_replay,
        disposition,
        reasons,
        [o.proof_outcome_id for o in state.outcomes],
        f"{disposition.value}: contract closed; proofs: {summary or 'none applicable'}",
    )


# --- driver ----------------------------------------------------------------------


def replay_attempt(
    request: object, manifest: AuthorityManifest, evidence: Sequence[ProofEvidence] = ()
) -> ReplayAdapterOutcome:
    """Classify one candidate attempt: a ReplayAdapterResult or a ReplayAdapterRefusal.

    Never raises for bad input; every defect is a typed refusal (ADR-0229 §16).
    """
    validated = validate(request, manifest)
    match validated:
        case ReplayAdapterRefusal():
            return validated
        case Validated():
            pass
        case _:
            assert_never(validated)
    contract = replay_contract(validated)
    match contract:
        case ReplayAdapterResult() | ReplayAdapterRefusal():
            return contract
        case ContractClosed():
            pass
        case _:
            assert_never(contract)
    proofs = replay_proofs(contract, evidence)
    match proofs:
        case ReplayAdapterRefusal():
            return proofs
        case ProofsReplayed():
            return dispose(proofs)
        case _:
            assert_never(proofs)
