"""The named guards of replay: one function per ADR-0229 check, in the words of the spec.

Rules (ADR 0011):

- A guard returns ``None`` when its rule holds and a ``Rejection`` (reason
  code and one-line detail) when it does not; a guard that also produces a
  value returns ``value | Rejection``. No guard raises for bad input and none
  builds an outcome: ``kernel/replay/_machine.py`` turns the first rejection
  into the refusal, and ``DISPOSITION_OF`` decides its disposition.
- Guards run in the order the machine lists them (first failure wins); each
  one cites the section it implements. Several rules of one §6 item are one
  guard; where the machine's order interleaves two items (9 and 10), each
  item's rules stay in their own guard.
- Guards never call an authority, except the two authority-boundary guards at
  the end (§9, §10), which call exactly one authority and judge its output.
"""

from __future__ import annotations

from typing import Final, assert_never, final

import attrs

from kernel.frames import DeltaRefusal, ProblemFrame, apply_delta, delta_digest, frame_digest
from kernel.replay._authority import (
    AuthorityManifest,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofObligations,
)
from kernel.replay._facts import (
    RunFacts,
    examine_run,
    facts_apply,
)
from kernel.replay._reasons import ReasonCode, Rejection
from kernel.replay._records import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayRequest,
    input_digest_of,
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
    run_input_digest,
)

__all__ = [
    "REQUEST_FIELDS",
    "SUPPORTED_UPSTREAM_POLICIES",
    "Examined",
    "assessment_bound",
    "assessment_reproduces",
    "attempt_at_index",
    "attempt_id_reproduces",
    "budget_bound",
    "candidate_digest_reproduces",
    "contract_target_allowlisted",
    "evidence_spans_exact",
    "gate_bound",
    "input_digest_reproduces",
    "operator_provenance_matches",
    "original_assessment_refused",
    "policies_supported",
    "problem_frame_bound",
    "proof_obligations_exact",
    "reconstruct_candidate",
    "reconstruction_envelope_reproduces",
    "residuals_bound",
    "run_reproduces",
    "schemas_supported",
    "well_formed",
]

R = ReasonCode

# Upstream policy versions this adapter knows how to read (§6: every policy
# version is supported explicitly).
SUPPORTED_UPSTREAM_POLICIES: Final = {
    "run": frozenset({"geometric_search_run.v1"}),
    "gate": frozenset({"search_gate.v1"}),
    "budget": frozenset({"compute_budget.v1"}),
}
_SUPPORTED_SCHEMAS: Final = dict(SCHEMA_VERSIONS)
_SUPPORTED_NAMES: Final = frozenset(_SUPPORTED_SCHEMAS)

REQUEST_FIELDS: Final = (
    ("replay_input", ReplayAdapterInput),
    ("problem_frame", ProblemFrame),
    ("assessment", ContractAssessment),
    ("gate", SearchGateDecision),
    ("budget", ComputeBudgetDecision),
    ("run", GeometricSearchRun),
    ("attempt", CandidateAttempt),
    ("reconstruction", CandidateReconstruction),
)


_NOT_RUN: Final = tuple((name, kind) for name, kind in REQUEST_FIELDS if name != "run")


@final
@attrs.frozen
class Examined:
    """A request whose structure holds, with the facts about its run."""

    request: ReplayRequest
    run: RunFacts


# --- §16 "malformed input": structure, before any identity is read -------------


