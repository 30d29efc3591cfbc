"""The reference arithmetic organ: contract authority and proof obligations (pure).

Frames are arithmetic word problems: integer ``Binding`` quantities with units
and evidence spans, ``Relation`` values ``result = op(operands...)`` over the
operators ``add``, ``sub``, ``mul`` and ``div`` (exact division), and
``Target`` values in the role ``answer``. See ``docs/organ-arithmetic.md``.

Rules:

- ``assess`` is the organ's contract authority. It returns a sealed
  ``ContractAssessment`` of exactly the frame it was given; the frame is
  runnable iff there is no missing binding and no hazard. Missing bindings are
  names, in order of first reference (relation operands in frame order, left
  to right, then targets in frame order), each once. Hazards are
  ``kind:detail`` codes grouped by ``Hazard`` in declaration order, each group
  in frame order, each code once.
- Evaluation is exact rational arithmetic (``fractions.Fraction``) in
  dependency order, iteratively (no recursion, so any frame size is safe). An
  operation whose operands exceed ``MAX_OPERAND_BITS`` in total is a hazard,
  never a slow computation.
- Units are exact strings; ``DIMENSIONLESS`` (``"1"``) is a pure count.
  ``add``/``sub`` need equal units. ``mul`` drops ``1`` operands and joins the
  rest with ``*``; ``div`` keeps the dividend's unit over ``1``, gives ``1``
  for equal units, else ``a/b``. Composite operand units are parenthesised.
  No unit algebra beyond that.
- The two proof authorities (``arithmetic.evidence_grounded`` and
  ``arithmetic.target_determined``) read any frame without raising (a frame
  outside the identity domain is refused with ``frame_not_canonical``) and
  return sealed ``ProofOutcome`` values bound to their context.
- No computed value ever leaves this module: not in a code, an id, an
  explanation or a return value (ADR-0229 §7.3 forbids answers).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from fractions import Fraction
from typing import Final, assert_never, final

import attrs

from kernel.frames import Binding, ProblemFrame, SourceSpan, frame_digest
from kernel.identity import IdentityError, int_from_digits
from kernel.replay import (
    ContractAuthority,
    ProofAuthority,
    ProofContext,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    candidate_derived,
    seal_proof_outcome,
)
from kernel.upstream import ContractAssessment, seal_assessment

__all__ = [
    "ANSWER_ROLE",
    "ARITHMETIC_ORGAN",
    "AUTHORITY_VERSION",
    "CONTRACT_AUTHORITY",
    "CONTRACT_AUTHORITY_ID",
    "DIMENSIONLESS",
    "EVIDENCE_GROUNDED",
    "EVIDENCE_GROUNDED_AUTHORITY",
    "MAX_NUMERAL_DIGITS",
    "MAX_OPERAND_BITS",
    "PROOF_OBLIGATIONS",
    "TARGET_DETERMINED",
    "TARGET_DETERMINED_AUTHORITY",
    "Hazard",
    "Operator",
    "ProofReason",
    "assess",
    "prove_evidence_grounded",
    "prove_target_determined",
    "stated_quantities",
]

ARITHMETIC_ORGAN: Final = "arithmetic"
CONTRACT_AUTHORITY_ID: Final = "arithmetic.contract"
EVIDENCE_GROUNDED: Final = "arithmetic.evidence_grounded"
TARGET_DETERMINED: Final = "arithmetic.target_determined"
AUTHORITY_VERSION: Final = "v1"
ANSWER_ROLE: Final = "answer"
DIMENSIONLESS: Final = "1"
# An operation whose operands total more bits (numerators plus denominators)
# than this is refused as a hazard: chained squaring must not exhaust memory.
MAX_OPERAND_BITS: Final = 1 << 17
# Numerals longer than this are not read (Python's int/str conversion limit is
# 4300 digits, and canonical identities refuse larger integers anyway).
MAX_NUMERAL_DIGITS: Final = 4000


class Operator(Enum):
    """The closed operator vocabulary of arithmetic relations."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"


