"""The payload path (``validated_payloads``) gives the reference's bytes and errors (ADR-0007).

Inside ``with validated_payloads():`` ``canonical_json`` skips the domain scan
and lets orjson (subclasses, dataclasses and datetimes passed through) refuse
what it can; the reference handles the rest. Sound only for payloads of
records whose validators hold. Claims, each tested directly:

1. orjson with those options renders exactly five kinds of value the domain
   refuses (float, Enum, UUID, Fragment, nesting of 201-254 levels) and refuses
   every other one we know of; for everything it refuses the scope gives the
   reference's outcome.
2. Every field of every record whose payload replay digests refuses all five
   kinds (so a record whose validators hold cannot carry one).
3. Differential: real records altered with ``object.__setattr__`` (hostile
   leaves, tuples of them, nested records altered the same way): whenever
   ``validate_deep`` accepts the record, the payload path gives the
   reference's bytes, or the reference's ``(code, path)``.
4. The scope is per thread, re-entrant, and off when the fast path is off.
5. End to end: an altered record is still refused by replay, and outcomes are
   identical with the fast path on and off.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kernel.frames import ProblemFrame
from kernel.identity import (
    IdentityError,
    canonical_json,
    canonical_json_reference,
    check_domain,
    set_fast_path,
    validated_payloads,
)
from kernel.organs import builtin_manifest
from kernel.replay import (
    ProofContext,
    ProofOutcome,
    ProofStatus,
    ReasonCode,
    ReplayAdapterRefusal,
    ReplayBundle,
    ReplayRequest,
    replay_attempt,
    replay_bundle_attempts,
    requests_from_bundle,
    seal_proof_outcome,
)
from kernel.replay._facts import validate_deep
from kernel.serde import dumps, loads
from kernel.upstream import ContractAssessment
from tests.support import reference as independent
from tests.test_identity_fast import DIFFERENTIAL_EXAMPLES, anything_like_json, texts

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "replay" / "bundle.json"


def _outcome(value: Any) -> bytes | tuple[str, str]:
    try:
        return canonical_json(value)
    except IdentityError as exc:
        return (exc.code, exc.path)


def in_scope(value: Any) -> bytes | tuple[str, str]:
    with validated_payloads():
        return _outcome(value)


def reference(value: Any) -> bytes | tuple[str, str]:
    try:
        return canonical_json_reference(value)
    except IdentityError as exc:
        return (exc.code, exc.path)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    ONE = 1


class Text(str):
    pass


class Number(int):
    pass


Point = collections.namedtuple("Point", "x y")


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


# --- 1. what orjson renders although the domain refuses it -------------------------

RENDERED_OUTSIDE_THE_DOMAIN = {
    "float": 1.5,
    "nan": float("nan"),
    "enum": Colour.RED,
    "int_enum": Level.ONE,
    "uuid": uuid.UUID(int=7),
    "fragment": orjson.Fragment(b"1"),
    "depth 201": _nested(201),
    "depth 254": _nested(254),
}

REFUSED_BY_ORJSON = {
    "str subclass": Text("x"),
    "int subclass": Number(3),
    "str subclass key": {Text("k"): 1},
    "int key": {1: 2},
    "bool key": {True: 1},
    "lone surrogate": "a\ud800",
    "lone surrogate key": {"\udfff": 1},
    "int past 64 bits": 2**64,
    "int below -2**63": -(2**63) - 1,
    "int past the kernel's limit": 10**4300,
    "bytes": b"x",
    "bytearray": bytearray(b"x"),
    "set": {1},
    "frozenset": frozenset({1}),
    "named tuple": Point(1, 2),
    "dict subclass": collections.OrderedDict(a=1),
    "list subclass": collections.UserList([1]),
    "complex": 1j,
    "depth 255": _nested(255),
    "nested float in a subclass": [Text("x"), 1.5],
}


@pytest.mark.parametrize("name", sorted(RENDERED_OUTSIDE_THE_DOMAIN))
def test_orjson_renders_exactly_these_five_kinds_so_validators_must_exclude_them(
    name: str,
) -> None:
    value = RENDERED_OUTSIDE_THE_DOMAIN[name]
    with pytest.raises(IdentityError):
        canonical_json_reference(value)
    assert isinstance(in_scope(value), bytes)  # the scope's contract excludes these


@pytest.mark.parametrize("name", sorted(REFUSED_BY_ORJSON))
def test_everything_else_outside_the_domain_takes_the_reference(name: str) -> None:
    value = REFUSED_BY_ORJSON[name]
    assert in_scope(value) == reference(value)


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(anything_like_json())
def test_the_scope_agrees_with_the_reference_unless_one_of_the_five_kinds_is_present(
    value: Any,
) -> None:
    if _holds_a_rendered_foreign_value(value):
        return
    assert in_scope(value) == reference(value)


def _holds_a_rendered_foreign_value(value: Any) -> bool:
    kind = type(value)
    if kind is float or isinstance(value, enum.Enum | uuid.UUID | orjson.Fragment):
        return True
    if kind is dict:
        return any(_holds_a_rendered_foreign_value(v) for v in value.values())
    if kind is list or kind is tuple:
        return any(_holds_a_rendered_foreign_value(v) for v in value)
    return False


# --- 2. record validators exclude the five kinds -----------------------------------


def _records(value: Any, into: dict[type, object]) -> None:
    if attrs.has(type(value)):
        into.setdefault(type(value), value)
        for field in attrs.fields(type(value)):
            _records(getattr(value, field.name), into)
    elif type(value) is tuple:
        for item in value:
            _records(item, into)


def _corpus() -> dict[type, object]:
    bundle = loads(BUNDLE.read_bytes(), ReplayBundle)
    found: dict[type, object] = {}
    _records(bundle, found)
    for outcome in replay_bundle_attempts(bundle, builtin_manifest()):
        _records(outcome, found)
    # A proof authority's outcome (its id is digested on the payload path too).
    frame = bundle.chain.problem_frame
    context = ProofContext(
        "arithmetic.evidence_grounded", "a" * 64, frame, bundle.chain.assessment, ()
    )
    proof = seal_proof_outcome(
        context=context, authority_id="arithmetic.proofs", authority_version="v1",
        status=ProofStatus.REFUSED, reason_codes=("span_out_of_source",),
        evidence_spans=frame.evidence_spans, explanation="refused",
    )
    _records(proof, found)
    return found


CORPUS = _corpus()
PAYLOAD_RECORDS = sorted(
    (kind for kind in CORPUS if hasattr(kind, "payload")), key=lambda k: k.__name__
)
FIVE_KINDS = (1.5, float("nan"), Colour.RED, Level.ONE, uuid.UUID(int=7), orjson.Fragment(b"1"))


def test_the_corpus_holds_every_record_replay_digests() -> None:
    names = {kind.__name__ for kind in PAYLOAD_RECORDS}
    assert {
        "ProblemFrame", "ContractAssessment", "ContractResidual", "SearchGateDecision",
        "ComputeBudgetDecision", "SearchRunInput", "CandidateAttempt", "GeometricSearchRun",
        "CandidateReconstruction", "ReplayAdapterInput", "ReplayAdapterResult",
        "ReplayAdapterRefusal", "ProofOutcome", "FrameDelta", "Binding", "SourceSpan",
    } <= names  # fmt: skip


def _fields_of_payload_records() -> Iterator[tuple[type, str]]:
    seen: set[type] = set()
    stack = list(PAYLOAD_RECORDS)
    while stack:
        kind = stack.pop()
        if kind in seen or not attrs.has(kind):
            continue
        seen.add(kind)
        for field in attrs.fields(kind):
            yield kind, field.name
            held = getattr(CORPUS.get(kind), field.name, None)
            for item in held if type(held) is tuple else (held,):
                if attrs.has(type(item)):
                    stack.append(type(item))


FIELDS = sorted(set(_fields_of_payload_records()), key=lambda kf: (kf[0].__name__, kf[1]))


@pytest.mark.parametrize("kind_field", FIELDS, ids=lambda kf: f"{kf[0].__name__}.{kf[1]}")
def test_every_field_validator_refuses_the_five_kinds_alone_and_nested(
    kind_field: tuple[type, str],
) -> None:
    kind, name = kind_field
    field = attrs.fields_dict(kind)[name]
    assert field.validator is not None, f"{kind.__name__}.{name} has no validator"
    instance = CORPUS.get(kind)
    for foreign in FIVE_KINDS:
        for value in (foreign, (foreign,), ((foreign, "v1"),), (("v1", foreign),)):
            with pytest.raises((TypeError, ValueError)):
                field.validator(instance, field, value)


# --- 3. differential over altered records --------------------------------------------

surrogate_texts = st.sampled_from(["a\ud800", "\udfff", "\ud800\udc00", "x\udbffy"])
huge_ints = st.sampled_from([4299, 4300, -4300]).map(  # built by map: never repr'd
    lambda d: 10 ** abs(d) * (1 if d > 0 else -1)
)
foreign = st.sampled_from([*FIVE_KINDS, Text("x"), Number(2), b"x", Point(1, 2), {"k": 1}, [1]])


def _plausible(current: object, data: st.DataObject, depth: int) -> object:
    """A value of the field's own kind, hostile where the validators may let it through."""
    kind = type(current)
    if attrs.has(kind):
        return _alter(current, data, depth + 1) if depth < 3 else current
    if kind is str:
        return data.draw(texts(8) | surrogate_texts | st.just(""))
    if kind is bool:
        return data.draw(st.booleans())
    if kind is int:
        return data.draw(st.integers(0, 2**70) | st.integers() | huge_ints)
    if kind is tuple:
        items = cast("tuple[object, ...]", current)
        if not items:
            return data.draw(st.lists(texts(4) | surrogate_texts, max_size=2).map(tuple))
        # Each element of its own kind, or now and then a foreign one, so a
        # foreign value also appears nested (inside pairs, inside tuples).
        return tuple(
            data.draw(foreign)
            if data.draw(st.integers(0, 5)) == 0
            else _plausible(data.draw(st.sampled_from(items)), data, depth)
            for _ in range(data.draw(st.integers(0, 3)))
        )
    if isinstance(current, enum.Enum):
        return data.draw(st.sampled_from(list(type(current))))
    return data.draw(st.none() | texts(4) | surrogate_texts)


