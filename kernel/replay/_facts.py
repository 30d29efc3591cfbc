"""Facts about a run that validation needs, and the deep re-validation of records.

Rules:

- ``RunFacts`` is a function of the run's value: whether its records are
  valid, whether it lies in the identity domain, its recomputed id, and
  whether every attempt reproduces its id, position, run and input.
- ``validate_deep`` re-runs every attrs validator of a record and of the
  records it holds, so a frozen value altered behind attrs' back
  (``object.__setattr__``) is caught when it is validated, not only when built.
"""

from __future__ import annotations

import functools
from typing import cast, final

import attrs
from attrs import AttrsInstance

from kernel.frames import ProblemFrame, delta_digest, frame_digest
from kernel.identity import IdentityError, check_domain
from kernel.replay._records import ReplayAdapterInput
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

__all__ = ["RunFacts", "canonical_payloads", "examine_run", "validate_deep"]


@final
@attrs.frozen
class RunFacts:
    """What validation needs to know about a run, all of it a function of its value."""

    structure_error: str | None
    canonical_error: str | None
    run_id: str | None
    attempts_consistent: bool


def validate_deep(value: object) -> None:
    """Re-run the attrs validators of ``value`` and everything it holds; raises on failure."""
    kind = type(value)
    if attrs.has(kind):
        attrs.validate(cast("AttrsInstance", value))
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


def _compute_run_facts(run: GeometricSearchRun) -> RunFacts:
    try:
        validate_deep(run)
    except (TypeError, ValueError) as exc:
        return RunFacts(str(exc), None, None, False)
    try:
        run_id = run_id_of(run)
    except IdentityError as exc:
        return RunFacts(None, str(exc), None, False)
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
    return RunFacts(None, None, run_id, consistent)


_cached_run_facts = functools.lru_cache(maxsize=16)(_compute_run_facts)


def examine_run(run: GeometricSearchRun) -> RunFacts:
    """Run-wide checks, memoised by the run's value.

    Classifying every attempt of one run would otherwise repeat these O(run)
    checks per attempt (quadratic in the run's size). Frozen records hash and
    compare by content, so a changed run is a different key; a run that cannot
    be hashed (altered behind attrs' back) is examined uncached.
    """
    try:
        return _cached_run_facts(run)
    except TypeError:  # unhashable: lru_cache cannot key it
        return _compute_run_facts(run)