def well_formed(request: object, facts: RunFacts | None = None) -> Examined | Rejection:
    """§16 malformed input, §6 item 14: exact types, valid records, canonical domain.

    ``facts`` are used only when ``examine_run`` built them for this very run
    object; otherwise the run is examined here.
    """
    # Exactly the type: a subclass could answer each field read differently.
    if type(request) is not ReplayRequest:
        return Rejection(
            R.REQUEST_NOT_A_REPLAY_REQUEST,
            f"expected a ReplayRequest, got {type(request).__name__}",
        )
    for name, kind in REQUEST_FIELDS:
        value = getattr(request, name)
        if type(value) is not kind:
            return Rejection(
                R.REQUEST_FIELD_WRONG_TYPE,
                f"{name} must be {kind.__name__}, got {type(value).__name__}",
            )
    if not (
        type(request.residuals) is tuple
        and all(type(r) is ContractResidual for r in request.residuals)
    ):
        return Rejection(
            R.REQUEST_FIELD_WRONG_TYPE, "residuals must be a tuple of ContractResidual"
        )
    # Records are validated on construction; re-run the validators in case a
    # frozen value was altered behind attrs' back (object.__setattr__).
    run_facts = facts if facts_apply(facts, request.run) else None
    if run_facts is None:
        run_facts = examine_run(request.run)
    if run_facts.structure_error is not None:
        return Rejection(R.RECORD_STRUCTURE_INVALID, run_facts.structure_error)
    # Records the batch shares were examined once with its facts (the very
    # objects only); the attempt's own records are examined here.
    records = [run_facts.record(getattr(request, name)) for name, _ in _NOT_RUN]
    records.append(run_facts.record(request.residuals))
    for examined in records:
        if examined.structure_error is not None:
            return Rejection(R.RECORD_STRUCTURE_INVALID, examined.structure_error)
    # Every record must lie in the identity domain (a str field may still hold
    # a lone surrogate when built in memory); later digests then cannot raise.
    if run_facts.canonical_error is not None:
        return Rejection(R.RECORD_NOT_CANONICAL, run_facts.canonical_error)
    for examined in records:
        if examined.canonical_error is not None:
            return Rejection(R.RECORD_NOT_CANONICAL, examined.canonical_error)
    # §6 item 14: unique names in ascending order, none missing.
    names = [name for name, _ in request.replay_input.schema_versions]
    if names != sorted(set(names)):
        return Rejection(
            R.SCHEMA_VERSIONS_NOT_CANONICAL,
            "schema_versions must hold unique names in ascending order",
        )
    if not _SUPPORTED_NAMES.issubset(names):
        missing = sorted(_SUPPORTED_NAMES.difference(names))
        return Rejection(R.SCHEMA_VERSION_MISSING, f"schema_versions lacks {', '.join(missing)}")
    return Examined(request, run_facts)


# --- §6 item 13: every schema and policy version is supported explicitly ------


def policies_supported(subject: Examined) -> Rejection | None:
    """§6 item 13 (policies): the replay, run, gate and budget policy versions."""
    request = subject.request
    replay_input = request.replay_input
    if replay_input.replay_policy_version != CONTRACT_PROOF_REPLAY_POLICY_VERSION:
        return Rejection(
            R.REPLAY_POLICY_UNSUPPORTED,
            f"replay policy {replay_input.replay_policy_version!r} is not supported",
        )
    if replay_input.run_policy_version not in SUPPORTED_UPSTREAM_POLICIES["run"]:
        return Rejection(
            R.RUN_POLICY_UNSUPPORTED,
            f"run policy {replay_input.run_policy_version!r} is not supported",
        )
    if request.gate.gate_policy_version not in SUPPORTED_UPSTREAM_POLICIES["gate"]:
        return Rejection(
            R.GATE_POLICY_UNSUPPORTED,
            f"gate policy {request.gate.gate_policy_version!r} is not supported",
        )
    if request.budget.budget_policy_version not in SUPPORTED_UPSTREAM_POLICIES["budget"]:
        return Rejection(
            R.BUDGET_POLICY_UNSUPPORTED,
            f"budget policy {request.budget.budget_policy_version!r} is not supported",
        )
    return None