def _alter(record: object, data: st.DataObject, depth: int = 0) -> object:
    """A copy of ``record`` with one field (possibly inside a held record) set by force."""
    copy: Any = attrs.evolve(record)  # type: ignore[misc]  # any attrs record of the corpus
    field = data.draw(st.sampled_from(attrs.fields(type(copy))))
    current = getattr(copy, field.name)
    value = (
        data.draw(foreign | huge_ints | surrogate_texts)
        if data.draw(st.integers(0, 4)) == 0
        else _plausible(current, data, depth)
    )
    object.__setattr__(copy, field.name, value)
    return copy


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(st.sampled_from(PAYLOAD_RECORDS), st.data())
def test_a_record_whose_validators_hold_canonicalises_like_the_reference(
    kind: type, data: st.DataObject
) -> None:
    record = _alter(CORPUS[kind], data)
    try:
        validate_deep(record)
        payload = record.payload()  # type: ignore[attr-defined]  # a payload record
    except (TypeError, ValueError, AttributeError):
        event("refused by the validators")
        return  # replay refuses it before any digest (record_structure_invalid)
    expected = reference(payload)
    given_back = "bytes" if isinstance(expected, bytes) else expected[0]
    event(f"validators hold; reference gives {given_back}")
    assert in_scope(payload) == expected
    with validated_payloads():
        try:
            check_domain(payload)
            checked: object = None
        except IdentityError as exc:
            checked = (exc.code, exc.path)
    assert checked == (None if isinstance(reference(payload), bytes) else reference(payload))


