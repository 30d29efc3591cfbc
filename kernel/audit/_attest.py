"""Signed attestations of stored runs: an in-toto Statement v1 in a DSSE envelope (ADR-0010).

Theory of operation:

- ``attest_run`` first audits the run (``audit_run``); a run that does not
  audit intact is never signed (``run_not_intact``);
- the Statement's subjects are every regular file of the run directory (its
  POSIX path relative to the run, and its SHA-256), plus the outcomes file
  when one is given (named ``outcomes/<file name>``); the envelope file itself
  is never a subject;
- the predicate (``PREDICATE_TYPE``) carries the run's outcomes: every
  outcome line as its JSON object for a ``kernel run`` work directory, the
  run's status, reason, verdict and digests for an external run; and what
  the audit recomputed;
- the payload is the canonical JSON of the Statement; the envelope is DSSE
  (payload type ``application/vnd.in-toto+json``, the in-toto convention),
  signed with Ed25519 over the DSSE pre-authentication encoding (PAE); the
  signature's ``keyid`` is the SHA-256 of the canonical JSON of
  ``{"keytype": "ed25519", "keyval": {"public": <hex>}, "scheme": "ed25519"}``,
  the default key id of securesystemslib, so in-toto tooling matches it;
- ``verify_attestation`` checks the signature before it reads the payload,
  then recomputes every subject's digest and lists files the Statement does
  not cover. Problems are returned, never raised: a stored envelope is
  evidence. Only the operator's inputs (a key that cannot be loaded) raise
  ``AttestationError``.

Key files are PEM (PKCS#8 private, SubjectPublicKeyInfo public). A private
key readable by group or others is refused, and ``generate_key_pair`` creates
the private key with mode 0600, exclusively, never through a symlink.
Everything cryptographic is the ``cryptography`` package (the ``attest``
extra); it is imported when a key is used, so the rest of the kernel does not
need it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, assert_never, final

from kernel.audit._run import (
    RunLayout,
    audit_run,
    detect_layout,
    read_outcome_lines,
    stored_files,
)
from kernel.audit._store import ATTESTATION_FILE, field_of
from kernel.audit._summary import check_summary, summary_path, summary_statement
from kernel.audit._work_dir import WORK_OUTCOMES
from kernel.identity import JsonValue, canonical_json, digest
from kernel.orchestrate import OrchestrateError
from kernel.replay import ReplayBundle
from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, parse_json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "ATTESTATION_FILE",
    "OUTCOMES_SUBJECT_PREFIX",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "AttestationError",
    "attest_run",
    "generate_key_pair",
    "key_id",
    "load_private_key",
    "load_public_key",
    "pae",
    "verify_attestation",
]

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
# Ours: a URN, so it claims no web domain; versioned with the predicate's shape.
PREDICATE_TYPE: Final = "urn:replay-kernel:predicate:run-outcomes:v1"
OUTCOMES_SUBJECT_PREFIX: Final = "outcomes/"
_KEY_BYTES: Final = 64 * 1024


@final
class AttestationError(OrchestrateError):
    """An operator input (key, outcomes) is refused, or the run to sign is not intact."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def _crypto() -> None:
    try:
        import cryptography  # noqa: F401  (only whether it imports)
    except ImportError as exc:  # the attest extra is not installed
        raise AttestationError(
            "attest_unavailable",
            "the cryptography package is missing: pip install 'failclosed-replay[attest]'",
        ) from exc