def schemas_supported(subject: Examined) -> Rejection | None:
    """§6 item 13 (schemas): every named schema at the version this adapter reads."""
    for name, version in subject.request.replay_input.schema_versions:
        if name not in _SUPPORTED_SCHEMAS:
            return Rejection(R.SCHEMA_UNKNOWN, f"schema {name!r} is not known to this adapter")
        if _SUPPORTED_SCHEMAS[name] != version:
            return Rejection(
                R.SCHEMA_VERSION_UNSUPPORTED,
                f"schema {name!r} version {version!r} is not supported",
            )
    return None


# --- §6 items 1-10 and 15, §11: the identity chain, every id recomputed --------

# Ids of the records a batch shares (the run's input, the frame, the
# assessment, its residuals, the gate, the budget) are recomputed once per
# batch through ``RunFacts.derived`` (ADR 0011): the functions below are
# module-level, so the memo is keyed by the same code for every attempt.


def _run_input_digest(run: GeometricSearchRun) -> str:
    return run_input_digest(run.run_input)


def _residual_ids_reproduce(residuals: tuple[ContractResidual, ...]) -> bool:
    return all(residual_id_of(r) == r.residual_id for r in residuals)



def run_reproduces(subject: Examined) -> Rejection | None:
    """§6 item 1: run_id reproduces from the supplied immutable run (and so do its attempts)."""
    replay_input, run = subject.request.replay_input, subject.request.run
    if not subject.run.run_id == run.run_id == replay_input.run_id:
        return Rejection(R.RUN_ID_MISMATCH, "run_id does not reproduce from the supplied run")
    if subject.run.derived(run, _run_input_digest) != run.input_digest:
        return Rejection(
            R.RUN_INPUT_DIGEST_MISMATCH, "the run's input_digest does not reproduce from its input"
        )
    if run.run_policy_version != replay_input.run_policy_version:
        return Rejection(R.RUN_POLICY_VERSION_MISMATCH, "run_policy_version differs from the run's")
    # The run id covers each attempt's content but not the derived attempt
    # ids, so every attempt in the run is checked too: a run carrying one
    # forged sibling attempt is not the immutable run the search recorded.
    if not subject.run.attempts_consistent:
        return Rejection(
            R.RUN_ATTEMPTS_INCONSISTENT,
            "an attempt of the run does not reproduce its id, position, run or input",
        )
    return None


def attempt_at_index(subject: Examined) -> Rejection | None:
    """§6 item 2: attempt_index is in range and addresses exactly the supplied attempt."""
    request = subject.request
    index, attempts = request.replay_input.attempt_index, request.run.candidate_attempts
    if not index < len(attempts):
        return Rejection(
            R.ATTEMPT_INDEX_OUT_OF_RANGE,
            f"attempt_index {index} is outside the run's {len(attempts)} attempts",
        )
    at_index = attempts[index]
    if not (
        (at_index is request.attempt or at_index == request.attempt)
        and request.attempt.attempt_index == index
    ):
        return Rejection(
            R.ATTEMPT_NOT_AT_INDEX, f"the attempt at index {index} is not the supplied attempt"
        )
    return None


def attempt_id_reproduces(subject: Examined) -> Rejection | None:
    """§6 items 3-4: the input names the supplied attempt by its reproduced id.

    Every run attempt already reproduced its id, belongs to run_id and carries
    the run's input digest (``run_reproduces``); what is left is that the input
    names this attempt.
    """
    attempt = subject.request.attempt
    # The very object at its index in the run was digested when the run was
    # examined (``attempts_consistent``, which ``run_reproduces`` required):
    # its id is not recomputed a second time for the same batch.
    attempts = subject.request.run.candidate_attempts
    index = attempt.attempt_index
    if (
        subject.run.attempts_consistent
        and 0 <= index < len(attempts)
        and attempts[index] is attempt
    ):
        reproduced = attempt.attempt_id
    else:
        reproduced = attempt_id_of(attempt)
    if not reproduced == attempt.attempt_id == subject.request.replay_input.attempt_id:
        return Rejection(
            R.ATTEMPT_ID_MISMATCH,
            "the input's attempt_id is not the supplied attempt's reproduced id",
        )
    return None


