"""Adversarial regression tests for the pure core (kernel/replay, verification, organs,
serde, identity, upstream, frames, drafts).

Each test pins one defect found by red-teaming; its docstring says what the
attack was. Work that used to be quadratic (or worse) is checked by counting
it, never by timing it (a shared machine makes any time bound flaky, and no
unit test asserts speed): name comparisons, graph edges, lines of the module
executed at two sizes, or the shape of a scan. Each count was checked to fail
with the defence taken out.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import attrs
import pytest

import kernel.organs.arithmetic as arithmetic
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
from kernel.serde import _STRING_LITERAL, SerdeError, _max_depth, parse_json
from kernel.upstream import SearchRunInput
from tests.replay_fixtures import CLOSING, CallLog, request_for, toy_chain, toy_manifest


def _lines_run(module_file: str, work: Callable[[], object]) -> int:
    """Lines of ``module_file`` executed by ``work()``: a measure of work no load can change."""
    count = 0

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return line

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename == module_file else None

    previous = sys.gettrace()  # a coverage tracer, say: restored below
    sys.settrace(call)
    try:
        work()
    finally:
        sys.settrace(previous)
    return count


# Linear work doubles when the input doubles (n log n: a little more); the
# quadratic defects these tests pin quadruple it.
_LINEAR_AT_DOUBLE_SIZE = 3.0


# --- serde: the depth pre-scan ------------------------------------------------


@pytest.mark.parametrize("body", [b'\\"' * 1000, b'\\"x' * 1000, b"\\", b'abc\\\\\\"'])
def test_an_unterminated_string_is_one_match_to_the_end_of_the_data(body: bytes) -> None:
    """The pre-scan blanks string literals out before counting brackets. A
    literal that never closes must be one match running to the end of the
    data: the old pattern failed there and restarted at every escaped quote,
    rescanning to the end each time (quadratic; 32 KB took 3 s)."""
    data = b'[1, "' + body
    assert [match.span() for match in _STRING_LITERAL.finditer(data)] == [(4, len(data))]


def test_an_unterminated_string_of_escaped_quotes_is_refused() -> None:
    """``"\\"\\"\\"...`` never closes (16 MiB of it would have taken days)."""
    # The shape test above fails fast without the defence; this one would hang.
    assert _STRING_LITERAL.match(b'"' + b'\\"' * 10) is not None
    with pytest.raises(SerdeError) as refused:
        parse_json(b'"' + b'\\"' * 200_000)
    assert refused.value.code == "malformed_json"


def test_brackets_inside_an_unterminated_string_do_not_count_as_depth() -> None:
    # JSON never sees them as brackets; the scan must not either.
    assert _max_depth(b'[1, "abc' + b"[" * 100) == 1
    assert _max_depth(b'["a\\' ) == 1
    assert _max_depth(b'[[["x"]]]') == 3


# --- frames: apply_delta --------------------------------------------------------

_comparisons = [0]


class _CountedName(str):
    """A binding name that counts the comparisons made with it (same value, same hash)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        _comparisons[0] += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


def test_a_delta_removing_many_bindings_compares_each_name_a_bounded_number_of_times() -> None:
    """Every kept item was tested against the removal *tuple*: 30k bindings
    removed from a 30k-binding base cost 9e8 comparisons (seconds; a 16 MiB
    bundle, hours)."""
    n = 2000
    base = ProblemFrame(
        "s", tuple(Binding(f"b{i}", 1, "u", SourceSpan(0, 1)) for i in range(n)), (), (), ()
    )
    removed = tuple(f"b{i}" for i in range(0, n, 2))  # half removed, half kept
    delta = FrameDelta(frame_digest(base), removed, (), (), (), (), (), ())
    # The validators admit exact str only: counted names, equal in value and
    # hash, are put in after construction to count the lookups apply_delta makes.
    object.__setattr__(delta, "removed_bindings", tuple(_CountedName(k) for k in removed))
    _comparisons[0] = 0
    frame = apply_delta(base, delta)
    assert isinstance(frame, ProblemFrame)
    assert frame.bindings == base.bindings[1::2]
    # Hashed lookups: about one comparison per removed name found, twice
    # (checked present, then dropped). A scan of the tuple: n * n / 4.
    assert 0 < _comparisons[0] <= 2 * n


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


def test_many_identical_producers_of_one_name_do_not_build_a_quadratic_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each user of x got an edge to every producer of x: n producers and n
    users made n*n edges (4000 each: 4 s and 16M ints; 100k each, the size of
    a 16 MiB bundle, exhausts memory with a MemoryError)."""
    edges: list[int] = []
    cycles = arithmetic._cyclic_relations

    def counting(successors: Any) -> frozenset[int]:
        edges.append(sum(len(targets) for targets in successors))
        return cycles(successors)

    monkeypatch.setattr(arithmetic, "_cyclic_relations", counting)
    n = 1000
    assessment = assess(_duplicate_producers(n))
    assert assessment.runnable is True
    assert edges and max(edges) <= 3 * n  # 2n through the hub; n*n direct
    monkeypatch.undo()
    # The whole assessment, not only the graph: its work doubles with the input.
    small_frame, large_frame = _duplicate_producers(200), _duplicate_producers(400)
    small = _lines_run(arithmetic.__file__, lambda: assess(small_frame))
    large = _lines_run(arithmetic.__file__, lambda: assess(large_frame))
    assert large <= _LINEAR_AT_DOUBLE_SIZE * small


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


def _ungrounded(bindings: int, numbers: int) -> ProofContext:
    source = "1 " * numbers
    frame = ProblemFrame(
        source,
        tuple(Binding(f"b{i}", 2, "u", SourceSpan(0, len(source))) for i in range(bindings)),
        (), (Target("b0", "answer"),), (),
    )
    return ProofContext(EVIDENCE_GROUNDED, "0" * 64, frame, assess(frame))


def test_evidence_grounding_is_not_bindings_times_numbers() -> None:
    """Every binding scanned every number of the source: 1000 ungrounded
    bindings over 100k stated numbers took seconds, a 16 MiB bundle hours."""
    # Lines of the organ run for twice the bindings over twice the numbers:
    # about twice as many (the per-binding lookup), four times for a scan.
    small_context, large_context = _ungrounded(100, 2000), _ungrounded(200, 4000)
    small = _lines_run(arithmetic.__file__, lambda: prove_evidence_grounded(small_context))
    large = _lines_run(arithmetic.__file__, lambda: prove_evidence_grounded(large_context))
    assert large <= _LINEAR_AT_DOUBLE_SIZE * small
    # And the size of the attack itself is refused (after the count: a scan would take minutes).
    outcome = prove_evidence_grounded(_ungrounded(1000, 100_000))
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
