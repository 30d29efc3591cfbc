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
- ``validate_deep`` re-runs every attrs validator of a record and of the
  records it holds, so a frozen value altered behind attrs' back
  (``object.__setattr__``) is caught when it is validated, not only when built.
"""

from __future__ import annotations

from typing import Final, cast, final

import attrs
from attrs import AttrsInstance

from kernel.frames import ProblemFrame, delta_digest, frame_digest
from kernel.identity import IdentityError, check_domain
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
    reconstruction_digest_of,
    run_id_of,
)

__all__ = [
    "RunFacts",
    "canonical_payloads",
    "examine_run",
    "facts_apply",
    "facts_for",
    "validate_deep",
]

# Only facts built by ``examine_run`` carry this mark.
_EXAMINED: Final = object()


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


def facts_apply(facts: object, run: object) -> bool:
    """Whether ``facts`` were built by ``examine_run`` for this very ``run`` object."""
    return type(facts) is RunFacts and facts._mark is _EXAMINED and facts.run is run


def validate_deep(value: object) -> None:
    """Re-run every invariant of ``value`` and of everything it holds; raises on failure.

    Field validators (``attrs.validate``) and the cross-field invariants that
    records state in ``__attrs_post_init__`` (exactly one of frame and delta,
    spans inside their source text, ...): in this kernel that hook only
    checks and never assigns, so re-running it on a built value is safe.
    """
    kind = type(value)
    if attrs.has(kind):
        attrs.validate(cast("AttrsInstance", value))
        invariants = getattr(kind, "__attrs_post_init__", None)
        if invariants is not None:
            invariants(value)
        for field in attrs.fields(kind):
            validate_deep(getattr(value, field.name))
    elif isinstance(value, tuple):
        for item in value:
            validate_deep(item)


def canonical_payloads(record: object) -> None:
    """Raise ``IdentityError`` unless every payload ``record`` digests lies in the domain."""
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


def examine_run(run: GeometricSearchRun) -> RunFacts:
    """Examine ``run`` once for a whole batch of its attempts (O(run)).

    Pass the result as ``facts=`` to ``begin_attempt``/``replay_attempt`` for
    every attempt of this run object; classifying n attempts then costs
    O(run + n) instead of O(run x n). Never raises for a bad run: its defects
    are recorded and become each attempt's refusal.
    """
    try:
        validate_deep(run)
    except (TypeError, ValueError) as exc:
        return RunFacts(run, str(exc), None, None, False, _EXAMINED)
    try:
        run_id = run_id_of(run)
    except IdentityError as exc:
        return RunFacts(run, None, str(exc), None, False, _EXAMINED)
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
    return RunFacts(run, None, None, run_id, consistent, _EXAMINED)


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
    return examine_run(run)
