"""Build the shipped replay example from the builders (never hand-typed digests).

Scenario: an arithmetic word problem whose frame lacks one quantity, so the
arithmetic organ's contract refused it. A search run proposes eight
candidates; four are honest and land in each semantic disposition, four are
deliberately damaged in the bundle to show typed refusals.

    python examples/build_example_chain.py            # write examples/replay/*.json
    python examples/build_example_chain.py --check    # fail if the shipped files differ

Outputs: ``chain.json`` (the honest search chain, for ``kernel digest``) and
``bundle.json`` (chain + one adapter input per attempt, for ``kernel replay``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
from _generated import reseal, span_of, with_first_spans_swapped, write_or_check

from kernel.frames import (
    Binding,
    FrameDelta,
    ProblemFrame,
    Relation,
    SourceSpan,
    Target,
    frame_digest,
)
from kernel.organs import BUILTIN_MANIFEST, assess
from kernel.replay import ReplayBundle, build_replay_input
from kernel.serde import dumps
from kernel.upstream import CandidateDraft, build_chain

SOURCE = (
    "Mia had 12 marbles. She won 7 more at recess and then gave 5 to her brother. "
    "How many marbles does Mia have now?"
)
OUT_DIR = Path(__file__).resolve().parent / "replay"


def at(text: str, occurrence: int = 0) -> SourceSpan:
    return span_of(SOURCE, text, occurrence)


HAD = Binding("had", 12, "marble", at("12"))
WON = Binding("won", 7, "marble", at("7"))
GAVE = Binding("gave", 5, "marble", at("5"))
RELATIONS = (
    Relation("after_win", "add", ("had", "won")),
    Relation("left", "sub", ("after_win", "gave")),
)
TARGETS = (Target("left", "answer"),)

# The original reading missed "gave 5 to her brother": a missing binding.
ORIGINAL = ProblemFrame(SOURCE, (HAD, WON), RELATIONS, TARGETS, (HAD.span, WON.span))


def whole(*bindings: Binding) -> ProblemFrame:
    return attrs.evolve(
        ORIGINAL, bindings=(HAD, WON, *bindings),
        evidence_spans=(HAD.span, WON.span, *(b.span for b in bindings)),
    )


CANDIDATES = (
    # 0: reads "gave 5" correctly -> contract_and_proof_closed
    CandidateDraft(whole(GAVE), "op.bind_missing_quantity", "v1"),
    # 1: reads 5 as "brother"s -> unit mismatch -> contract_refused
    CandidateDraft(whole(attrs.evolve(GAVE, unit="brother")), "op.bind_missing_quantity", "v1"),
    # 2: binds 6 to the span that says 5 -> contract closes, evidence not grounded
    CandidateDraft(whole(attrs.evolve(GAVE, value=6)), "op.bind_missing_quantity", "v1"),
    # 3: the same repair as a frame delta -> contract_and_proof_closed
    CandidateDraft(
        FrameDelta(frame_digest(ORIGINAL), (), (GAVE,), (), (), (), (),
                   (HAD.span, WON.span, GAVE.span)),
        "op.delta_bind", "v1",
    ),
    # 4-7: honest candidates whose bundle entries are damaged below
    *(CandidateDraft(whole(GAVE), "op.bind_missing_quantity", "v1") for _ in range(4)),
)


def build() -> tuple[bytes, bytes]:
    assessment = assess(ORIGINAL)
    assert not assessment.runnable, "the original frame must be refused"
    chain = build_chain(ORIGINAL, assessment, CANDIDATES,
                        operator_set_id="arithmetic.repair_ops", operator_set_version="v1")
    inputs = [build_replay_input(chain, i, BUILTIN_MANIFEST) for i in range(len(CANDIDATES))]
    # 4: a replay policy this kernel does not implement -> unsupported_replay_policy
    inputs[4] = reseal(inputs[4], replay_policy_version="contract_proof_replay.v2")
    # 5: obligations reordered -> unsupported_proof_obligation
    inputs[5] = reseal(inputs[5], proof_obligation_refs=tuple(
        reversed(inputs[5].proof_obligation_refs)))
    # 6: a contract target outside the static allowlist -> contract_replay_unavailable
    inputs[6] = reseal(inputs[6], contract_replay_target="arithmetic.contract@v0")
    # 7: evidence spans reordered after sealing -> candidate_identity_mismatch
    damaged = with_first_spans_swapped(chain.reconstructions[7])
    bundle_chain = attrs.evolve(
        chain, reconstructions=(*chain.reconstructions[:7], damaged))
    bundle = ReplayBundle(bundle_chain, tuple(inputs))
    return dumps(chain) + b"\n", dumps(bundle) + b"\n"


def main() -> int:
    chain, bundle = build()
    return write_or_check(
        __doc__.splitlines()[0], OUT_DIR,
        lambda out: {out / "chain.json": chain, out / "bundle.json": bundle},
    )


if __name__ == "__main__":
    sys.exit(main())
