"""Build the main job's bundle from the builders (never hand-typed digests).

Scenario (``kernel run``, ADR-0006): a word problem whose frame misses the
number of boxes, so the arithmetic organ's contract refused it. A search run
proposes six candidates, replayed under ``kernel.organs.CERTIFIED_MANIFEST``
(evidence_grounded, target_determined, target_certified), the last closed
only by a receipt from the real z3 -> cvc5 pair:

    0  reads "6 boxes"                     -> contract_and_proof_closed (certified)
    1  reads the 6 as 5: 48 / 5 is inexact -> contract_refused
    2  binds 8 to the span that says 6     -> contract_closed_but_proof_refused
    3  the repair of 0 as a frame delta    -> contract_and_proof_closed (certified)
    4  honest, input names replay policy v2 -> unsupported_replay_policy (refusal)
    5  honest, evidence spans reordered     -> candidate_identity_mismatch (refusal)

Two candidates close; the kernel reports each and selects neither (ADR-0229 §12).

    python examples/build_e2e_bundle.py            # write examples/e2e/bundle.json
    python examples/build_e2e_bundle.py --check    # fail if the shipped file differs
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
from kernel.organs import CERTIFIED_MANIFEST, assess
from kernel.replay import ReplayBundle, build_replay_input
from kernel.serde import dumps
from kernel.upstream import CandidateDraft, build_chain

SOURCE = (
    "A baker fills 4 trays with 12 cookies each and packs all the cookies equally "
    "into 6 boxes. How many cookies go in each box?"
)
OUT_DIR = Path(__file__).resolve().parent / "e2e"


def at(text: str) -> SourceSpan:
    return span_of(SOURCE, text)


TRAYS = Binding("trays", 4, "1", at("4"))
PER_TRAY = Binding("per_tray", 12, "cookie", at("12"))
BOXES = Binding("boxes", 6, "1", at("6"))
RELATIONS = (
    Relation("total", "mul", ("trays", "per_tray")),
    Relation("per_box", "div", ("total", "boxes")),
)
TARGETS = (Target("per_box", "answer"),)

# The original reading missed "into 6 boxes": a missing binding.
ORIGINAL = ProblemFrame(SOURCE, (TRAYS, PER_TRAY), RELATIONS, TARGETS, (TRAYS.span, PER_TRAY.span))


def whole(boxes: Binding) -> ProblemFrame:
    return attrs.evolve(
        ORIGINAL,
        bindings=(TRAYS, PER_TRAY, boxes),
        evidence_spans=(TRAYS.span, PER_TRAY.span, boxes.span),
    )


OP = "op.bind_missing_quantity"
CANDIDATES = (
    CandidateDraft(whole(BOXES), OP, "v1"),
    CandidateDraft(whole(attrs.evolve(BOXES, value=5)), OP, "v1"),
    CandidateDraft(whole(attrs.evolve(BOXES, value=8)), OP, "v1"),
    CandidateDraft(
        FrameDelta(frame_digest(ORIGINAL), (), (BOXES,), (), (), (), (),
                   (TRAYS.span, PER_TRAY.span, BOXES.span)),
        "op.delta_bind", "v1",
    ),
    CandidateDraft(whole(BOXES), OP, "v1"),
    CandidateDraft(whole(BOXES), OP, "v1"),
)


def build() -> bytes:
    assessment = assess(ORIGINAL)
    assert not assessment.runnable, "the original frame must be refused"
    chain = build_chain(ORIGINAL, assessment, CANDIDATES,
                        operator_set_id="arithmetic.repair_ops", operator_set_version="v1")
    inputs = [build_replay_input(chain, i, CERTIFIED_MANIFEST) for i in range(len(CANDIDATES))]
    # 4: a replay policy this kernel does not implement -> unsupported_replay_policy
    inputs[4] = reseal(inputs[4], replay_policy_version="contract_proof_replay.v2")
    # 5: evidence spans reordered after sealing -> candidate_identity_mismatch
    damaged = with_first_spans_swapped(chain.reconstructions[5])
    bundle_chain = attrs.evolve(chain, reconstructions=(*chain.reconstructions[:5], damaged))
    return dumps(ReplayBundle(bundle_chain, tuple(inputs))) + b"\n"


def main() -> int:
    data = build()
    return write_or_check(__doc__.splitlines()[0], OUT_DIR,
                          lambda out: {out / "bundle.json": data})


if __name__ == "__main__":
    sys.exit(main())
