"""Deterministic, identity-bearing test authorities and chains for the replay adapter.

The "toy" organ judges frames by their bindings' units, so a test chooses a
candidate's fate by how it builds the frame:

- a target with no binding of that name  -> missing binding (contract refused);
- a binding with unit ``"blocker"``      -> hazard (contract refused);
- a binding with unit ``"refute:<ref>"`` -> proof obligation ``<ref>`` refused;
- a binding with unit ``"vague:<ref>"``  -> proof obligation ``<ref>`` unavailable;
- anything else closes.

Authorities are pure functions of their input; the only side effect is an
append to a ``CallLog`` so tests can prove who was (not) called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from kernel.frames import Binding, ProblemFrame, SourceSpan, Target, frame_digest
from kernel.replay import (
    AuthorityManifest,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofContext,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    ReplayBundle,
    ReplayRequest,
    build_replay_input,
    requests_from_bundle,
    seal_proof_outcome,
)
from kernel.upstream import (
    CandidateDraft,
    ContractAssessment,
    SearchChain,
    build_chain,
    seal_assessment,
)

TOY = "toy"
REFS = ("toy.p1", "toy.p2")
SOURCE = "Ann has 3 apples and 4 pears."


@attrs.define
class CallLog:
    calls: list[str] = attrs.Factory(list)

    def contract_calls(self) -> list[str]:
        return [c for c in self.calls if c.startswith("contract")]

    def proof_calls(self) -> list[str]:
        return [c for c in self.calls if c.startswith("proof")]


def toy_assessment(frame: ProblemFrame, organ: str = TOY) -> ContractAssessment:
    names = {b.name for b in frame.bindings}
    missing = [t.name for t in frame.targets if t.name not in names]
    hazards = [f"blocked:{b.name}" for b in frame.bindings if b.unit == "blocker"]
    return seal_assessment(
        problem_frame_digest=frame_digest(frame),
        candidate_organ=organ,
        runnable=not missing and not hazards,
        missing_bindings=missing,
        unresolved_hazards=hazards,
        evidence_spans=frame.evidence_spans,
        explanation="toy contract",
    )


def toy_contract(log: CallLog) -> Callable[[ProblemFrame], ContractAssessment]:
    def assess(frame: ProblemFrame) -> ContractAssessment:
        log.calls.append("contract")
        return toy_assessment(frame)

    return assess


def toy_proof(log: CallLog, ref: str) -> Callable[[ProofContext], ProofOutcome]:
    def prove(context: ProofContext) -> ProofOutcome:
        log.calls.append(f"proof:{ref}")
        units = {b.unit for b in context.candidate_frame.bindings}
        status = ProofStatus.CLOSED
        codes: tuple[str, ...] = ()
        if f"refute:{ref}" in units:
            status, codes = ProofStatus.REFUSED, ("refuted",)
        elif f"vague:{ref}" in units:
            status, codes = ProofStatus.UNAVAILABLE, ("undetermined",)
        return seal_proof_outcome(
            context=context, authority_id=ref, authority_version="v1", status=status,
            reason_codes=codes, evidence_spans=context.candidate_frame.evidence_spans,
        )

    return prove


def toy_manifest(
    log: CallLog,
    *,
    contract: Callable[[ProblemFrame], ContractAssessment] | None = None,
    proofs: dict[str, Callable[[ProofContext], ProofOutcome]] | None = None,
    policy: ProofObligations | NoProofObligationsApplicable | None = None,
    include_policy: bool = True,
) -> AuthorityManifest:
    provers = {ref: toy_proof(log, ref) for ref in REFS}
    provers.update(proofs or {})
    return AuthorityManifest(
        manifest_version="toy.v1",
        contract_authorities={
            TOY: ContractAuthority("toy.contract", "v1", contract or toy_contract(log))
        },
        proof_policies=(
            {TOY: policy or ProofObligations(REFS)} if include_policy else {}
        ),
        proof_authorities={
            ref: ProofAuthority(ref, "v1", fn) for ref, fn in provers.items()
        },
    )


def span(start: int, end: int) -> SourceSpan:
    return SourceSpan(start, end)


ORIGINAL = ProblemFrame(
    SOURCE,
    (Binding("apples", 3, "apple", span(8, 9)), Binding("pears", 4, "pear", span(21, 22))),
    (),
    (Target("total", "answer"),),
    (span(8, 9), span(21, 22)),
)


def candidate(*units: str, spans: Sequence[SourceSpan] | None = None) -> ProblemFrame:
    """A whole-frame candidate that binds ``total``; extra bindings carry ``units``."""
    extra = tuple(Binding(f"x{i}", i, unit, span(0, 3)) for i, unit in enumerate(units))
    return attrs.evolve(
        ORIGINAL,
        bindings=(*ORIGINAL.bindings, Binding("total", 7, "fruit", span(0, 3)), *extra),
        evidence_spans=tuple(spans) if spans is not None else (span(8, 9), span(21, 22),
                                                                  span(8, 9)),
    )


CLOSING = candidate()
CONTRACT_REFUSING = candidate("blocker")
PROOF_REFUSING = candidate("refute:toy.p2")
PROOF_UNAVAILABLE = candidate("vague:toy.p1")


def toy_chain(*candidates: ProblemFrame, organ: str = TOY) -> SearchChain:
    drafts = [CandidateDraft(c, "op.rewrite", "v1") for c in candidates or (CLOSING,)]
    return build_chain(
        ORIGINAL, toy_assessment(ORIGINAL, organ), drafts,
        operator_set_id="toy.ops", operator_set_version="v1",
    )


def bundle_for(chain: SearchChain, manifest: AuthorityManifest) -> ReplayBundle:
    inputs = tuple(
        build_replay_input(chain, i, manifest) for i in range(len(chain.run.candidate_attempts))
    )
    return ReplayBundle(chain, inputs)


def request_for(chain: SearchChain, manifest: AuthorityManifest, index: int = 0
                ) -> ReplayRequest:
    return requests_from_bundle(bundle_for(chain, manifest))[index]
