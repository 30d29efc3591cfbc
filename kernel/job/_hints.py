"""The summary's likely cause of an ``unsupported_proof_obligation``: another manifest's bundle."""

from __future__ import annotations

from kernel.bundles import ReadyAttempt
from kernel.job._bundle_input import Attempt
from kernel.organs import builtin_manifest, certified_manifest
from kernel.replay import (
    AuthorityManifest,
    ProofObligations,
    ReplayAdapterOutcome,
    ReplayDisposition,
)

__all__ = ["RUN_MANIFEST_ADVICE", "manifest_hint", "run_hint"]

_KNOWN_MANIFESTS: tuple[AuthorityManifest, ...] = (builtin_manifest(), certified_manifest())

# What a builtin.v1 bundle's user should do: the main job certifies under certified.v1.
RUN_MANIFEST_ADVICE = ("kernel run certifies under certified.v1: seal the draft with "
                       "`kernel bundle --manifest certified.v1` (a builtin.v1 bundle is for "
                       "`kernel replay`)")


def manifest_hint(
    item: Attempt, outcome: ReplayAdapterOutcome, manifest: AuthorityManifest, advice: str
) -> str | None:
    """The likely cause of an ``unsupported_proof_obligation``: the bundle's manifest is another.

    When the attempt's obligation refs are exactly another shipped manifest's
    policy for its organ, that manifest is named, then ``advice`` (what the
    user should do about it); ``None`` otherwise (any other outcome, or refs
    that are no shipped manifest's: the refusal's explanation is the cause).
    """
    if (outcome.replay_disposition is not ReplayDisposition.UNSUPPORTED_PROOF_OBLIGATION
            or not isinstance(item, ReadyAttempt)):
        return None
    refs = item.request.replay_input.proof_obligation_refs
    organ = item.request.replay_input.candidate_organ
    for known in _KNOWN_MANIFESTS:
        policy = known.proof_policies.get(organ)
        if (known.manifest_version != manifest.manifest_version
                and isinstance(policy, ProofObligations) and policy.refs == refs):
            return (f"unsupported_proof_obligation: the bundle names the obligations of "
                    f"{known.manifest_version}, not of {manifest.manifest_version}; {advice}")
    return None  # not another manifest's: the refusal's own explanation says what differs


def run_hint(item: Attempt, outcome: ReplayAdapterOutcome) -> str | None:
    """The main job's likely cause (a builtin.v1 bundle); module level, so a worker can call it."""
    return manifest_hint(item, outcome, certified_manifest(), RUN_MANIFEST_ADVICE)
