"""The orjson parse path is the reference parser, observably (ADR 0011).

``parse_json`` reads with orjson plus a strictness pass and falls back to the
reference parser (``json.loads`` with strict hooks, then the identity-domain
check) on any doubt. These tests hold the two equal over hostile documents:
same value (same canonical bytes, so ``1`` is never ``true``) or the same
``SerdeError`` (code, path and message).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from kernel.identity import canonical_json, set_fast_path
from kernel.serde import SerdeError, parse_json


@contextmanager
def _reference() -> Iterator[None]:
    previous = set_fast_path(False)
    try:
        yield
    finally:
        set_fast_path(previous)


def _outcome(data: bytes) -> tuple[str, object]:
    try:
        value = parse_json(data)
    except SerdeError as exc:
        return "refused", (exc.code, exc.path, exc.message)
    return "value", canonical_json(value)


def _same_both_ways(data: bytes) -> None:
    fast = _outcome(data)
    with _reference():
        reference = _outcome(data)
    assert fast == reference, data[:200]


# JSON text built by hand so that duplicates, floats, constants, big ints and
# escapes the encoder would never write can all appear.
_escapes = st.sampled_from(
    ['\\"', "\\\\", "\\/", "\\n", "\\u0000", "\\ud800", "\\udc00", "\\ud83d\\ude00",
     "\\u00e9", "\\x", "\\u12", ":", ",", "[", "{", "}", "]",
     # escaped colons: the strictness pass counts raw colons against orjson's
     # output, so these are where a dropped duplicate key could hide
     "\\u003a", "\\u003A", "\\u003a\\u003a"]
)
_plain = st.text(st.characters(exclude_categories=["Cs"], exclude_characters='"\\'), max_size=8)
_strings = st.lists(st.one_of(_plain, _escapes), max_size=4).map(lambda p: '"' + "".join(p) + '"')
_numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "-0", "01", "1.0", "1e5", "-2.5E-3", "18446744073709551616",
                     "-9223372036854775809", "9" * 700, "9" * 4301, "NaN", "Infinity",
                     "-Infinity", "1.", ".5", "+1"]),
)
_atoms = st.one_of(_numbers, _strings, st.sampled_from(["true", "false", "null", "tru", "nul"]))


def _array(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def _object(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"


_values = st.recursive(
    _atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(_array),
        st.lists(st.tuples(st.sampled_from(['"a"', '"b"', '"\\u0061"', '"c"']) | _strings,
                           inner), max_size=4).map(_object),
    ),
    max_leaves=12,
)


@given(_values, st.sampled_from(["", " ", "\n\t", "\ufeff"]), st.sampled_from(["", " ", ",", "x"]))
def test_hostile_json_text_parses_the_same_both_ways(text: str, before: str, after: str) -> None:
    _same_both_ways((before + text + after).encode("utf-8", "surrogatepass"))


# Well-formed text only (keys from a tiny alphabet, so duplicates are common):
# the case where orjson accepts and only the strictness pass can object.
_valid_values = st.recursive(
    st.one_of(st.integers(-(2**66), 2**66).map(str), st.sampled_from(['"x"', "true", "null"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(_array),
        st.lists(st.tuples(st.sampled_from(['"a"', '"b"', '"\\u0061"', '":"', '"\\u003a"',
                                            '"a:"', '"a\\u003A"']), inner),
                 max_size=4).map(_object),
    ),
    max_leaves=12,
)


@given(_valid_values)
def test_well_formed_text_with_duplicate_prone_keys_parses_the_same_both_ways(text: str) -> None:
    _same_both_ways(text.encode())


@given(st.binary(max_size=40))
def test_arbitrary_bytes_parse_the_same_both_ways(data: bytes) -> None:
    _same_both_ways(data)


@given(_values, st.data())
def test_hostile_text_with_foreign_bytes_spliced_in_parses_the_same_both_ways(
    text: str, data: st.DataObject
) -> None:
    # Invalid UTF-8 (lone continuation bytes, overlongs, encoded surrogates,
    # past U+10FFFF), NUL and a BOM, anywhere in the document (inside
    # strings too) and at its ends.
    raw = text.encode("utf-8", "surrogatepass")
    spliced = data.draw(
        st.sampled_from([b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                         b"\xff", b"\x00", b"\xef\xbb\xbf", b"\\u003a"])
    )
    at = data.draw(st.integers(0, len(raw)))
    _same_both_ways(raw[:at] + spliced + raw[at:])


@given(st.integers(55, 70), st.sampled_from(["[", "{\"k\":"]))
def test_deep_documents_parse_the_same_both_ways(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    _same_both_ways((opener * depth + "1" + closer * depth).encode())


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=4), inner, max_size=4),
        max_leaves=20,
    )
)
def test_well_formed_documents_parse_the_same_both_ways(value: object) -> None:
    _same_both_ways(json.dumps(value).encode())
    _same_both_ways(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def test_the_known_differences_of_orjson_fall_back_to_the_reference() -> None:
    cases = {
        b'{"a":1,"a":2}': "duplicate_key",
        b'{"a":{"b":1,"b":1}}': "duplicate_key",
        b"[1.0]": "float_forbidden",
        b"[18446744073709551616]": None,  # past 64 bits: orjson gives a float
        b"[NaN]": "constant_forbidden",
        b'"\\ud800"': "lone_surrogate",
        b"\xef\xbb\xbf1": "malformed_json",
    }
    for data, code in cases.items():
        _same_both_ways(data)
        if code is None:
            assert parse_json(data) == [18446744073709551616]
        else:
            try:
                parse_json(data)
            except SerdeError as exc:
                assert exc.code == code, (data, exc.code)
            else:
                raise AssertionError(f"{data!r} was accepted")
