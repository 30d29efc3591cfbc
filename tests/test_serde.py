"""kernel.serde: strict JSON boundary; one test per rejection."""

from __future__ import annotations

import json
from enum import Enum

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.frames import ProblemFrame, SourceSpan
from kernel.serde import (
    MAX_DEPTH,
    OPTIONAL_ON_INPUT,
    SerdeError,
    _max_depth,
    dumps,
    loads,
    parse_json,
)

GOOD_SPAN = b'{"start": 1, "end": 3}'


def refused(data: bytes, cls: type = SourceSpan, **kwargs: int) -> SerdeError:
    with pytest.raises(SerdeError) as info:
        loads(data, cls, **kwargs)
    return info.value


def test_a_valid_record_loads_and_dumps_canonically() -> None:
    assert loads(GOOD_SPAN, SourceSpan) == SourceSpan(1, 3)
    assert dumps(SourceSpan(1, 3)) == b'{"end":3,"start":1}'


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b'{"start": 1, "start": 2, "end": 3}', "duplicate_key"),
        (b'{"start": 1.0, "end": 3}', "float_forbidden"),
        (b'{"start": 1e3, "end": 3}', "float_forbidden"),
        (b'{"start": NaN, "end": 3}', "constant_forbidden"),
        (b'{"start": Infinity, "end": 3}', "constant_forbidden"),
        (b'{"start": -Infinity, "end": 3}', "constant_forbidden"),
        (b'{"start": 1, "end": 3', "malformed_json"),
        (b"\xef\xbb\xbf" + GOOD_SPAN, "malformed_json"),
        (b'{"start": 1, "end": 3} trailing', "malformed_json"),
        (b'{"start": 1, "end": "\xff"}', "invalid_utf8"),
        (b'{"start": 1, "end": "\\ud800"}', "lone_surrogate"),
        (b'{"start": 1, "end": 3, "\\udc00": 1}', "lone_surrogate"),
        (b'{"start": 1' + b"0" * 5000 + b', "end": 3}', "integer_too_large"),
    ],
)
def test_malformed_documents_are_refused_with_a_stable_code(data: bytes, code: str) -> None:
    assert refused(data).code == code


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (b'{"start": "1", "end": 3}', "$.start"),
        (b'{"start": true, "end": 3}', "$.start"),
        (b'{"start": 1}', "$.end"),
        (b'{"start": 1, "end": 3, "extra": 0}', "$"),
        (b'{"start": 4, "end": 3}', "$"),
        (b'[1, 3]', "$"),
    ],
)
def test_schema_violations_name_the_path(data: bytes, path: str) -> None:
    error = refused(data)
    assert error.code == "schema_mismatch"
    assert error.path == path
    assert path in str(error)


def test_a_string_is_not_accepted_as_a_tuple() -> None:
    doc = (b'{"source_text": "x", "bindings": [], "relations": [], "targets": [],'
           b' "evidence_spans": "ab"}')
    error = refused(doc, ProblemFrame)
    assert error.code == "schema_mismatch"
    assert error.path == "$.evidence_spans"


def test_nesting_beyond_the_limit_is_refused_before_parsing() -> None:
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(SerdeError) as info:
        parse_json(deep)
    assert info.value.code == "too_deep"
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    parse_json(ok)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert parse_json(b'["' + b"[" * 500 + b'\\"["]') == ["[" * 500 + '"[']


def test_documents_over_the_size_limit_are_refused() -> None:
    assert refused(GOOD_SPAN, max_bytes=len(GOOD_SPAN) - 1).code == "document_too_large"
    assert loads(GOOD_SPAN, SourceSpan, max_bytes=len(GOOD_SPAN)) == SourceSpan(1, 3)


def test_non_bytes_input_is_refused() -> None:
    with pytest.raises(SerdeError) as info:
        parse_json("{}")  # type: ignore[arg-type]
    assert info.value.code == "not_bytes"


class Colour(Enum):
    RED = "red"


@attrs.frozen
class Paint:
    colour: Colour


def test_enums_are_read_by_value_only() -> None:
    assert loads(b'{"colour": "red"}', Paint) == Paint(Colour.RED)
    assert dumps(Paint(Colour.RED)) == b'{"colour":"red"}'
    for bad in (b'{"colour": "RED"}', b'{"colour": 1}', b'{"colour": ["red"]}'):
        assert refused(bad, Paint).code == "schema_mismatch"


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers()
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
    | st.sampled_from(['"', "\\", "[", "]", "{", "}", '\\"', '"]', "\\\\"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(st.sampled_from('ab"\\[]{}'), max_size=4), children, max_size=3),
    max_leaves=25,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@given(json_documents)
def test_the_depth_pre_scan_equals_the_parsed_depth(value: object) -> None:
    # Strings full of quotes, backslashes and brackets must not fool the scan.
    data = json.dumps(value).encode()
    assert _max_depth(data) == _depth(value)
    assert _max_depth(json.dumps(value, ensure_ascii=False).encode()) == _depth(value)


@attrs.frozen
class _Policy:
    name: str
    note: str = ""
    level: str | None = attrs.field(default=None, metadata={OPTIONAL_ON_INPUT: True})


def test_only_a_field_marked_optional_on_input_may_be_left_out() -> None:
    # A marked field takes its default when absent; an ordinary defaulted
    # field is still required (every seed record defines every field).
    assert loads(b'{"name":"a","note":""}', _Policy) == _Policy("a", "", None)
    assert loads(b'{"name":"a","note":"","level":"x"}', _Policy) == _Policy("a", "", "x")
    with pytest.raises(SerdeError) as refused:
        loads(b'{"name":"a"}', _Policy)
    assert "note" in str(refused.value)


def test_an_external_manifest_may_omit_required_containment() -> None:
    from kernel.external import ContainmentLevel, parse_manifest

    command = {"argv": ["/usr/bin/true"], "executable": {"path": "/usr/bin/true",
               "sha256": "0" * 64}, "dependencies": [], "trusted_tool_dependencies": []}
    entry = {"check_id": "c", "claim": {"specification": "spec.txt", "obligations": ["o"],
             "assumptions": [], "model_scope": "m"}, "assurance": "a", "inputs": [],
             "evidence_artifacts": ["e.txt"], "producer": command, "checker": command}
    for extra, expected in (({}, None), ({"required_containment": "namespace"},
                                          ContainmentLevel.NAMESPACE)):
        document = json.dumps({"schema_version": 1, "checks": [{**entry, **extra}]})
        (check,) = parse_manifest(parse_json(document.encode())).checks
        assert check.required_containment is expected
