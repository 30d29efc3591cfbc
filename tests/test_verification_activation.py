"""Backend activation: selections, the frozen profile snapshot, typed gaps."""

from __future__ import annotations

import attrs
import pytest

from kernel.verification import (
    REVERIFY_BACKEND,
    Activation,
    BackendGap,
    BackendInactive,
    BackendReady,
    Claim,
    ClaimLevel,
    GapCode,
    Proceed,
    ProfileSnapshot,
    RejectionCode,
    Role,
    Selection,
    Status,
    evaluate_activation,
    integrate_selections,
    select_backend,
)
from tests import verification_strategies as vs

BINARY = vs.binary_claim("claim-bin")
SOURCE = Claim(claim_id="claim-src", level=ClaimLevel.SOURCE, statement="no overflow")


def _select(claim: Claim, backend: str, activation: Activation) -> Selection:
    outcome = select_backend(Role.PLANNING_TEST_ENGINEER, claim, backend, activation)
    assert isinstance(outcome, Selection), outcome
    return outcome


def _snapshot(
    *selections: Selection, available: tuple[str, ...] = (), reverify_enabled: bool = False
) -> ProfileSnapshot:
    return ProfileSnapshot(
        reverify_enabled=reverify_enabled,
        available_backends=tuple(sorted(available)),
        selections=tuple(sorted(selections, key=lambda s: s.key)),
    )


def test_required_unavailable_backend_is_an_error_gap_that_halts() -> None:
    snap = _snapshot(_select(BINARY, REVERIFY_BACKEND, Activation.REQUIRED))
    gap = evaluate_activation(snap, "claim-bin", REVERIFY_BACKEND)
    assert isinstance(gap, BackendGap)
    assert (gap.status, gap.code, gap.proceed) == (
        Status.ERROR,
        GapCode.BACKEND_UNAVAILABLE,
        Proceed.HALT,
    )
    assert GapCode.BACKEND_UNAVAILABLE.value == "backend_unavailable"
    assert Proceed.HALT.value == "halt"


def test_selected_only_unavailable_backend_proceeds_with_note() -> None:
    snap = _snapshot(_select(BINARY, REVERIFY_BACKEND, Activation.SELECTED))
    gap = evaluate_activation(snap, "claim-bin", REVERIFY_BACKEND)
    assert isinstance(gap, BackendGap)
    assert gap.status is Status.ERROR
    assert gap.code is GapCode.BACKEND_UNAVAILABLE
    assert gap.proceed.value == "proceed-with-note"


def test_a_gap_is_never_anything_but_error() -> None:
    with pytest.raises(ValueError):
        BackendGap(
            claim_id="c",
            backend="cbmc",
            activation=Activation.REQUIRED,
            status=Status.VERIFIED,
            code=GapCode.BACKEND_UNAVAILABLE,
            proceed=Proceed.HALT,
            message="m",
        )


def test_unselected_unrequired_absence_stays_inactive() -> None:
    decision = evaluate_activation(_snapshot(), "claim-bin", "cbmc")
    assert decision == BackendInactive(claim_id="claim-bin", backend="cbmc")


def test_activated_and_available_backend_is_ready_with_its_activation() -> None:
    snap = _snapshot(_select(BINARY, "cbmc", Activation.REQUIRED), available=("cbmc",))
    decision = evaluate_activation(snap, "claim-bin", "cbmc")
    assert decision == BackendReady(
        claim_id="claim-bin", backend="cbmc", activation=Activation.REQUIRED
    )


def test_reverify_enabled_and_available_selects_nothing() -> None:
    snap = _snapshot(available=(REVERIFY_BACKEND,), reverify_enabled=True)
    decision = evaluate_activation(snap, "claim-bin", REVERIFY_BACKEND)
    assert isinstance(decision, BackendInactive)


def test_reverify_keeps_its_identity_in_a_gap() -> None:
    snap = _snapshot(
        _select(BINARY, REVERIFY_BACKEND, Activation.REQUIRED),
        available=("cbmc",),
        reverify_enabled=True,
    )
    gap = evaluate_activation(snap, "claim-bin", REVERIFY_BACKEND)
    assert isinstance(gap, BackendGap)
    assert gap.backend == "reverify" == REVERIFY_BACKEND
    # another available backend does not stand in for the absent binding
    assert isinstance(evaluate_activation(snap, "claim-bin", "cbmc"), BackendInactive)


