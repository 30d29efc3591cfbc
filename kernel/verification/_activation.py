"""Backend activation: selections, the frozen profile snapshot, and typed gaps.

Theory of operation (the deterministic verification adapter seed, "Backend
activation"):

- a backend is active for a claim only when it is ``selected`` or ``required``
  by a ``Selection``; only the Planning Test Engineer makes selections, and the
  Plan Integrator copies them exactly (``selection_invented`` /
  ``selection_dropped`` otherwise);
- ``reverify_enabled`` in the profile records user configuration and selects
  nothing; Reverify keeps the identity ``reverify`` and applies to
  binary-level claims only;
- ``evaluate_activation`` reads only the ``ProfileSnapshot`` value it is
  handed (frozen at lifecycle time), never a live catalog;
- an activated but unavailable backend is a ``BackendGap`` with status
  ``ERROR`` and code ``backend_unavailable``: ``halt`` when required,
  ``proceed-with-note`` when only selected. Unselected and unrequired
  absence is ``BackendInactive``, not a failure.
"""

from __future__ import annotations

from typing import Any, TypeAlias, assert_never, final

import attrs

from kernel.verification._catalog import BACKEND_CATALOG, REVERIFY_BACKEND, is_role_name
from kernel.verification._records import Claim, Rejection
from kernel.verification._vocabulary import (
    Activation,
    ClaimLevel,
    GapCode,
    Proceed,
    RejectionCode,
    Role,
    Status,
)

__all__ = [
    "ActivationDecision",
    "BackendGap",
    "BackendInactive",
    "BackendReady",
    "ProfileSnapshot",
    "Selection",
    "evaluate_activation",
    "integrate_selections",
    "select_backend",
]


def _exact(kind: type) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not kind:
            raise TypeError(f"{attribute.name} must be {kind.__name__}")

    return check


def _selection_invariants(selection: Selection) -> None:
    if selection.activation is Activation.INACTIVE:
        raise ValueError("a selection activates its backend: selected or required")
    if selection.selected_by is not Role.PLANNING_TEST_ENGINEER:
        raise ValueError("only the Planning Test Engineer selects backends")
    if BACKEND_CATALOG.entry(selection.backend) is None:
        raise ValueError(f"backend {selection.backend!r} is not catalogued")
    if selection.backend == REVERIFY_BACKEND and selection.claim.level is not ClaimLevel.BINARY:
        raise ValueError("reverify is selected on binary-level claims only")


@final
@attrs.frozen
class Selection:
    """A backend activated for one claim by the Planning Test Engineer."""

    claim: Claim = attrs.field(validator=_exact(Claim))
    backend: str = attrs.field(validator=_exact(str))
    activation: Activation = attrs.field(validator=_exact(Activation))
    selected_by: Role = attrs.field(validator=_exact(Role))

    def __attrs_post_init__(self) -> None:
        _selection_invariants(self)

    @property
    def key(self) -> tuple[str, str]:
        """``(claim_id, backend)``: at most one selection per pair."""
        return (self.claim.claim_id, self.backend)


