"""kernel.identity: canonical bytes exactly as ADR-0229 §13, and every refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.identity import IdentityError, canonical_json, digest, is_digest
from tests.support import reference

json_domain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=["Cs"])),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=6), children,
                      max_size=4),
    max_leaves=20,
)


@given(json_domain)
def test_canonical_json_is_exactly_the_adr_encoding(value: Any) -> None:
    assert canonical_json(value) == reference.canonical(value)
    assert digest(value) == reference.sha(value)


@given(json_domain)
def test_canonical_json_round_trips_through_the_standard_parser(value: Any) -> None:
    assert json.loads(canonical_json(value)) == value


def test_key_order_and_tuples_do_not_change_bytes() -> None:
    assert canonical_json({"b": 1, "a": (1, 2)}) == b'{"a":[1,2],"b":1}'
    assert canonical_json({"é": "ü"}) == '{"é":"ü"}'.encode()


def test_arbitrary_size_integers_are_allowed() -> None:
    big = 10**200
    assert canonical_json([big]) == b"[" + str(big).encode() + b"]"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (1.5, "float_forbidden"),
        (float("nan"), "float_forbidden"),
        (float("inf"), "float_forbidden"),
        ({"a": [0.0]}, "float_forbidden"),
        ({1: "x"}, "non_string_key"),
        ({(1,): "x"}, "non_string_key"),
        ("\ud800", "lone_surrogate"),
        ({"\udfff": 1}, "lone_surrogate"),
        (b"bytes", "unsupported_type"),
        ({1, 2}, "unsupported_type"),
        (frozenset(), "unsupported_type"),
        (object(), "unsupported_type"),
        (10**5000, "integer_too_large"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_values_outside_the_domain_are_refused_with_a_code(value: Any, code: str) -> None:
    with pytest.raises(IdentityError) as info:
        canonical_json(value)
    assert info.value.code == code


def test_subclasses_are_refused_rather_than_rendered() -> None:
    from enum import StrEnum

    class Colour(StrEnum):
        RED = "red"

    with pytest.raises(IdentityError) as info:
        canonical_json([Colour.RED])
    assert info.value.code == "unsupported_type"
    assert info.value.path == "$[0]"


def test_excessive_nesting_is_a_typed_error_not_a_recursion_error() -> None:
    value: Any = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(IdentityError) as info:
        canonical_json(value)
    assert info.value.code == "too_deep"


def test_is_digest_accepts_only_lowercase_full_sha256() -> None:
    assert is_digest("a" * 64)
    assert not is_digest("A" * 64)
    assert not is_digest("a" * 63)
    assert not is_digest(None)