# --- 4. the scope ------------------------------------------------------------------


def test_the_scope_is_off_outside_the_block_and_in_other_threads() -> None:
    seen: list[object] = []

    def other_thread() -> None:
        seen.append(_outcome(1.5))

    with validated_payloads():
        assert canonical_json(1.5) == b"1.5"  # type: ignore[arg-type]  # the caller's contract
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        with validated_payloads():  # re-entrant
            assert canonical_json([1]) == b"[1]"
        assert canonical_json(1.5) == b"1.5"  # type: ignore[arg-type]  # still inside
    assert seen == [("float_forbidden", "$")]
    assert _outcome(1.5) == ("float_forbidden", "$")


def test_forcing_the_reference_turns_the_scope_off() -> None:
    previous = set_fast_path(False)
    try:
        with validated_payloads():
            assert _outcome(1.5) == ("float_forbidden", "$")
    finally:
        set_fast_path(previous)


def test_the_scope_ends_when_its_block_raises() -> None:
    with pytest.raises(RuntimeError), validated_payloads():
        raise RuntimeError("boom")
    assert _outcome(Colour.RED) == ("unsupported_type", "$")


# --- 5. end to end -------------------------------------------------------------------


def _requests() -> tuple[ReplayRequest, ...]:
    return requests_from_bundle(loads(BUNDLE.read_bytes(), ReplayBundle))


