"""`kernel attest` and `kernel audit --verify-key`: signed in-toto Statements in DSSE envelopes.

The envelopes are verified with the in-toto project's own library
(``in_toto.models.metadata``, on ``securesystemslib``'s DSSE), as a
supply-chain tool would; the PAE and the subjects' digests are also
recomputed here by hand (``hashlib``, ``base64``, the DSSE spec's formula).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from in_toto.models.metadata import Envelope, Metadata
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]  # re-exported without __all__

from tests.orchestrate_helpers import stored_main_job
from tests.support.cli import KERNEL_MAIN, kernel
from tests.test_external_helpers import Scenario

PREDICATE = "urn:replay-kernel:predicate:run-outcomes:v1"


@pytest.fixture(scope="module")
def stored_work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real `kernel run` work directory and its outcomes file (made once)."""
    work, out = stored_main_job(tmp_path_factory.mktemp("e2e"))
    assert len(out.read_bytes().splitlines()) == 6
    return work, out


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A signing key pair made by `kernel attest-keygen`, and another public key."""
    base = tmp_path_factory.mktemp("keys")
    done = kernel("attest-keygen", base / "signer.pem", base / "signer.pub")
    assert done.returncode == 0, done.stderr
    other = kernel("attest-keygen", base / "other.pem", base / "other.pub")
    assert other.returncode == 0, other.stderr
    return base / "signer.pem", base / "signer.pub", base / "other.pub"


@pytest.fixture
def work(stored_work_dir: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    source, outcomes = stored_work_dir
    target = tmp_path / "work"
    shutil.copytree(source, target, symlinks=True)
    copy = tmp_path / "outcomes.jsonl"
    shutil.copyfile(outcomes, copy)
    return target, copy


def _public(path: Path) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(path.read_bytes())
    assert isinstance(key, Ed25519PublicKey)
    return key


def _pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 " + str(len(kind)).encode() + b" " + kind + b" " + \
        str(len(payload)).encode() + b" " + payload  # fmt: skip


def _attest(work_dir: Path, outcomes: Path, key: Path) -> Path:
    done = kernel("attest", work_dir, "--key", key, "--outcomes", outcomes)
    assert done.returncode == 0, done.stderr
    envelope = Path(done.stdout.strip())
    assert envelope == work_dir / "attestation.dsse.json"
    return envelope


def _verify(work_dir: Path, outcomes: Path, public: Path) -> tuple[int, dict[str, Any]]:
    done = kernel(
        "audit", work_dir, "--outcomes", outcomes, "--verify-key", public, "--format", "json"
    )
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 3), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_keygen_writes_the_private_key_0600_and_prints_the_in_toto_key_id(
    keys: tuple[Path, Path, Path],
) -> None:
    private, public, _ = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    done = kernel("attest-keygen", private, public.with_name("again.pub"))
    assert done.returncode == 2 and "key_unwritable" in done.stderr  # never overwritten
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


def test_the_envelope_verifies_with_the_in_toto_library(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, public, _ = keys
    path = _attest(work_dir, outcomes, private)
    metadata = Metadata.load(str(path))
    assert isinstance(metadata, Envelope)
    accepted = metadata.verify([SSlibKey.from_crypto(_public(public))], 1)
    assert len(accepted) == 1
    statement = json.loads(metadata.payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE
    lines = outcomes.read_bytes().splitlines()
    assert statement["predicate"]["outcomes"] == [json.loads(line) for line in lines]
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects["outcomes/outcomes.jsonl"] == hashlib.sha256(outcomes.read_bytes()).hexdigest()
    stored = sorted(
        p.relative_to(work_dir).as_posix()
        for p in work_dir.rglob("*")
        if p.is_file() and p != path and p.name != "verification-summary.dsse.json"
    )
    assert sorted(n for n in subjects if not n.startswith("outcomes/")) == stored
    for name in stored:
        assert subjects[name] == hashlib.sha256((work_dir / name).read_bytes()).hexdigest()


def test_the_signature_covers_the_dsse_pae_computed_by_hand(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, public, _ = keys
    envelope = json.loads(_attest(work_dir, outcomes, private).read_bytes())
    payload = base64.b64decode(envelope["payload"])
    (signature,) = envelope["signatures"]
    key = _public(public)
    key.verify(base64.b64decode(signature["sig"]), _pae(envelope["payloadType"], payload))
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    keyval = {"keytype": "ed25519", "keyval": {"public": raw}, "scheme": "ed25519"}
    text = json.dumps(keyval, sort_keys=True, separators=(",", ":"))
    assert signature["keyid"] == hashlib.sha256(text.encode()).hexdigest()
    with pytest.raises(InvalidSignature):
        key.verify(base64.b64decode(signature["sig"]), payload)  # PAE, not the bare payload


def test_audit_verify_key_accepts_the_signed_intact_run(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, public, _ = keys
    _attest(work_dir, outcomes, private)
    code, report = _verify(work_dir, outcomes, public)
    assert code == 0, report
    assert report["attestation"] == {"problems": [], "verified": True}
    assert report["intact"] is True


def test_verify_key_without_the_outcomes_it_needs_is_a_usage_error_not_not_intact(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    # Issue 35, finding 10: this used to exit 3, "NOT intact", for a missing argument.
    work_dir, outcomes = work
    private, public, _ = keys
    _attest(work_dir, outcomes, private)
    done = kernel("audit", work_dir, "--verify-key", public)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("error: outcomes_required: "), done.stderr
    assert "--outcomes" in done.stderr and done.stderr.count("\n") == 1
    assert "NOT intact" not in done.stdout


def test_a_wrong_key_is_refused(work: tuple[Path, Path], keys: tuple[Path, Path, Path]) -> None:
    work_dir, outcomes = work
    private, _, other = keys
    path = _attest(work_dir, outcomes, private)
    code, report = _verify(work_dir, outcomes, other)
    assert code == 3
    assert report["attestation"]["verified"] is False
    assert "no signature verifies" in report["attestation"]["problems"][0]
    loaded = Metadata.load(str(path))
    assert isinstance(loaded, Envelope)
    with pytest.raises(VerificationError):
        loaded.verify([SSlibKey.from_crypto(_public(other))], 1)


def test_a_tampered_payload_is_refused(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, public, _ = keys
    path = _attest(work_dir, outcomes, private)
    envelope = json.loads(path.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    line = statement["predicate"]["outcomes"][1]
    assert line["attempt_index"] == 1  # the outcome lines as written (ADR-0013)
    line["outcome"]["replay_disposition"] = "contract_and_proof_closed"
    forged = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope["payload"] = base64.b64encode(forged).decode()
    path.write_text(json.dumps(envelope))
    code, report = _verify(work_dir, outcomes, public)
    assert code == 3
    assert "no signature verifies" in report["attestation"]["problems"][0]
    loaded = Metadata.load(str(path))
    assert isinstance(loaded, Envelope)
    with pytest.raises(VerificationError):
        loaded.verify([SSlibKey.from_crypto(_public(public))], 1)


def test_a_tampered_signature_is_refused(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, public, _ = keys
    path = _attest(work_dir, outcomes, private)
    envelope = json.loads(path.read_bytes())
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[10] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    path.write_text(json.dumps(envelope))
    code, report = _verify(work_dir, outcomes, public)
    assert code == 3
    assert report["attestation"]["verified"] is False


def test_a_stored_file_changed_after_signing_is_reported_twice(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    # The signature still verifies; the subject digest and the audit do not.
    work_dir, outcomes = work
    private, public, _ = keys
    _attest(work_dir, outcomes, private)
    log = sorted(work_dir.glob("*/run/checker/stdout.log"))[0]
    log.write_bytes(log.read_bytes() + b"edited\n")
    (work_dir / "planted.txt").write_text("x\n")
    code, report = _verify(work_dir, outcomes, public)
    assert code == 3
    problems = report["attestation"]["problems"]
    rel = log.relative_to(work_dir).as_posix()
    assert any(p.startswith(f"subject {rel}: sha256") for p in problems)
    assert "planted.txt: stored but not attested" in problems
    assert any(f["path"] == rel for f in report["findings"])


def test_a_run_that_does_not_audit_intact_is_never_signed(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path]
) -> None:
    work_dir, outcomes = work
    private, _, _ = keys
    evidence = sorted(work_dir.glob("*/run/evidence/z3-answer.txt"))[0]
    evidence.write_text("target_certified sat\n")
    done = kernel("attest", work_dir, "--key", private, "--outcomes", outcomes)
    assert done.returncode == 3  # integrity: the stored run is not what was recorded
    assert done.stderr.startswith("error: run_not_intact: ")
    assert not (work_dir / "attestation.dsse.json").exists()


def test_a_private_key_readable_by_others_is_refused(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    work_dir, outcomes = work
    private, _, _ = keys
    loose = tmp_path / "loose.pem"
    shutil.copyfile(private, loose)
    os.chmod(loose, 0o644)
    done = kernel("attest", work_dir, "--key", loose, "--outcomes", outcomes)
    assert done.returncode == 2
    assert done.stderr.startswith("error: key_file_too_open: ")
    assert not (work_dir / "attestation.dsse.json").exists()


def test_a_public_key_is_not_a_signing_key(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    work_dir, outcomes = work
    _, public, _ = keys
    pem = tmp_path / "public-as-private.pem"
    shutil.copyfile(public, pem)
    os.chmod(pem, 0o600)
    done = kernel("attest", work_dir, "--key", pem, "--outcomes", outcomes)
    assert done.returncode == 2
    # Named for what it is (issue 20), not only "not an unencrypted PEM key".
    assert done.stderr.startswith("error: key_not_private: ")


def test_an_external_run_directory_is_attested_with_its_status(
    tmp_path: Path, keys: tuple[Path, Path, Path]
) -> None:
    private, public, _ = keys
    run_dir = Path(Scenario(tmp_path).run().attempt_dir)
    done = kernel("attest", run_dir, "--key", private, "--out", tmp_path / "run.dsse.json")
    assert done.returncode == 0, done.stderr
    envelope = Metadata.load(str(tmp_path / "run.dsse.json"))
    assert isinstance(envelope, Envelope)
    envelope.verify([SSlibKey.from_crypto(_public(public))], 1)
    statement = json.loads(envelope.payload)
    metadata = json.loads((run_dir / "metadata.json").read_bytes())
    assert statement["predicate"]["run"]["status"] == metadata["status"] == "PASS"
    assert statement["predicate"]["run"]["evidence_digest"] == metadata["evidence_digest"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "run.dsse.json").stat().st_mode) == 0o666 & ~umask
    verified = kernel(
        "audit", run_dir, "--verify-key", public, "--attestation", tmp_path / "run.dsse.json"
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_signed_outcomes_file_verifies_under_another_name(
    work: tuple[Path, Path], keys: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    # Issue 20: the same bytes under another name were "pass the outcomes file
    # with --outcomes", though they were passed. The digest decides, not the name.
    work_dir, outcomes = work
    private, public, _ = keys
    _attest(work_dir, outcomes, private)
    renamed = tmp_path / "renamed.jsonl"
    shutil.copyfile(outcomes, renamed)
    code, report = _verify(work_dir, renamed, public)
    assert code == 0, report
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(outcomes.read_bytes().replace(b"contract_refused", b"contract_closed", 1))
    code, report = _verify(work_dir, edited, public)
    assert code == 3, report


def test_audit_reads_the_outcomes_copy_from_stdin(work: tuple[Path, Path]) -> None:
    # Issue 20: '-' is stdin wherever a document is read; `--outcomes -` was
    # stdin_not_supported. The lines from stdin are audited like a named copy.
    work_dir, outcomes = work
    argv = [sys.executable, "-c", KERNEL_MAIN, "audit", str(work_dir), "--outcomes", "-"]
    honest = subprocess.run(argv, input=outcomes.read_bytes(), capture_output=True, timeout=120)
    assert honest.returncode == 0, honest.stdout + honest.stderr
    edited = outcomes.read_bytes().replace(b"contract_refused", b"contract_closed", 1)
    forged = subprocess.run(argv, input=edited, capture_output=True, timeout=120)
    assert forged.returncode == 3, forged.stdout + forged.stderr
    assert b"Traceback" not in forged.stderr
