"""`kernel attest` emits an SLSA Verification Summary (issue 20, finding 6).

Beside the outcomes Statement, `kernel attest` writes a second signed in-toto
Statement whose predicate is the SLSA Verification Summary
(``https://slsa.dev/verification_summary/v1``) that supply-chain verifiers
and policy engines read. Checked here with the in-toto project's own
libraries: the envelope with ``in_toto`` (DSSE, securesystemslib keys), the
Statement with ``in_toto_attestation``'s Statement v1 validation and the
predicate against its VSA v1 protobuf message. ``kernel audit --verify-key``
verifies it, and refuses one whose result, policy or input attestation was
changed. Every case goes through the real command line over a real work
directory (z3 -> cvc5).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf import json_format  # type: ignore[import-untyped]
from in_toto.models.metadata import Envelope, Metadata
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2  # type: ignore[import-untyped]
from in_toto_attestation.v1 import statement_pb2  # type: ignore[import-untyped]
from in_toto_attestation.v1.statement import Statement  # type: ignore[import-untyped]
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # re-exported without __all__

from tests.orchestrate_helpers import stored_main_job
from tests.support.cli import kernel
from tests.support.reference import canonical

VSA = "https://slsa.dev/verification_summary/v1"
SUMMARY = "verification-summary.dsse.json"


@pytest.fixture(scope="module")
def stored_work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return stored_main_job(tmp_path_factory.mktemp("e2e"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("keys")
    done = kernel("attest-keygen", base / "signer.pem", base / "signer.pub")
    assert done.returncode == 0, done.stderr
    return base / "signer.pem", base / "signer.pub"


@pytest.fixture
def work_dir(stored_work_dir: tuple[Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "work"
    shutil.copytree(stored_work_dir[0], target, symlinks=True)
    return target


def _public(path: Path) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(path.read_bytes())
    assert isinstance(key, Ed25519PublicKey)
    return key


def _attest(work_dir: Path, private: Path, *args: str) -> Path:
    done = kernel("attest", work_dir, "--key", private, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(work_dir / "attestation.dsse.json")]
    assert (work_dir / SUMMARY).is_file()  # beside the outcomes envelope
    return work_dir / SUMMARY


def _statement(path: Path) -> dict[str, Any]:
    envelope = json.loads(path.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert isinstance(statement, dict)
    return statement


def _verify(work_dir: Path, public: Path) -> tuple[int, dict[str, Any]]:
    done = kernel("audit", work_dir, "--verify-key", public, "--format", "json")
    assert "Traceback" not in done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_summary_is_a_valid_vsa_verified_by_the_in_toto_library(
    work_dir: Path, keys: tuple[Path, Path]
) -> None:
    private, public = keys
    path = _attest(work_dir, private)
    metadata = Metadata.load(str(path))
    assert isinstance(metadata, Envelope)
    assert len(metadata.verify([SSlibKey.from_crypto(_public(public))], 1)) == 1
    statement = json.loads(metadata.payload)
    # in-toto-attestation's own Statement v1 checks (type, subjects with digests, predicate).
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    predicate = statement["predicate"]
    assert statement["predicateType"] == VSA
    # The VSA v1 message of in-toto-attestation 0.9.3 types verifiedLevels as
    # one string where the SLSA spec has an array of strings: every other
    # field is parsed by it (unknown fields refused), that one against the spec.
    levels = predicate.pop("verifiedLevels")
    json_format.ParseDict(predicate, vsa_pb2.VerificationSummary())
    assert isinstance(levels, list) and levels and all(isinstance(v, str) for v in levels)
    assert not any(v.startswith("SLSA_") for v in levels)  # we claim no SLSA build level
    # The e2e bundle holds one tampered attempt: kernel run exits 3, so FAILED.
    assert predicate["verificationResult"] == "FAILED"
    envelope = work_dir / "attestation.dsse.json"
    assert predicate["inputAttestations"] == [
        {"digest": {"sha256": hashlib.sha256(envelope.read_bytes()).hexdigest()},
         "uri": "attestation.dsse.json"}
    ]
    # The policy: the manifest and the bundle by digest, and the --fail-on classes.
    # kernel run's own default, unclassified (integrity is always in).
    assert predicate["policy"]["uri"].endswith("?fail-on=integrity,unclassified")
    manifests = sorted(p.parent.name for p in work_dir.glob("*/manifest.json"))
    policy = {
        "authority_manifest": "certified.v1",
        "bundle": {"name": "bundle.json",
                   "sha256": hashlib.sha256((work_dir / "bundle.json").read_bytes()).hexdigest()},
        "check_manifests": [
            {"attempt_id": name,
             "sha256": hashlib.sha256((work_dir / name / "manifest.json").read_bytes()).hexdigest()}
            for name in manifests
        ],
        "fail_on": ["integrity", "unclassified"],
    }
    recomputed = hashlib.sha256(canonical(policy)).hexdigest()
    assert predicate["policy"]["digest"] == {"sha256": recomputed}
    assert statement["subject"] == _statement(envelope)["subject"]
    code, report = _verify(work_dir, public)
    assert code == 0, report


def test_the_result_follows_fail_on(work_dir: Path, keys: tuple[Path, Path]) -> None:
    # Only integrity is always selected; the tampered attempt is integrity, so
    # even the narrowest policy fails this run, and the policy says which.
    private, _ = keys
    predicate = _statement(_attest(work_dir, private, "--fail-on", "integrity"))["predicate"]
    assert predicate["verificationResult"] == "FAILED"
    assert predicate["policy"]["uri"].endswith("?fail-on=integrity")


def _resign(path: Path, private: Path, edit: dict[str, Any]) -> None:
    """Change the summary's predicate and sign it again with the right key."""
    key = serialization.load_pem_private_key(private.read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    envelope = json.loads(path.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"].update(edit)
    payload = canonical(statement)
    kind = envelope["payloadType"].encode()
    pae = b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)
    envelope["payload"] = base64.b64encode(payload).decode()
    envelope["signatures"][0]["sig"] = base64.b64encode(key.sign(pae)).decode()
    path.write_bytes(canonical(envelope) + b"\n")


def test_verify_key_checks_the_summary(work_dir: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    path = _attest(work_dir, private)
    original = path.read_bytes()
    # An altered byte: the signature no longer verifies.
    path.write_bytes(original.replace(b'"payload":"', b'"payload":"A', 1))
    code, report = _verify(work_dir, public)
    assert code == 3 and not report["attestation"]["verified"]
    # Re-signed with a policy that is not the one the files give.
    path.write_bytes(original)
    _resign(path, private, {"policy": {"digest": {"sha256": "0" * 64},
                                       "uri": "urn:replay-kernel:policy:rederived-outcomes:v1"}})
    code, report = _verify(work_dir, public)
    assert code == 3
    assert any("policy.digest" in p for p in report["attestation"]["problems"])
    # Re-signed naming another input attestation.
    path.write_bytes(original)
    _resign(path, private, {"inputAttestations": [{"digest": {"sha256": "0" * 64},
                                                   "uri": "attestation.dsse.json"}]})
    code, report = _verify(work_dir, public)
    assert code == 3
    # Gone.
    path.unlink()
    code, report = _verify(work_dir, public)
    assert code == 3
    assert any("verification summary" in p for p in report["attestation"]["problems"])
