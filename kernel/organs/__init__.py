"""The built-in organs and the static authority manifest that wires them (pure).

Rules:

- ``BUILTIN_MANIFEST`` (also returned by ``builtin_manifest()``) is the one
  static, versioned allowlist the kernel ships (ADR-0229 §9, §10, §15.1): the
  arithmetic organ's contract authority, its ordered proof policy and one
  in-process proof authority per obligation. Nothing is discovered, imported
  by name or resolved by convention.
- ``CERTIFIED_MANIFEST`` (``certified_manifest()``) is the production
  wiring: the same contract authority and the arithmetic policy extended by
  the external obligation ``arithmetic.target_certified`` (ADR-0005), which
  closes only on a sealed SMT certification receipt handed in as
  ``ProofEvidence``. ``BUILTIN_MANIFEST`` is unchanged.
- Changing what an authority decides changes its ``authority_version``;
  changing the wiring changes ``manifest_version``.
"""

from __future__ import annotations

from typing import Final

from kernel.organs.arithmetic import (
    ARITHMETIC_ORGAN,
    CONTRACT_AUTHORITY,
    EVIDENCE_GROUNDED,
    EVIDENCE_GROUNDED_AUTHORITY,
    PROOF_OBLIGATIONS,
    TARGET_DETERMINED,
    TARGET_DETERMINED_AUTHORITY,
    assess,
    prove_evidence_grounded,
    prove_target_determined,
)
from kernel.organs.certification import (
    CERTIFICATION_BACKEND,
    CERTIFICATION_MEDIA_TYPE,
    CERTIFICATION_OPERATION,
    CERTIFIED_PREFIX,
    CHECK_CONTENT_SETTING,
    CHECK_DIGEST_SETTING,
    TARGET_CERTIFIED,
    TARGET_CERTIFIED_AUTHORITY,
    CertificationEvidence,
    certification_digest,
    certification_problem,
    certification_spec,
    problem_digest,
    prove_target_certified,
)
from kernel.replay import AuthorityManifest, ProofObligations

__all__ = [
    "ARITHMETIC_ORGAN",
    "BUILTIN_MANIFEST",
    "BUILTIN_MANIFEST_VERSION",
    "CERTIFICATION_BACKEND",
    "CERTIFICATION_MEDIA_TYPE",
    "CERTIFICATION_OPERATION",
    "CERTIFIED_MANIFEST",
    "CERTIFIED_MANIFEST_VERSION",
    "CERTIFIED_PREFIX",
    "CHECK_CONTENT_SETTING",
    "CHECK_DIGEST_SETTING",
    "CONTRACT_AUTHORITY",
    "CertificationEvidence",
    "EVIDENCE_GROUNDED",
    "EVIDENCE_GROUNDED_AUTHORITY",
    "PROOF_OBLIGATIONS",
    "TARGET_CERTIFIED",
    "TARGET_CERTIFIED_AUTHORITY",
    "TARGET_DETERMINED",
    "TARGET_DETERMINED_AUTHORITY",
    "assess",
    "builtin_manifest",
    "certification_digest",
    "certification_problem",
    "certification_spec",
    "certified_manifest",
    "problem_digest",
    "prove_evidence_grounded",
    "prove_target_certified",
    "prove_target_determined",
]

BUILTIN_MANIFEST_VERSION: Final = "builtin.v1"

BUILTIN_MANIFEST: Final = AuthorityManifest(
    manifest_version=BUILTIN_MANIFEST_VERSION,
    contract_authorities={ARITHMETIC_ORGAN: CONTRACT_AUTHORITY},
    proof_policies={ARITHMETIC_ORGAN: PROOF_OBLIGATIONS},
    proof_authorities={
        EVIDENCE_GROUNDED: EVIDENCE_GROUNDED_AUTHORITY,
        TARGET_DETERMINED: TARGET_DETERMINED_AUTHORITY,
    },
)


def builtin_manifest() -> AuthorityManifest:
    """The kernel's static authority manifest (``builtin.v1``); the same value every call."""
    return BUILTIN_MANIFEST


CERTIFIED_MANIFEST_VERSION: Final = "certified.v1"

CERTIFIED_MANIFEST: Final = AuthorityManifest(
    manifest_version=CERTIFIED_MANIFEST_VERSION,
    contract_authorities={ARITHMETIC_ORGAN: CONTRACT_AUTHORITY},
    proof_policies={
        ARITHMETIC_ORGAN: ProofObligations((EVIDENCE_GROUNDED, TARGET_DETERMINED, TARGET_CERTIFIED))
    },
    proof_authorities={
        EVIDENCE_GROUNDED: EVIDENCE_GROUNDED_AUTHORITY,
        TARGET_DETERMINED: TARGET_DETERMINED_AUTHORITY,
        TARGET_CERTIFIED: TARGET_CERTIFIED_AUTHORITY,
    },
)


def certified_manifest() -> AuthorityManifest:
    """The production manifest (``certified.v1``): ``builtin.v1`` plus the external
    obligation ``arithmetic.target_certified``; the same value every call."""
    return CERTIFIED_MANIFEST
