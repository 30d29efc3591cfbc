"""The upstream identity chain the replay adapter consumes (pure values).

ADR-0229 depends on records defined elsewhere (ADR-0225..0228); this module
is the smallest honest version of each, recorded in
``adr/0001-records-and-identities.md``. Rules:

- Every id is recomputed from content, never trusted: a *self-sealed* id is
  the digest of the record's identity payload with the id itself blanked to
  ``""``; explanations never enter a payload.
- Constructors check structure only (types, digest shape, exactly-one
  choices). Whether ids reproduce and the chain binds is the replay adapter's
  question, so a tampered record can be built, loaded and then refused.
- The ``seal_*`` / ``build_*`` helpers are the only way this project writes
  ids; tests recompute them with their own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Final, final

import attrs

from kernel._values import (
    DIGEST,
    EXACT_BOOL,
    NAME,
    NON_NEGATIVE_INT,
    OPTIONAL_DIGEST,
    TEXT,
    UNSEALED_ID,
    tuple_of,
)
from kernel.frames import (
    Binding,
    DeltaRefusal,
    FrameDelta,
    ProblemFrame,
    Relation,
    SourceSpan,
    Target,
    apply_delta,
    delta_digest,
    exact_type,
    frame_digest,
    spans_payload,
)
from kernel.identity import JsonValue, digest

__all__ = [
    "SCHEMA_VERSIONS",
    "CandidateAttempt",
    "CandidateDraft",
    "CandidateReconstruction",
    "ComputeBudgetDecision",
    "ContractAssessment",
    "ContractResidual",
    "GeometricSearchRun",
    "ReplayStatus",
    "ResidualKind",
    "SearchChain",
    "SearchGateDecision",
    "SearchRunInput",
    "assessment_id_of",
    "attempt_id_of",
    "budget_id_of",
    "build_chain",
    "build_reconstruction",
    "candidate_content_payload",
    "candidate_digest_of",
    "gate_decision_id_of",
    "reconstruction_digest_of",
    "residual_id_of",
    "residuals_for",
    "run_id_of",
    "run_input_digest",
    "seal_assessment",
    "seal_budget",
    "seal_gate",
    "seal_run",
]

# The record schemas this kernel reads; ReplayAdapterInput.schema_versions
# must equal this exactly (ADR-0229 §6.2: unique names, ascending order).
SCHEMA_VERSIONS: Final[tuple[tuple[str, str], ...]] = (
    ("candidate_attempt", "v1"),
    ("candidate_reconstruction", "v1"),
    ("compute_budget_decision", "v1"),
    ("contract_assessment", "v1"),
    ("contract_residual", "v1"),
    ("geometric_search_run", "v1"),
    ("problem_frame", "v1"),
    ("search_gate_decision", "v1"),
)

_BLANK: Final = ""


# --- ContractAssessment (ADR-0225 context) ----------------------------------


@final
@attrs.frozen
class ContractAssessment:
    """An organ's contract judgement of one frame; ``runnable`` False is a refusal."""

    assessment_id: str = attrs.field(validator=DIGEST)
    problem_frame_digest: str = attrs.field(validator=DIGEST)
    candidate_organ: str = attrs.field(validator=NAME)
    runnable: bool = attrs.field(validator=EXACT_BOOL)
    missing_bindings: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    unresolved_hazards: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))
    explanation: str = attrs.field(default="", validator=TEXT)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "assessment_id": _BLANK,
            "problem_frame_digest": self.problem_frame_digest,
            "candidate_organ": self.candidate_organ,
            "runnable": self.runnable,
            "missing_bindings": list(self.missing_bindings),
            "unresolved_hazards": list(self.unresolved_hazards),
            "evidence_spans": spans_payload(self.evidence_spans),
        }


def assessment_id_of(assessment: ContractAssessment) -> str:
    """Recompute a ContractAssessment's self-sealed id."""
    return digest(assessment.payload())