class Hazard(Enum):
    """Hazard kinds, in the order their codes are reported (``kind:detail``)."""

    CONFLICTING_BINDING = "conflicting_binding"  # detail: the name
    UNKNOWN_OPERATOR = "unknown_operator"  # detail: the relation result
    WRONG_ARITY = "wrong_arity"  # detail: the relation result
    CYCLE = "cycle"  # detail: a relation result on a cycle
    UNIT_MISMATCH = "unit_mismatch"  # detail: the relation result
    DIVISION_BY_ZERO = "division_by_zero"  # detail: the relation result
    INEXACT_DIVISION = "inexact_division"  # detail: the relation result
    MAGNITUDE_EXCEEDED = "magnitude_exceeded"  # detail: the relation result
    NO_TARGET = "no_target"  # no detail
    UNSUPPORTED_TARGET_ROLE = "unsupported_target_role"  # detail: the target name


class ProofReason(Enum):
    """Reason-code kinds of the proof authorities (``kind:detail``)."""

    SPAN_OUT_OF_SOURCE = "span_out_of_source"  # detail: the binding name
    UNGROUNDED = "ungrounded"  # detail: the binding name
    NO_TARGET = "no_target"  # no detail
    UNBOUND_TARGET = "unbound_target"  # detail: the target name
    UNDETERMINED_TARGET = "undetermined_target"  # detail: the target name
    FRAME_NOT_CANONICAL = "frame_not_canonical"  # no detail


_OPERATORS: Final = {op.value: op for op in Operator}


def _code(kind: Hazard | ProofReason, detail: str | None = None) -> str:
    return kind.value if detail is None else f"{kind.value}:{detail}"


def _unique(codes: Iterable[str]) -> tuple[str, ...]:
    """Codes in first-occurrence order, each once."""
    return tuple(dict.fromkeys(codes))


# --- analysis (private; values never leave it) ---------------------------------


@final
@attrs.frozen
class _Analysis:
    """What the contract and the proofs read off a frame; holds no values."""

    missing_bindings: tuple[str, ...]
    hazards: tuple[str, ...]
    defined: frozenset[str]
    determined: frozenset[str]


def _cyclic_relations(successors: Sequence[tuple[int, ...]]) -> frozenset[int]:
    """Nodes on a cycle of the graph: iterative Tarjan SCC (no recursion)."""
    count = len(successors)
    index = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    cyclic: set[int] = set()
    counter = 0
    for root in range(count):
        if index[root] != -1:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, 0)]
        while work:
            node, position = work[-1]
            if position < len(successors[node]):
                work[-1] = (node, position + 1)
                nxt = successors[node][position]
                if index[nxt] == -1:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt]:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in successors[node]:
                    cyclic.update(component)
    return frozenset(cyclic)


def _group(unit: str) -> str:
    return f"({unit})" if "*" in unit or "/" in unit else unit


def _unit_of(operator: Operator, units: Sequence[str]) -> str | None:
    """The result unit, or ``None`` for a unit mismatch."""
    match operator:
        case Operator.ADD | Operator.SUB:
            return units[0] if all(u == units[0] for u in units) else None
        case Operator.MUL:
            kept = [_group(u) for u in units if u != DIMENSIONLESS]
            return "*".join(kept) if kept else DIMENSIONLESS
        case Operator.DIV:
            dividend, divisor = units
            if divisor == DIMENSIONLESS:
                return dividend
            if dividend == divisor:
                return DIMENSIONLESS
            return f"{_group(dividend)}/{_group(divisor)}"
        case _:
            assert_never(operator)


def _bits(value: Fraction) -> int:
    return value.numerator.bit_length() + value.denominator.bit_length()


def _arity_ok(operator: Operator, count: int) -> bool:
    match operator:
        case Operator.ADD | Operator.MUL:
            return count >= 2
        case Operator.SUB | Operator.DIV:
            return count == 2
        case _:
            assert_never(operator)