@pytest.mark.parametrize(
    ("field", "path", "value"),
    [
        ("problem_frame", ("source_text",), 1.5),
        ("reconstruction", ("operator_id",), Colour.RED),
        ("attempt", ("candidate_digest",), uuid.UUID(int=7)),
        ("replay_input", ("attempt_index",), 1.0),
        ("assessment", ("missing_bindings",), (orjson.Fragment(b"1"),)),
        ("run", ("run_input", "operator_set_id"), 2.5),
    ],
)
def test_a_record_altered_behind_attrs_back_is_still_refused(
    field: str, path: tuple[str, ...], value: object
) -> None:
    manifest = builtin_manifest()
    for fast in (True, False):
        previous = set_fast_path(fast)
        try:
            request = _requests()[1]
            holder: object = getattr(request, field)
            for step in path[:-1]:
                holder = getattr(holder, step)
            object.__setattr__(holder, path[-1], value)
            outcome = replay_attempt(request, manifest)
        finally:
            set_fast_path(previous)
        assert type(outcome) is ReplayAdapterRefusal
        assert outcome.reason_codes == (ReasonCode.RECORD_STRUCTURE_INVALID.value,)


def test_replay_outcomes_are_identical_with_the_fast_path_on_and_off() -> None:
    manifest = builtin_manifest()
    fast = [dumps(replay_attempt(r, manifest)) for r in _requests()]
    previous = set_fast_path(False)
    try:
        slow = [dumps(replay_attempt(r, manifest)) for r in _requests()]
    finally:
        set_fast_path(previous)
    assert fast == slow


def _proof_context() -> ProofContext:
    """The context of the corpus's proof outcome, for sealing another outcome."""
    proof = CORPUS[ProofOutcome]
    assert isinstance(proof, ProofOutcome)
    frame = CORPUS[ProblemFrame]
    assert isinstance(frame, ProblemFrame)
    context = ProofContext(proof.obligation_ref, proof.candidate_digest, frame,
                           CORPUS[ContractAssessment], ())  # type: ignore[arg-type]
    return context


@pytest.mark.parametrize("reason", ["ok", "a\ud800", "\U0001f600"])
def test_a_sealed_proof_outcome_is_the_same_on_the_payload_path(reason: str) -> None:
    context = _proof_context()

    def seal() -> object:
        try:
            return seal_proof_outcome(
                context=context, authority_id="a", authority_version="v1",
                status=ProofStatus.CLOSED, reason_codes=(reason,),
            )
        except IdentityError as exc:
            return (exc.code, exc.path)

    fast = seal()
    previous = set_fast_path(False)
    try:
        assert seal() == fast
    finally:
        set_fast_path(previous)


@pytest.mark.parametrize("validators", ["on", "off"])
def test_a_sealed_proof_outcome_has_the_id_recomputed_independently(validators: str) -> None:
    # seal_proof_outcome digests its draft on the payload path only when the
    # constructor's validators ran; with attrs' validators switched off it
    # takes the reference path. Either way the id is the payload's digest.
    context = _proof_context()
    with attrs.validators.disabled() if validators == "off" else contextlib.nullcontext():
        sealed = seal_proof_outcome(
            context=context, authority_id="a", authority_version="v1",
            status=ProofStatus.CLOSED, reason_codes=("ok",),
        )
    assert sealed.proof_outcome_id == independent.proof_outcome_id(sealed)