def seal_assessment(
    *,
    problem_frame_digest: str,
    candidate_organ: str,
    runnable: bool,
    missing_bindings: Sequence[str] = (),
    unresolved_hazards: Sequence[str] = (),
    evidence_spans: Sequence[SourceSpan] = (),
    explanation: str = "",
) -> ContractAssessment:
    """A ContractAssessment with its id computed."""
    draft = ContractAssessment(
        assessment_id=UNSEALED_ID,
        problem_frame_digest=problem_frame_digest,
        candidate_organ=candidate_organ,
        runnable=runnable,
        missing_bindings=tuple(missing_bindings),
        unresolved_hazards=tuple(unresolved_hazards),
        evidence_spans=tuple(evidence_spans),
        explanation=explanation,
    )
    return attrs.evolve(draft, assessment_id=assessment_id_of(draft))


# --- ContractResidual (ADR-0225) --------------------------------------------


class ResidualKind(Enum):
    """What kind of obstruction a residual records."""

    MISSING_BINDING = "missing_binding"
    UNRESOLVED_HAZARD = "unresolved_hazard"


@final
@attrs.frozen
class ContractResidual:
    """One obstruction of a refused assessment, at its ordinal position."""

    residual_id: str = attrs.field(validator=DIGEST)
    assessment_id: str = attrs.field(validator=DIGEST)
    kind: ResidualKind = attrs.field(validator=attrs.validators.instance_of(ResidualKind))
    code: str = attrs.field(validator=NAME)
    ordinal: int = attrs.field(validator=NON_NEGATIVE_INT)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "residual_id": _BLANK,
            "assessment_id": self.assessment_id,
            "kind": self.kind.value,
            "code": self.code,
            "ordinal": self.ordinal,
        }


def residual_id_of(residual: ContractResidual) -> str:
    """Recompute a ContractResidual's self-sealed id."""
    return digest(residual.payload())


def residuals_for(assessment: ContractAssessment) -> tuple[ContractResidual, ...]:
    """One residual per missing binding, then per hazard, in the assessment's order."""
    items = [(ResidualKind.MISSING_BINDING, c) for c in assessment.missing_bindings]
    items += [(ResidualKind.UNRESOLVED_HAZARD, c) for c in assessment.unresolved_hazards]
    sealed = []
    for ordinal, (kind, code) in enumerate(items):
        draft = ContractResidual(UNSEALED_ID, assessment.assessment_id, kind, code, ordinal)
        sealed.append(attrs.evolve(draft, residual_id=residual_id_of(draft)))
    return tuple(sealed)


# --- SearchGateDecision (ADR-0226) ------------------------------------------


@final
@attrs.frozen
class SearchGateDecision:
    """Whether search may run over a refused assessment's residuals."""

    gate_decision_id: str = attrs.field(validator=DIGEST)
    gate_policy_version: str = attrs.field(validator=NAME)
    assessment_id: str = attrs.field(validator=DIGEST)
    residual_ids: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    search_permitted: bool = attrs.field(validator=EXACT_BOOL)
    explanation: str = attrs.field(default="", validator=TEXT)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "gate_decision_id": _BLANK,
            "gate_policy_version": self.gate_policy_version,
            "assessment_id": self.assessment_id,
            "residual_ids": list(self.residual_ids),
            "search_permitted": self.search_permitted,
        }


def gate_decision_id_of(gate: SearchGateDecision) -> str:
    """Recompute a SearchGateDecision's self-sealed id."""
    return digest(gate.payload())


def seal_gate(
    assessment: ContractAssessment,
    residuals: Sequence[ContractResidual],
    *,
    gate_policy_version: str,
    search_permitted: bool = True,
    explanation: str = "",
) -> SearchGateDecision:
    """A SearchGateDecision with its id computed."""
    draft = SearchGateDecision(
        UNSEALED_ID,
        gate_policy_version,
        assessment.assessment_id,
        tuple(r.residual_id for r in residuals),
        search_permitted,
        explanation,
    )
    return attrs.evolve(draft, gate_decision_id=gate_decision_id_of(draft))


# --- ComputeBudgetDecision (ADR-0227) ---------------------------------------


