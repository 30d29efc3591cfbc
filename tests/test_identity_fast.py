"""The orjson fast path of ``canonical_json`` is byte-identical to the reference (ADR-0007).

Three claims, each tested directly:

1. Over the covered domain (the identity domain with every int in
   ``[-2**63, 2**64 - 1]``) raw ``orjson.dumps(v, option=OPT_SORT_KEYS)``
   equals ``json.dumps(v, ensure_ascii=False, sort_keys=True,
   separators=(",", ":")).encode()``: differential properties plus one
   targeted test per known difference between the two serializers.
2. The scan that admits a value to the fast path never admits anything the
   reference check refuses, and everything outside the covered domain (ints
   past 64 bits above all) takes the reference.
3. ``canonical_json`` and ``check_domain`` give the reference's bytes and the
   reference's errors (code and path) for every value, covered or not.
"""

from __future__ import annotations

import collections
import enum
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel.identity as identity
from kernel.identity import (
    MAX_IDENTITY_DEPTH,
    IdentityError,
    canonical_json,
    canonical_json_reference,
    check_domain,
    digest,
    fast_path_enabled,
    set_fast_path,
)
from tests.support.reference import canonical as stdlib_bytes  # ADR-0001's definition

# The differential properties run five times the ci profile's default (they
# were 1,000 each, a minute of CI); the deep profile (make fuzz) raises them to
# its 2,000, and IDENTITY_FAST_EXAMPLES=N asks for a longer run (BENCHMARKS.md
# records one).
_PROFILE = settings.default
DIFFERENTIAL_EXAMPLES = max(
    300,
    _PROFILE.max_examples if _PROFILE is not None else 0,
    int(os.environ.get("IDENTITY_FAST_EXAMPLES", "0")),
)

FAST_INT_MIN = -(2**63)
FAST_INT_MAX = 2**64 - 1


def orjson_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@contextmanager
def reference_only() -> Iterator[None]:
    previous = set_fast_path(False)
    try:
        yield
    finally:
        set_fast_path(previous)


def checked_bytes(value: Any) -> bytes:
    check_domain(value)
    return b""


def outcome(encode: Any, value: Any) -> bytes | tuple[str, str]:
    """Bytes, or the (code, path) of the IdentityError."""
    try:
        return bytes(encode(value))
    except IdentityError as exc:
        return (exc.code, exc.path)


# --- strategies ------------------------------------------------------------------

# Characters where serializers are known to diverge, always in the mix.
SPECIAL_CHARS = (
    [chr(c) for c in range(0x20)]  # C0 controls: \n \r \t \b \f and \u00XX spellings
    + ['"', "\\", "/", "\x7f"]  # quote, backslash, solidus, DEL
    + [chr(c) for c in range(0x80, 0xA0)]  # C1 controls (not escaped by either)
    + ["\u00a0", "\u2028", "\u2029", "\ufeff", "\ufffe", "\uffff"]
    + ["\ud7ff", "\ue000", "\U00010000", "\U0001f600", "\U0010ffff"]  # around the surrogates
)

# All of Unicode except surrogates (category Cs), astral planes included.
any_char = (
    st.characters(exclude_categories=["Cs"])
    | st.sampled_from(SPECIAL_CHARS)
    | st.sampled_from(["\u2028", "\u2029", "\x7f", "\x00", "\x1f", '"', "\\"])
)

# st.text() merges a union alphabet into one character set and samples it
# uniformly, which would drown the special characters; lists keep the weights.
def texts(max_size: int) -> st.SearchStrategy[str]:
    return st.lists(any_char, max_size=max_size).map("".join)


unicode_text = texts(12)

INT_EDGES = [
    0, 1, -1, 2**31, -(2**31), 2**53, 2**53 + 1, 2**63 - 1, -(2**63), -(2**63) - 1,
    2**63, 2**64 - 1, 2**64, -(2**64), 10**19, 10**20, -(10**19), 10**100, -(10**100),
]  # fmt: skip
covered_ints = st.integers(FAST_INT_MIN, FAST_INT_MAX) | st.sampled_from(
    [i for i in INT_EDGES if FAST_INT_MIN <= i <= FAST_INT_MAX]
)
all_ints = (
    st.integers()
    | st.integers(-(2**200), 2**200)
    | st.sampled_from(INT_EDGES)
    | covered_ints
)


def json_values(ints: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | ints | unicode_text,
        lambda children: st.lists(children, max_size=5)
        | st.lists(children, max_size=5).map(tuple)
        | st.dictionaries(unicode_text, children, max_size=5),
        max_leaves=30,
    )


covered_domain = json_values(covered_ints)
identity_domain = json_values(all_ints)


class Colour(enum.Enum):
    RED = "red"


class Text(str):
    pass


class Number(int):
    pass


class Record(dict[str, Any]):
    pass


Point = collections.namedtuple("Point", "x y")

