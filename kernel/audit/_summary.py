"""The SLSA Verification Summary of an attested run (issue 20, deliverable 6; ADR-0010).

``kernel attest`` writes, beside its outcomes Statement, a second in-toto
Statement v1 whose predicate is the SLSA Verification Summary
(``https://slsa.dev/verification_summary/v1``), the predicate policy engines
and supply-chain verifiers read:

- ``verifier.id``: this kernel's audit (``VERIFIER_ID``);
- ``resourceUri``: the run (``urn:replay-kernel:run:<run id>``);
- ``policy``: ``uri`` names the policy and the ``--fail-on`` classes the
  verdict was taken under; ``digest.sha256`` is the digest (canonical JSON)
  of the policy document: the authority manifest (``certified.v1``), the
  SHA-256 of the bundle the work directory keeps and of each attempt's
  stored check manifest (for an external run: its job and identity), and the
  ``--fail-on`` classes. A verifier recomputes it from the stored files;
- ``inputAttestations``: the outcomes envelope, by SHA-256 of its bytes;
- ``verificationResult``: ``PASSED`` when the run's re-derived outcomes pass
  under ``--fail-on`` (the exit code ``kernel run`` gives them would be 0),
  else ``FAILED``; a run that does not audit intact is never summarised;
- ``verifiedLevels``: one custom level (``VERIFIED_LEVEL``); we claim no
  SLSA build level.

Its subjects are the outcomes Statement's. ``check_summary`` verifies one.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, urlsplit

from kernel.audit._bundle import BUNDLE_COPY, BUNDLE_STREAM_COPY
from kernel.audit._store import (
    SUMMARY_FILE,
    RunLayout,
    Unreadable,
    field_of,
    read_bounded,
    sha256_file,
)
from kernel.audit._work_dir import RUN_STATE, attempt_dirs
from kernel.identity import JsonValue, digest
from kernel.organs import CERTIFIED_MANIFEST
from kernel.serde import SerdeError, parse_json

__all__ = [
    "POLICY_URI",
    "SUMMARY_FILE",
    "VERIFIED_LEVEL",
    "VERIFIER_ID",
    "VSA_PREDICATE_TYPE",
    "check_summary",
    "policy_document",
    "summary_statement",
]

VSA_PREDICATE_TYPE: Final = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID: Final = "urn:replay-kernel:verifier:kernel-attest"
POLICY_URI: Final = "urn:replay-kernel:policy:rederived-outcomes:v1"
VERIFIED_LEVEL: Final = "REPLAY_KERNEL_OUTCOMES_REDERIVED"


def _sha(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except Unreadable:
        return None


def policy_document(root: Path, layout: RunLayout, fail_on: Sequence[str]) -> JsonValue:
    """What the verdict was taken under, by digest of the stored files (recomputable)."""
    classes: list[JsonValue] = [*sorted(set(fail_on))]
    if layout is RunLayout.EXTERNAL_RUN:
        return {
            "fail_on": classes,
            "identity_sha256": _sha(root / "identity.json"),
            "job_sha256": _sha(root / "job.json"),
        }
    kept = next(
        (name for name in (BUNDLE_COPY, BUNDLE_STREAM_COPY) if (root / name).is_file()), None
    )
    manifests: list[JsonValue] = [
        {"attempt_id": d.name, "sha256": _sha(d / "manifest.json")} for d in attempt_dirs(root)
    ]
    return {
        "authority_manifest": CERTIFIED_MANIFEST.manifest_version,
        "bundle": None if kept is None else {"name": kept, "sha256": _sha(root / kept)},
        "check_manifests": manifests,
        "fail_on": classes,
    }


def _run_id(root: Path, layout: RunLayout) -> str:
    name = RUN_STATE if layout is RunLayout.WORK_DIR else "metadata.json"
    try:
        value = field_of(parse_json(read_bounded(root / name)), "run_id")
    except (Unreadable, SerdeError):
        value = None
    return value if isinstance(value, str) else "unknown"


def policy_uri(fail_on: Sequence[str]) -> str:
    return f"{POLICY_URI}?fail-on={','.join(sorted(set(fail_on)))}"


def summary_statement(
    root: Path,
    layout: RunLayout,
    subjects: list[JsonValue],
    envelope_name: str,
    envelope_sha256: str,
    fail_on: Sequence[str],
    passed: bool,
) -> JsonValue:
    """The in-toto Statement v1 carrying the SLSA Verification Summary of the run."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "predicate": {
            "inputAttestations": [{"digest": {"sha256": envelope_sha256}, "uri": envelope_name}],
            "policy": {
                "digest": {"sha256": digest(policy_document(root, layout, fail_on))},
                "uri": policy_uri(fail_on),
            },
            "resourceUri": f"urn:replay-kernel:run:{_run_id(root, layout)}",
            "slsaVersion": "1.0",
            "timeVerified": now.isoformat().replace("+00:00", "Z"),
            "verificationResult": "PASSED" if passed else "FAILED",
            "verifiedLevels": [VERIFIED_LEVEL],
            "verifier": {"id": VERIFIER_ID},
        },
        "predicateType": VSA_PREDICATE_TYPE,
        "subject": subjects,
    }


def check_summary(
    root: Path, layout: RunLayout, statement: JsonValue, envelope_path: Path
) -> list[str]:
    """Every problem with a (signature-verified) summary Statement but its subjects."""
    if not isinstance(statement, dict) or statement.get("predicateType") != VSA_PREDICATE_TYPE:
        return [f"predicateType is not {VSA_PREDICATE_TYPE}"]
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        return ["no predicate"]
    problems: list[str] = []
    if predicate.get("verificationResult") not in ("PASSED", "FAILED"):
        problems.append("verificationResult is neither PASSED nor FAILED")
    if field_of(predicate.get("verifier"), "id") != VERIFIER_ID:
        problems.append(f"verifier.id is not {VERIFIER_ID}")
    inputs = predicate.get("inputAttestations")
    wanted = {"digest": {"sha256": _sha(envelope_path)}, "uri": envelope_path.name}
    if not isinstance(inputs, list) or wanted not in inputs:
        problems.append(f"the outcomes envelope {envelope_path.name} is not its input attestation")
    policy = predicate.get("policy")
    uri = field_of(policy, "uri")
    parts = urlsplit(uri) if isinstance(uri, str) else None
    if parts is None or f"{parts.scheme}:{parts.path}" != POLICY_URI:
        return [*problems, f"policy.uri is not {POLICY_URI}"]
    fail_on = [c for v in parse_qs(parts.query).get("fail-on", []) for c in v.split(",") if c]
    recomputed = digest(policy_document(root, layout, fail_on))
    if field_of(field_of(policy, "digest"), "sha256") != recomputed:
        problems.append("policy.digest does not recompute from the stored bundle and manifests")
    return problems


def summary_path(root: Path, out: Path | None) -> Path:
    """Where the summary goes: beside the outcomes envelope."""
    return (Path(os.path.abspath(out)).parent if out is not None else root) / SUMMARY_FILE
