"""ADR-0229 vocabulary and records: input, result, refusal, request.

Rules:

- ``ReplayDisposition`` is closed (§8); ``RESULT_DISPOSITIONS`` and
  ``REFUSAL_DISPOSITIONS`` partition it and each output type accepts only its
  own half, checked on construction.
- No record carries an answer, score, rank, selection or any other §7.3
  field; a test asserts the exact field lists.
- Identities follow §13: ``input_digest`` covers exactly the §13.2 fields;
  result and refusal ids self-seal their structural payload with the id
  blanked; ``explanation`` never enters an id.
- A refusal also names the attempt index it concerns (ADR 0011), so early
  refusals of different attempts of one run never share an id even though
  none of their identities could be validated.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Final, final

import attrs

from kernel._values import (
    DIGEST,
    NAME,
    NON_NEGATIVE_INT,
    OPTIONAL_DIGEST,
    OPTIONAL_NON_NEGATIVE_INT,
    TEXT,
    tuple_of,
)
from kernel.frames import ProblemFrame, SourceSpan, spans_payload
from kernel.identity import JsonValue, digest
from kernel.upstream import (
    CandidateAttempt,
    CandidateReconstruction,
    ComputeBudgetDecision,
    ContractAssessment,
    ContractResidual,
    GeometricSearchRun,
    SearchChain,
    SearchGateDecision,
)

__all__ = [
    "CONTRACT_PROOF_REPLAY_POLICY_VERSION",
    "REFUSAL_DISPOSITIONS",
    "RESULT_DISPOSITIONS",
    "ReplayAdapterInput",
    "ReplayAdapterOutcome",
    "ReplayAdapterRefusal",
    "ReplayAdapterResult",
    "ReplayBundle",
    "ReplayDisposition",
    "ReplayRequest",
    "input_digest_of",
    "refusal_id_of",
    "result_id_of",
]

CONTRACT_PROOF_REPLAY_POLICY_VERSION: Final = "contract_proof_replay.v1"


class ReplayDisposition(Enum):
    """The closed disposition vocabulary of ADR-0229 §8."""

    CONTRACT_REFUSED = "contract_refused"
    CONTRACT_CLOSED_BUT_PROOF_REFUSED = "contract_closed_but_proof_refused"
    CONTRACT_AND_PROOF_CLOSED = "contract_and_proof_closed"
    INVALID_REPLAY_INPUT = "invalid_replay_input"
    CANDIDATE_IDENTITY_MISMATCH = "candidate_identity_mismatch"
    CONTRACT_REPLAY_UNAVAILABLE = "contract_replay_unavailable"
    PROOF_REPLAY_UNAVAILABLE = "proof_replay_unavailable"
    UNSUPPORTED_REPLAY_POLICY = "unsupported_replay_policy"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported_schema_version"
    UNSUPPORTED_PROOF_OBLIGATION = "unsupported_proof_obligation"


RESULT_DISPOSITIONS: Final = frozenset(
    {
        ReplayDisposition.CONTRACT_REFUSED,
        ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED,
        ReplayDisposition.CONTRACT_AND_PROOF_CLOSED,
    }
)
REFUSAL_DISPOSITIONS: Final = frozenset(ReplayDisposition) - RESULT_DISPOSITIONS


def _schema_versions(
    _inst: object, attribute: attrs.Attribute[tuple[tuple[str, str], ...]], value: object
) -> None:
    # Shape only; whether the pairs are canonical and supported is validation.
    if type(value) is not tuple or not all(
        type(pair) is tuple and len(pair) == 2 and all(type(x) is str for x in pair)
        for pair in value
    ):
        raise TypeError(f"{attribute.name} must be a tuple of (name, version) str pairs")


@final
@attrs.frozen
class ReplayAdapterInput:
    """ADR-0229 §6.2: one attempt of one run, and what replay must honour."""

    input_digest: str = attrs.field(validator=DIGEST)
    replay_policy_version: str = attrs.field(validator=NAME)
    run_id: str = attrs.field(validator=DIGEST)
    run_policy_version: str = attrs.field(validator=NAME)
    attempt_id: str = attrs.field(validator=DIGEST)
    attempt_index: int = attrs.field(validator=NON_NEGATIVE_INT)
    candidate_digest: str = attrs.field(validator=DIGEST)
    candidate_reconstruction_digest: str = attrs.field(validator=DIGEST)
    problem_frame_digest: str = attrs.field(validator=DIGEST)
    original_contract_assessment_id: str = attrs.field(validator=DIGEST)
    candidate_organ: str = attrs.field(validator=NAME)
    residual_ids: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    gate_decision_id: str = attrs.field(validator=DIGEST)
    budget_id: str = attrs.field(validator=DIGEST)
    operator_set_id: str = attrs.field(validator=NAME)
    operator_set_version: str = attrs.field(validator=NAME)
    contract_replay_target: str = attrs.field(validator=NAME)
    proof_obligation_refs: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    schema_versions: tuple[tuple[str, str], ...] = attrs.field(validator=_schema_versions)

    def payload(self) -> dict[str, JsonValue]:
        """§13.2: every structural field except ``input_digest`` itself."""
        return {
            "replay_policy_version": self.replay_policy_version,
            "run_id": self.run_id,
            "run_policy_version": self.run_policy_version,
            "attempt_id": self.attempt_id,
            "attempt_index": self.attempt_index,
            "candidate_digest": self.candidate_digest,
            "candidate_reconstruction_digest": self.candidate_reconstruction_digest,
            "problem_frame_digest": self.problem_frame_digest,
            "original_contract_assessment_id": self.original_contract_assessment_id,
            "candidate_organ": self.candidate_organ,
            "residual_ids": list(self.residual_ids),
            "gate_decision_id": self.gate_decision_id,
            "budget_id": self.budget_id,
            "operator_set_id": self.operator_set_id,
            "operator_set_version": self.operator_set_version,
            "contract_replay_target": self.contract_replay_target,
            "proof_obligation_refs": list(self.proof_obligation_refs),
            "schema_versions": [list(pair) for pair in self.schema_versions],
        }


def input_digest_of(replay_input: ReplayAdapterInput) -> str:
    """Recompute ``input_digest`` (§13.2)."""
    return digest(replay_input.payload())


def _disposition_in(
    allowed: frozenset[ReplayDisposition],
) -> Callable[[object, attrs.Attribute[ReplayDisposition], object], None]:
    def check(_inst: object, attribute: attrs.Attribute[ReplayDisposition], value: object) -> None:
        if not isinstance(value, ReplayDisposition) or value not in allowed:
            raise ValueError(f"{attribute.name} {value!r} is not permitted for this output type")

    return check


@final
@attrs.frozen
class ReplayAdapterResult:
    """ADR-0229 §7.1: semantic replay evidence for one candidate. Never an answer."""

    replay_result_id: str = attrs.field(validator=DIGEST)
    replay_policy_version: str = attrs.field(validator=NAME)
    input_digest: str = attrs.field(validator=DIGEST)
    run_id: str = attrs.field(validator=DIGEST)
    attempt_id: str = attrs.field(validator=DIGEST)
    candidate_digest: str = attrs.field(validator=DIGEST)
    contract_replay_assessment_id: str = attrs.field(validator=DIGEST)
    proof_obligation_refs: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    proof_replay_refs: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    replay_disposition: ReplayDisposition = attrs.field(
        validator=_disposition_in(RESULT_DISPOSITIONS)
    )
    reason_codes: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))
    explanation: str = attrs.field(default="", validator=TEXT)

    def payload(self) -> dict[str, JsonValue]:
        """§13.3: the structural result, id blanked, explanation excluded."""
        return {
            "replay_result_id": "",
            "replay_policy_version": self.replay_policy_version,
            "input_digest": self.input_digest,
            "run_id": self.run_id,
            "attempt_id": self.attempt_id,
            "candidate_digest": self.candidate_digest,
            "contract_replay_assessment_id": self.contract_replay_assessment_id,
            "proof_obligation_refs": list(self.proof_obligation_refs),
            "proof_replay_refs": list(self.proof_replay_refs),
            "replay_disposition": self.replay_disposition.value,
            "reason_codes": list(self.reason_codes),
            "evidence_spans": spans_payload(self.evidence_spans),
        }


def result_id_of(result: ReplayAdapterResult) -> str:
    """Recompute ``replay_result_id`` (§13.3)."""
    return digest(result.payload())


@final
@attrs.frozen
class ReplayAdapterRefusal:
    """ADR-0229 §7.2: the adapter could not lawfully classify the candidate.

    ``attempt_index`` (ADR 0011) is the position in the run the refused
    attempt was addressed at: validated once the identity chain holds,
    otherwise as the input stated it (or as the bundle placed a malformed
    attempt); ``None`` when nothing states one. It is an address, not an
    identity claim, and it enters the refusal's id.
    """

    replay_refusal_id: str = attrs.field(validator=DIGEST)
    replay_policy_version: str = attrs.field(validator=NAME)
    input_digest: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    run_id: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    attempt_id: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    attempt_index: int | None = attrs.field(validator=OPTIONAL_NON_NEGATIVE_INT)
    candidate_digest: str | None = attrs.field(validator=OPTIONAL_DIGEST)
    replay_disposition: ReplayDisposition = attrs.field(
        validator=_disposition_in(REFUSAL_DISPOSITIONS)
    )
    reason_codes: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    explanation: str = attrs.field(default="", validator=TEXT)

    def payload(self) -> dict[str, JsonValue]:
        """§13.3: the structural refusal, id blanked, explanation excluded."""
        return {
            "replay_refusal_id": "",
            "replay_policy_version": self.replay_policy_version,
            "input_digest": self.input_digest,
            "run_id": self.run_id,
            "attempt_id": self.attempt_id,
            "attempt_index": self.attempt_index,
            "candidate_digest": self.candidate_digest,
            "replay_disposition": self.replay_disposition.value,
            "reason_codes": list(self.reason_codes),
        }


def refusal_id_of(refusal: ReplayAdapterRefusal) -> str:
    """Recompute ``replay_refusal_id`` (§13.3)."""
    return digest(refusal.payload())


ReplayAdapterOutcome = ReplayAdapterResult | ReplayAdapterRefusal


@final
@attrs.frozen
class ReplayRequest:
    """One adapter input together with the immutable upstream values it names (§6.2)."""

    replay_input: ReplayAdapterInput
    problem_frame: ProblemFrame
    assessment: ContractAssessment
    residuals: tuple[ContractResidual, ...]
    gate: SearchGateDecision
    budget: ComputeBudgetDecision
    run: GeometricSearchRun
    attempt: CandidateAttempt
    reconstruction: CandidateReconstruction


@final
@attrs.frozen
class ReplayBundle:
    """A search chain and one adapter input per attempt, in the run's order (CLI input)."""

    chain: SearchChain
    inputs: tuple[ReplayAdapterInput, ...]