def test_evaluation_reads_only_the_frozen_snapshot() -> None:
    selection = _select(BINARY, "cbmc", Activation.REQUIRED)
    before = _snapshot(selection)
    after = _snapshot(selection, available=("cbmc",))
    # The decision is a function of the snapshot value handed in, nothing else.
    assert isinstance(evaluate_activation(before, "claim-bin", "cbmc"), BackendGap)
    assert isinstance(evaluate_activation(after, "claim-bin", "cbmc"), BackendReady)
    assert isinstance(evaluate_activation(before, "claim-bin", "cbmc"), BackendGap)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        before.available_backends = ("cbmc",)  # type: ignore[misc]
    assert type(before.selections) is tuple


def test_planning_test_engineer_selects_reverify_on_a_binary_claim() -> None:
    selection = _select(BINARY, REVERIFY_BACKEND, Activation.SELECTED)
    assert selection.selected_by is Role.PLANNING_TEST_ENGINEER
    assert selection.backend == "reverify"


@pytest.mark.parametrize("level", [ClaimLevel.SOURCE, ClaimLevel.SYSTEM])
def test_reverify_is_not_selected_on_a_non_binary_claim(level: ClaimLevel) -> None:
    claim = Claim(claim_id="c", level=level, statement="s")
    refused = vs.rejection(
        select_backend(Role.PLANNING_TEST_ENGINEER, claim, REVERIFY_BACKEND, Activation.SELECTED)
    )
    assert refused.code is RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE


@pytest.mark.parametrize("role", [r for r in Role if r is not Role.PLANNING_TEST_ENGINEER])
def test_only_the_planning_test_engineer_selects(role: Role) -> None:
    refused = vs.rejection(select_backend(role, BINARY, REVERIFY_BACKEND, Activation.SELECTED))
    assert refused.code is RejectionCode.SELECTION_ROLE_NOT_PERMITTED


@pytest.mark.parametrize(
    ("backend", "activation", "code"),
    [
        ("cbmc", Activation.INACTIVE, RejectionCode.BACKEND_NOT_ACTIVATED),
        ("orchestrator", Activation.SELECTED, RejectionCode.BACKEND_IS_A_ROLE),
        ("deterministic_verification", Activation.SELECTED, RejectionCode.BACKEND_UNKNOWN),
    ],
)
def test_selection_refusals(backend: str, activation: Activation, code: RejectionCode) -> None:
    refused = vs.rejection(select_backend(Role.PLANNING_TEST_ENGINEER, BINARY, backend, activation))
    assert refused.code is code


def test_a_selection_cannot_be_built_for_another_role() -> None:
    with pytest.raises(ValueError):
        Selection(
            claim=BINARY,
            backend="cbmc",
            activation=Activation.SELECTED,
            selected_by=Role.PLAN_INTEGRATOR,
        )


def test_plan_integrator_copies_selections_exactly() -> None:
    planned = (
        _select(BINARY, REVERIFY_BACKEND, Activation.REQUIRED),
        _select(SOURCE, "cbmc", Activation.SELECTED),
    )
    assert integrate_selections(planned, tuple(reversed(planned))) == tuple(
        sorted(planned, key=lambda s: s.key)
    )


def test_plan_integrator_cannot_invent_a_selection() -> None:
    planned = (_select(BINARY, REVERIFY_BACKEND, Activation.SELECTED),)
    invented = (*planned, _select(SOURCE, "cbmc", Activation.SELECTED))
    assert vs.rejection(integrate_selections(planned, invented)).code is (
        RejectionCode.SELECTION_INVENTED
    )


def test_plan_integrator_cannot_upgrade_a_selection() -> None:
    planned = (_select(BINARY, REVERIFY_BACKEND, Activation.SELECTED),)
    upgraded = (_select(BINARY, REVERIFY_BACKEND, Activation.REQUIRED),)
    assert vs.rejection(integrate_selections(planned, upgraded)).code is (
        RejectionCode.SELECTION_INVENTED
    )


def test_plan_integrator_cannot_drop_a_selection() -> None:
    planned = (
        _select(BINARY, REVERIFY_BACKEND, Activation.REQUIRED),
        _select(SOURCE, "cbmc", Activation.SELECTED),
    )
    assert vs.rejection(integrate_selections(planned, planned[:1])).code is (
        RejectionCode.SELECTION_DROPPED
    )