@final
@attrs.frozen
class _Step:
    """One relation's evaluation: its value and unit (if any) and its own hazards."""

    value: Fraction | None = None
    unit: str | None = None
    hazards: tuple[Hazard, ...] = ()


def _apply(operator: Operator, values: Sequence[Fraction | None]) -> _Step:
    """Exact rational evaluation of one well-formed relation (no unit)."""
    known = [v for v in values if v is not None]
    if len(known) != len(values):
        return _Step()
    if sum(_bits(v) for v in known) > MAX_OPERAND_BITS:
        return _Step(hazards=(Hazard.MAGNITUDE_EXCEEDED,))
    match operator:
        case Operator.ADD:
            return _Step(sum(known, Fraction(0)))
        case Operator.SUB:
            return _Step(known[0] - known[1])
        case Operator.MUL:
            product = Fraction(1)
            for v in known:
                product *= v
            return _Step(product)
        case Operator.DIV:
            if known[1] == 0:
                return _Step(hazards=(Hazard.DIVISION_BY_ZERO,))
            quotient = known[0] / known[1]
            inexact = () if quotient.denominator == 1 else (Hazard.INEXACT_DIVISION,)
            return _Step(quotient, hazards=inexact)
        case _:
            assert_never(operator)


def _evaluate(operator: Operator, operands: Sequence[tuple[Fraction | None, str | None]]) -> _Step:
    step = _apply(operator, [v for v, _ in operands])
    units = [u for _, u in operands if u is not None]
    if len(units) != len(operands):
        return step
    unit = _unit_of(operator, units)
    if unit is None:
        return attrs.evolve(step, hazards=(Hazard.UNIT_MISMATCH, *step.hazards))
    return attrs.evolve(step, unit=unit)


def _conflicting(
    frame: ProblemFrame,
    bound: Mapping[str, Sequence[Binding]],
    produced: Mapping[str, Sequence[int]],
) -> tuple[str, ...]:
    """Names with disagreeing definitions, in order of first definition."""
    definers = [b.name for b in frame.bindings] + [r.result for r in frame.relations]
    conflicting = []
    for name in dict.fromkeys(definers):
        readings = {(b.value, b.unit) for b in bound.get(name, ())}
        formulas = {
            (frame.relations[i].operator, frame.relations[i].operands)
            for i in produced.get(name, ())
        }
        if len(readings) > 1 or len(formulas) > 1 or (readings and formulas):
            conflicting.append(name)
    return tuple(conflicting)


