"""Adversarial regression tests for the pure core (kernel/replay, verification, organs,
serde, identity, upstream, frames, drafts).

Each test pins one defect found by red-teaming; its docstring says what the
attack was. Timings are generous bounds on work that used to be quadratic
(or worse): the honest cost is milliseconds, the old cost minutes or hours.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from typing import TypeVar

import attrs
import pytest

from kernel.frames import (
    Binding,
    FrameDelta,
    ProblemFrame,
    Relation,
    SourceSpan,
    Target,
    apply_delta,
    frame_digest,
)
from kernel.identity import JsonValue
from kernel.organs import EVIDENCE_GROUNDED, assess, prove_evidence_grounded
from kernel.replay import (
    ProofContext,
    ProofStatus,
    ReasonCode,
    ReplayAdapterRefusal,
    ReplayRequest,
    replay_attempt,
)
from kernel.serde import SerdeError, _max_depth, parse_json
from kernel.upstream import SearchRunInput
from tests.replay_fixtures import CLOSING, CallLog, request_for, toy_chain, toy_manifest

T = TypeVar("T")

# Sizes of the complexity tests; RED_TEAM_SCALE=0.1 shows the old behaviour quickly.
_SCALE = float(os.environ.get("RED_TEAM_SCALE", "1"))


def _n(size: int) -> int:
    return max(10, int(size * _SCALE))


def _elapsed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


# --- serde: the depth pre-scan ------------------------------------------------


def test_an_unterminated_string_of_escaped_quotes_is_refused_in_linear_time() -> None:
    """``"\\"\\"\\"...`` never closes: the old string regex restarted at every
    escaped quote and rescanned to the end (quadratic; 32 KB took 3 s, 16 MiB
    would take days), so any evidence document could hang replay."""
    data = b'"' + b'\\"' * 200_000
    def parse() -> None:
        try:
            parse_json(data)
        except SerdeError as exc:
            assert exc.code == "malformed_json"
        else:
            raise AssertionError("an unterminated string parsed")

    assert _elapsed(parse) < 2.0


def test_brackets_inside_an_unterminated_string_do_not_count_as_depth() -> None:
    # JSON never sees them as brackets; the scan must not either.
    assert _max_depth(b'[1, "abc' + b"[" * 100) == 1
    assert _max_depth(b'["a\\' ) == 1
    assert _max_depth(b'[[["x"]]]') == 3


# --- frames: apply_delta --------------------------------------------------------


def test_a_delta_removing_many_bindings_applies_in_linear_time() -> None:
    """Every kept item was tested against the removal *tuple*: 30k bindings
    removed from a 30k-binding base cost 9e8 comparisons (seconds; a 16 MiB
    bundle, hours)."""
    n = _n(30_000)
    base = ProblemFrame(
        "s", tuple(Binding(f"b{i}", 1, "u", SourceSpan(0, 1)) for i in range(n)), (), (), ()
    )
    delta = FrameDelta(
        frame_digest(base), tuple(f"b{i}" for i in range(n)), (), (), (), (), (), ()
    )
    frame, seconds = _timed(lambda: apply_delta(base, delta))
    assert seconds < 1.0
    assert isinstance(frame, ProblemFrame) and frame.bindings == ()


# --- organs: the arithmetic contract and evidence_grounded -----------------------


def _duplicate_producers(n: int) -> ProblemFrame:
    # n identical producers of x (not a conflict: one formula) and n users of x.
    relations = tuple(Relation("x", "add", ("a", "a")) for _ in range(n)) + tuple(
        Relation(f"y{i}", "add", ("x", "x")) for i in range(n)
    )
    return ProblemFrame(
        "a is 1", (Binding("a", 1, "u", SourceSpan(5, 6)),), relations,
        (Target("y0", "answer"),), (),
    )


def test_many_identical_producers_of_one_name_do_not_build_a_quadratic_graph() -> None:
    """Each user of x got an edge to every producer of x: n producers and n
    users made n*n edges (4000 each: 4 s and 16M ints; 100k each, the size of
    a 16 MiB bundle, exhausts memory with a MemoryError)."""
    frame = _duplicate_producers(_n(4000))
    assessment, seconds = _timed(lambda: assess(frame))
    assert seconds < 1.5
    assert assessment.runnable is True


def test_cycles_through_duplicate_producers_are_still_every_relation_on_them() -> None:
    # Both producers of x lie on the cycle x -> y -> x; the third relation does not.
    frame = ProblemFrame(
        "a is 1", (Binding("a", 1, "u", SourceSpan(5, 6)),),
        (Relation("x", "add", ("y", "a")), Relation("x", "add", ("y", "a")),
         Relation("y", "add", ("x", "a")), Relation("z", "add", ("a", "a")),
         Relation("w", "add", ("w", "a"))),
        (Target("z", "answer"),), (),
    )
    assert assess(frame).unresolved_hazards == ("cycle:x", "cycle:y", "cycle:w")


def test_evidence_grounding_is_not_bindings_times_numbers() -> None:
    """Every binding scanned every number of the source: 1000 ungrounded
    bindings over 100k stated numbers took seconds, a 16 MiB bundle hours."""
    source = "1 " * _n(100_000)
    frame = ProblemFrame(
        source,
        tuple(Binding(f"b{i}", 2, "u", SourceSpan(0, len(source))) for i in range(_n(1000))),
        (), (Target("b0", "answer"),), (),
    )
    context = ProofContext(EVIDENCE_GROUNDED, "0" * 64, frame, assess(frame))
    outcome, seconds = _timed(lambda: prove_evidence_grounded(context))
    assert seconds < 1.5
    assert outcome.status is ProofStatus.REFUSED


# --- replay: records of a subclass cannot pass as the record ----------------------


class _ForgedSpan(SourceSpan):  # type: ignore[misc]  # the attack itself
    """Claims (8, 9) in its identity payload while it is really another span."""

    __slots__ = ()

    def payload(self) -> dict[str, JsonValue]:
        return {"start": 8, "end": 9}


def test_a_span_subclass_cannot_carry_one_identity_and_another_value() -> None:
    """``typing.final`` does not stop subclassing at run time. A SourceSpan
    subclass overriding ``payload`` gave two different frames one frame_digest
    (so one candidate digest and every id after it) while the proof
    authorities judged the real span: identical ids, different verdicts."""
    with pytest.raises(TypeError):
        Binding("apples", 3, "apple", _ForgedSpan(21, 22))
    # A deep copy: the fixtures' frames are shared module values.
    request = copy.deepcopy(request_for(toy_chain(CLOSING), toy_manifest(CallLog())))
    frame = request.reconstruction.candidate_problem_frame
    assert frame is not None
    binding = frame.bindings[0]
    object.__setattr__(binding, "span", _ForgedSpan(binding.span.start, binding.span.end))
    outcome = replay_attempt(request, toy_manifest(CallLog()))
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.reason_codes == (ReasonCode.RECORD_STRUCTURE_INVALID.value,)


class _ForgedFrame(ProblemFrame):  # type: ignore[misc]
    __slots__ = ()


def test_nested_records_must_be_exactly_their_type() -> None:
    chain = toy_chain(CLOSING)
    rec = chain.reconstructions[0]
    frame = rec.candidate_problem_frame
    assert frame is not None
    forged = _ForgedFrame(*attrs.astuple(frame, recurse=False))
    with pytest.raises(TypeError):
        attrs.evolve(rec, candidate_problem_frame=forged)
    with pytest.raises(TypeError):
        attrs.evolve(chain.run, run_input=type("_Input", (SearchRunInput,), {"__slots__": ()})(
            *attrs.astuple(chain.run.run_input, recurse=False)))


class _ForgedRequest(ReplayRequest):  # type: ignore[misc]
    __slots__ = ()


def test_a_replay_request_subclass_is_not_a_replay_request() -> None:
    # A subclass could answer each field read differently (properties), so
    # what validation read need not be what the result reports.
    honest = request_for(toy_chain(CLOSING), toy_manifest(CallLog()))
    forged = _ForgedRequest(*attrs.astuple(honest, recurse=False))
    outcome = replay_attempt(forged, toy_manifest(CallLog()))
    assert isinstance(outcome, ReplayAdapterRefusal)
    assert outcome.reason_codes == (ReasonCode.REQUEST_NOT_A_REPLAY_REQUEST.value,)
