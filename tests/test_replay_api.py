"""ADR-0229 §7, §8, §17: the public surface and record shapes are exact."""

from __future__ import annotations

import attrs
import pytest

import kernel.replay as api
from kernel.replay import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
)

FORBIDDEN_FIELDS = {
    "answer", "final_answer", "served_output", "promotion", "mutation", "teaching_update",
    "pack_update", "policy_update", "identity_update", "workbench_state", "runtime_effect",
    "confidence", "score", "rank", "priority", "selected_candidate", "serving_allowed",
}


def test_public_api_exports_are_exact() -> None:
    assert api.__all__ == [
        "CONTRACT_PROOF_REPLAY_POLICY_VERSION", "DISPOSITION_OF", "AuthorityManifest",
        "ContractAuthority", "ContractClosed", "NoProofObligationsApplicable", "ProofAuthority",
        "ProofContext", "ProofEvidence", "ProofObligations", "ProofOutcome", "ProofStatus",
        "ProofsReplayed", "ReasonCode", "ReplayAdapterInput", "ReplayAdapterOutcome",
        "ReplayAdapterRefusal", "ReplayAdapterResult", "ReplayBundle", "ReplayDisposition",
        "ReplayMisuseError", "ReplayRequest", "RunFacts", "Validated", "begin_attempt",
        "build_replay_input", "candidate_derived", "dispose", "examine_run", "facts_for",
        "finish_attempt",
        "input_digest_of", "proof_outcome_id_of", "refusal_id_of", "refuse_malformed_attempt",
        "replay_attempt", "replay_attempts", "replay_bundle_attempts",
        "replay_bundle_document", "replay_contract",
        "replay_proofs", "requests_from_bundle", "result_id_of", "seal_proof_outcome",
        "validate",
    ]
    assert all(hasattr(api, name) for name in api.__all__)


def test_policy_version_is_v1() -> None:
    assert CONTRACT_PROOF_REPLAY_POLICY_VERSION == "contract_proof_replay.v1"


def test_disposition_vocabulary_is_exactly_section_8() -> None:
    assert [d.value for d in ReplayDisposition] == [
        "contract_refused", "contract_closed_but_proof_refused", "contract_and_proof_closed",
        "invalid_replay_input", "candidate_identity_mismatch", "contract_replay_unavailable",
        "proof_replay_unavailable", "unsupported_replay_policy", "unsupported_schema_version",
        "unsupported_proof_obligation",
    ]


def test_record_fields_are_exactly_section_6_and_7() -> None:
    assert list(attrs.fields_dict(ReplayAdapterInput)) == [
        "input_digest", "replay_policy_version", "run_id", "run_policy_version", "attempt_id",
        "attempt_index", "candidate_digest", "candidate_reconstruction_digest",
        "problem_frame_digest", "original_contract_assessment_id", "candidate_organ",
        "residual_ids", "gate_decision_id", "budget_id", "operator_set_id",
        "operator_set_version", "contract_replay_target", "proof_obligation_refs",
        "schema_versions",
    ]
    assert list(attrs.fields_dict(ReplayAdapterResult)) == [
        "replay_result_id", "replay_policy_version", "input_digest", "run_id", "attempt_id",
        "candidate_digest", "contract_replay_assessment_id", "proof_obligation_refs",
        "proof_replay_refs", "replay_disposition", "reason_codes", "evidence_spans",
        "explanation",
    ]
    assert list(attrs.fields_dict(ReplayAdapterRefusal)) == [
        "replay_refusal_id", "replay_policy_version", "input_digest", "run_id", "attempt_id",
        "attempt_index", "candidate_digest", "replay_disposition", "reason_codes", "explanation",
    ]
    for record in (ReplayAdapterResult, ReplayAdapterRefusal):
        assert FORBIDDEN_FIELDS.isdisjoint(f.lower() for f in attrs.fields_dict(record))


@pytest.mark.parametrize("disposition", list(ReplayDisposition))
def test_each_output_type_accepts_only_its_half_of_the_vocabulary(
    disposition: ReplayDisposition,
) -> None:
    is_result = disposition.value.startswith("contract_") and disposition.value in {
        "contract_refused", "contract_closed_but_proof_refused", "contract_and_proof_closed"
    }
    h = "0" * 64

    def make_result() -> object:
        return ReplayAdapterResult(h, "p", h, h, h, h, h, (), (), disposition, (), ())

    def make_refusal() -> object:
        return ReplayAdapterRefusal(h, "p", None, None, None, None, None, disposition, ())

    if is_result:
        make_result()
        with pytest.raises(ValueError):
            make_refusal()
    else:
        make_refusal()
        with pytest.raises(ValueError):
            make_result()


def test_records_are_frozen() -> None:
    h = "0" * 64
    refusal = ReplayAdapterRefusal(h, "p", None, None, None, None, None,
                                   ReplayDisposition.INVALID_REPLAY_INPUT, ())
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        refusal.reason_codes = ("x",)  # type: ignore[misc]


def test_every_reason_code_is_exercised_by_an_adapter_test() -> None:
    # Each check's code must appear in an expectation of the adapter tests, so
    # a check without a test that can fail is noticed here.
    from pathlib import Path

    from kernel.replay import ReasonCode

    text = "".join(
        path.read_text(encoding="utf-8")
        for path in sorted(Path(__file__).parent.glob("test_replay_*.py"))
        if path.name != "test_replay_api.py"
    )
    missing = [code.name for code in ReasonCode if f"RC.{code.name}" not in text
               and code.value not in text]
    assert missing == []