def _analyse(frame: ProblemFrame) -> _Analysis:
    relations = frame.relations
    bound: dict[str, list[Binding]] = {}
    for binding in frame.bindings:
        bound.setdefault(binding.name, []).append(binding)
    produced: dict[str, list[int]] = {}
    for i, relation in enumerate(relations):
        produced.setdefault(relation.result, []).append(i)
    defined = frozenset(bound) | frozenset(produced)

    referenced = [o for r in relations for o in r.operands] + [t.name for t in frame.targets]
    missing = _unique(name for name in referenced if name not in defined)

    conflicting = _conflicting(frame, bound, produced)
    conflicted = frozenset(conflicting)
    operators = [_OPERATORS.get(r.operator) for r in relations]
    well_formed = [
        op is not None and _arity_ok(op, len(r.operands))
        for op, r in zip(operators, relations, strict=True)
    ]
    # The dependency graph goes through one hub node per produced name
    # (relation -> hub of each operand it reads -> every producer of that
    # name), so n producers and n readers of one name are 2n edges, not n*n.
    # Relation-to-relation paths, and so the cycles, are exactly those of the
    # direct graph (a relation reading its own result is relation -> hub -> it).
    hub = {name: len(relations) + k for k, name in enumerate(produced)}
    uses = [tuple(o for o in dict.fromkeys(r.operands) if o in produced) for r in relations]
    successors = [tuple(hub[o] for o in used) for used in uses] + [
        tuple(producers) for producers in produced.values()
    ]
    cyclic = frozenset(i for i in _cyclic_relations(successors) if i < len(relations))

    # Kahn's order: a relation runs once every producer of every name it reads
    # has run; relations on or behind a cycle never run.
    steps: list[_Step] = [_Step() for _ in relations]
    pending = [len(used) for used in uses]
    unproduced = {name: len(producers) for name, producers in produced.items()}
    readers: dict[str, list[int]] = {}
    for i, used in enumerate(uses):
        for name in used:
            readers.setdefault(name, []).append(i)
    ready = deque(i for i, n in enumerate(pending) if n == 0)

    def reading(name: str) -> tuple[Fraction | None, str | None]:
        if name in conflicted:
            return None, None
        if name in bound:
            first = bound[name][0]
            return Fraction(first.value), first.unit
        if name in produced:
            step = steps[produced[name][0]]
            return step.value, step.unit
        return None, None

    while ready:
        i = ready.popleft()
        op = operators[i]
        if op is not None and well_formed[i]:
            steps[i] = _evaluate(op, [reading(o) for o in relations[i].operands])
        result = relations[i].result
        unproduced[result] -= 1
        if unproduced[result] == 0:
            for k in readers.get(result, ()):
                pending[k] -= 1
                if pending[k] == 0:
                    ready.append(k)

    hazards: list[str] = [_code(Hazard.CONFLICTING_BINDING, n) for n in conflicting]
    hazards += [
        _code(Hazard.UNKNOWN_OPERATOR, r.result)
        for r, op in zip(relations, operators, strict=True)
        if op is None
    ]
    hazards += [
        _code(Hazard.WRONG_ARITY, r.result)
        for r, op, ok in zip(relations, operators, well_formed, strict=True)
        if op is not None and not ok
    ]
    hazards += [_code(Hazard.CYCLE, r.result) for i, r in enumerate(relations) if i in cyclic]
    for kind in (
        Hazard.UNIT_MISMATCH,
        Hazard.DIVISION_BY_ZERO,
        Hazard.INEXACT_DIVISION,
        Hazard.MAGNITUDE_EXCEEDED,
    ):
        hazards += [
            _code(kind, r.result)
            for r, step in zip(relations, steps, strict=True)
            if kind in step.hazards
        ]
    if not frame.targets:
        hazards.append(_code(Hazard.NO_TARGET))
    hazards += [
        _code(Hazard.UNSUPPORTED_TARGET_ROLE, t.name)
        for t in frame.targets
        if t.role != ANSWER_ROLE
    ]
    determined = frozenset(name for name in defined if reading(name)[0] is not None)
    return _Analysis(missing, _unique(hazards), defined, determined)


# --- contract authority -----------------------------------------------------------


def assess(frame: ProblemFrame) -> ContractAssessment:
    """The arithmetic contract over exactly ``frame``: a sealed ``ContractAssessment``.

    Runnable iff no missing binding and no hazard (order rules in the module
    docstring). Never raises for a frame that has a canonical identity; a
    frame without one (``frame_digest`` raises ``IdentityError``) cannot be
    assessed at all, and replay validation refuses such a frame first.
    """
    # Within one replay the proofs read the same analysis and digest off the
    # same candidate: derived once per attempt (candidate_derived, ADR 0011).
    analysis = candidate_derived(frame, _analyse)
    runnable = not analysis.missing_bindings and not analysis.hazards
    if runnable:
        explanation = "runnable: every referenced quantity is bound and no hazard remains"
    else:
        explanation = (
            f"refused: {len(analysis.missing_bindings)} missing binding(s), "
            f"{len(analysis.hazards)} hazard(s)"
        )
    return seal_assessment(
        problem_frame_digest=candidate_derived(frame, frame_digest),
        candidate_organ=ARITHMETIC_ORGAN,
        runnable=runnable,
        missing_bindings=analysis.missing_bindings,
        unresolved_hazards=analysis.hazards,
        evidence_spans=frame.evidence_spans,
        explanation=explanation,
    )