# Values outside the domain, of the kinds orjson would happily serialize
# (floats, enums, subclasses, named tuples) and of kinds it would not.
foreign_leaves = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(Colour.RED),
    unicode_text.map(Text),
    st.integers(-5, 5).map(Number),
    st.just(Record(a=1)),
    st.just(Point(1, 2)),
    st.sampled_from(["\ud800", "a\udfff", "\udbff"]),  # lone surrogates
    st.binary(max_size=3),
    st.frozensets(st.integers(0, 3), max_size=2),
    st.integers(10**4300, 10**4301),  # past the int/str conversion limit
)


def anything_like_json() -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | all_ints | unicode_text | foreign_leaves
    keys = unicode_text | st.integers(0, 3) | st.sampled_from(["\ud800", Text("k")])
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(keys, children, max_size=4),
        max_leaves=20,
    )


# --- 1. orjson equals the reference over the covered domain ----------------------


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(covered_domain)
def test_orjson_bytes_equal_the_reference_over_the_covered_domain(value: Any) -> None:
    assert identity._covered(value, 0)
    assert orjson_bytes(value) == stdlib_bytes(value)


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(st.dictionaries(unicode_text, st.integers(0, 3), min_size=2, max_size=12))
def test_key_order_is_code_point_order_in_both(value: dict[str, int]) -> None:
    # Python sorts str keys by code point, orjson by UTF-8 bytes. For scalar
    # values (no surrogates) UTF-8 preserves code-point order, so the orders
    # agree; UTF-16 order would not (it puts U+10000.. before U+E000..U+FFFF).
    assert orjson_bytes(value) == stdlib_bytes(value)


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(texts(64))
def test_every_string_escapes_identically(text: str) -> None:
    assert orjson_bytes(text) == stdlib_bytes(text)
    assert orjson_bytes({text: text}) == stdlib_bytes({text: text})


def test_every_non_surrogate_code_point_escapes_identically() -> None:
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert orjson_bytes(everything) == stdlib_bytes(everything)


def test_every_non_surrogate_code_point_sorts_identically_as_a_key() -> None:
    # Inserted in reverse so that sorting has all the work to do.
    keys = [chr(c) for c in reversed(range(0x110000)) if not 0xD800 <= c <= 0xDFFF]
    value = dict.fromkeys(keys, 0)
    assert orjson_bytes(value) == stdlib_bytes(value)


@pytest.mark.parametrize("code", range(0x20), ids=lambda c: f"U+{c:04X}")
def test_each_c0_control_has_the_same_escape(code: int) -> None:
    # json writes \n \r \t \b \f and lowercase \u00XX for the rest; so does orjson.
    assert orjson_bytes(chr(code)) == stdlib_bytes(chr(code))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x7f", '"\x7f"'),  # DEL is not escaped
        ("\u2028\u2029", '"\u2028\u2029"'),  # nor are the JS line separators
        ("/", '"/"'),  # nor the solidus
        ('"\\', '"\\"\\\\"'),
        ("\x1f", '"\\u001f"'),  # lowercase hex
        ("\x0b", '"\\u000b"'),  # vertical tab has no short escape
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x85\u00a0\ufeff", '"\x85\u00a0\ufeff"'),  # C1, NBSP, BOM verbatim
        ("\U0001f600", '"\U0001f600"'),  # astral verbatim, never a surrogate pair
    ],
    ids=repr,
)
def test_known_escaping_differences_do_not_differ(text: str, expected: str) -> None:
    assert stdlib_bytes(text) == expected.encode()
    assert orjson_bytes(text) == expected.encode()


def test_bmp_private_use_and_astral_keys_sort_by_code_point() -> None:
    value = {"\U00010000": 1, "\uffff": 2, "\ue000": 3, "\U0010ffff": 4, "\ud7ff": 5}
    expected = '{"\ud7ff":5,"\ue000":3,"\uffff":2,"\U00010000":1,"\U0010ffff":4}'.encode()
    assert stdlib_bytes(value) == orjson_bytes(value) == expected


def test_prefix_keys_and_nul_sort_identically() -> None:
    value = {"a\x00": 1, "a": 2, "": 3, "\x00": 4, "A": 5, "a\x00\x00": 6}
    assert orjson_bytes(value) == stdlib_bytes(value)


def test_tuples_serialize_as_arrays_in_both() -> None:
    value = {"t": (1, ("x", ()), [()]), "e": ()}
    assert orjson_bytes(value) == stdlib_bytes(value) == b'{"e":[],"t":[1,["x",[]],[[]]]}'


def test_booleans_are_not_rendered_as_ints() -> None:
    value = [True, False, None, 1, 0]
    assert orjson_bytes(value) == stdlib_bytes(value) == b"[true,false,null,1,0]"


@pytest.mark.parametrize("number", [i for i in INT_EDGES if FAST_INT_MIN <= i <= FAST_INT_MAX])
def test_ints_at_the_edges_of_orjson_range_are_identical(number: int) -> None:
    assert orjson_bytes([number]) == stdlib_bytes([number])


