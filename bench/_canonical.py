"""Honest canonical-JSON figures (issue 10, deliverable 4; ADR 0007, ADR 0014).

The fast path (``kernel.identity.canonical_json``) is compared with what an
integrator would write without the kernel, not with the kernel's own
reference path:

- baseline: plain ``json.dumps(v, sort_keys=True, separators=(",", ":"),
  ensure_ascii=False).encode()`` (the same bytes, no domain check);
- ``canonical_json``: the domain scan, then orjson;
- raw ``orjson.dumps(v, option=OPT_SORT_KEYS)``: the floor (no domain check);
- the domain scan alone (``identity._covered``), to show where the fast
  path's time goes beyond orjson;
- the change proposed to CORE for ``kernel/identity.py`` (not live): orjson
  with subclasses passed through and the reference as fallback, for values
  whose domain membership the record validators already proved.

Records come from the shipped example, small to large: one ``Binding``, one
``ReplayAdapterInput``, one ``CandidateReconstruction`` and the whole
``ReplayBundle``. Every variant is checked to give the same bytes first.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from bench._harness import Comparison, Variant
from kernel import identity
from kernel.identity import JsonValue, canonical_json
from kernel.replay import ReplayBundle
from kernel.serde import loads, unstructure

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_PATH = ROOT / "examples" / "replay" / "bundle.json"

GROUP = "e: canonical vs plain"


def records() -> tuple[tuple[str, JsonValue], ...]:
    """(label, value) from small to large, as unstructured JSON values."""
    bundle = loads(BUNDLE_PATH.read_bytes(), ReplayBundle)
    chosen: tuple[tuple[str, object], ...] = (
        ("small: Binding", bundle.chain.problem_frame.bindings[0]),
        ("medium: ReplayAdapterInput", bundle.inputs[0]),
        ("medium: CandidateReconstruction", bundle.chain.reconstructions[0]),
        ("large: ReplayBundle", bundle),
    )
    return tuple((label, unstructure(record)) for label, record in chosen)


def _plain(value: JsonValue) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _raw_orjson(value: JsonValue) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _scan(value: JsonValue) -> bool:
    return identity._covered(value, 0)


# The change proposed for kernel/identity.py (BENCHMARKS.md): for payloads the
# kernel builds from records whose validators already proved exact types, skip
# the scan and let orjson refuse what it cannot prove (subclasses passed
# through, so they raise; lone surrogates and ints past 64 bits raise too),
# falling back to the reference on any JSONEncodeError.
_TRUSTED_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


def _proposed_payload_path(value: JsonValue) -> bytes:
    try:
        return orjson.dumps(value, option=_TRUSTED_OPTIONS)
    except orjson.JSONEncodeError:
        return identity.canonical_json_reference(value)


def comparisons() -> tuple[Comparison, ...]:
    """One comparison per record: plain json.dumps against the fast path, orjson and the scan."""
    found = []
    for label, value in records():
        expected = _plain(value)
        assert canonical_json(value) == expected == _raw_orjson(value), label
        assert _proposed_payload_path(value) == expected, label
        assert _scan(value), label
        size = len(expected)
        found.append(
            Comparison(
                GROUP,
                f"{label} ({size:,} B)",
                Variant("plain json.dumps", lambda v=value: _plain(v)),
                (
                    Variant("canonical_json (fast path)", lambda v=value: canonical_json(v)),
                    Variant("raw orjson", lambda v=value: _raw_orjson(v)),
                    Variant("domain scan alone", lambda v=value: _scan(v)),
                    Variant(
                        "proposed payload path (no scan)",
                        lambda v=value: _proposed_payload_path(v),
                    ),
                ),
            )
        )
    return tuple(found)