# --- proof authorities --------------------------------------------------------------

_DIGITS: Final = re.compile(
    # A whole integer numeral: optional minus, digits with optional ","
    # thousands groups; never a piece of a longer digit run or of a decimal.
    r"(?<![0-9])(?<![0-9][.,])(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?![0-9])(?![.,][0-9])"
)
_WORD: Final = re.compile(r"(?<![A-Za-z])[A-Za-z]+(?:-[A-Za-z]+)*(?![A-Za-z])")
_SMALL: Final = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS: Final = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORDS: Final[Mapping[str, int]] = {
    **{word: n for n, word in enumerate(_SMALL)},
    **{tens: 20 + 10 * t for t, tens in enumerate(_TENS)},
    **{
        f"{tens}-{unit}": 20 + 10 * t + u
        for t, tens in enumerate(_TENS)
        for u, unit in enumerate(_SMALL[1:10], start=1)
    },
    "dozen": 12,
}


def _tokens(text: str) -> tuple[tuple[int, int, int], ...]:
    """``(start, end, value)`` of every number ``text`` states, by position."""
    found = []
    for match in _DIGITS.finditer(text):
        digits = match.group(2).replace(",", "")
        if len(digits) <= MAX_NUMERAL_DIGITS:
            # int_from_digits: never the interpreter's int/str limit (ADR 0001).
            value = -int_from_digits(digits) if match.group(1) else int_from_digits(digits)
            found.append((match.start(), match.end(), value))
    for match in _WORD.finditer(text):
        word_value = _NUMBER_WORDS.get(match.group(0).lower())
        if word_value is not None:
            found.append((match.start(), match.end(), word_value))
    return tuple(sorted(found))


def stated_quantities(text: str) -> tuple[int, ...]:
    """The integers ``text`` states, in order of position.

    A numeral is a whole run of ASCII digits (``1,234`` thousands groups
    allowed, a directly preceding ``-`` makes it negative), not part of a
    decimal such as ``3.5``; runs over ``MAX_NUMERAL_DIGITS`` digits are
    skipped. A number word is a whole, case-insensitive word from ``zero`` to
    ``ninety-nine`` (hyphenated compounds only) or ``dozen``.
    """
    return tuple(value for _, _, value in _tokens(text))


def _canonical(frame: ProblemFrame) -> bool:
    # The digest raises exactly when the frame's payload is outside the
    # identity domain; within one replay the contract has already computed it.
    try:
        candidate_derived(frame, frame_digest)
    except IdentityError:
        return False
    return True


def _seal(
    context: ProofContext,
    authority_id: str,
    reasons: Sequence[str],
    spans: tuple[SourceSpan, ...],
    closed_prose: str,
) -> ProofOutcome:
    return seal_proof_outcome(
        context=context,
        authority_id=authority_id,
        authority_version=AUTHORITY_VERSION,
        status=ProofStatus.REFUSED if reasons else ProofStatus.CLOSED,
        reason_codes=_unique(reasons),
        evidence_spans=spans,
        explanation=f"refused: {len(reasons)} reason(s)" if reasons else closed_prose,
    )


_NOT_CANONICAL: Final = (_code(ProofReason.FRAME_NOT_CANONICAL),)


def _first_at_or_after(ordered: Sequence[int], bound: int) -> int:
    """The index of the first item ``>= bound`` in ascending ``ordered`` (binary search)."""
    low, high = 0, len(ordered)
    while low < high:
        middle = (low + high) // 2
        if ordered[middle] < bound:
            low = middle + 1
        else:
            high = middle
    return low


