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
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import attrs

import kernel.identity as identity
from bench._cases import ROOT, Corpus
from bench._harness import Comparison, Ratio, Variant
from kernel._values import UNSEALED_ID
from kernel.commands.replay import attempt_lines
from kernel.frames import ProblemFrame
from kernel.identity import JsonValue, digest, validated_payloads
from kernel.organs import BUILTIN_MANIFEST, assess, builtin_manifest
from kernel.replay import (
    ContractClosed,
    ProofContext,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    Validated,
    build_replay_input,
    examine_run,
    refusal_id_of,
    replay_attempt,
    replay_bundle_attempts,
    replay_contract,
    result_id_of,
    validate,
)
from kernel.replay._authority import CandidateMemo, candidate_scope
from kernel.replay._facts import built_facts, with_built
from kernel.replay._machine import _sealed
from kernel.serde import loads
from kernel.upstream import CandidateDraft, build_chain


@dataclass(frozen=True)
class Floor:
    """Every payload digested while the bundle is replayed once, in call order."""

    attempts: int
    payloads: tuple[JsonValue, ...]


# The function ``_recording`` swaps, by name, in every kernel module holding it
# (a module's attributes have no static type for mypy to check an assignment to).
_PROBED: Final = "canonical_json"


@contextmanager
def _recording(into: list[JsonValue]) -> Iterator[None]:
    original = identity.canonical_json

    def recorder(value: JsonValue) -> bytes:
        into.append(value)
        return original(value)

    # bench-only probe: kernel.identity's own name (``digest`` calls it) and
    # every kernel module that imported the function by name.
    holders = [
        module
        for name, module in sorted(sys.modules.items())
        if (name == "kernel" or name.startswith("kernel."))
        and getattr(module, _PROBED, None) is original
    ]
    for module in holders:
        setattr(module, _PROBED, recorder)
    try:
        yield
    finally:
        for module in holders:
            setattr(module, _PROBED, original)


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

    def proofs(state: ContractClosed) -> list[object]:
        replay_input = state.validated.request.replay_input
        return [
            authority.prove(
                ProofContext(
                    ref,
                    replay_input.candidate_digest,
                    state.validated.candidate_frame,
                    state.contract_replay,
                    (),
                )
            )
            for ref, authority in zip(
                replay_input.proof_obligation_refs, state.validated.proof_authorities, strict=True
            )
        ]

    def authorities() -> object:
        done: list[object] = [v.contract_authority.assess(v.candidate_frame) for v in validated]
        for state in closed:
            done.extend(proofs(state))
        return done

    closed_of = {id(state.validated): state for state in closed}

    def authorities_shared() -> object:
        # As replay calls them: one candidate scope per attempt, so what the
        # contract derived from the candidate (the organ's analysis, the
        # frame's digest) is not derived again by its proofs.
        done: list[object] = []
        for v in validated:
            with candidate_scope(CandidateMemo(v.candidate_frame)):
                done.append(v.contract_authority.assess(v.candidate_frame))
                state = closed_of.get(id(v))
                if state is not None:
                    done.extend(proofs(state))
        return done

    outcomes = tuple(replay_bundle_attempts(bundle, manifest))
    attempt_ids = tuple(a.attempt_id for a in chain.run.candidate_attempts)
    sealing = [_resealing(outcome) for outcome in outcomes]

    def seals() -> object:
        return [seal() for seal in sealing]

    def encoding() -> object:
        return attempt_lines(outcomes, attempt_ids)

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
            Variant(AUTHORITIES_SHARED, authorities_shared),
            Variant(SEALS, seals),
            Variant(ENCODING, encoding),
        ),
    )


REPLAY: Final = "replay (records the kernel built)"
AUTHORITIES: Final = "authorities"
AUTHORITIES_SHARED: Final = "authorities, one candidate scope each (as replay calls them)"
SEALS: Final = "seals (each outcome built and sealed)"
ENCODING: Final = "outcome encoding (kernel replay's lines)"


def floor_ratios(ratios: Sequence[Ratio], authorities: str = AUTHORITIES) -> tuple[float, ...]:
    """Per round: replay (records the kernel built) / (hash floor + authorities).

    The floor of issue 22 (deliverable 3): the work ADR-0229 obliges, every id
    recomputed plus the organ's authorities run once each (called directly,
    each deriving what it reads; ``AUTHORITIES_SHARED``: in one candidate
    scope per attempt, as replay calls them). All are timed in the same
    round, so each ratio is formed within one round.
    """
    found = {r.variant.label: r for r in ratios}
    replay, called = found[REPLAY], found[authorities]
    return tuple(
        r / (f + a)
        for r, f, a in zip(
            replay.variant_us, replay.baseline_us, called.variant_us, strict=True
        )
    )