def _read_key_file(path: Path, *, private: bool) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise AttestationError("key_unreadable", f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise AttestationError("key_unreadable", f"{path}: not a regular file")
        if private and info.st_mode & 0o077:
            # Like ssh: a signing key others can read is no longer ours alone.
            raise AttestationError(
                "key_file_too_open",
                f"{path}: mode {stat.S_IMODE(info.st_mode):04o}; a private key must not be "
                "readable or writable by group or others (chmod 600)",
            )
        data = handle.read(_KEY_BYTES + 1)
    if len(data) > _KEY_BYTES:
        raise AttestationError("key_malformed", f"{path}: too large for a PEM key")
    return data


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An unencrypted PKCS#8 PEM Ed25519 private key, from a file only its owner can read."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key_file(path, private=True)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise AttestationError("key_malformed", f"{path}: not an unencrypted PEM key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise AttestationError("key_not_ed25519", f"{path}: not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A PEM (SubjectPublicKeyInfo) Ed25519 public key."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key_file(path, private=False)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise AttestationError("key_malformed", f"{path}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise AttestationError("key_not_ed25519", f"{path}: not an Ed25519 key")
    return key


def key_id(public_key: Ed25519PublicKey) -> str:
    """securesystemslib's default key id of an Ed25519 key (in-toto tools match on it)."""
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return digest({"keytype": "ed25519", "keyval": {"public": raw.hex()}, "scheme": "ed25519"})


def generate_key_pair(private_path: Path, public_path: Path) -> str:
    """Create a new Ed25519 key pair as PEM files; returns its key id.

    The private key is created exclusively (never overwriting, never through
    a symlink) with mode 0600; the public key with the user's umask.
    """
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(private_path, flags, 0o600)
    except OSError as exc:
        raise AttestationError("key_unwritable", f"{private_path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(private_pem)
    try:
        fd = os.open(public_path, flags, 0o666)
    except OSError as exc:
        raise AttestationError("key_unwritable", f"{public_path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(public_pem)
    return key_id(key.public_key())


def _sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        while chunk := handle.read(1024 * 1024):
            hasher.update(chunk)
    return hasher.hexdigest()


def _subjects(root: Path, outcomes: Path | None, exclude: Sequence[Path]) -> list[JsonValue]:
    subjects: list[JsonValue] = []
    excluded = {os.path.abspath(path) for path in exclude}
    for relative, path in stored_files(root):
        if os.path.abspath(path) in excluded:
            continue
        subjects.append({"digest": {"sha256": _sha256_file(path)}, "name": relative})
    inside = outcomes is not None and os.path.abspath(outcomes).startswith(str(root) + os.sep)
    if outcomes is not None and not inside:
        subjects.append(
            {
                "digest": {"sha256": _sha256_file(outcomes)},
                "name": OUTCOMES_SUBJECT_PREFIX + outcomes.name,
            }
        )
    return subjects


def _external_predicate(root: Path) -> JsonValue:
    metadata = parse_json(Path(root / "metadata.json").read_bytes())
    assert isinstance(metadata, dict)
    keys = (
        "check_digest", "check_id", "evidence_digest", "input_digest", "job_digest", "job_id",
        "reason", "receipt_sha256", "run_id", "specification_digest", "status", "verdict",
    )  # fmt: skip
    return {key: metadata.get(key) for key in keys}


def attest_run(
    root: Path,
    private_key: Ed25519PrivateKey,
    *,
    outcomes: Path | None = None,
    bundle: ReplayBundle | None = None,
    out: Path | None = None,
    fail_on: Sequence[str] = ("integrity",),
    passed: Callable[[Sequence[bytes]], bool] | None = None,
    write: Callable[[Path, bytes], None] | None = None,
) -> Path:
    """Audit ``root``, then write its signed Statements; returns the outcomes envelope's path.

    Two DSSE envelopes, signed with the same key: the outcomes Statement at
    ``out`` (default ``root/ATTESTATION_FILE``) and, beside it
    (``SUMMARY_FILE``), the SLSA Verification Summary whose result is
    ``passed(outcome lines)`` (the caller's ``--fail-on`` verdict over the
    re-derived lines; by default PASSED only when every line is a result
    closed on both contract and proof). ``write(path, data)`` writes each
    envelope (default: a temporary file renamed over ``path``; the command
    line passes its own output rules). Raises ``AttestationError``
    (``run_not_intact``) when the audit finds any mismatch, and the audit's
    ``AuditInputError`` when ``root`` is not a stored run.
    """
    root = Path(os.path.abspath(root))
    target = Path(os.path.abspath(out)) if out is not None else root / ATTESTATION_FILE
    summary = summary_path(root, out)
    report = audit_run(root, outcomes=outcomes, bundle=bundle)
    if not report.intact:
        raise AttestationError(
            "run_not_intact",
            f"{root}: {len(report.findings)} stored ids do not reproduce "
            "(kernel audit lists them); an altered run is never signed",
        )
    predicate: dict[str, JsonValue] = {
        "audit": {"checked": report.checked, "intact": True},
        "layout": report.layout.value,
    }
    lines: list[bytes] = []
    match report.layout:
        case RunLayout.WORK_DIR:
            # The directory's own lines: the audit re-derived every one of them.
            lines = read_outcome_lines(root / WORK_OUTCOMES)
            predicate["outcomes"] = [parse_json(line) for line in lines]
            verdict = (passed or _all_closed)(lines)
        case RunLayout.EXTERNAL_RUN:
            run = _external_predicate(root)
            predicate["run"] = run
            verdict = field_of(run, "status") == "PASS"
        case _:
            assert_never(report.layout)
    subjects = _subjects(root, outcomes, (target, summary))
    statement: JsonValue = {
        "_type": STATEMENT_TYPE,
        "predicate": predicate,
        "predicateType": PREDICATE_TYPE,
        "subject": subjects,
    }
    envelope = _signed(private_key, statement)
    write = write or _write_public
    write(target, envelope)
    vsa = summary_statement(
        root, report.layout, subjects, target.name, hashlib.sha256(envelope).hexdigest(),
        fail_on, verdict,
    )  # fmt: skip
    write(summary, _signed(private_key, vsa))
    return target


def _signed(private_key: Ed25519PrivateKey, statement: JsonValue) -> bytes:
    payload = canonical_json(statement)
    signature = private_key.sign(pae(PAYLOAD_TYPE, payload))
    envelope: JsonValue = {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [
            {
                "keyid": key_id(private_key.public_key()),
                "sig": base64.b64encode(signature).decode("ascii"),
            }
        ],
    }
    return canonical_json(envelope) + b"\n"


def _all_closed(lines: Sequence[bytes]) -> bool:
    for line in lines:
        document = parse_json(line)
        record = document.get("outcome", document) if isinstance(document, dict) else None
        if field_of(record, "replay_disposition") != "contract_and_proof_closed":
            return False
    return True


def _write_public(path: Path, data: bytes) -> None:
    # Not a secret: the user's umask applies (mkstemp's 0600 is widened to it).
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _b64(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify_attestation(
    root: Path,
    envelope_path: Path,
    public_key: Ed25519PublicKey,
    *,
    outcomes: Path | None = None,
    summary: Path | None = None,
) -> tuple[str, ...]:
    """Every problem with the run's attestation under ``public_key``; ``()`` when it verifies.

    The signature is checked (Ed25519 over the DSSE PAE) before the payload
    is read; then the Statement's type, predicate type, and every subject's
    digest against the files now stored, and files it does not cover. With
    ``summary``, the SLSA Verification Summary envelope too: its signature,
    its predicate (``check_summary``: the outcomes envelope as its input
    attestation, the policy digest recomputed) and its subjects.
    """
    root = Path(os.path.abspath(root))
    statement, problems = _open_envelope(envelope_path, public_key)
    if statement is None:
        return tuple(problems)
    if statement.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is not {PREDICATE_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        return (*problems, "the Statement has no subject list")
    excluded = [envelope_path] if summary is None else [envelope_path, summary]
    problems.extend(_check_subjects(root, subjects, outcomes, excluded))
    if summary is not None:
        problems.extend(_check_summary_envelope(root, summary, public_key, subjects,
                                                envelope_path, outcomes))
    return tuple(problems)


def _check_summary_envelope(
    root: Path,
    summary: Path,
    public_key: Ed25519PublicKey,
    subjects: list[JsonValue],
    envelope_path: Path,
    outcomes: Path | None,
) -> list[str]:
    statement, problems = _open_envelope(summary, public_key)
    if statement is None:
        return [f"verification summary: {p}" for p in problems]
    layout = detect_layout(root)
    problems.extend(check_summary(root, layout, statement, envelope_path))
    if statement.get("subject") != subjects:
        problems.append("its subjects are not the outcomes Statement's")
    return [f"verification summary: {p}" for p in problems]


def _open_envelope(
    envelope_path: Path, public_key: Ed25519PublicKey
) -> tuple[dict[str, JsonValue] | None, list[str]]:
    """The signed Statement of a DSSE envelope, verified under ``public_key``, or problems."""
    from cryptography.exceptions import InvalidSignature

    try:
        fd = os.open(envelope_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None, [f"{envelope_path}: not a regular file"]
            envelope = parse_json(handle.read(MAX_DOCUMENT_BYTES + 1))
    except OSError as exc:
        return None, [f"{envelope_path}: no attestation ({exc.strerror or exc})"]
    except SerdeError as exc:
        return None, [f"{envelope_path}: malformed envelope ({exc.code})"]
    if not isinstance(envelope, dict) or envelope.get("payloadType") != PAYLOAD_TYPE:
        return None, [f"{envelope_path}: not a DSSE envelope of an in-toto payload"]
    payload = _b64(envelope.get("payload"))
    signatures = envelope.get("signatures")
    if payload is None or not isinstance(signatures, list) or not signatures:
        return None, [f"{envelope_path}: malformed envelope (payload or signatures)"]
    expected_id = key_id(public_key)
    message = pae(PAYLOAD_TYPE, payload)
    verified = False
    for entry in signatures:
        sig = _b64(entry.get("sig")) if isinstance(entry, dict) else None
        if sig is None or not isinstance(entry, dict) or entry.get("keyid") != expected_id:
            continue
        try:
            public_key.verify(sig, message)
        except InvalidSignature:
            continue
        verified = True
    if not verified:
        return None, [f"{envelope_path}: no signature verifies with key {expected_id}"]
    try:
        statement = parse_json(payload)
    except SerdeError as exc:
        return None, [f"signed payload is not strict JSON ({exc.code})"]
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        return None, ["signed payload is not an in-toto Statement v1"]
    return statement, []


def _check_subjects(
    root: Path, subjects: Sequence[JsonValue], outcomes: Path | None, envelopes: Sequence[Path]
) -> list[str]:
    problems: list[str] = []
    covered: set[str] = set()
    for subject in subjects:
        name = subject.get("name") if isinstance(subject, dict) else None
        sha = subject.get("digest") if isinstance(subject, dict) else None
        recorded = sha.get("sha256") if isinstance(sha, dict) else None
        if not isinstance(name, str) or not isinstance(recorded, str):
            problems.append("a subject without a name or a sha256 digest")
            continue
        covered.add(name)
        if name.startswith(OUTCOMES_SUBJECT_PREFIX):
            # The subject binds the file's bytes by digest; its name is only a
            # label, so a copy under another name verifies (issue 20).
            if outcomes is None:
                # A missing argument, not a finding about the run: refused (exit 2),
                # never "NOT intact" (issue 35, finding 10).
                raise AttestationError(
                    "outcomes_required",
                    f"the attestation names the outcomes file {name!r} as a subject: "
                    "pass that file with --outcomes to verify it")
            path = outcomes
        else:
            path = root / name
            if ".." in Path(name).parts or Path(name).is_absolute():
                problems.append(f"subject {name}: not a path inside the run")
                continue
        try:
            actual = _sha256_file(path)
        except OSError:
            problems.append(f"subject {name}: missing or not a regular file")
            continue
        if actual != recorded:
            problems.append(f"subject {name}: sha256 {actual}, attested {recorded}")
    excluded = {os.path.abspath(path) for path in envelopes}
    for relative, path in stored_files(root):
        if relative not in covered and os.path.abspath(path) not in excluded:
            problems.append(f"{relative}: stored but not attested")
    return problems
