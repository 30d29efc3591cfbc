"""Source spans, problem frames and frame deltas (pure values).

Rules:

- A ``SourceSpan`` is a half-open range of code points ``[start, end)`` in the
  frame's ``source_text``; spans are never merged, sorted or deduplicated by
  the kernel (ADR-0229 §6.1, §7.1). The unit is the Unicode code point (a
  Python ``str`` index), not a UTF-8 byte or a UTF-16 unit: a character
  outside the BMP counts once (a JavaScript integrator must count with
  ``[...text]``, not ``text.length``).
- Every span of a frame (its evidence spans and each binding's span) lies
  inside its source text: ``0 <= start <= end <= len(source_text)``; a
  frame that breaks this is never built, and a delta whose spans do not fit
  the base's text does not reconstruct.
- A ``ProblemFrame`` is the typed reading of one source text: quantity
  bindings, relations between them, the targets the problem asks for, and the
  ordered evidence spans. Its identity is the digest of every field
  (``frame_digest``); a frame has no self-declared id to forge.
- A ``FrameDelta`` names the exact frame it applies to (by digest) and
  reconstructs exactly one frame, or refuses (``apply_delta``). It can never
  change the source text (ADR-0229 §6.1: a candidate may not alter source
  text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, final

import attrs

from kernel._values import (
    DIGEST,
    EXACT_INT,
    NAME,
    NON_NEGATIVE_INT,
    tuple_of,
)
from kernel.identity import JsonValue, digest

__all__ = [
    "Binding",
    "DeltaRefusal",
    "DeltaRefusalCode",
    "FrameDelta",
    "ProblemFrame",
    "Relation",
    "SourceSpan",
    "Target",
    "apply_delta",
    "delta_digest",
    "exact_type",
    "frame_digest",
    "spans_outside",
    "spans_payload",
]


def exact_type(kind: type) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator accepting exactly ``kind``, never a subclass.

    ``typing.final`` does not stop subclassing at run time, and a subclass can
    override ``payload`` (or turn fields into properties): a record field
    holding one could carry one identity and another value.
    """

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not kind:
            raise TypeError(f"{attribute.name} must be {kind.__name__}, got {type(value).__name__}")

    return check


@final
@attrs.frozen
class SourceSpan:
    """Code points ``[start, end)`` of a frame's source text."""

    start: int = attrs.field(validator=NON_NEGATIVE_INT)
    end: int = attrs.field(validator=NON_NEGATIVE_INT)

    def __attrs_post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"span end {self.end} precedes start {self.start}")

    def payload(self) -> dict[str, JsonValue]:
        return {"start": self.start, "end": self.end}


@final
@attrs.frozen
class Binding:
    """A named integer quantity with its unit, read from one span."""

    name: str = attrs.field(validator=NAME)
    value: int = attrs.field(validator=EXACT_INT)
    unit: str = attrs.field(validator=NAME)
    span: SourceSpan = attrs.field(validator=exact_type(SourceSpan))

    def payload(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "span": self.span.payload(),
        }


@final
@attrs.frozen
class Relation:
    """``result = operator(operands...)``; the operator is the organ's to judge."""

    result: str = attrs.field(validator=NAME)
    operator: str = attrs.field(validator=NAME)
    operands: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))

    def payload(self) -> dict[str, JsonValue]:
        return {"result": self.result, "operator": self.operator, "operands": list(self.operands)}


@final
@attrs.frozen
class Target:
    """A quantity the problem asks for, in a named role (e.g. ``answer``)."""

    name: str = attrs.field(validator=NAME)
    role: str = attrs.field(validator=NAME)

    def payload(self) -> dict[str, JsonValue]:
        return {"name": self.name, "role": self.role}


def spans_outside(source_text: str, spans: Sequence[SourceSpan]) -> str | None:
    """A description of the first span not inside ``source_text`` (code points), or ``None``."""
    limit = len(source_text)
    for span in spans:
        if not 0 <= span.start <= span.end <= limit:
            return (
                f"span [{span.start}, {span.end}) is not inside the {limit} code points "
                "of the source text"
            )
    return None


def spans_payload(spans: Sequence[SourceSpan]) -> list[JsonValue]:
    """Ordered span payloads; duplicates kept."""
    return [s.payload() for s in spans]