def reconstruct_candidate(subject: Examined) -> tuple[ProblemFrame, str] | Rejection:
    """§6.1, §11: the one exact candidate frame, recomputed from the values supplied.

    Returns the frame with its digest, computed here before anyone else holds
    the frame (the contract's binding is judged against it, ADR 0011).
    """
    rec, original = subject.request.reconstruction, subject.request.problem_frame
    if rec.original_problem_frame_digest != subject.run.derived(original, frame_digest):
        return Rejection(
            R.ORIGINAL_FRAME_MISMATCH,
            "reconstruction does not bind back to the original problem frame",
        )
    # Exactly one of frame and delta: ``well_formed`` re-ran the record's own
    # invariant (RECORD_STRUCTURE_INVALID otherwise), so no delta means a frame.
    frame: ProblemFrame
    candidate, delta = rec.candidate_problem_frame, rec.frame_delta
    if delta is None:
        assert candidate is not None
        frame = candidate
        digest = frame_digest(frame)
        if rec.candidate_problem_frame_digest != digest:
            return Rejection(
                R.CANDIDATE_FRAME_DIGEST_MISMATCH,
                "candidate_problem_frame_digest does not reproduce",
            )
    else:
        if rec.frame_delta_digest != delta_digest(delta):
            return Rejection(R.FRAME_DELTA_DIGEST_MISMATCH, "frame_delta_digest does not reproduce")
        applied = apply_delta(original, delta)
        if isinstance(applied, DeltaRefusal):
            return Rejection(R.FRAME_DELTA_DOES_NOT_RECONSTRUCT, applied.detail)
        frame = applied
        # Built by apply_delta from the validated base and delta, held by nobody else.
        digest = frame_digest(frame)
    if frame.source_text != original.source_text:
        return Rejection(R.CANDIDATE_SOURCE_TEXT_ALTERED, "the candidate alters the source text")
    if (rec.candidate_bindings, rec.candidate_relations, rec.candidate_targets) != (
        frame.bindings,
        frame.relations,
        frame.targets,
    ):
        return Rejection(
            R.CANDIDATE_CONTENT_MISMATCH,
            "candidate bindings/relations/targets differ from the reconstructed frame",
        )
    return frame, digest


def candidate_digest_reproduces(subject: Examined, frame: ProblemFrame) -> Rejection | None:
    """§6 item 5: candidate_digest recomputed from the candidate content itself."""
    rec = subject.request.reconstruction
    if not (
        candidate_digest_of(rec)
        == rec.candidate_digest
        == subject.request.attempt.candidate_digest
        == subject.request.replay_input.candidate_digest
    ):
        return Rejection(
            R.CANDIDATE_DIGEST_MISMATCH,
            "candidate_digest does not reproduce from the candidate content",
        )
    return None


def reconstruction_envelope_reproduces(subject: Examined, frame: ProblemFrame) -> Rejection | None:
    """§6 item 6: the reconstruction envelope self-seals and names this run and attempt."""
    request = subject.request
    rec = request.reconstruction
    if not (
        reconstruction_digest_of(rec)
        == rec.candidate_reconstruction_digest
        == request.replay_input.candidate_reconstruction_digest
    ):
        return Rejection(
            R.RECONSTRUCTION_DIGEST_MISMATCH, "candidate_reconstruction_digest does not reproduce"
        )
    if not (rec.run_id == request.run.run_id and rec.attempt_id == request.attempt.attempt_id):
        return Rejection(
            R.RECONSTRUCTION_NOT_FOR_ATTEMPT, "the reconstruction names another run or attempt"
        )
    return None


def evidence_spans_exact(subject: Examined, frame: ProblemFrame) -> Rejection | None:
    """§6 item 7: spans exact, ordered, duplicates kept (tuple equality, no set logic)."""
    if subject.request.reconstruction.evidence_spans != frame.evidence_spans:
        return Rejection(
            R.EVIDENCE_SPANS_MISMATCH,
            "reconstruction spans differ from the candidate frame's (order and duplicates count)",
        )
    return None


