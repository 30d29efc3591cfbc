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
- the payload path (live since ADR 0007's "validated payloads"):
  ``canonical_json`` inside ``validated_payloads()``, the scope entered and
  left on every call (its whole cost, as the worst case), which is how
  replay canonicalises the payloads of records whose validators it has run.

Values come from the shipped example, small to large: the identity payloads
(``payload()``, what the kernel actually digests) of one ``Binding``, one
``ReplayAdapterInput`` and one ``CandidateReconstruction``, and the whole
``ReplayBundle`` unstructured (it has no payload of its own; the payload path
is measured on it only as a yardstick). Every variant is checked to give the
same bytes first.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from bench._harness import Comparison, Variant
from kernel import identity
from kernel.identity import JsonValue, canonical_json, validated_payloads
from kernel.replay import ReplayBundle
from kernel.serde import loads, unstructure

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_PATH = ROOT / "examples" / "replay" / "bundle.json"

GROUP = "e: canonical vs plain"


def records() -> tuple[tuple[str, JsonValue], ...]:
    """(label, value) from small to large: identity payloads, then a whole bundle."""
    bundle = loads(BUNDLE_PATH.read_bytes(), ReplayBundle)
    return (
        ("small: Binding payload", bundle.chain.problem_frame.bindings[0].payload()),
        ("medium: ReplayAdapterInput payload", bundle.inputs[0].payload()),
        ("medium: CandidateReconstruction payload", bundle.chain.reconstructions[0].payload()),
        ("large: ReplayBundle (unstructured)", unstructure(bundle)),
    )


def _plain(value: JsonValue) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _raw_orjson(value: JsonValue) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _scan(value: JsonValue) -> bool:
    return identity._covered(value, 0)


def _payload_path(value: JsonValue) -> bytes:
    with validated_payloads():
        return canonical_json(value)


def comparisons() -> tuple[Comparison, ...]:
    """One comparison per record: plain json.dumps against the fast path, orjson and the scan."""
    found = []
    for label, value in records():
        expected = _plain(value)
        assert canonical_json(value) == expected == _raw_orjson(value), label
        assert _payload_path(value) == expected, label
        assert _scan(value), label
        size = len(expected)

        # What the lambdas ``lambda v=value: f(v)`` were (the value bound as a
        # default, one call per run), annotated: mypy cannot type such a lambda.
        def plain(v: JsonValue = value) -> bytes:
            return _plain(v)

        def fast(v: JsonValue = value) -> bytes:
            return canonical_json(v)

        def raw(v: JsonValue = value) -> bytes:
            return _raw_orjson(v)

        def scan(v: JsonValue = value) -> bool:
            return _scan(v)

        def payload_path(v: JsonValue = value) -> bytes:
            return _payload_path(v)

        found.append(
            Comparison(
                GROUP,
                f"{label} ({size:,} B)",
                Variant("plain json.dumps", plain),
                (
                    Variant("canonical_json (fast path)", fast),
                    Variant("raw orjson", raw),
                    Variant("domain scan alone", scan),
                    Variant("payload path (validated_payloads, live)", payload_path),
                ),
            )
        )
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench._canonical [--rounds N]``: this group alone, as Markdown rows."""
    import statistics

    from bench._harness import cpu_clock, measure, standalone_parser

    args = standalone_parser("python -m bench._canonical").parse_args(argv)
    with cpu_clock(args.cpu) as clock:
        print(f"clock: {clock}, {args.rounds} rounds")
        print("| value (canonical size) | variant | plain us/call | variant us/call "
              "| ratio (median) | IQR | min-max |")
        print("|---|---|---|---|---|---|---|")
        for item in comparisons():
            for ratio in measure(item, rounds=args.rounds, target_s=args.target_ms / 1000):
                q1, q3 = ratio.quartiles
                low, high = ratio.extremes
                print(
                    f"| {item.case} | {ratio.variant.label} | "
                    f"{statistics.median(ratio.baseline_us):,.1f} | "
                    f"{statistics.median(ratio.variant_us):,.1f} | {ratio.median:.2f}x | "
                    f"{q1:.2f}-{q3:.2f} | {low:.2f}-{high:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
