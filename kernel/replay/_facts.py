"""Facts about a run that validation needs, and the deep re-validation of records.

Rules:

- ``RunFacts`` is what validation needs to know about one run: whether its
  records are valid, whether it lies in the identity domain, its recomputed
  id, and whether every attempt reproduces its id, position, run and input.
- Facts are computed once per batch (``examine_run``) and passed explicitly
  to every attempt of that run; nothing is memoised by value. Values that
  compare equal are not the same input (``True == 1``; a ``__hash__`` may
  raise anything), so a value-keyed cache over untrusted input could serve
  one run's facts to another (ADR 0011).
- Facts apply to the very run object they examined (``facts.run is
  request.run``) and only when ``examine_run`` built them; anything else is
  ignored and the run is examined afresh, so a stale or forged ``RunFacts``
  can cost time but never change an outcome.
- The same holds for the upstream records a batch shares (frame,
  assessment, residuals, gate, budget): ``RecordFacts`` of each is examined
  once and applies only to the very object examined.
- ``validate_deep`` re-runs every attrs validator of a record and of the
  records it holds, so a frozen value altered behind attrs' back
  (``object.__setattr__``) is caught when it is validated, not only when built.
- The one exception is provenance (ADR 0011, "Records the kernel built"):
  ``built_facts``/``with_built`` vouch, without walking them, for records that
  ``kernel.serde``'s strict converter has just built (every field validator
  and invariant ran in the constructor, over values the strict parser had
  already put in the identity domain) and that no caller has held since.
  Only the function that parsed the records may call them
  (``replay_bundle_document``); a record handed in by a caller is always
  examined.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from enum import EnumType
from typing import Any, Final, TypeVar, cast, final

import attrs

from kernel.frames import ProblemFrame
from kernel.identity import IdentityError, check_domain, validated_payloads
from kernel.replay._records import ReplayAdapterInput, ReplayRequest
from kernel.upstream import (
    CandidateAttempt,
    CandidateReconstruction,
    ComputeBudgetDecision,
    ContractAssessment,
    ContractResidual,
    GeometricSearchRun,
    SearchGateDecision,
    attempt_id_of,
    run_id_of,
)

__all__ = [
    "RecordFacts",
    "RunFacts",
    "built_facts",
    "canonical_payloads",
    "examine_run",
    "facts_apply",
    "facts_for",
    "validate_deep",
    "with_built",
]

# Only facts built by ``examine_run`` carry this mark.
_EXAMINED: Final = object()

_R = TypeVar("_R")
_V = TypeVar("_V")


@final
@attrs.frozen(eq=False)
class RecordFacts:
    """Whether one record (or a tuple of records) is valid and in the identity domain.

    ``memo`` holds what guards computed from this very record once for the
    batch (its recomputed id, say), keyed by the function that computed it:
    code, never a value of the record (see ``RunFacts.derived``).
    """

    record: object
    structure_error: str | None
    canonical_error: str | None
    memo: dict[Callable[[Any], object], object] = attrs.field(factory=dict, repr=False)


def examine_record(record: object) -> RecordFacts:
    """Re-run every invariant of ``record`` (each item, for a tuple), then its domain check."""
    items = record if type(record) is tuple else (record,)
    try:
        for item in items:
            validate_deep(item)
    except (TypeError, ValueError) as exc:
        return RecordFacts(record, str(exc), None)
    try:
        # The validators of every item (and of all it holds) have just held,
        # so its payloads may take the payload path (ADR-0007): orjson without
        # the scan, the reference for whatever orjson refuses.
        with validated_payloads():
            for item in items:
                canonical_payloads(item)
    except IdentityError as exc:
        return RecordFacts(record, None, str(exc))
    return RecordFacts(record, None, None)


@final
@attrs.frozen(eq=False)
class RunFacts:
    """What validation needs to know about ``run``, computed once by ``examine_run``.

    Compared by identity, never by value; build it with ``examine_run`` only.
    """

    run: GeometricSearchRun
    structure_error: str | None
    canonical_error: str | None
    run_id: str | None
    attempts_consistent: bool
    _mark: object = attrs.field(default=None, repr=False)
    shared: tuple[RecordFacts, ...] = ()
    _memo: dict[Callable[[Any], object], object] = attrs.field(factory=dict, repr=False)
    def _known(self, record: object) -> RecordFacts | None:
        """The facts of the very object ``record`` if the batch shares it (``is``, never ``==``)."""
        for known in self.shared:
            if known.record is record:
                return known
        return None

    def derived(self, record: _R, compute: Callable[[_R], _V]) -> _V:
        """``compute(record)``, computed once per batch when ``record`` is the run or a
        record the batch shares (the very object, found sound), else every time.

        For pure functions of the record alone (its recomputed id, the
        residuals its assessment implies): the batch's records are the same
        objects for every attempt, so each attempt would recompute the same
        value (ADR 0011, "Shared records digested once per batch"). Keyed by
        the function (code), never by a value of the record, and held by the
        facts of the very object only, so nothing computed for one record is
        ever served for another, however equal.
        """
        memo: dict[Callable[[Any], object], object] | None = None
        if record is self.run:
            if self.structure_error is None and self.canonical_error is None:
                memo = self._memo
        else:
            known = self._known(record)
            if (
                known is not None
                and known.structure_error is None
                and known.canonical_error is None
            ):
                memo = known.memo
        if memo is None:
            return compute(record)
        if compute in memo:
            return cast("_V", memo[compute])
        value = compute(record)
        memo[compute] = value
        return value

    def record(self, record: object) -> RecordFacts:
        """The facts of ``record``: examined with the batch if it is that very object.

        An attempt that is the very object at its own index in this run was
        examined with the run (``validate_deep(run)`` reaches every attempt,
        and the run id and every attempt id were digested): it is not walked
        again when the run was found sound.
        """
        known = self._known(record)
        if known is not None:
            return known
        if (
            type(record) is CandidateAttempt
            and self.structure_error is None
            and self.canonical_error is None
        ):
            index: object = record.attempt_index
            attempts = self.run.candidate_attempts
            if type(index) is int and 0 <= index < len(attempts) and attempts[index] is record:
                return RecordFacts(record, None, None)
        return examine_record(record)


def facts_apply(facts: object, run: object) -> bool:
    """Whether ``facts`` were built by ``examine_run`` for this very ``run`` object."""
    return type(facts) is RunFacts and facts._mark is _EXAMINED and facts.run is run


_Checked = tuple[tuple[int, "attrs.Attribute[Any]"], ...]
_Plan = tuple[Callable[[Any], tuple[Any, ...]], _Checked, Callable[[Any], None] | None]
# Per record class (the kernel's own classes, never a value): one getter for
# all its fields in declaration order, the fields that have a validator (with
# their position), and its cross-field invariant. Classes whose metaclass is
# not ``type`` are walked without a cached plan, so no foreign __hash__ or
# __eq__ runs here.
_PLANS: Final[dict[type, _Plan]] = {}
_LEAVES: Final = frozenset({str, int, bool, type(None)})


def _plan(kind: type) -> _Plan | None:
    plan = _PLANS.get(kind) if type(kind) is type else None
    if plan is None and attrs.has(kind):
        fields = attrs.fields(kind)
        names = [field.name for field in fields]
        # attrgetter of one name returns the value itself, of several a tuple.
        getter: Callable[[Any], tuple[Any, ...]]
        if len(names) == 1:
            one = operator.attrgetter(names[0])
            getter = lambda value: (one(value),)  # noqa: E731 -- a one-line adapter
        elif names:
            getter = operator.attrgetter(*names)
        else:
            getter = lambda value: ()  # noqa: E731
        checked = tuple((i, f) for i, f in enumerate(fields) if f.validator is not None)
        plan = (getter, checked, getattr(kind, "__attrs_post_init__", None))
        if type(kind) is type:
            _PLANS[kind] = plan
    return plan


def validate_deep(value: object) -> None:
    """Re-run every invariant of ``value`` and of everything it holds; raises on failure.

    Field validators (as ``attrs.validate``, whatever attrs' global switch
    says) and the cross-field invariants that records state in
    ``__attrs_post_init__`` (exactly one of frame and delta, spans inside
    their source text, ...): in this kernel that hook only checks and never
    assigns, so re-running it on a built value is safe. Fields are checked
    before the values they hold, as ``attrs.validate`` then recursion would.
    """
    kind = type(value)
    if kind is tuple:
        for item in cast("tuple[object, ...]", value):
            if type(item) not in _LEAVES:
                validate_deep(item)
        return
    if kind in _LEAVES:
        return
    # The planned classes' own entry first (no call); an enum member holds no
    # record (its field's validator checked its class; the exact stdlib
    # metaclass runs no foreign code); anything else is planned (or found to
    # be no record) by ``_plan``, which owns the metaclass rule.
    meta = type(kind)
    plan = _PLANS.get(kind) if meta is type else None
    if plan is None:
        if meta is EnumType:
            return
        plan = _plan(kind)
        if plan is None:
            return
    getter, checked, invariants = plan
    items = getter(value)
    for position, field in checked:
        field.validator(value, field, items[position])  # type: ignore[misc]  # not None: planned
    if invariants is not None:
        invariants(value)
    for item in items:
        held = type(item)
        if held is tuple:  # the walk of a tuple, inline: most hold leaves only
            for member in item:
                if type(member) not in _LEAVES:
                    validate_deep(member)
        elif held not in _LEAVES:
            validate_deep(item)


def canonical_payloads(record: object) -> None:
    """Raise ``IdentityError`` unless every payload ``record`` digests lies in the domain.

    The domain check alone (no encoding, no hash): it raises exactly what the
    digest of the same payload would, and the digests follow in the guards.
    """
    if isinstance(record, ProblemFrame):
        check_domain(record.payload())
    elif isinstance(record, CandidateReconstruction):
        check_domain(record.payload())
        if record.candidate_problem_frame is not None:
            check_domain(record.candidate_problem_frame.payload())
        if record.frame_delta is not None:
            check_domain(record.frame_delta.payload())
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


def examine_run(run: GeometricSearchRun, *, shared: Sequence[object] = ()) -> RunFacts:
    """Examine ``run`` once for a whole batch of its attempts (O(run)).

    Pass the result as ``facts=`` to ``begin_attempt``/``replay_attempt`` for
    every attempt of this run object; classifying n attempts then costs
    O(run + n) instead of O(run x n). ``shared`` names the upstream records
    (or the residuals tuple) the batch's requests hold in common; each is
    examined here once. Never raises for a bad run or record: defects are
    recorded and become each attempt's refusal.
    """
    records = tuple(examine_record(record) for record in shared)
    try:
        validate_deep(run)
    except (TypeError, ValueError) as exc:
        return RunFacts(run, str(exc), None, None, False, _EXAMINED, records)
    # validate_deep(run) has just held for the run and every record in it:
    # its digests take the payload path (ADR-0007).
    return _identity_facts(run, records)


def _identity_facts(run: GeometricSearchRun, records: tuple[RecordFacts, ...]) -> RunFacts:
    """The run's id and its attempts' consistency, for a run known valid.

    Callers guarantee the run is valid and in the identity domain (examined
    or built by the converter), so the digests take the payload path.
    """
    with validated_payloads():
        try:
            run_id = run_id_of(run)
        except IdentityError as exc:
            return RunFacts(run, None, str(exc), None, False, _EXAMINED, records)
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
    return RunFacts(run, None, None, run_id, consistent, _EXAMINED, records)


def built_facts(run: GeometricSearchRun, shared: Sequence[object]) -> RunFacts:
    """Facts for a run and shared records that the strict converter has just built.

    Private to ``kernel.replay``: the caller must have structured ``run`` and
    ``shared`` itself from parsed bytes, with attrs' validators on, and handed
    them to nobody. The records are then valid and in the identity domain by
    construction, so they are not walked again; the run's id and every
    attempt's id are still recomputed (that is identity, not validation).
    """
    return _identity_facts(run, tuple(RecordFacts(record, None, None) for record in shared))


def with_built(facts: RunFacts, *records: object) -> RunFacts:
    """``facts`` that also vouch for ``records``, built like those of ``built_facts``.

    Same contract as ``built_facts``: only for records the caller has itself
    structured from parsed bytes and handed to nobody. One per attempt, so
    looking a record up stays O(shared records), whatever the run's size.
    """
    # Built directly rather than through attrs.evolve (which reads the class's
    # fields on every call): one per attempt. The memo of the run is shared
    # with the batch's facts, like the shared records' own facts.
    return RunFacts(
        facts.run,
        facts.structure_error,
        facts.canonical_error,
        facts.run_id,
        facts.attempts_consistent,
        facts._mark,
        (*facts.shared, *(RecordFacts(record, None, None) for record in records)),
        facts._memo,
    )


def facts_for(request: object, known: RunFacts | None = None) -> RunFacts | None:
    """The facts to pass with ``request`` in a batch: ``known`` if they apply to its run.

    Otherwise the run of ``request`` is examined now (when ``request`` is a
    ``ReplayRequest`` holding a real ``GeometricSearchRun``), else ``None``
    (validation then refuses the request on its own). A batch whose attempts
    share one run object therefore examines it once.
    """
    if type(request) is not ReplayRequest:
        return None
    run: object = request.run
    if known is not None and facts_apply(known, run):
        return known
    if type(run) is not GeometricSearchRun:
        return None
    return examine_run(
        run,
        shared=(
            request.problem_frame,
            request.assessment,
            request.gate,
            request.budget,
            request.residuals,
        ),
    )