@final
@attrs.frozen
class ComputeBudgetDecision:
    """The attempt budget granted under one gate decision."""

    budget_id: str = attrs.field(validator=DIGEST)
    budget_policy_version: str = attrs.field(validator=NAME)
    gate_decision_id: str = attrs.field(validator=DIGEST)
    max_attempts: int = attrs.field(validator=NON_NEGATIVE_INT)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "budget_id": _BLANK,
            "budget_policy_version": self.budget_policy_version,
            "gate_decision_id": self.gate_decision_id,
            "max_attempts": self.max_attempts,
        }


def budget_id_of(budget: ComputeBudgetDecision) -> str:
    """Recompute a ComputeBudgetDecision's self-sealed id."""
    return digest(budget.payload())


def seal_budget(
    gate: SearchGateDecision, *, budget_policy_version: str, max_attempts: int
) -> ComputeBudgetDecision:
    """A ComputeBudgetDecision with its id computed."""
    draft = ComputeBudgetDecision(
        UNSEALED_ID, budget_policy_version, gate.gate_decision_id, max_attempts
    )
    return attrs.evolve(draft, budget_id=budget_id_of(draft))


# --- GeometricSearchRun and CandidateAttempt (ADR-0228) ---------------------


class ReplayStatus(Enum):
    """An attempt's replay status in the run; the adapter never changes it."""

    REPLAY_PENDING = "replay_pending"


@final
@attrs.frozen
class SearchRunInput:
    """The original chain a run is bound to; its digest is the run's input digest."""

    problem_frame_digest: str = attrs.field(validator=DIGEST)
    original_contract_assessment_id: str = attrs.field(validator=DIGEST)
    residual_ids: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    gate_decision_id: str = attrs.field(validator=DIGEST)
    budget_id: str = attrs.field(validator=DIGEST)
    operator_set_id: str = attrs.field(validator=NAME)
    operator_set_version: str = attrs.field(validator=NAME)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "problem_frame_digest": self.problem_frame_digest,
            "original_contract_assessment_id": self.original_contract_assessment_id,
            "residual_ids": list(self.residual_ids),
            "gate_decision_id": self.gate_decision_id,
            "budget_id": self.budget_id,
            "operator_set_id": self.operator_set_id,
            "operator_set_version": self.operator_set_version,
        }


def run_input_digest(run_input: SearchRunInput) -> str:
    """The digest a run and each of its attempts carry as ``input_digest``."""
    return digest(run_input.payload())


@final
@attrs.frozen
class CandidateAttempt:
    """One ordered attempt of a run: which candidate, by which operator."""

    attempt_id: str = attrs.field(validator=DIGEST)
    run_id: str = attrs.field(validator=DIGEST)
    attempt_index: int = attrs.field(validator=NON_NEGATIVE_INT)
    input_digest: str = attrs.field(validator=DIGEST)
    candidate_digest: str = attrs.field(validator=DIGEST)
    operator_id: str = attrs.field(validator=NAME)
    operator_version: str = attrs.field(validator=NAME)
    replay_status: ReplayStatus = attrs.field(
        default=ReplayStatus.REPLAY_PENDING,
        validator=attrs.validators.instance_of(ReplayStatus),
    )

    def content_payload(self) -> dict[str, JsonValue]:
        """What the run id covers for this attempt (no derived ids)."""
        return {
            "attempt_index": self.attempt_index,
            "input_digest": self.input_digest,
            "candidate_digest": self.candidate_digest,
            "operator_id": self.operator_id,
            "operator_version": self.operator_version,
            "replay_status": self.replay_status.value,
        }

    def payload(self) -> dict[str, JsonValue]:
        return {
            "attempt_id": _BLANK,
            "run_id": self.run_id,
            "attempt_index": self.attempt_index,
            "input_digest": self.input_digest,
            "candidate_digest": self.candidate_digest,
            "operator_id": self.operator_id,
            "operator_version": self.operator_version,
        }


def attempt_id_of(attempt: CandidateAttempt) -> str:
    """Recompute an attempt's self-sealed id (binds it to its run id)."""
    return digest(attempt.payload())