def operator_provenance_matches(subject: Examined, frame: ProblemFrame) -> Rejection | None:
    """§6 item 8: operator id/version of the attempt; operator set of the run."""
    request = subject.request
    rec, attempt, replay_input = request.reconstruction, request.attempt, request.replay_input
    if (rec.operator_id, rec.operator_version) != (attempt.operator_id, attempt.operator_version):
        return Rejection(R.OPERATOR_MISMATCH, "operator id/version differ from the attempt's")
    run_ops = (request.run.run_input.operator_set_id, request.run.run_input.operator_set_version)
    if not (
        (rec.operator_set_id, rec.operator_set_version)
        == run_ops
        == (replay_input.operator_set_id, replay_input.operator_set_version)
    ):
        return Rejection(R.OPERATOR_SET_MISMATCH, "operator set differs from the run's")
    return None


def problem_frame_bound(subject: Examined) -> Rejection | None:
    """§6 item 9 (frame): the problem frame's identity along the chain."""
    request = subject.request
    run_input = request.run.run_input
    if not (
        subject.run.derived(request.problem_frame, frame_digest)
        == run_input.problem_frame_digest
        == request.replay_input.problem_frame_digest
        == request.assessment.problem_frame_digest
    ):
        return Rejection(
            R.PROBLEM_FRAME_CHAIN_MISMATCH, "problem frame identity differs along the chain"
        )
    return None


def assessment_reproduces(subject: Examined) -> Rejection | None:
    """§6 item 10 (identity): the original assessment's id reproduces."""
    assessment = subject.request.assessment
    if subject.run.derived(assessment, assessment_id_of) != assessment.assessment_id:
        return Rejection(
            R.ASSESSMENT_ID_MISMATCH, "the original assessment's id does not reproduce"
        )
    return None


def assessment_bound(subject: Examined) -> Rejection | None:
    """§6 item 9 (assessment): the assessment's identity along the chain."""
    request = subject.request
    if not (
        request.assessment.assessment_id
        == request.run.run_input.original_contract_assessment_id
        == request.replay_input.original_contract_assessment_id
    ):
        return Rejection(R.ASSESSMENT_CHAIN_MISMATCH, "assessment identity differs along the chain")
    return None


def residuals_bound(subject: Examined) -> Rejection | None:
    """§6 item 9 (residuals): reproduced from the assessment, the same along the chain."""
    request = subject.request
    supplied_ids = tuple(r.residual_id for r in request.residuals)
    if not (
        subject.run.derived(request.residuals, _residual_ids_reproduce)
        and request.residuals == subject.run.derived(request.assessment, residuals_for)
        and supplied_ids == request.run.run_input.residual_ids == request.replay_input.residual_ids
    ):
        return Rejection(
            R.RESIDUAL_CHAIN_MISMATCH,
            "residuals do not reproduce from the assessment or differ along the chain",
        )
    return None


def gate_bound(subject: Examined) -> Rejection | None:
    """§6 item 9 (gate): the gate reproduces, binds the chain, and permitted search."""
    request = subject.request
    gate = request.gate
    if not (
        subject.run.derived(gate, gate_decision_id_of)
        == gate.gate_decision_id
        == request.run.run_input.gate_decision_id
        == request.replay_input.gate_decision_id
        and gate.assessment_id == request.assessment.assessment_id
        and gate.residual_ids == tuple(r.residual_id for r in request.residuals)
    ):
        return Rejection(
            R.GATE_CHAIN_MISMATCH, "gate decision does not reproduce or bind the chain"
        )
    if not gate.search_permitted:
        return Rejection(R.GATE_DID_NOT_PERMIT_SEARCH, "the gate decision did not permit search")
    return None


