"""Builders for adapter inputs and requests (the honest way to write them).

``build_replay_input`` seals the §6.2 input for one attempt of a valid chain,
naming the manifest's allowlisted target and the organ's exact obligations;
``requests_from_bundle`` pairs a bundle's inputs with its attempts and
reconstructions in the run's canonical order; ``replay_bundle_attempts``
classifies them, examining the bundle's one run once for the whole batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from kernel._values import UNSEALED_ID
from kernel.frames import frame_digest
from kernel.replay._authority import AuthorityManifest, ProofObligations
from kernel.replay._facts import built_facts, examine_run, with_built
from kernel.replay._machine import replay_attempt
from kernel.replay._records import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayAdapterOutcome,
    ReplayBundle,
    ReplayRequest,
    input_digest_of,
)
from kernel.serde import loads
from kernel.upstream import SCHEMA_VERSIONS, SearchChain

__all__ = [
    "build_replay_input",
    "replay_bundle_attempts",
    "replay_bundle_document",
    "requests_from_bundle",
]


def build_replay_input(
    chain: SearchChain, attempt_index: int, manifest: AuthorityManifest
) -> ReplayAdapterInput:
    """The sealed input for attempt ``attempt_index`` of ``chain`` under ``manifest``.

    Raises ``KeyError`` when the chain's organ has no contract authority or
    proof policy in the manifest (a builder misuse, not a replay refusal).
    """
    run = chain.run
    attempt = run.candidate_attempts[attempt_index]
    organ = chain.assessment.candidate_organ
    policy = manifest.proof_policies[organ]
    draft = ReplayAdapterInput(
        input_digest=UNSEALED_ID,
        replay_policy_version=CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        run_id=run.run_id,
        run_policy_version=run.run_policy_version,
        attempt_id=attempt.attempt_id,
        attempt_index=attempt_index,
        candidate_digest=attempt.candidate_digest,
        candidate_reconstruction_digest=(
            chain.reconstructions[attempt_index].candidate_reconstruction_digest
        ),
        problem_frame_digest=frame_digest(chain.problem_frame),
        original_contract_assessment_id=chain.assessment.assessment_id,
        candidate_organ=organ,
        residual_ids=tuple(r.residual_id for r in chain.residuals),
        gate_decision_id=chain.gate.gate_decision_id,
        budget_id=chain.budget.budget_id,
        operator_set_id=run.run_input.operator_set_id,
        operator_set_version=run.run_input.operator_set_version,
        contract_replay_target=manifest.contract_authorities[organ].target,
        proof_obligation_refs=policy.refs if isinstance(policy, ProofObligations) else (),
        schema_versions=SCHEMA_VERSIONS,
    )
    return attrs.evolve(draft, input_digest=input_digest_of(draft))


def requests_from_bundle(bundle: ReplayBundle) -> tuple[ReplayRequest, ...]:
    """One request per attempt, in the run's order.

    Raises ``ValueError`` unless the bundle holds exactly one input and one
    reconstruction per attempt.
    """
    chain = bundle.chain
    attempts = chain.run.candidate_attempts
    if not len(attempts) == len(chain.reconstructions) == len(bundle.inputs):
        raise ValueError(
            f"bundle holds {len(attempts)} attempts, {len(chain.reconstructions)} "
            f"reconstructions and {len(bundle.inputs)} inputs; they must be equal"
        )
    return tuple(
        ReplayRequest(
            replay_input,
            chain.problem_frame,
            chain.assessment,
            chain.residuals,
            chain.gate,
            chain.budget,
            chain.run,
            attempt,
            reconstruction,
        )
        for replay_input, attempt, reconstruction in zip(
            bundle.inputs, attempts, chain.reconstructions, strict=True
        )
    )


def replay_bundle_attempts(
    bundle: ReplayBundle, manifest: AuthorityManifest
) -> Iterator[ReplayAdapterOutcome]:
    """Every attempt's outcome, in the run's order, streamed; no evidence.

    Equal to ``replay_attempt`` over ``requests_from_bundle(bundle)``, but the
    bundle's run is examined once for the batch (linear cost). Raises
    ``ValueError`` (before yielding anything) like ``requests_from_bundle``.
    """
    requests = requests_from_bundle(bundle)
    chain = bundle.chain
    facts = examine_run(
        chain.run,
        shared=(chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals),
    )
    return (replay_attempt(request, manifest, facts=facts) for request in requests)


def replay_bundle_document(
    data: bytes, manifest: AuthorityManifest
) -> Iterator[ReplayAdapterOutcome]:
    """Parse one single-document bundle and classify every attempt, streamed.

    Outcomes are those of ``replay_bundle_attempts(loads(data, ReplayBundle),
    manifest)``, byte for byte; raises what that raises (``SerdeError`` for a
    document the strict parser or converter refuses, ``ValueError`` for
    unequal counts), before yielding anything. Faster: the records parsed
    here never leave this function before they are classified, and the
    converter ran every validator and invariant when it built them, over
    values the strict parser put in the identity domain, so they are not
    validated again (ADR 0011, "Records the kernel built"). If attrs'
    validators are switched off, the converter did not run them, and every
    record is examined as for any other caller.
    """
    bundle = loads(data, ReplayBundle)
    requests = requests_from_bundle(bundle)
    chain = bundle.chain
    shared = (chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals)
    if attrs.validators.get_disabled():
        facts = examine_run(chain.run, shared=shared)
        return (replay_attempt(request, manifest, facts=facts) for request in requests)
    batch = built_facts(chain.run, shared)
    return (
        replay_attempt(
            request,
            manifest,
            facts=with_built(batch, request.replay_input, request.reconstruction),
        )
        for request in requests
    )
