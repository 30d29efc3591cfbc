"""Shared Hypothesis strategies for frames, records and whole chains."""

from __future__ import annotations

from hypothesis import strategies as st

from kernel.drafts import DraftCandidate, DraftDelta, SearchDraft
from kernel.frames import (
    Binding,
    FrameDelta,
    ProblemFrame,
    Relation,
    SourceSpan,
    Target,
    frame_digest,
)
from kernel.upstream import (
    CandidateDraft,
    ContractAssessment,
    SearchChain,
    build_chain,
    seal_assessment,
)

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
# Any valid Unicode text, including astral and combining characters, but no
# lone surrogates (those are outside the identity domain by design).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
digests = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
big_ints = st.integers(min_value=-(10**30), max_value=10**30)


@st.composite
def source_spans(draw: st.DrawFn, limit: int = 60) -> SourceSpan:
    start = draw(st.integers(0, limit))
    return SourceSpan(start, draw(st.integers(start, limit)))


bindings = st.builds(Binding, names, big_ints, names, source_spans())


def bindings_within(limit: int) -> st.SearchStrategy[Binding]:
    """Bindings whose span fits a source text of ``limit`` code points."""
    return st.builds(Binding, names, big_ints, names, source_spans(limit))


def span_tuples_within(limit: int) -> st.SearchStrategy[tuple[SourceSpan, ...]]:
    """Evidence spans inside a source text of ``limit`` code points (frames require it)."""
    return st.lists(source_spans(limit), max_size=5).map(tuple)

relations = st.builds(
    Relation, names, st.sampled_from(["add", "sub", "mul", "div", "pow"]),
    st.lists(names, max_size=3).map(tuple),
)
targets = st.builds(Target, names, st.sampled_from(["answer", "intermediate"]))
span_tuples = st.lists(source_spans(), max_size=5).map(tuple)

@st.composite
def _problem_frames(draw: st.DrawFn) -> ProblemFrame:
    text = draw(texts)
    return ProblemFrame(
        text,
        tuple(draw(st.lists(bindings_within(len(text)), max_size=4))),
        tuple(draw(st.lists(relations, max_size=3))),
        tuple(draw(st.lists(targets, max_size=2))),
        draw(span_tuples_within(len(text))),
    )


problem_frames = _problem_frames()


@st.composite
def refused_assessments(draw: st.DrawFn, frame: ProblemFrame) -> ContractAssessment:
    missing = draw(st.lists(names, max_size=3))
    hazards = draw(st.lists(names, min_size=0 if missing else 1, max_size=3))
    return seal_assessment(
        problem_frame_digest=frame_digest(frame),
        candidate_organ=draw(st.sampled_from(["arithmetic", "other_organ"])),
        runnable=False,
        missing_bindings=missing,
        unresolved_hazards=hazards,
        evidence_spans=draw(span_tuples),
        explanation=draw(texts),
    )


@st.composite
def frame_deltas(draw: st.DrawFn, base: ProblemFrame) -> FrameDelta:
    binding_names = sorted({b.name for b in base.bindings})
    removed = draw(st.lists(st.sampled_from(binding_names), unique=True)) if binding_names else []
    return FrameDelta(
        base_frame_digest=frame_digest(base),
        removed_bindings=tuple(removed),
        added_bindings=tuple(draw(st.lists(bindings_within(len(base.source_text)), max_size=2))),
        removed_relations=(),
        added_relations=tuple(draw(st.lists(relations, max_size=2))),
        removed_targets=(),
        added_targets=tuple(draw(st.lists(targets, max_size=1))),
        evidence_spans=draw(span_tuples_within(len(base.source_text))),
    )


@st.composite
def chains(draw: st.DrawFn) -> SearchChain:
    """A valid sealed chain with 1-3 attempts, each a whole frame or a delta."""
    frame = draw(problem_frames)
    assessment = draw(refused_assessments(frame))
    drafts = []
    for _ in range(draw(st.integers(1, 3))):
        candidate: ProblemFrame | FrameDelta
        if draw(st.booleans()):
            limit = len(frame.source_text)
            candidate = ProblemFrame(
                frame.source_text,
                tuple(draw(st.lists(bindings_within(limit), max_size=4))),
                tuple(draw(st.lists(relations, max_size=3))),
                tuple(draw(st.lists(targets, max_size=2))),
                draw(span_tuples_within(limit)),
            )
        else:
            candidate = draw(frame_deltas(frame))
        drafts.append(CandidateDraft(candidate, draw(names), draw(names)))
    return build_chain(
        frame, assessment, drafts, operator_set_id=draw(names), operator_set_version=draw(names)
    )


@st.composite
def search_drafts(draw: st.DrawFn) -> SearchDraft:
    """A draft as a search process might write one, defects included.

    Each candidate is a whole frame or a delta over the problem frame; a whole
    frame's source text is usually the problem's, sometimes one character
    longer or shorter, sometimes any text (spans always inside its own text,
    as frames require). The organ is the shipped ``arithmetic`` organ, so the
    built-in manifests can seal it when its contract refuses the problem.
    """
    frame = draw(problem_frames)
    candidates = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            text = draw(st.sampled_from(["same", "longer", "shorter", "any"]))
            source = {
                "same": frame.source_text,
                "longer": frame.source_text + draw(st.characters(exclude_categories=["Cs"])),
                "shorter": frame.source_text[:-1],
                "any": draw(texts),
            }[text]
            limit = len(source)
            whole = ProblemFrame(
                source,
                tuple(draw(st.lists(bindings_within(limit), max_size=4))),
                tuple(draw(st.lists(relations, max_size=3))),
                tuple(draw(st.lists(targets, max_size=2))),
                draw(span_tuples_within(limit)),
            )
            candidates.append(DraftCandidate(draw(names), draw(names), whole, None))
        else:
            delta = draw(frame_deltas(frame))
            candidates.append(DraftCandidate(draw(names), draw(names), None, DraftDelta(
                delta.removed_bindings, delta.added_bindings, delta.removed_relations,
                delta.added_relations, delta.removed_targets, delta.added_targets,
                delta.evidence_spans,
            )))
    return SearchDraft(frame, "arithmetic", draw(names), draw(names), tuple(candidates))