@final
@attrs.frozen
class ProblemFrame:
    """The typed reading of one source text."""

    source_text: str = attrs.field(validator=exact_type(str))
    bindings: tuple[Binding, ...] = attrs.field(validator=tuple_of(Binding))
    relations: tuple[Relation, ...] = attrs.field(validator=tuple_of(Relation))
    targets: tuple[Target, ...] = attrs.field(validator=tuple_of(Target))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))

    def __attrs_post_init__(self) -> None:
        problem = spans_outside(
            self.source_text, self.evidence_spans + tuple(b.span for b in self.bindings)
        )
        if problem is not None:
            raise ValueError(problem)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "source_text": self.source_text,
            "bindings": [b.payload() for b in self.bindings],
            "relations": [r.payload() for r in self.relations],
            "targets": [t.payload() for t in self.targets],
            "evidence_spans": spans_payload(self.evidence_spans),
        }


def frame_digest(frame: ProblemFrame) -> str:
    """The content identity of a frame: digest of every field."""
    return digest(frame.payload())


@final
@attrs.frozen
class FrameDelta:
    """Edits to one exact base frame; ``evidence_spans`` replaces the base's spans."""

    base_frame_digest: str = attrs.field(validator=DIGEST)
    removed_bindings: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_bindings: tuple[Binding, ...] = attrs.field(validator=tuple_of(Binding))
    removed_relations: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_relations: tuple[Relation, ...] = attrs.field(validator=tuple_of(Relation))
    removed_targets: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    added_targets: tuple[Target, ...] = attrs.field(validator=tuple_of(Target))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))

    def payload(self) -> dict[str, JsonValue]:
        return {
            "base_frame_digest": self.base_frame_digest,
            "removed_bindings": list(self.removed_bindings),
            "added_bindings": [b.payload() for b in self.added_bindings],
            "removed_relations": list(self.removed_relations),
            "added_relations": [r.payload() for r in self.added_relations],
            "removed_targets": list(self.removed_targets),
            "added_targets": [t.payload() for t in self.added_targets],
            "evidence_spans": spans_payload(self.evidence_spans),
        }


def delta_digest(delta: FrameDelta) -> str:
    """The content identity of a delta."""
    return digest(delta.payload())


class DeltaRefusalCode(Enum):
    """Why a delta does not reconstruct a frame."""

    BASE_MISMATCH = "delta_base_mismatch"
    REMOVES_UNKNOWN = "delta_removes_unknown_item"
    SPAN_OUTSIDE_SOURCE = "delta_span_outside_source"


@final
@attrs.frozen
class DeltaRefusal:
    """A delta that reconstructs no frame."""

    code: DeltaRefusalCode
    detail: str


def apply_delta(base: ProblemFrame, delta: FrameDelta) -> ProblemFrame | DeltaRefusal:
    """Reconstruct the one frame ``delta`` describes over ``base``.

    Removal drops every item with the named key (binding name, relation
    result, target name) and must name an existing item; additions are
    appended in delta order after the kept items. Refuses when the base digest
    differs, a removal names nothing, or a span of the delta does not lie in
    the base's source text.
    """
    if frame_digest(base) != delta.base_frame_digest:
        return DeltaRefusal(DeltaRefusalCode.BASE_MISMATCH, "delta names a different base frame")
    for label, removed, present in (
        ("binding", delta.removed_bindings, {b.name for b in base.bindings}),
        ("relation", delta.removed_relations, {r.result for r in base.relations}),
        ("target", delta.removed_targets, {t.name for t in base.targets}),
    ):
        for key in removed:
            if key not in present:
                return DeltaRefusal(
                    DeltaRefusalCode.REMOVES_UNKNOWN, f"delta removes unknown {label} {key!r}"
                )
    outside = spans_outside(
        base.source_text, delta.evidence_spans + tuple(b.span for b in delta.added_bindings)
    )
    if outside is not None:
        return DeltaRefusal(DeltaRefusalCode.SPAN_OUTSIDE_SOURCE, outside)
    # Sets, not the removal tuples: membership must not cost a scan per kept item.
    removed_bindings = frozenset(delta.removed_bindings)
    removed_relations = frozenset(delta.removed_relations)
    removed_targets = frozenset(delta.removed_targets)
    return ProblemFrame(
        source_text=base.source_text,
        bindings=tuple(b for b in base.bindings if b.name not in removed_bindings)
        + delta.added_bindings,
        relations=tuple(r for r in base.relations if r.result not in removed_relations)
        + delta.added_relations,
        targets=tuple(t for t in base.targets if t.name not in removed_targets)
        + delta.added_targets,
        evidence_spans=delta.evidence_spans,
    )