def _selections(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple or not all(type(s) is Selection for s in value):
        raise TypeError("selections must be a tuple of Selection")
    keys = [s.key for s in value]
    if keys != sorted(set(keys)):
        raise ValueError("selections must be unique per (claim_id, backend) and sorted")


def _backends(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple or not all(type(b) is str for b in value):
        raise TypeError("available_backends must be a tuple of str")
    if list(value) != sorted(set(value)):
        raise ValueError("available_backends must be unique and sorted")


@final
@attrs.frozen
class ProfileSnapshot:
    """The ``deterministic_verification`` profile as frozen at lifecycle time.

    ``reverify_enabled`` is recorded user configuration only: it selects nothing.
    """

    reverify_enabled: bool = attrs.field(validator=_exact(bool))
    available_backends: tuple[str, ...] = attrs.field(validator=_backends)
    selections: tuple[Selection, ...] = attrs.field(validator=_selections)


@final
@attrs.frozen
class BackendInactive:
    """Neither selected nor required: absence is not a failure."""

    claim_id: str
    backend: str


@final
@attrs.frozen
class BackendReady:
    """Activated and available: plan a request with this activation."""

    claim_id: str
    backend: str
    activation: Activation


def _gap_status(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not Status.ERROR:
        raise ValueError("a backend gap is always ERROR")


@final
@attrs.frozen
class BackendGap:
    """An activated backend that is unavailable: a typed ERROR gap, never success."""

    claim_id: str
    backend: str
    activation: Activation
    status: Status = attrs.field(validator=_gap_status)
    code: GapCode
    proceed: Proceed
    message: str


ActivationDecision: TypeAlias = BackendInactive | BackendReady | BackendGap


def select_backend(
    role: Role, claim: Claim, backend: str, activation: Activation
) -> Selection | Rejection:
    """Record that ``backend`` is selected or required for ``claim``, or reject it.

    Refuses: ``selection_role_not_permitted`` (only the Planning Test Engineer
    selects), ``backend_not_activated`` (``inactive`` is not a selection),
    ``backend_is_a_role``, ``backend_unknown`` and
    ``reverify_claim_not_applicable``.
    """
    if role is not Role.PLANNING_TEST_ENGINEER:
        return Rejection(
            code=RejectionCode.SELECTION_ROLE_NOT_PERMITTED,
            message=f"{role.value} may not select backends; the Planning Test Engineer does",
            backend_detail=None,
        )
    if activation is Activation.INACTIVE:
        return Rejection(
            code=RejectionCode.BACKEND_NOT_ACTIVATED,
            message="a selection is selected or required",
            backend_detail=None,
        )
    if is_role_name(backend):
        return Rejection(
            code=RejectionCode.BACKEND_IS_A_ROLE,
            message=f"{backend!r} names a role; a backend is never a role",
            backend_detail=None,
        )
    if BACKEND_CATALOG.entry(backend) is None:
        return Rejection(
            code=RejectionCode.BACKEND_UNKNOWN,
            message=f"backend {backend!r} is not in the catalog",
            backend_detail=None,
        )
    if backend == REVERIFY_BACKEND and claim.level is not ClaimLevel.BINARY:
        return Rejection(
            code=RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE,
            message=f"reverify applies to binary-level claims, not {claim.level.value}",
            backend_detail=None,
        )
    return Selection(claim=claim, backend=backend, activation=activation, selected_by=role)


def integrate_selections(
    planned: tuple[Selection, ...], integrated: tuple[Selection, ...]
) -> tuple[Selection, ...] | Rejection:
    """The Plan Integrator's copy of the Planning Test Engineer's selections.

    Returns the selections (sorted) when ``integrated`` is exactly ``planned``;
    ``selection_invented`` when it adds or alters one, ``selection_dropped``
    when it loses one. The integrator cannot invent verification.
    """
    planned_set = set(planned)
    for selection in integrated:
        if selection not in planned_set:
            return Rejection(
                code=RejectionCode.SELECTION_INVENTED,
                message=(
                    f"{selection.backend} for claim {selection.claim.claim_id} was not "
                    "selected by the Planning Test Engineer"
                ),
                backend_detail=None,
            )
    integrated_set = set(integrated)
    for selection in planned:
        if selection not in integrated_set:
            return Rejection(
                code=RejectionCode.SELECTION_DROPPED,
                message=(
                    f"{selection.backend} for claim {selection.claim.claim_id} was selected "
                    "but not copied"
                ),
                backend_detail=None,
            )
    return tuple(sorted(planned_set, key=lambda s: s.key))


def evaluate_activation(
    snapshot: ProfileSnapshot, claim_id: str, backend: str
) -> ActivationDecision:
    """Decide activation of ``backend`` for ``claim_id`` from the frozen snapshot only."""
    selection = next(
        (s for s in snapshot.selections if s.key == (claim_id, backend)),
        None,
    )
    if selection is None:
        # Enabled-but-unselected (e.g. reverify_enabled) stays inactive too.
        return BackendInactive(claim_id=claim_id, backend=backend)
    if backend in snapshot.available_backends:
        return BackendReady(claim_id=claim_id, backend=backend, activation=selection.activation)
    match selection.activation:
        case Activation.REQUIRED:
            proceed = Proceed.HALT
        case Activation.SELECTED:
            proceed = Proceed.PROCEED_WITH_NOTE
        case Activation.INACTIVE:  # pragma: no cover - Selection refuses it
            raise AssertionError("a Selection is never inactive")
        case _:
            assert_never(selection.activation)
    return BackendGap(
        claim_id=claim_id,
        backend=backend,
        activation=selection.activation,
        status=Status.ERROR,
        code=GapCode.BACKEND_UNAVAILABLE,
        proceed=proceed,
        message=f"{selection.activation.value} backend {backend} is unavailable in the snapshot",
    )
