"""What is measured: realistic records from the shipped example, never synthetic blobs.

(a) ``canonical_json`` (fast path) against ``canonical_json_reference`` on a
    whole ``SearchChain``, one ``ReplayAdapterInput`` and one span;
(b) strict ``parse_json`` against plain ``json.loads``: the price of strictness,
    the share of it taken by the depth pre-scan (``serde._max_depth``), and a
    what-if: the same pre-scan with an unrolled string regex (same language,
    checked equal on the corpus), to size a possible change to ``serde``;
(c) ``replay_attempt`` over the shipped bundle, and the whole in-memory work of
    ``kernel replay`` (strict load, classify, JSON Lines), with the fast path
    against the reference forced (``set_fast_path(False)``);
plus a control: the reference against itself, to show what noise looks like.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench._harness import Comparison, Variant
from kernel.commands.replay import classify_bundle, outcome_lines
from kernel.identity import JsonValue, canonical_json, canonical_json_reference
from kernel.organs import builtin_manifest
from kernel.replay import ReplayBundle, ReplayRequest, replay_attempt, requests_from_bundle
from kernel.serde import _BRACKET, _STRING_LITERAL, _max_depth, loads, parse_json, unstructure
from kernel.upstream import SearchChain

ROOT = Path(__file__).resolve().parents[1]
CHAIN_PATH = ROOT / "examples" / "replay" / "chain.json"
BUNDLE_PATH = ROOT / "examples" / "replay" / "bundle.json"


@dataclass(frozen=True)
class Corpus:
    """The shipped example, read once."""

    chain_bytes: bytes
    bundle_bytes: bytes
    chain: JsonValue
    replay_input: JsonValue
    span: JsonValue
    bundle: ReplayBundle
    requests: tuple[ReplayRequest, ...]


def load_corpus() -> Corpus:
    chain_bytes = CHAIN_PATH.read_bytes()
    bundle_bytes = BUNDLE_PATH.read_bytes()
    chain = loads(chain_bytes, SearchChain)
    bundle = loads(bundle_bytes, ReplayBundle)
    return Corpus(
        chain_bytes=chain_bytes,
        bundle_bytes=bundle_bytes,
        chain=unstructure(chain),
        replay_input=unstructure(bundle.inputs[0]),
        span=unstructure(chain.problem_frame.evidence_spans[0]),
        bundle=bundle,
        requests=requests_from_bundle(bundle),
    )


# What-if for serde's pre-scan: "(?:[^"\\]|\\.)*" tries an alternation per
# character; the unrolled form consumes runs of plain characters at once and
# matches exactly the same strings.
_UNROLLED_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _max_depth_unrolled(data: bytes) -> int:
    depth = deepest = 0
    for match in _BRACKET.finditer(_UNROLLED_STRING.sub(b"", data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _encode(value: JsonValue) -> tuple[Variant, Variant]:
    return (
        Variant("canonical_json_reference", lambda: canonical_json_reference(value)),
        Variant("canonical_json (orjson)", lambda: canonical_json(value)),
    )


def comparisons(corpus: Corpus) -> tuple[Comparison, ...]:
    manifest = builtin_manifest()

    def replay_all() -> object:
        return [replay_attempt(request, manifest) for request in corpus.requests]

    def kernel_replay() -> object:
        # `kernel replay BUNDLE` minus file I/O and the rich summary.
        return outcome_lines(classify_bundle(loads(corpus.bundle_bytes, ReplayBundle)))

    for data in (corpus.chain_bytes, corpus.bundle_bytes):  # the what-if must agree
        assert _UNROLLED_STRING.sub(b"", data) == _STRING_LITERAL.sub(b"", data)
        assert _max_depth_unrolled(data) == _max_depth(data)
    size = f"{len(corpus.chain_bytes) // 1024} KiB"
    bundle_size = f"{len(corpus.bundle_bytes) // 1024} KiB"
    attempts = len(corpus.requests)
    reference_chain = Variant("reference", lambda: canonical_json_reference(corpus.chain))
    return (
        Comparison(
            "control", "reference vs itself (SearchChain)", reference_chain, (reference_chain,)
        ),
        Comparison("a: canonical_json", "SearchChain", *_split(_encode(corpus.chain))),
        Comparison(
            "a: canonical_json", "ReplayAdapterInput", *_split(_encode(corpus.replay_input))
        ),
        Comparison("a: canonical_json", "SourceSpan", *_split(_encode(corpus.span))),
        Comparison(
            "b: strict parse",
            f"chain.json ({size})",
            Variant("json.loads", lambda: json.loads(corpus.chain_bytes)),
            (Variant("parse_json", lambda: parse_json(corpus.chain_bytes)),),
        ),
        Comparison(
            "b: strict parse",
            f"bundle.json ({bundle_size})",
            Variant("json.loads", lambda: json.loads(corpus.bundle_bytes)),
            (
                Variant("parse_json", lambda: parse_json(corpus.bundle_bytes)),
                Variant(
                    "parse_json, reference forced",
                    lambda: parse_json(corpus.bundle_bytes),
                    fast_path=False,
                ),
            ),
        ),
        Comparison(
            "b: strict parse",
            f"bundle.json ({bundle_size}): depth pre-scan alone",
            Variant("json.loads", lambda: json.loads(corpus.bundle_bytes)),
            (Variant("serde._max_depth", lambda: _max_depth(corpus.bundle_bytes)),),
        ),
        Comparison(
            "b: what-if",
            f"bundle.json ({bundle_size}): depth pre-scan",
            Variant("serde._max_depth", lambda: _max_depth(corpus.bundle_bytes)),
            (Variant("unrolled string regex", lambda: _max_depth_unrolled(corpus.bundle_bytes)),),
        ),
        Comparison(
            "c: replay",
            f"replay_attempt x {attempts} (bundle)",
            Variant("reference forced", replay_all, fast_path=False),
            (Variant("fast path", replay_all),),
        ),
        Comparison(
            "c: replay",
            "kernel replay in memory (load+classify+dump)",
            Variant("reference forced", kernel_replay, fast_path=False),
            (Variant("fast path", kernel_replay),),
        ),
    )


def _split(pair: tuple[Variant, Variant]) -> tuple[Variant, tuple[Variant, ...]]:
    return pair[0], (pair[1],)