@final
@attrs.frozen
class GeometricSearchRun:
    """A bounded search run: its input chain and ordered candidate attempts."""

    run_id: str = attrs.field(validator=DIGEST)
    run_policy_version: str = attrs.field(validator=NAME)
    run_input: SearchRunInput = attrs.field(validator=exact_type(SearchRunInput))
    input_digest: str = attrs.field(validator=DIGEST)
    candidate_attempts: tuple[CandidateAttempt, ...] = attrs.field(
        validator=tuple_of(CandidateAttempt)
    )

    def payload(self) -> dict[str, JsonValue]:
        return {
            "run_id": _BLANK,
            "run_policy_version": self.run_policy_version,
            "run_input": self.run_input.payload(),
            "input_digest": self.input_digest,
            "candidate_attempts": [a.content_payload() for a in self.candidate_attempts],
        }


def run_id_of(run: GeometricSearchRun) -> str:
    """Recompute a run's self-sealed id (covers every attempt's content)."""
    return digest(run.payload())


@final
@attrs.frozen
class CandidateDraft:
    """A candidate before the run is sealed: a whole frame or a delta, and its operator."""

    candidate: ProblemFrame | FrameDelta = attrs.field(
        validator=attrs.validators.instance_of((ProblemFrame, FrameDelta))
    )
    operator_id: str = attrs.field(validator=NAME)
    operator_version: str = attrs.field(validator=NAME)


# --- CandidateReconstruction (ADR-0229 §6.1, §13.1) -------------------------


@final
@attrs.frozen
class CandidateReconstruction:
    """The exact candidate an attempt names, with the value needed to replay it.

    Exactly one of ``candidate_problem_frame`` / ``frame_delta`` is present,
    and its digest field is present with it.
    """

    candidate_reconstruction_digest: str = attrs.field(validator=DIGEST)
    candidate_digest: str = attrs.field(validator=DIGEST)
    run_id: str = attrs.field(validator=DIGEST)
    attempt_id: str = attrs.field(validator=DIGEST)
    original_problem_frame_digest: str = attrs.field(validator=DIGEST)
    candidate_problem_frame_digest: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    frame_delta_digest: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    candidate_problem_frame: ProblemFrame | None = attrs.field(
        validator=attrs.validators.optional(exact_type(ProblemFrame))
    )
    frame_delta: FrameDelta | None = attrs.field(
        validator=attrs.validators.optional(exact_type(FrameDelta))
    )
    candidate_bindings: tuple[Binding, ...] = attrs.field(validator=tuple_of(Binding))
    candidate_relations: tuple[Relation, ...] = attrs.field(validator=tuple_of(Relation))
    candidate_targets: tuple[Target, ...] = attrs.field(validator=tuple_of(Target))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))
    operator_set_id: str = attrs.field(validator=NAME)
    operator_set_version: str = attrs.field(validator=NAME)
    operator_id: str = attrs.field(validator=NAME)
    operator_version: str = attrs.field(validator=NAME)

    def __attrs_post_init__(self) -> None:
        has_frame = self.candidate_problem_frame is not None
        has_delta = self.frame_delta is not None
        if has_frame == has_delta:
            raise ValueError("exactly one of candidate_problem_frame and frame_delta is required")
        if (self.candidate_problem_frame_digest is not None) != has_frame:
            raise ValueError("candidate_problem_frame_digest must accompany the candidate frame")
        if (self.frame_delta_digest is not None) != has_delta:
            raise ValueError("frame_delta_digest must accompany the frame delta")

    def content_payload(self) -> dict[str, JsonValue]:
        return candidate_content_payload(
            original_problem_frame_digest=self.original_problem_frame_digest,
            candidate_problem_frame_digest=self.candidate_problem_frame_digest,
            frame_delta_digest=self.frame_delta_digest,
            bindings=self.candidate_bindings,
            relations=self.candidate_relations,
            targets=self.candidate_targets,
            evidence_spans=self.evidence_spans,
        )

    def payload(self) -> dict[str, JsonValue]:
        return {
            "candidate_reconstruction_digest": _BLANK,
            "candidate_digest": self.candidate_digest,
            "candidate": self.content_payload(),
            "run_id": self.run_id,
            "attempt_id": self.attempt_id,
            "operator_set_id": self.operator_set_id,
            "operator_set_version": self.operator_set_version,
            "operator_id": self.operator_id,
            "operator_version": self.operator_version,
        }


