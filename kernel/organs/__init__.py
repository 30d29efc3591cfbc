"""The built-in organs and the static authority manifest that wires them (pure).

Rules:

- ``BUILTIN_MANIFEST`` (also returned by ``builtin_manifest()``) is the one
  static, versioned allowlist the kernel ships (ADR-0229 §9, §10, §15.1): the
  arithmetic organ's contract authority, its ordered proof policy and one
  in-process proof authority per obligation. Nothing is discovered, imported
  by name or resolved by convention.
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
from kernel.replay import AuthorityManifest

__all__ = [
    "ARITHMETIC_ORGAN",
    "BUILTIN_MANIFEST",
    "BUILTIN_MANIFEST_VERSION",
    "CONTRACT_AUTHORITY",
    "EVIDENCE_GROUNDED",
    "EVIDENCE_GROUNDED_AUTHORITY",
    "PROOF_OBLIGATIONS",
    "TARGET_DETERMINED",
    "TARGET_DETERMINED_AUTHORITY",
    "assess",
    "builtin_manifest",
    "prove_evidence_grounded",
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