def budget_bound(subject: Examined) -> Rejection | None:
    """§6 item 9 (budget): the budget reproduces, binds the gate, and covers the run."""
    request = subject.request
    budget = request.budget
    if not (
        subject.run.derived(budget, budget_id_of)
        == budget.budget_id
        == request.run.run_input.budget_id
        == request.replay_input.budget_id
        and budget.gate_decision_id == request.gate.gate_decision_id
    ):
        return Rejection(
            R.BUDGET_CHAIN_MISMATCH, "budget decision does not reproduce or bind the gate"
        )
    if len(request.run.candidate_attempts) > budget.max_attempts:
        return Rejection(
            R.RUN_EXCEEDS_BUDGET, "the run holds more attempts than its budget granted"
        )
    return None


def original_assessment_refused(subject: Examined) -> Rejection | None:
    """§6 item 10 (state): the original assessment refused, for the input's organ."""
    assessment = subject.request.assessment
    if assessment.runnable:
        return Rejection(
            R.ORIGINAL_ASSESSMENT_NOT_REFUSED,
            "the original assessment is runnable, so there is nothing to replay",
        )
    if assessment.candidate_organ != subject.request.replay_input.candidate_organ:
        return Rejection(
            R.CANDIDATE_ORGAN_MISMATCH, "candidate_organ differs from the assessment's"
        )
    return None


def input_digest_reproduces(subject: Examined) -> Rejection | None:
    """§6 item 15, §13.2: input_digest reproduces from the complete structural payload."""
    replay_input = subject.request.replay_input
    if input_digest_of(replay_input) != replay_input.input_digest:
        return Rejection(R.INPUT_DIGEST_MISMATCH, "input_digest does not reproduce")
    return None


# --- §6 items 11-12: the static allowlist and the organ's exact obligations ----


def contract_target_allowlisted(
    request: ReplayRequest, manifest: AuthorityManifest
) -> ContractAuthority | Rejection:
    """§6 item 11, §9: the static allowlist, no dynamic lookup, no fallback."""
    organ = request.replay_input.candidate_organ
    authority = manifest.contract_authorities.get(organ)
    if authority is None:
        return Rejection(
            R.CONTRACT_AUTHORITY_MISSING,
            f"no contract authority is allowlisted for organ {organ!r}",
        )
    if request.replay_input.contract_replay_target != authority.target:
        return Rejection(
            R.CONTRACT_TARGET_NOT_ALLOWLISTED,
            f"target {request.replay_input.contract_replay_target!r} is not the allowlisted "
            f"{authority.target!r} for organ {organ!r}",
        )
    return authority


def proof_obligations_exact(
    request: ReplayRequest, manifest: AuthorityManifest
) -> tuple[ProofObligations | NoProofObligationsApplicable, tuple[ProofAuthority, ...]] | Rejection:
    """§6 item 12, §10: exactly the policy's list; nothing added, dropped or reordered."""
    organ = request.replay_input.candidate_organ
    refs = request.replay_input.proof_obligation_refs
    policy = manifest.proof_policies.get(organ)
    if policy is None:
        return Rejection(
            R.PROOF_POLICY_MISSING,
            f"organ {organ!r} has no proof policy, not even a 'none applicable' one",
        )
    for ref in refs:
        if ref not in manifest.proof_authorities:
            return Rejection(R.PROOF_OBLIGATION_UNKNOWN, f"obligation {ref!r} is not supported")
    declared: tuple[str, ...]
    match policy:
        case ProofObligations():
            declared = policy.refs
        case NoProofObligationsApplicable():
            declared = ()
        case _:
            assert_never(policy)
    if refs != declared:
        return Rejection(
            R.PROOF_OBLIGATIONS_NOT_POLICY,
            f"obligations {list(refs)} are not exactly the policy's {list(declared)}",
        )
    return policy, tuple(manifest.proof_authorities[ref] for ref in declared)