def prove_evidence_grounded(context: ProofContext) -> ProofOutcome:
    """``arithmetic.evidence_grounded``: every binding's span states its quantity.

    For each binding, in frame order: its span must end within the source
    text (else ``span_out_of_source:<name>``) and must contain a whole number
    of the source (as ``stated_quantities`` reads the full source text) equal
    to the binding's value (else ``ungrounded:<name>``).
    CLOSED iff no reason; evidence spans are every binding's span, in order,
    duplicates kept.
    """
    frame = context.candidate_frame
    if not _canonical(frame):
        return _seal(context, EVIDENCE_GROUNDED, _NOT_CANONICAL, (), "")
    source = frame.source_text
    # Numbers are read in the whole source, so a span cut out of "13" never states 3.
    # Stated numbers never overlap, so per value, ordered by start, they are
    # ordered by end too: the first one starting inside a span is the one most
    # likely to end inside it (a lookup, not a scan of every number per binding).
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for start, end, value in _tokens(source) if frame.bindings else ():
        starts.setdefault(value, []).append(start)
        ends.setdefault(value, []).append(end)
    reasons = []
    for binding in frame.bindings:
        span = binding.span
        if span.end > len(source):
            reasons.append(_code(ProofReason.SPAN_OUT_OF_SOURCE, binding.name))
            continue
        at = starts.get(binding.value, [])
        first = _first_at_or_after(at, span.start)
        if first == len(at) or ends[binding.value][first] > span.end:
            reasons.append(_code(ProofReason.UNGROUNDED, binding.name))
    spans = tuple(b.span for b in frame.bindings)
    return _seal(
        context, EVIDENCE_GROUNDED, reasons, spans, "closed: every quantity is stated by its span"
    )


def _support(frame: ProblemFrame) -> tuple[SourceSpan, ...]:
    """Spans of the bindings the targets depend on, in binding order."""
    operands: dict[str, list[str]] = {}
    for relation in frame.relations:
        operands.setdefault(relation.result, []).extend(relation.operands)
    seen: set[str] = set()
    todo = [t.name for t in frame.targets]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(operands.get(name, ()))
    return tuple(b.span for b in frame.bindings if b.name in seen)


def prove_target_determined(context: ProofContext) -> ProofOutcome:
    """``arithmetic.target_determined``: exact evaluation gives one value per target.

    Refuses with ``no_target`` for a frame without targets, else per target in
    frame order with ``unbound_target:<name>`` (it names nothing) or
    ``undetermined_target:<name>`` (no single exact value: a conflict, cycle,
    zero division, malformed relation or oversized operation on its path).
    Evidence spans are the spans of the bindings the targets depend on, in
    binding order. The values themselves are never reported.
    """
    frame = context.candidate_frame
    if not _canonical(frame):
        return _seal(context, TARGET_DETERMINED, _NOT_CANONICAL, (), "")
    analysis = candidate_derived(frame, _analyse)
    reasons = [] if frame.targets else [_code(ProofReason.NO_TARGET)]
    for target in frame.targets:
        if target.name not in analysis.defined:
            reasons.append(_code(ProofReason.UNBOUND_TARGET, target.name))
        elif target.name not in analysis.determined:
            reasons.append(_code(ProofReason.UNDETERMINED_TARGET, target.name))
    return _seal(
        context,
        TARGET_DETERMINED,
        reasons,
        _support(frame),
        "closed: every target is determined by exact evaluation",
    )


CONTRACT_AUTHORITY: Final = ContractAuthority(CONTRACT_AUTHORITY_ID, AUTHORITY_VERSION, assess)
EVIDENCE_GROUNDED_AUTHORITY: Final = ProofAuthority(
    EVIDENCE_GROUNDED, AUTHORITY_VERSION, prove_evidence_grounded
)
TARGET_DETERMINED_AUTHORITY: Final = ProofAuthority(
    TARGET_DETERMINED, AUTHORITY_VERSION, prove_target_determined
)
PROOF_OBLIGATIONS: Final = ProofObligations((EVIDENCE_GROUNDED, TARGET_DETERMINED))
