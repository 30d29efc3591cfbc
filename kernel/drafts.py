"""Search drafts: what a search process writes before any id exists (pure values).

A draft names the refused problem frame, the closed operator set, and each
candidate as a whole frame or a frame delta with its operator. It carries no
ids at all: ``kernel bundle`` seals the whole chain from it with the builders
(adr/0001), so an integrator in any language never re-implements hashing to
produce a valid bundle — and can still recompute every id afterwards.
"""

from __future__ import annotations

from typing import final

import attrs

from kernel._values import NAME, tuple_of
from kernel.frames import (
    Binding,
    FrameDelta,
    ProblemFrame,
    Relation,
    SourceSpan,
    Target,
    frame_digest,
)
from kernel.upstream import CandidateDraft

__all__ = ["DraftCandidate", "DraftDelta", "SearchDraft"]


@final
@attrs.frozen
class DraftDelta:
    """A frame delta over the draft's own problem frame (its base digest is implied)."""

    removed_bindings: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_bindings: tuple[Binding, ...] = attrs.field(validator=tuple_of(Binding))
    removed_relations: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_relations: tuple[Relation, ...] = attrs.field(validator=tuple_of(Relation))
    removed_targets: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_targets: tuple[Target, ...] = attrs.field(validator=tuple_of(Target))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))

    def over(self, base: ProblemFrame) -> FrameDelta:
        """The sealed delta over ``base``."""
        return FrameDelta(
            frame_digest(base), self.removed_bindings, self.added_bindings,
            self.removed_relations, self.added_relations, self.removed_targets,
            self.added_targets, self.evidence_spans,
        )


@final
@attrs.frozen
class DraftCandidate:
    """One proposed candidate: exactly one of ``frame`` and ``delta``, and its operator."""

    operator_id: str = attrs.field(validator=NAME)
    operator_version: str = attrs.field(validator=NAME)
    frame: ProblemFrame | None = attrs.field(
        validator=attrs.validators.optional(attrs.validators.instance_of(ProblemFrame))
    )
    delta: DraftDelta | None = attrs.field(
        validator=attrs.validators.optional(attrs.validators.instance_of(DraftDelta))
    )

    def __attrs_post_init__(self) -> None:
        if (self.frame is None) == (self.delta is None):
            raise ValueError("a candidate is exactly one of a whole frame and a frame delta")

    def to_candidate_draft(self, base: ProblemFrame) -> CandidateDraft:
        """The builder's draft, with a delta sealed over ``base``."""
        if self.frame is not None:
            return CandidateDraft(self.frame, self.operator_id, self.operator_version)
        assert self.delta is not None
        return CandidateDraft(self.delta.over(base), self.operator_id, self.operator_version)


@final
@attrs.frozen
class SearchDraft:
    """A refused problem frame and the candidates one search run proposed, in run order."""

    problem_frame: ProblemFrame = attrs.field(
        validator=attrs.validators.instance_of(ProblemFrame)
    )
    candidate_organ: str = attrs.field(validator=NAME)
    operator_set_id: str = attrs.field(validator=NAME)
    operator_set_version: str = attrs.field(validator=NAME)
    candidates: tuple[DraftCandidate, ...] = attrs.field(validator=tuple_of(DraftCandidate))

    def __attrs_post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("a search draft needs at least one candidate")
