"""(e) Replay against its hash floor, and where the rest of the time goes.

The hash floor of replay is the canonical-JSON + SHA-256 work for every
identity replay recomputes (ADR-0229 §6, §11, §13): this module records each
payload ``canonical_json`` is asked for while the whole shipped bundle is
classified (``replay_bundle_attempts``: validation, contract and proof
authorities' own sealing, the outcome ids), then times re-digesting exactly
those payloads, twice: on the payload path (``validated_payloads``: orjson
and SHA-256 only, the floor the ratio is taken against) and through the
public ``digest`` (domain scan first, as before ADR 0007's payload path;
the floor of earlier runs). Side by side in the same rounds:

- replay: ``replay_bundle_attempts`` over the parsed bundle (facts once per
  batch, as ``kernel replay`` does; every record examined, as for any caller);
- replay (records the kernel built): the same attempts with the facts
  ``replay_bundle_document`` uses for the records it has just parsed
  (``built_facts``/``with_built``: not re-validated, ADR 0011); the bench
  loaded the bundle itself and nobody altered it, so the facts are true;
- parse: ``loads(bundle.json, ReplayBundle)`` (strict JSON and structuring);
- validate: ``validate`` of every attempt with the batch's facts (every
  record examined), and again with the built records' facts;
- authorities: the contract authority on every validated candidate and the
  proof authorities on every contract-closed one, called directly;
- transitions: what is left of replay once validate and the authorities
  are taken out (building states, outcomes, their ids), reported in the
  summary as a difference of medians (records the kernel built).

Every figure is per bundle (the summary divides by its attempts); ratios are
floor / variant, so replay's multiple of its floor is the inverse.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import kernel.identity as identity
from bench._cases import ROOT, Corpus
from bench._harness import Comparison, Variant
from kernel.identity import JsonValue, digest, validated_payloads
from kernel.organs import BUILTIN_MANIFEST, assess, builtin_manifest
from kernel.replay import (
    ContractClosed,
    ProofContext,
    ReplayBundle,
    Validated,
    build_replay_input,
    examine_run,
    replay_attempt,
    replay_bundle_attempts,
    replay_contract,
    validate,
)
from kernel.replay._facts import built_facts, with_built
from kernel.serde import loads
from kernel.upstream import build_chain


@dataclass(frozen=True)
class Floor:
    """Every payload digested while the bundle is replayed once, in call order."""

    attempts: int
    payloads: tuple[JsonValue, ...]


@contextmanager
def _recording(into: list[JsonValue]) -> Iterator[None]:
    original = identity.canonical_json

    def recorder(value: JsonValue) -> bytes:
        into.append(value)
        return original(value)

    identity.canonical_json = recorder  # bench-only probe
    try:
        yield
    finally:
        identity.canonical_json = original


def hash_floor(corpus: Corpus) -> Floor:
    manifest = builtin_manifest()
    payloads: list[JsonValue] = []
    with _recording(payloads):
        outcomes = list(replay_bundle_attempts(corpus.bundle, manifest))
    return Floor(len(outcomes), tuple(payloads))


def comparison(corpus: Corpus, floor: Floor) -> Comparison:
    manifest = builtin_manifest()
    bundle = corpus.bundle
    chain = bundle.chain
    facts = examine_run(
        chain.run,
        shared=(chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals),
    )
    validated = [
        state
        for request in corpus.requests
        if isinstance(state := validate(request, manifest, facts=facts), Validated)
    ]
    contracts = [replay_contract(state) for state in validated]
    closed = [state for state in contracts if isinstance(state, ContractClosed)]

    def replay() -> object:
        return list(replay_bundle_attempts(bundle, manifest))

    def parse() -> object:
        return loads(corpus.bundle_bytes, ReplayBundle)

    # What replay_bundle_document does after parsing, on the bench's own
    # freshly loaded (and unaltered) bundle.
    built = built_facts(
        chain.run,
        (chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals),
    )

    def replay_built() -> object:
        batch = built_facts(chain.run, tuple(known.record for known in built.shared))
        return [
            replay_attempt(
                request, manifest,
                facts=with_built(batch, request.replay_input, request.reconstruction),
            )
            for request in corpus.requests
        ]

    built_per_request = [
        with_built(built, request.replay_input, request.reconstruction)
        for request in corpus.requests
    ]

    def validate_built() -> object:
        return [
            validate(request, manifest, facts=facts)
            for request, facts in zip(corpus.requests, built_per_request, strict=True)
        ]

    def validate_all() -> object:
        return [validate(request, manifest, facts=facts) for request in corpus.requests]

    def authorities() -> object:
        done: list[object] = [v.contract_authority.assess(v.candidate_frame) for v in validated]
        for state in closed:
            replay_input = state.validated.request.replay_input
            for ref, authority in zip(
                replay_input.proof_obligation_refs, state.validated.proof_authorities, strict=True
            ):
                context = ProofContext(
                    ref,
                    replay_input.candidate_digest,
                    state.validated.candidate_frame,
                    state.contract_replay,
                    (),
                )
                done.append(authority.prove(context))
        return done

    def floor_digests() -> object:
        with validated_payloads():
            return [digest(value) for value in floor.payloads]

    def scanned_floor_digests() -> object:
        return [digest(value) for value in floor.payloads]

    return Comparison(
        "e: replay split",
        f"bundle of {floor.attempts} attempts, {len(floor.payloads)} digests",
        Variant("hash floor", floor_digests),
        (
            Variant("hash floor with the domain scan", scanned_floor_digests),
            Variant("replay (batch)", replay),
            Variant("replay (records the kernel built)", replay_built),
            Variant("parse", parse),
            Variant("validate", validate_all),
            Variant("validate (records the kernel built)", validate_built),
            Variant("authorities", authorities),
        ),
    )


def summary(floor: Floor, medians_us: dict[str, float]) -> list[str]:
    """Per-attempt figures and replay's multiple of its hash floor."""
    per = {label: us / floor.attempts for label, us in medians_us.items()}
    built = per["replay (records the kernel built)"]
    built_validate = per["validate (records the kernel built)"]
    transitions = built - built_validate - per["authorities"]
    ratio = per["replay (batch)"] / per["hash floor"]
    floor = per["hash floor"]
    lines = [
        f"per attempt (us, median): hash floor {floor:.0f}; records the kernel built: "
        f"replay {built:.0f} = validate {built_validate:.0f} + authorities "
        f"{per['authorities']:.0f} + transitions {transitions:.0f}; parse {per['parse']:.0f}",
        f"records a caller handed in: replay {per['replay (batch)']:.0f}, "
        f"validate {per['validate']:.0f}",
        f"replay of records the kernel built = {built / floor:.2f}x its hash floor "
        f"(target <= 1.5x): validate {built_validate / floor:.2f}x, authorities "
        f"{per['authorities'] / floor:.2f}x, transitions {transitions / floor:.2f}x",
        f"replay of records a caller handed in = {ratio:.2f}x its hash floor; "
        f"validate alone {per['validate'] / floor:.2f}x",
        f"against the floor with the domain scan ({per['hash floor with the domain scan']:.0f} "
        f"us): replay {per['replay (batch)'] / per['hash floor with the domain scan']:.2f}x",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m bench._replay_split [--rounds N]``: this group alone."""
    import statistics

    from bench._cases import load_corpus
    from bench._harness import cpu_clock, measure, standalone_parser

    args = standalone_parser("python -m bench._replay_split").parse_args(argv)
    corpus = load_corpus()
    floor = hash_floor(corpus)
    item = comparison(corpus, floor)
    with cpu_clock(args.cpu) as clock:
        ratios = measure(item, rounds=args.rounds, target_s=args.target_ms / 1000)
    print(f"clock: {clock}")
    medians = {item.baseline.label: statistics.median(ratios[0].baseline_us)}
    medians.update({r.variant.label: statistics.median(r.variant_us) for r in ratios})
    print(f"{item.case}, {args.rounds} rounds")
    print("| variant | us per bundle (median) | floor / variant (median) | IQR |")
    print("|---|---|---|---|")
    for ratio in ratios:
        q1, q3 = ratio.quartiles
        print(
            f"| {ratio.variant.label} | {statistics.median(ratio.variant_us):,.0f} | "
            f"{ratio.median:.3f} | {q1:.3f}-{q3:.3f} |"
        )
    for line in summary(floor, medians):
        print(f"- {line}")
    return 0


if __name__ == "__main__":  # pragma: no cover - or as part of ``python -m bench``
    sys.exit(main())


# --- linear batches (issue 10): CPU of one batch against its size ---------------


def scaled_bundle(attempts: int) -> ReplayBundle:
    """The shipped scenario's four honest candidates, cycled to ``attempts`` attempts."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import build_example_chain as example
    finally:
        sys.path.pop(0)

    drafts = [example.CANDIDATES[i % 4] for i in range(attempts)]
    chain = build_chain(
        example.ORIGINAL, assess(example.ORIGINAL), drafts,
        operator_set_id="arithmetic.repair_ops", operator_set_version="v1",
    )
    inputs = tuple(build_replay_input(chain, i, BUILTIN_MANIFEST) for i in range(attempts))
    return ReplayBundle(chain, inputs)


def batch_cpu_seconds(bundle: ReplayBundle, *, frozen: bool = False) -> float:
    """CPU seconds (this process) to classify every attempt of ``bundle`` in one batch.

    ``frozen`` moves the loaded bundle out of the cyclic GC's sight first
    (``gc.freeze``), as a command may after reading it: the collector's full
    passes otherwise rescan the whole bundle, a cost that grows with it.
    """
    manifest = builtin_manifest()
    if frozen:
        gc.collect()
        gc.freeze()
    try:
        started = time.process_time()
        for _ in replay_bundle_attempts(bundle, manifest):
            pass
        return time.process_time() - started
    finally:
        if frozen:
            gc.unfreeze()


def scaling(sizes: tuple[int, ...], *, frozen: bool = False) -> list[str]:
    """``T(n)`` per size, and each ratio to the previous size (linear: the size ratio)."""
    lines: list[str] = [f"gc.freeze() after building each bundle: {frozen}"]
    previous: tuple[int, float] | None = None
    for size in sizes:
        seconds = batch_cpu_seconds(scaled_bundle(size), frozen=frozen)
        line = (
            f"replay batch of {size:,} attempts: {seconds:.2f} s CPU "
            f"({seconds / size * 1e6:.0f} us each)"
        )
        if previous is not None:
            line += (
                f"; T({size:,})/T({previous[0]:,}) = {seconds / previous[1]:.1f} "
                f"(size x{size / previous[0]:g})"
            )
        lines.append(line)
        previous = (size, seconds)
    return lines
