"""Records the kernel built itself are not re-validated, and outcomes do not change (ADR 0011).

``replay_bundle_document(data, manifest)`` parses a bundle and classifies it
without walking the records its own strict converter just built. Claims:

1. Its outcomes are byte-identical to ``replay_bundle_attempts(loads(data))``
   (which examines every record), with the fast path on and off, on the
   shipped bundle and on hostile variants of it (any leaf replaced: other
   strings, lone surrogates, other ints, huge ints, booleans, nulls); errors
   are the same too.
2. With attrs' validators switched off the converter does not validate, so
   nothing is vouched for: an invalid record is still refused.
3. Facts that vouch for records apply only to those very objects: a record
   altered behind attrs' back and handed in by a caller is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kernel.identity import set_fast_path
from kernel.organs import builtin_manifest
from kernel.replay import (
    ReasonCode,
    ReplayAdapterRefusal,
    ReplayBundle,
    replay_attempt,
    replay_bundle_attempts,
    replay_bundle_document,
    requests_from_bundle,
)
from kernel.replay._facts import built_facts, with_built
from kernel.serde import SerdeError, dumps, loads

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "replay" / "bundle.json"
DATA = BUNDLE.read_bytes()


def outcomes_examined(data: bytes) -> list[bytes] | tuple[str, str | None, str]:
    try:
        return [dumps(o) for o in replay_bundle_attempts(loads(data, ReplayBundle), MANIFEST)]
    except (SerdeError, ValueError) as exc:
        return (type(exc).__name__, getattr(exc, "code", None), str(exc))


def outcomes_built(data: bytes) -> list[bytes] | tuple[str, str | None, str]:
    try:
        return [dumps(o) for o in replay_bundle_document(data, MANIFEST)]
    except (SerdeError, ValueError) as exc:
        return (type(exc).__name__, getattr(exc, "code", None), str(exc))


MANIFEST = builtin_manifest()


def test_the_shipped_bundle_gives_the_same_outcomes_either_way() -> None:
    expected = outcomes_examined(DATA)
    assert isinstance(expected, list) and len(expected) == 8
    assert outcomes_built(DATA) == expected
    previous = set_fast_path(False)
    try:
        assert outcomes_built(DATA) == expected
        assert outcomes_examined(DATA) == expected
    finally:
        set_fast_path(previous)


def _leaves(value: Any, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _get(value: Any, path: tuple[object, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


DOCUMENT = json.loads(DATA)
LEAVES = _leaves(DOCUMENT)
STRINGS = sorted({v for v in (_get(DOCUMENT, p) for p in LEAVES) if isinstance(v, str)})
foreign = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "a\ud800", "\udfff", "0" * 64]),
    st.sampled_from([2**64, -(2**63) - 1, -1]),
    st.none(),
)


def replacement(original: object) -> st.SearchStrategy[object]:
    """Mostly a value of the leaf's own type (so the document still structures)."""
    if type(original) is bool:
        own: st.SearchStrategy[object] = st.booleans()
    elif type(original) is int:
        own = st.integers(0, 120)
    elif type(original) is str:
        own = st.sampled_from(STRINGS) | st.text(min_size=1, max_size=6)
    else:
        own = st.none()
    return st.one_of(own, own, own, foreign)


@settings(max_examples=300)
@given(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3), st.data())
def test_hostile_variants_give_the_same_outcomes_or_errors_either_way(
    paths: list[tuple[object, ...]], data_: st.DataObject
) -> None:
    document = json.loads(DATA)
    for path in paths:
        holder: Any = _get(document, path[:-1])
        holder[path[-1]] = data_.draw(replacement(holder[path[-1]]))
    data = json.dumps(document).encode()  # ensure_ascii: lone surrogates as \\u escapes
    expected = outcomes_examined(data)
    event("outcomes" if isinstance(expected, list) else f"error {expected[1]}")
    assert outcomes_built(data) == expected


def test_with_validators_switched_off_nothing_is_vouched_for() -> None:
    document = json.loads(DATA)
    document["chain"]["reconstructions"][1]["operator_id"] = ""  # NAME refuses it
    data = json.dumps(document).encode()
    with pytest.raises(SerdeError):
        loads(data, ReplayBundle)  # the converter refuses it while validators are on
    with attrs.validators.disabled():
        built = list(replay_bundle_document(data, MANIFEST))
        examined = list(replay_bundle_attempts(loads(data, ReplayBundle), MANIFEST))
    assert [dumps(o) for o in built] == [dumps(o) for o in examined]
    refused = built[1]
    assert type(refused) is ReplayAdapterRefusal
    assert refused.reason_codes == (ReasonCode.RECORD_STRUCTURE_INVALID.value,)


def test_vouching_facts_apply_to_the_very_objects_only() -> None:
    bundle = loads(DATA, ReplayBundle)
    chain = bundle.chain
    shared = (chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals)
    requests = requests_from_bundle(bundle)
    facts = with_built(built_facts(chain.run, shared), requests[0].replay_input,
                       requests[0].reconstruction)
    # A caller's copy of attempt 0, altered behind attrs' back: the facts vouch
    # for the original objects, not for this one, so it is examined and refused.
    other = loads(DATA, ReplayBundle)
    altered = requests_from_bundle(other)[0]
    object.__setattr__(altered.reconstruction, "operator_id", 1.5)
    for request in (attrs.evolve(requests[0], reconstruction=altered.reconstruction), altered):
        outcome = replay_attempt(request, MANIFEST, facts=facts)
        assert type(outcome) is ReplayAdapterRefusal
        assert outcome.reason_codes == (ReasonCode.RECORD_STRUCTURE_INVALID.value,)