def candidate_content_payload(
    *,
    original_problem_frame_digest: str,
    candidate_problem_frame_digest: str | None,
    frame_delta_digest: str | None,
    bindings: Sequence[Binding],
    relations: Sequence[Relation],
    targets: Sequence[Target],
    evidence_spans: Sequence[SourceSpan],
) -> dict[str, JsonValue]:
    """ADR-0229 §13.1: the candidate content, without the attempt/operator envelope."""
    return {
        "original_problem_frame_digest": original_problem_frame_digest,
        "candidate_problem_frame_digest": candidate_problem_frame_digest,
        "frame_delta_digest": frame_delta_digest,
        "bindings": [b.payload() for b in bindings],
        "relations": [r.payload() for r in relations],
        "targets": [t.payload() for t in targets],
        "evidence_spans": spans_payload(evidence_spans),
    }


def candidate_digest_of(reconstruction: CandidateReconstruction) -> str:
    """Recompute the candidate-content digest of a reconstruction."""
    return digest(reconstruction.content_payload())


def reconstruction_digest_of(reconstruction: CandidateReconstruction) -> str:
    """Recompute the self-sealed reconstruction envelope digest."""
    return digest(reconstruction.payload())


def _reconstruct(original: ProblemFrame, candidate: ProblemFrame | FrameDelta) -> ProblemFrame:
    if isinstance(candidate, ProblemFrame):
        return candidate
    frame = apply_delta(original, candidate)
    if isinstance(frame, DeltaRefusal):
        raise ValueError(f"candidate delta does not reconstruct: {frame.detail}")
    return frame


def _candidate_digest(original: ProblemFrame, candidate: ProblemFrame | FrameDelta) -> str:
    frame = _reconstruct(original, candidate)
    is_frame = isinstance(candidate, ProblemFrame)
    return digest(
        candidate_content_payload(
            original_problem_frame_digest=frame_digest(original),
            candidate_problem_frame_digest=frame_digest(frame) if is_frame else None,
            frame_delta_digest=None
            if isinstance(candidate, ProblemFrame)
            else delta_digest(candidate),
            bindings=frame.bindings,
            relations=frame.relations,
            targets=frame.targets,
            evidence_spans=frame.evidence_spans,
        )
    )


def seal_run(
    run_input: SearchRunInput,
    candidates: Sequence[tuple[str, str, str]],
    *,
    run_policy_version: str,
) -> GeometricSearchRun:
    """A run over ``(candidate_digest, operator_id, operator_version)`` triples, ids computed."""
    input_digest = run_input_digest(run_input)
    placeholder = UNSEALED_ID
    attempts = tuple(
        CandidateAttempt(placeholder, placeholder, index, input_digest, cand, op, ver)
        for index, (cand, op, ver) in enumerate(candidates)
    )
    draft = GeometricSearchRun(placeholder, run_policy_version, run_input, input_digest, attempts)
    run_id = run_id_of(draft)
    sealed_attempts = []
    for attempt in attempts:
        bound = attrs.evolve(attempt, run_id=run_id)
        sealed_attempts.append(attrs.evolve(bound, attempt_id=attempt_id_of(bound)))
    return attrs.evolve(draft, run_id=run_id, candidate_attempts=tuple(sealed_attempts))