def test_deepest_domain_value_serializes_identically() -> None:
    # The domain allows MAX_IDENTITY_DEPTH nested levels below the root;
    # orjson's own limit (254) lies beyond it.
    value: Any = []
    for _ in range(MAX_IDENTITY_DEPTH):
        value = [value]
    assert identity._covered(value, 0)
    assert orjson_bytes(value) == stdlib_bytes(value)


# --- the differences orjson has, and why none reaches the fast path -------------


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**30, -(10**30)])
def test_orjson_refuses_ints_past_64_bits(number: int) -> None:
    with pytest.raises(orjson.JSONEncodeError):
        orjson_bytes(number)
    assert not identity._covered(number, 0)


@pytest.mark.parametrize(
    "value",
    [Text("x"), Number(3), Record(a=1), Colour.RED, 1.5, {"k": Text("v")}],
    ids=lambda v: type(v).__name__,
)
def test_orjson_renders_what_the_domain_refuses_so_the_scan_refuses_first(value: Any) -> None:
    orjson_bytes(value)  # orjson accepts subclasses, enums and floats ...
    assert not identity._covered(value, 0)  # ... the scan does not
    with pytest.raises(IdentityError):
        canonical_json(value)


@pytest.mark.parametrize("value", [{1: "x"}, "\ud800", {"\udfff": 1}, Point(1, 2)], ids=repr)
def test_orjson_refuses_non_str_keys_surrogates_and_named_tuples(value: Any) -> None:
    with pytest.raises(orjson.JSONEncodeError):
        orjson_bytes(value)
    assert not identity._covered(value, 0)


# --- 2. the scan is sound; the fallback is taken --------------------------------


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(anything_like_json())
def test_the_scan_never_admits_what_the_reference_refuses(value: Any) -> None:
    if identity._covered(value, 0):
        identity._check_domain(value, "$", 0)  # must not raise


def test_the_scan_refuses_past_the_depth_limit_like_the_reference() -> None:
    value: Any = 0
    for _ in range(MAX_IDENTITY_DEPTH + 1):
        value = [value]
    assert not identity._covered(value, 0)
    with pytest.raises(IdentityError) as info:
        canonical_json(value)
    assert info.value.code == "too_deep"


@pytest.fixture
def reference_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    reference = identity.canonical_json_reference

    def spy(value: Any) -> bytes:
        calls.append(value)
        return reference(value)

    monkeypatch.setattr(identity, "canonical_json_reference", spy)
    return calls


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**200, -(10**200)])
def test_ints_past_64_bits_take_the_reference(reference_calls: list[object], number: int) -> None:
    value: Any = {"n": [number], "s": "x"}
    assert canonical_json(value) == stdlib_bytes(value)
    assert reference_calls == [value]


@pytest.mark.parametrize("number", [2**64 - 1, -(2**63), 0])
def test_ints_within_64_bits_take_orjson(reference_calls: list[object], number: int) -> None:
    value = {"n": [number]}
    assert canonical_json(value) == stdlib_bytes(value)
    assert reference_calls == []


def test_an_orjson_failure_falls_back_to_the_reference(
    monkeypatch: pytest.MonkeyPatch, reference_calls: list[object]
) -> None:
    def broken(value: Any, option: int | None = None) -> bytes:
        raise orjson.JSONEncodeError("simulated")

    monkeypatch.setattr(orjson, "dumps", broken)
    assert canonical_json({"a": 1}) == b'{"a":1}'
    assert reference_calls == [{"a": 1}]


def test_forcing_the_reference_never_calls_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(value: Any, option: int | None = None) -> bytes:
        raise AssertionError("orjson called with the fast path off")

    monkeypatch.setattr(orjson, "dumps", forbidden)
    with reference_only():
        assert not fast_path_enabled()
        assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'.encode()
    assert fast_path_enabled()


def test_set_fast_path_returns_the_previous_setting() -> None:
    assert set_fast_path(False) is True
    try:
        assert set_fast_path(False) is False
    finally:
        assert set_fast_path(True) is False
    assert fast_path_enabled()


# --- 3. canonical_json and check_domain: the reference's bytes and errors --------


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(identity_domain)
def test_canonical_json_equals_the_reference_over_the_whole_domain(value: Any) -> None:
    expected = stdlib_bytes(value)
    assert canonical_json(value) == expected
    assert canonical_json_reference(value) == expected
    with reference_only():
        assert canonical_json(value) == expected


@settings(max_examples=DIFFERENTIAL_EXAMPLES)
@given(anything_like_json())
def test_fast_and_reference_agree_on_bytes_and_errors_for_any_value(value: Any) -> None:
    fast = outcome(canonical_json, value)
    assert fast == outcome(canonical_json_reference, value)
    with reference_only():
        assert outcome(canonical_json, value) == fast
    checked = outcome(checked_bytes, value)
    with reference_only():
        assert outcome(checked_bytes, value) == checked
    assert (checked == b"") == isinstance(fast, bytes)


def test_digest_is_unchanged_by_the_fast_path() -> None:
    value: Any = {"z": [2**64 - 1, -(2**63)], "é": ("\u2028", "\x00"), "\U0001f600": {}}
    fast = digest(value)
    with reference_only():
        assert digest(value) == fast
