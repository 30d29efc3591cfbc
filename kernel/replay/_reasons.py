"""Reason codes, the disposition each one implies, and the rejection value guards return.

Rules:

- ``ReasonCode`` is closed; each member names the one check that failed (or,
  for ``NO_PROOF_OBLIGATION_APPLICABLE``, the cause of a semantic result).
- ``DISPOSITION_OF`` is the whole link from a code to its ADR-0229 §8
  disposition, in one ``Final`` mapping; a test holds it total. A check never
  chooses its disposition: it names its code, the mapping does the rest.
- ``Rejection`` is what a guard returns when its rule fails (ADR 0011: the
  one guard style of the core); ``None`` means the rule holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Final, final

import attrs

from kernel.replay._records import ReplayDisposition

__all__ = ["DISPOSITION_OF", "ReasonCode", "Rejection"]


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


R = ReasonCode
D = ReplayDisposition


def _each(
    disposition: ReplayDisposition, *codes: ReasonCode
) -> dict[ReasonCode, ReplayDisposition]:
    return dict.fromkeys(codes, disposition)


# ADR-0229 §8 and §16: the disposition a failed check (or a cause) implies.
DISPOSITION_OF: Final[Mapping[ReasonCode, ReplayDisposition]] = MappingProxyType(
    _each(
        D.INVALID_REPLAY_INPUT,
        R.REQUEST_NOT_A_REPLAY_REQUEST,
        R.ATTEMPT_MALFORMED,
        R.REQUEST_FIELD_WRONG_TYPE,
        R.RECORD_STRUCTURE_INVALID,
        R.RECORD_NOT_CANONICAL,
        R.SCHEMA_VERSIONS_NOT_CANONICAL,
        R.SCHEMA_VERSION_MISSING,
    )
    | _each(
        D.UNSUPPORTED_REPLAY_POLICY,
        R.REPLAY_POLICY_UNSUPPORTED,
        R.RUN_POLICY_UNSUPPORTED,
        R.GATE_POLICY_UNSUPPORTED,
        R.BUDGET_POLICY_UNSUPPORTED,
    )
    | _each(D.UNSUPPORTED_SCHEMA_VERSION, R.SCHEMA_UNKNOWN, R.SCHEMA_VERSION_UNSUPPORTED)
    | _each(
        D.CANDIDATE_IDENTITY_MISMATCH,
        R.RUN_ID_MISMATCH,
        R.RUN_INPUT_DIGEST_MISMATCH,
        R.RUN_POLICY_VERSION_MISMATCH,
        R.RUN_ATTEMPTS_INCONSISTENT,
        R.ATTEMPT_INDEX_OUT_OF_RANGE,
        R.ATTEMPT_NOT_AT_INDEX,
        R.ATTEMPT_ID_MISMATCH,
        R.ORIGINAL_FRAME_MISMATCH,
        R.CANDIDATE_FRAME_DIGEST_MISMATCH,
        R.FRAME_DELTA_DIGEST_MISMATCH,
        R.FRAME_DELTA_DOES_NOT_RECONSTRUCT,
        R.CANDIDATE_SOURCE_TEXT_ALTERED,
        R.CANDIDATE_CONTENT_MISMATCH,
        R.CANDIDATE_DIGEST_MISMATCH,
        R.RECONSTRUCTION_DIGEST_MISMATCH,
        R.RECONSTRUCTION_NOT_FOR_ATTEMPT,
        R.EVIDENCE_SPANS_MISMATCH,
        R.OPERATOR_MISMATCH,
        R.OPERATOR_SET_MISMATCH,
        R.PROBLEM_FRAME_CHAIN_MISMATCH,
        R.ASSESSMENT_CHAIN_MISMATCH,
        R.RESIDUAL_CHAIN_MISMATCH,
        R.GATE_CHAIN_MISMATCH,
        R.GATE_DID_NOT_PERMIT_SEARCH,
        R.BUDGET_CHAIN_MISMATCH,
        R.RUN_EXCEEDS_BUDGET,
        R.ASSESSMENT_ID_MISMATCH,
        R.ORIGINAL_ASSESSMENT_NOT_REFUSED,
        R.CANDIDATE_ORGAN_MISMATCH,
        R.INPUT_DIGEST_MISMATCH,
    )
    | _each(
        D.CONTRACT_REPLAY_UNAVAILABLE,
        R.CONTRACT_AUTHORITY_MISSING,
        R.CONTRACT_TARGET_NOT_ALLOWLISTED,
        R.CONTRACT_AUTHORITY_RAISED,
        R.CONTRACT_OUTCOME_MALFORMED,
        R.CONTRACT_OUTCOME_WRONG_ORGAN,
        R.CONTRACT_OUTCOME_NOT_BOUND,
        R.CONTRACT_OUTCOME_ID_INVALID,
        R.CONTRACT_OUTCOME_INCONSISTENT,
    )
    | _each(
        D.UNSUPPORTED_PROOF_OBLIGATION,
        R.PROOF_POLICY_MISSING,
        R.PROOF_OBLIGATION_UNKNOWN,
        R.PROOF_OBLIGATIONS_NOT_POLICY,
    )
    | _each(
        D.PROOF_REPLAY_UNAVAILABLE,
        R.PROOF_AUTHORITY_RAISED,
        R.PROOF_OUTCOME_MALFORMED,
        R.PROOF_OUTCOME_NOT_BOUND,
        R.PROOF_OUTCOME_WRONG_AUTHORITY,
        R.PROOF_OUTCOME_ID_INVALID,
        R.PROOF_EVIDENCE_MALFORMED,
        R.PROOF_EVIDENCE_UNEXPECTED,
    )
    # Only a declared "none applicable" policy yields this code, and it closes.
    | _each(D.CONTRACT_AND_PROOF_CLOSED, R.NO_PROOF_OBLIGATION_APPLICABLE)
)


@final
@attrs.frozen
class Rejection:
    """A guard's verdict that its rule does not hold: the code and a one-line detail."""

    code: ReasonCode
    detail: str

    @property
    def disposition(self) -> ReplayDisposition:
        return DISPOSITION_OF[self.code]