def build_reconstruction(
    run: GeometricSearchRun,
    attempt: CandidateAttempt,
    original: ProblemFrame,
    candidate: ProblemFrame | FrameDelta,
) -> CandidateReconstruction:
    """The sealed reconstruction of ``candidate`` for ``attempt`` of ``run``."""
    frame = _reconstruct(original, candidate)
    is_frame = isinstance(candidate, ProblemFrame)
    draft = CandidateReconstruction(
        candidate_reconstruction_digest=UNSEALED_ID,
        candidate_digest=UNSEALED_ID,
        run_id=run.run_id,
        attempt_id=attempt.attempt_id,
        original_problem_frame_digest=frame_digest(original),
        candidate_problem_frame_digest=frame_digest(frame) if is_frame else None,
        frame_delta_digest=None if isinstance(candidate, ProblemFrame) else delta_digest(candidate),
        candidate_problem_frame=candidate if isinstance(candidate, ProblemFrame) else None,
        frame_delta=None if isinstance(candidate, ProblemFrame) else candidate,
        candidate_bindings=frame.bindings,
        candidate_relations=frame.relations,
        candidate_targets=frame.targets,
        evidence_spans=frame.evidence_spans,
        operator_set_id=run.run_input.operator_set_id,
        operator_set_version=run.run_input.operator_set_version,
        operator_id=attempt.operator_id,
        operator_version=attempt.operator_version,
    )
    draft = attrs.evolve(draft, candidate_digest=candidate_digest_of(draft))
    return attrs.evolve(draft, candidate_reconstruction_digest=reconstruction_digest_of(draft))


# --- the whole chain ---------------------------------------------------------


@final
@attrs.frozen
class SearchChain:
    """One refused frame, its upstream decisions, a run, and one reconstruction per attempt."""

    problem_frame: ProblemFrame = attrs.field(validator=attrs.validators.instance_of(ProblemFrame))
    assessment: ContractAssessment = attrs.field(
        validator=attrs.validators.instance_of(ContractAssessment)
    )
    residuals: tuple[ContractResidual, ...] = attrs.field(validator=tuple_of(ContractResidual))
    gate: SearchGateDecision = attrs.field(
        validator=attrs.validators.instance_of(SearchGateDecision)
    )
    budget: ComputeBudgetDecision = attrs.field(
        validator=attrs.validators.instance_of(ComputeBudgetDecision)
    )
    run: GeometricSearchRun = attrs.field(
        validator=attrs.validators.instance_of(GeometricSearchRun)
    )
    reconstructions: tuple[CandidateReconstruction, ...] = attrs.field(
        validator=tuple_of(CandidateReconstruction)
    )


def build_chain(
    problem_frame: ProblemFrame,
    assessment: ContractAssessment,
    candidates: Sequence[CandidateDraft],
    *,
    operator_set_id: str,
    operator_set_version: str,
    gate_policy_version: str = "search_gate.v1",
    budget_policy_version: str = "compute_budget.v1",
    run_policy_version: str = "geometric_search_run.v1",
    max_attempts: int | None = None,
) -> SearchChain:
    """Seal a complete, valid chain for a refused ``assessment`` of ``problem_frame``."""
    residuals = residuals_for(assessment)
    gate = seal_gate(assessment, residuals, gate_policy_version=gate_policy_version)
    budget = seal_budget(
        gate,
        budget_policy_version=budget_policy_version,
        max_attempts=len(candidates) if max_attempts is None else max_attempts,
    )
    run_input = SearchRunInput(
        problem_frame_digest=frame_digest(problem_frame),
        original_contract_assessment_id=assessment.assessment_id,
        residual_ids=tuple(r.residual_id for r in residuals),
        gate_decision_id=gate.gate_decision_id,
        budget_id=budget.budget_id,
        operator_set_id=operator_set_id,
        operator_set_version=operator_set_version,
    )
    run = seal_run(
        run_input,
        [
            (_candidate_digest(problem_frame, d.candidate), d.operator_id, d.operator_version)
            for d in candidates
        ],
        run_policy_version=run_policy_version,
    )
    reconstructions = tuple(
        build_reconstruction(run, attempt, problem_frame, draft.candidate)
        for attempt, draft in zip(run.candidate_attempts, candidates, strict=True)
    )
    return SearchChain(problem_frame, assessment, residuals, gate, budget, run, reconstructions)
