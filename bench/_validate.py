"""(d) Where ``validate`` spends its time, and whether deduplicating digests would pay.

``validate`` recomputes every identity of the chain; some records are
digested more than once per call (the original frame, the run). This module
records every ``canonical_json`` call ``digest`` makes during one ``validate``
per attempt, then times, side by side: ``validate`` itself, re-digesting every
recorded payload, re-digesting each distinct payload once, and the deep
re-validation of the records' attrs validators (``_validate_deep``, private
to the machine: called here only to price it). The gap between the two digest
variants, as a share of ``validate``, bounds what computing each digest once
per call could save (payload construction excepted: it is not replayed).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import kernel.identity as identity
from bench._cases import Corpus
from bench._harness import Comparison, Variant
from kernel.identity import JsonValue, digest
from kernel.organs import builtin_manifest
from kernel.replay import ReplayRequest, validate
from kernel.replay._facts import validate_deep as _validate_deep
from kernel.replay._guards import REQUEST_FIELDS as _REQUEST_FIELDS


@dataclass(frozen=True)
class DigestCensus:
    """Digest calls made by ``validate`` over the bundle."""

    validates: int
    payloads: tuple[JsonValue, ...]  # every digested payload, in call order
    distinct: tuple[JsonValue, ...]  # first occurrence of each distinct payload per validate
    callers: Counter[str]  # which function asked for the digest


@contextmanager
def _recording(into: list[tuple[JsonValue, str]]) -> Iterator[None]:
    original = identity.canonical_json

    def recorder(value: JsonValue) -> bytes:
        # digest -> canonical_json: the caller of digest is two frames up.
        into.append((value, sys._getframe(2).f_code.co_name))
        return original(value)

    identity.canonical_json = recorder  # bench-only probe
    try:
        yield
    finally:
        identity.canonical_json = original


def census(corpus: Corpus) -> DigestCensus:
    manifest = builtin_manifest()
    payloads: list[JsonValue] = []
    distinct: list[JsonValue] = []
    callers: Counter[str] = Counter()
    for request in corpus.requests:
        calls: list[tuple[JsonValue, str]] = []
        with _recording(calls):
            validate(request, manifest)
        seen: set[bytes] = set()
        for value, caller in calls:
            payloads.append(value)
            callers[caller] += 1
            encoded = identity.canonical_json(value)
            if encoded not in seen:
                seen.add(encoded)
                distinct.append(value)
    return DigestCensus(len(corpus.requests), tuple(payloads), tuple(distinct), callers)


def comparison(corpus: Corpus, found: DigestCensus) -> Comparison:
    manifest = builtin_manifest()

    def validate_all() -> object:
        return [validate(request, manifest) for request in corpus.requests]

    def digests(values: tuple[JsonValue, ...]) -> object:
        return [digest(v) for v in values]

    def revalidate(request: ReplayRequest) -> None:
        # What validate's structure check does before any digest.
        for name, _ in _REQUEST_FIELDS:
            _validate_deep(getattr(request, name))
        for residual in request.residuals:
            _validate_deep(residual)

    def revalidate_all() -> object:
        for request in corpus.requests:
            revalidate(request)
        return None

    return Comparison(
        "d: validate",
        f"validate x {found.validates}",
        Variant("validate", validate_all),
        (
            Variant(f"its {len(found.payloads)} digests", lambda: digests(found.payloads)),
            Variant(
                f"its {len(found.distinct)} distinct digests",
                lambda: digests(found.distinct),
            ),
            Variant("its attrs re-validation (_validate_deep)", revalidate_all),
        ),
    )