def _resealing(outcome: ReplayAdapterOutcome) -> Callable[[], object]:
    """Build ``outcome`` again as the machine does (one construction, then its id sealed)."""
    fields = {a.name: getattr(outcome, a.name) for a in attrs.fields(type(outcome))}
    if isinstance(outcome, ReplayAdapterResult):
        unsealed = {**fields, "replay_result_id": UNSEALED_ID}
        return lambda: _sealed(ReplayAdapterResult(**unsealed), "replay_result_id", result_id_of)
    unsealed = {**fields, "replay_refusal_id": UNSEALED_ID}
    return lambda: _sealed(ReplayAdapterRefusal(**unsealed), "replay_refusal_id", refusal_id_of)


def summary(
    floor: Floor, medians_us: dict[str, float], ratios: Sequence[Ratio] = ()
) -> list[str]:
    """Per-attempt figures, replay against its floor, and what each part costs."""
    per = {label: us / floor.attempts for label, us in medians_us.items()}
    built = per[REPLAY]
    built_validate = per["validate (records the kernel built)"]
    authorities, shared = per[AUTHORITIES], per[AUTHORITIES_SHARED]
    # Replay calls the authorities in one candidate scope per attempt.
    transitions = built - built_validate - shared
    hashes = per["hash floor"]
    obliged = hashes + authorities
    lines = []
    if ratios:
        for label, which in (
            ("authorities called directly", AUTHORITIES),
            ("authorities in one candidate scope each, as replay calls them", AUTHORITIES_SHARED),
        ):
            per_round = floor_ratios(ratios, which)
            q1, _, q3 = statistics.quantiles(per_round, n=4, method="inclusive")
            lines.append(
                f"replay of records the kernel built / (hash floor + authorities) = "
                f"{statistics.median(per_round):.2f} (median of {len(per_round)} rounds, "
                f"IQR {q1:.2f}-{q3:.2f}; target <= 1.5), {label}"
            )
    lines += [
        f"per attempt (us, median): floor {obliged:.0f} = hash floor {hashes:.0f} + "
        f"authorities {authorities:.0f} (called directly; {shared:.0f} in one candidate "
        f"scope each); replay of records the kernel built {built:.0f} = validate "
        f"{built_validate:.0f} + authorities {shared:.0f} + transitions {transitions:.0f} "
        f"(of which seals {per[SEALS]:.0f}); not in replay: outcome encoding "
        f"{per[ENCODING]:.0f}, parse {per['parse']:.0f}",
        f"as multiples of the floor (hash floor + authorities called directly): replay "
        f"{built / obliged:.2f}x (medians' ratio), validate {built_validate / obliged:.2f}x, "
        f"authorities as replay calls them {shared / obliged:.2f}x, transitions "
        f"{transitions / obliged:.2f}x, seals {per[SEALS] / obliged:.2f}x, outcome encoding "
        f"{per[ENCODING] / obliged:.2f}x",
        f"the old measure: replay of records the kernel built = {built / hashes:.2f}x its hash "
        f"floor (authorities alone {authorities / hashes:.2f}x); records a caller handed in: "
        f"replay {per['replay (batch)']:.0f} us ({per['replay (batch)'] / hashes:.2f}x), "
        f"validate {per['validate']:.0f} us",
        f"against the floor with the domain scan ({per['hash floor with the domain scan']:.0f} "
        f"us): replay {per['replay (batch)'] / per['hash floor with the domain scan']:.2f}x",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m bench._replay_split [--rounds N]``: this group alone."""
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
    for line in summary(floor, medians, ratios):
        print(f"- {line}")
    return 0


if __name__ == "__main__":  # pragma: no cover - or as part of ``python -m bench``
    sys.exit(main())


# --- linear batches (issue 10): CPU of one batch against its size ---------------


def scaled_bundle(attempts: int) -> ReplayBundle:
    """The shipped scenario's four honest candidates, cycled to ``attempts`` attempts."""
    # examples/ is no package and not on mypy's path: import the script by name
    # while its folder is on sys.path (its own ``_generated`` import needs that
    # too), and give what is taken from it the types it has there.
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        example = importlib.import_module("build_example_chain")
    finally:
        sys.path.pop(0)

    candidates: tuple[CandidateDraft, ...] = example.CANDIDATES
    original: ProblemFrame = example.ORIGINAL
    drafts = [candidates[i % 4] for i in range(attempts)]
    chain = build_chain(
        original, assess(original), drafts,
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
