"""The public surface of kernel.verification: exact exports, closed vocabularies, frozen values."""

from __future__ import annotations

import enum
import typing

import attrs
import pytest

import kernel.verification as verification
from kernel.verification import (
    Activation,
    Authority,
    EvidenceTier,
    Role,
    Stage,
    Status,
    VerificationSpec,
)
from tests import verification_strategies as vs

EXPECTED_ALL = [
    "ActivationDecision",
    "Activation",
    "Authority",
    "BACKEND_CATALOG",
    "BackendCatalog",
    "BackendEntry",
    "BackendGap",
    "BackendInactive",
    "BackendOperation",
    "BackendReady",
    "BackendVerdict",
    "Candidate",
    "Claim",
    "ClaimLevel",
    "ClosureItem",
    "ClosureReason",
    "CommandConfiguration",
    "EXECUTOR_AUTHORITY",
    "EvidenceTier",
    "GapCode",
    "GateDecision",
    "GateReason",
    "OUTPUT_FIELDS",
    "OperationKind",
    "PostRepairClosure",
    "Proceed",
    "Producer",
    "ProfileSnapshot",
    "REVERIFY_BACKEND",
    "Rejection",
    "RejectionCode",
    "RepairHistory",
    "Rereview",
    "Role",
    "STAGE_AUTHORITY",
    "STAGE_REQUESTERS",
    "Selection",
    "Setting",
    "Stage",
    "Status",
    "VerificationPlan",
    "VerificationReceipt",
    "VerificationRequest",
    "VerificationSpec",
    "close_post_repair",
    "evaluate_activation",
    "evaluate_gate",
    "integrate_selections",
    "plan_post_repair_reruns",
    "plan_verification",
    "receipt_id_of",
    "request_id_of",
    "seal_verification",
    "select_backend",
]


def test_all_is_exact_and_alphabetical() -> None:
    assert sorted(verification.__all__) == sorted(EXPECTED_ALL)
    assert verification.__all__ == sorted(verification.__all__)
    assert len(set(verification.__all__)) == len(verification.__all__)
    for name in verification.__all__:
        assert hasattr(verification, name), name


def _enums() -> list[type[enum.Enum]]:
    return [
        v for v in vars(verification).values() if isinstance(v, type) and issubclass(v, enum.Enum)
    ]


@pytest.mark.parametrize("vocabulary", _enums(), ids=lambda e: e.__name__)
def test_vocabularies_are_plain_enums_with_str_values(vocabulary: type[enum.Enum]) -> None:
    # A str mixin would pass through cattrs unchanged and canonical_json refuses it.
    assert not issubclass(vocabulary, str)
    assert all(type(member.value) is str for member in vocabulary)


def test_seed_vocabularies_are_exactly_the_named_members() -> None:
    assert [s.value for s in Status] == ["VERIFIED", "REFUTED", "INCONCLUSIVE", "ERROR"]
    assert [a.value for a in Authority] == ["diagnostic", "assurance"]
    assert {a.value for a in Activation} == {"selected", "required", "inactive"}
    assert [t.value for t in EvidenceTier] == ["observed", "derived"]
    assert {r.value for r in Role} == {
        "implementer",
        "light_implementer",
        "integration_engineer",
        "test_engineer",
        "reviewer",
        "orchestrator",
        "planning_test_engineer",
        "plan_integrator",
    }
    assert {s.value for s in Stage} == {
        "implementation",
        "integration",
        "assurance",
        "adjudication",
        "post_repair_closure",
    }


def _records() -> list[type]:
    return [v for v in vars(verification).values() if isinstance(v, type) and attrs.has(v)]


@pytest.mark.parametrize("record", _records(), ids=lambda r: r.__name__)
def test_records_are_frozen_slotted_and_final(record: type) -> None:
    assert record.__setattr__.__name__ == "_frozen_setattrs"
    assert "__slots__" in vars(record)
    assert getattr(record, "__final__", False) is True
    for field in attrs.fields(record):
        assert typing.get_origin(field.type) is not list, field.name


def test_spec_defaults_nothing() -> None:
    # ADR-0003: activation, authority, stage, expected result, claim and candidate
    # (and everything else) must be bound by the caller.
    assert all(f.default is attrs.NOTHING for f in attrs.fields(VerificationSpec))
    with pytest.raises(TypeError):
        VerificationSpec(candidate=vs.candidate(), claim=vs.binary_claim())  # type: ignore[call-arg]


def test_records_refuse_mutation() -> None:
    p = vs.plan()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.request.backend = "cbmc"  # type: ignore[misc]
