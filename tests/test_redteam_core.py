"""Adversarial regression tests for the pure core (kernel/replay, verification, organs,
serde, identity, upstream, frames, drafts).

Each test pins one defect found by red-teaming; its docstring says what the
attack was. Timings are generous bounds on work that used to be quadratic
(or worse): the honest cost is milliseconds, the old cost minutes or hours.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

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
from kernel.organs import EVIDENCE_GROUNDED, assess, prove_evidence_grounded
from kernel.replay import ProofContext, ProofStatus
from kernel.serde import SerdeError, _max_depth, parse_json

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
