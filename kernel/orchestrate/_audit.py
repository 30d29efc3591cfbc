"""Audit of a stored run: recompute every id from the stored bytes, offline.

Theory of operation (ADR-0010; ADR-0004 "Run directory layout"; ADR-0006
"Where the files go"; ADR-0229 §13): a stored run is a set of records that
name each other by content address. The audit reads the stored bytes,
recomputes each address the records carry, and reports every one that does
not reproduce. It never runs a producer, a checker or a solver, never opens
the network, and never takes configuration from what it reads: every path,
digest and field in a stored file is *evidence* to compare, never an
instruction (a manifest path recorded in metadata is not opened; the
manifest audited is the copy stored beside the run).

Two layouts are recognised, by shape only:

- an external run directory (``kernel check run``, seed 003): a directory
  holding ``metadata.json``;
- a ``kernel run`` work directory (ADR-0006): one directory per attempt,
  each holding ``run/`` (an external run), ``certification.json``,
  ``manifest.json`` and ``repository/``; the outcome lines are passed
  separately (``outcomes``), since ``kernel run`` writes them elsewhere.

What is recomputed (each is one comparison; each failure one ``AuditFinding``):

- external run: ``job_digest`` of ``job.json``; the check digest of
  ``identity.json``; the SHA-256 of every snapshot input, evidence artifact,
  request, receipt and log against the metadata; ``input_digest`` and
  ``evidence_digest`` over the path/hash lists; the values a request or the
  checker's receipt binds (job, run, check digest, identity, specification,
  evidence digest, verdict); that the status, reason and verdict can go
  together; files in ``snapshot/`` or ``evidence/`` that no record lists;
  each retained replay under ``replays/`` the same way;
- work directory, per attempt: ``request_id`` and ``receipt_id`` of the
  certification; the receipt's ``request_id``; its ``evidence_digest``
  against the backend output document rebuilt from the run's metadata
  (``backend_output``: the receipt binds the metadata through it); the
  check digest and problem digest the request names against the run; the
  job id against the attempt's directory name; every field of the stored
  manifest entry (all pins included) against the run's identity;
- outcome lines: ``replay_result_id`` / ``replay_refusal_id`` of each line;
  each attempt directory named by an outcome, and each closed certified
  outcome backed by a certification of its candidate and run;
- with a bundle: every outcome re-derived by the pure core from the bundle
  and the stored certifications (the proof authority re-judges each stored
  receipt through the gate), byte for byte against the stored line.

Metadata is structured with the external protocol's own ``RunMetadata`` so a
field the protocol adds (for example a containment level) is read the way
the protocol writes it; everything else is compared as parsed JSON, field by
field where both records name the field, so a record that gains a field does
not break the audit.
"""

from __future__ import annotations

import enum
import hashlib
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeVar, final

import attrs

from kernel.bundles import document_attempts, outcome_line
from kernel.external import RunMetadata, RunOutcome, Status, Verdict
from kernel.identity import JsonValue, canonical_json, digest
from kernel.orchestrate._certifier import CERTIFICATION_RECORD, author_session, backend_output
from kernel.orchestrate._driver import replay_bundle
from kernel.orchestrate.errors import OrchestrateError
from kernel.organs import (
    CERTIFICATION_MEDIA_TYPE,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
    CertificationEvidence,
)
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    refusal_id_of,
    result_id_of,
)
from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, dumps, loads, parse_json
from kernel.verification import receipt_id_of, request_id_of

__all__ = [
    "AuditCode",
    "AuditFinding",
    "AuditInputError",
    "AuditReport",
    "RunLayout",
    "StoredCertifications",
    "audit_run",
    "detect_layout",
    "read_outcome_lines",
    "report_document",
    "stored_files",
]

_T = TypeVar("_T")
_CHUNK: Final = 1024 * 1024
METADATA: Final = "metadata.json"


@final
class RunLayout(enum.Enum):
    """The two stored layouts the audit recognises."""

    EXTERNAL_RUN = "external_run"
    WORK_DIR = "work_dir"


@final
class AuditCode(enum.Enum):
    """Why a stored id or binding does not reproduce (stable codes)."""

    MISSING = "missing"
    NOT_REGULAR = "not_regular"
    MALFORMED = "malformed"
    DIGEST_MISMATCH = "digest_mismatch"
    ID_MISMATCH = "id_mismatch"
    BINDING_MISMATCH = "binding_mismatch"
    INCONSISTENT = "inconsistent"
    UNDECLARED = "undeclared"
    OUTCOME_MISMATCH = "outcome_mismatch"


@final
@attrs.frozen
class AuditFinding:
    """One stored id that does not reproduce: where, what, recorded vs recomputed."""

    path: str
    subject: str
    code: AuditCode
    recorded: str | None
    recomputed: str | None
    message: str


@final
@attrs.frozen
class AuditReport:
    """The audit of one stored run: how many comparisons, and every failure."""

    root: str
    layout: RunLayout
    checked: int
    findings: tuple[AuditFinding, ...]

    @property
    def intact(self) -> bool:
        """True exactly when every recomputed id reproduced."""
        return not self.findings


@final
class AuditInputError(OrchestrateError):
    """The audit cannot start: the path is not a stored run, or an operator input is refused."""


class _Unreadable(Exception):
    def __init__(self, code: AuditCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _open_nofollow(path: Path) -> int:
    # A tampered store may hold a symlink or a FIFO where a file was: never
    # follow the one, never block on the other.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise _Unreadable(AuditCode.MISSING, "absent") from exc
    except OSError as exc:
        raise _Unreadable(AuditCode.NOT_REGULAR, f"cannot be opened: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Unreadable(AuditCode.NOT_REGULAR, "not a regular file")
    return fd


def _read(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    fd = _open_nofollow(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _Unreadable(AuditCode.MALFORMED, f"more than {limit} bytes")
    return data


def _sha256(path: Path) -> str:
    fd = _open_nofollow(path)
    hasher = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _pairs_digest(items: Sequence[tuple[str, str]]) -> str:
    # Seed 003: the digest of the sorted [[path, sha256], ...] list.
    return digest(sorted([path, sha] for path, sha in items))


def stored_files(root: Path) -> Iterator[tuple[str, Path]]:
    """Every regular file under ``root`` (no symlink followed), as (POSIX relative path, path).

    Sorted by relative path; symlinks and special files are skipped (the
    audit reports them where a record names them).
    """
    found: list[tuple[str, Path]] = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            path = Path(directory) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append((path.relative_to(root).as_posix(), path))
    yield from sorted(found)


def _tree(root: Path) -> set[str]:
    if not root.is_dir() or root.is_symlink():
        return set()
    names: set[str] = set()
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*filenames, *(d for d in dirnames if (Path(directory) / d).is_symlink())]:
            names.add((Path(directory) / name).relative_to(root).as_posix())
    return names


class _Auditor:
    """Collects comparisons and findings for one audited root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.checked = 0
        self.findings: list[AuditFinding] = []

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def finding(
        self,
        path: Path,
        subject: str,
        code: AuditCode,
        message: str,
        recorded: str | None = None,
        recomputed: str | None = None,
    ) -> None:
        self.findings.append(
            AuditFinding(self.rel(path), subject, code, recorded, recomputed, message)
        )

    def compare(
        self,
        path: Path,
        subject: str,
        recorded: object,
        recomputed: object,
        code: AuditCode = AuditCode.BINDING_MISMATCH,
    ) -> bool:
        """One comparison; a finding unless equal (exact JSON types: ``True`` is not ``1``)."""
        self.checked += 1
        if _same(recorded, recomputed):
            return True
        self.finding(
            path,
            subject,
            code,
            "does not reproduce",
            _text(recorded),
            _text(recomputed),
        )
        return False

    def document(self, path: Path) -> JsonValue | None:
        """Strict JSON of ``path``, or ``None`` with a finding."""
        try:
            return parse_json(_read(path))
        except _Unreadable as exc:
            self.finding(path, "file", exc.code, exc.message)
        except SerdeError as exc:
            self.finding(path, "file", AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
        return None

    def typed(self, path: Path, cls: type[_T]) -> _T | None:
        try:
            return loads(_read(path), cls)
        except _Unreadable as exc:
            self.finding(path, "file", exc.code, exc.message)
        except SerdeError as exc:
            self.finding(path, "file", AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
        return None

    def file_digest(self, path: Path, subject: str, recorded: str | None) -> None:
        """Hash ``path`` and compare with the digest a record holds for it."""
        try:
            actual: str | None = _sha256(path)
        except _Unreadable as exc:
            self.checked += 1
            self.finding(path, subject, exc.code, exc.message, recorded, None)
            return
        self.compare(path, subject, recorded, actual, AuditCode.DIGEST_MISMATCH)


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return dumps(value).decode("utf-8")
    except Exception:  # a value canonical JSON refuses is still reported, as repr
        return repr(value)


def _field(document: JsonValue | None, name: str) -> JsonValue | None:
    if isinstance(document, dict):
        return document.get(name)
    return None


# --- one external run directory (seed 003) -------------------------------------------


def _audit_external(a: _Auditor, run: Path) -> RunMetadata | None:
    meta_path = run / METADATA
    metadata = a.typed(meta_path, RunMetadata)
    if metadata is None:
        return None
    _symlinked_dirs(a, run)
    job = a.document(run / "job.json")
    if isinstance(job, dict):
        a.compare(
            run / "job.json",
            "job_digest",
            job.get("job_digest"),
            digest({**job, "job_digest": ""}),
            AuditCode.ID_MISMATCH,
        )
        a.compare(meta_path, "job_digest", metadata.job_digest, job.get("job_digest"))
        a.compare(meta_path, "job_id", metadata.job_id, job.get("job_id"))
    identity = a.document(run / "identity.json") if metadata.check_digest is not None else None
    if identity is not None:
        a.compare(
            meta_path,
            "check_digest",
            metadata.check_digest,
            digest(identity),
            AuditCode.ID_MISMATCH,
        )
        a.compare(meta_path, "check_id", metadata.check_id, _field(identity, "check_id"))
    _audit_tree(a, run / "snapshot", "input", [(d.path, d.sha256) for d in metadata.inputs])
    if metadata.input_digest is not None:
        a.compare(
            meta_path,
            "input_digest",
            metadata.input_digest,
            _pairs_digest([(d.path, d.sha256) for d in metadata.inputs]),
            AuditCode.ID_MISMATCH,
        )
    if metadata.specification_digest is not None:
        specification = _field(_field(identity, "claim"), "specification")
        by_path = {d.path: d.sha256 for d in metadata.inputs}
        a.compare(
            meta_path,
            "specification_digest",
            metadata.specification_digest,
            by_path.get(specification) if isinstance(specification, str) else None,
        )
    if metadata.evidence_digest is not None:
        _audit_tree(
            a, run / "evidence", "artifact", [(d.path, d.sha256) for d in metadata.artifacts]
        )
        a.compare(
            meta_path,
            "evidence_digest",
            metadata.evidence_digest,
            _pairs_digest([(d.path, d.sha256) for d in metadata.artifacts]),
            AuditCode.ID_MISMATCH,
        )
    for role, summary, request_sha in (
        ("producer", metadata.producer, metadata.producer_request_sha256),
        ("checker", metadata.checker, metadata.checker_request_sha256),
    ):
        if request_sha is not None:
            a.file_digest(run / role / "request.json", f"{role}_request_sha256", request_sha)
            _audit_request(a, run / role / "request.json", metadata, identity, role)
        if summary is not None:
            a.file_digest(run / role / "stdout.log", f"{role}.stdout_sha256", summary.stdout_sha256)
            a.file_digest(run / role / "stderr.log", f"{role}.stderr_sha256", summary.stderr_sha256)
    if metadata.receipt_sha256 is not None:
        a.file_digest(run / "checker" / "receipt.json", "receipt_sha256", metadata.receipt_sha256)
    if metadata.verdict is not None:
        _audit_checker_receipt(a, run / "checker" / "receipt.json", metadata, identity)
    _audit_status(a, meta_path, metadata)
    replays = run / "replays"
    if replays.is_dir() and not replays.is_symlink():
        for child in sorted(replays.iterdir()):
            if child.is_dir() and not child.is_symlink():
                _audit_external(a, child)
    return metadata


def _clean_relative(path: str) -> bool:
    # A recorded path is evidence: one that climbs out of its directory is
    # reported, never followed.
    parts = path.split("/")
    return (
        bool(path)
        and not path.startswith("/")
        and "\\" not in path
        and "\x00" not in path
        and all(part not in ("", ".", "..") for part in parts)
    )


def _audit_tree(a: _Auditor, root: Path, what: str, recorded: list[tuple[str, str]]) -> None:
    if root.is_symlink():
        a.checked += 1
        a.finding(root, what, AuditCode.NOT_REGULAR, "a symlink where the run keeps a directory")
        return
    for path, sha in recorded:
        if not _clean_relative(path):
            a.checked += 1
            a.finding(root, f"{what}:{path}", AuditCode.MALFORMED, "a path outside its directory")
            continue
        a.file_digest(root / path, f"{what}:{path}", sha)
    listed = {path for path, _ in recorded}
    for extra in sorted(_tree(root) - listed):
        if (root / extra).is_dir() and not (root / extra).is_symlink():
            continue
        a.finding(
            root / extra, f"{what}:{extra}", AuditCode.UNDECLARED, "no record lists this file"
        )


def _symlinked_dirs(a: _Auditor, run: Path) -> None:
    for name in ("producer", "checker", "replays"):
        if (run / name).is_symlink():
            a.checked += 1
            a.finding(
                run / name, name, AuditCode.NOT_REGULAR, "a symlink where the run keeps a directory"
            )


def _audit_request(
    a: _Auditor, path: Path, metadata: RunMetadata, identity: JsonValue | None, role: str
) -> None:
    request = a.document(path)
    if not isinstance(request, dict):
        return
    bound: dict[str, object] = {
        "run_id": metadata.run_id,
        "job_id": metadata.job_id,
        "job_digest": metadata.job_digest,
        "check_id": metadata.check_id,
        "check_digest": metadata.check_digest,
        "specification_digest": metadata.specification_digest,
        "input_digest": metadata.input_digest,
    }
    if identity is not None:
        bound["identity"] = identity
    if role == "checker":
        bound["evidence_digest"] = metadata.evidence_digest
    for name, value in bound.items():
        if name in request:
            a.compare(path, f"{role} request {name}", request[name], value)


def _audit_checker_receipt(
    a: _Auditor, path: Path, metadata: RunMetadata, identity: JsonValue | None
) -> None:
    receipt = a.document(path)
    if receipt is None:
        return
    if not isinstance(receipt, dict):
        a.finding(path, "receipt", AuditCode.MALFORMED, "the receipt is not a JSON object")
        return
    bound: dict[str, object] = {
        "run_id": metadata.run_id,
        "job_id": metadata.job_id,
        "check_id": metadata.check_id,
        "check_digest": metadata.check_digest,
        "specification_digest": metadata.specification_digest,
        "evidence_digest": metadata.evidence_digest,
        "verdict": metadata.verdict.value if metadata.verdict is not None else None,
    }
    if identity is not None:
        bound["identity"] = identity
    for name, value in bound.items():
        a.compare(path, f"receipt {name}", receipt.get(name), value)


def _audit_status(a: _Auditor, path: Path, metadata: RunMetadata) -> None:
    # PASS exists only as an accepting, retained, valid receipt (seed 003).
    a.checked += 1
    if metadata.status is Status.PASS and (
        metadata.verdict is not Verdict.ACCEPTED
        or metadata.receipt_sha256 is None
        or metadata.evidence_digest is None
        or metadata.check_digest is None
    ):
        a.finding(
            path,
            "status",
            AuditCode.INCONSISTENT,
            "PASS without an accepting, retained receipt",
            metadata.status.value,
            metadata.verdict.value if metadata.verdict is not None else None,
        )


# --- a kernel run work directory (ADR-0006) -------------------------------------------


def _attempt_dirs(root: Path) -> list[Path]:
    return [
        child
        for child in sorted(root.iterdir())
        if child.is_dir()
        and not child.is_symlink()
        and ((child / "run").is_dir() or (child / CERTIFICATION_RECORD).exists())
    ]


def _audit_attempt(a: _Auditor, attempt: Path) -> CertificationEvidence | None:
    run = attempt / "run"
    for name in ("run", "repository"):
        if (attempt / name).is_symlink():
            a.checked += 1
            a.finding(
                attempt / name,
                name,
                AuditCode.NOT_REGULAR,
                "a symlink where the run keeps a directory",
            )
            return None
    metadata = _audit_external(a, run) if (run / METADATA).exists() else None
    if metadata is None and run.exists() and not (run / METADATA).exists():
        a.finding(run / METADATA, "file", AuditCode.MISSING, "absent")
    if metadata is not None:
        a.compare(run / METADATA, "job_id", metadata.job_id, f"certify-{attempt.name}")
    _audit_manifest_copy(a, attempt, run)
    record = attempt / CERTIFICATION_RECORD
    if not record.exists() and not record.is_symlink():
        return None
    evidence = a.typed(record, CertificationEvidence)
    if evidence is None:
        return None
    request, receipt = evidence.request, evidence.receipt
    a.compare(
        record, "request_id", request.request_id, request_id_of(request), AuditCode.ID_MISMATCH
    )
    a.compare(
        record, "receipt_id", receipt.receipt_id, receipt_id_of(receipt), AuditCode.ID_MISMATCH
    )
    a.compare(record, "receipt request_id", receipt.request_id, request.request_id)
    settings = {s.name: s.value for s in request.command_configuration.settings}
    check = settings.get("check-digest")
    a.compare(record, "receipt backend_version", receipt.backend_version, check)
    try:
        problem_sha: str | None = _sha256(attempt / "repository" / "certification.smt2")
    except _Unreadable as exc:
        a.finding(attempt / "repository" / "certification.smt2", "file", exc.code, exc.message)
        problem_sha = None
    a.compare(record, "problem-digest", settings.get("problem-digest"), problem_sha)
    if metadata is None:
        return evidence
    a.compare(record, "check-digest", check, metadata.check_digest)
    a.compare(
        record,
        "problem-digest (run)",
        settings.get("problem-digest"),
        metadata.specification_digest,
    )
    # The receipt binds the run's metadata through the backend output document.
    work_dir = Path(metadata.repository_root).parent.parent
    output = backend_output(
        RunOutcome(str(run), metadata),
        candidate_digest=receipt.candidate.digest,
        check_digest=receipt.backend_version,
        work_dir=work_dir,
    )
    a.compare(
        record,
        "receipt evidence_digest",
        receipt.evidence_digest,
        digest(output),
        AuditCode.ID_MISMATCH,
    )
    return evidence


def _audit_manifest_copy(a: _Auditor, attempt: Path, run: Path) -> None:
    manifest_path = attempt / "manifest.json"
    if not manifest_path.exists() or not (run / "identity.json").exists():
        return
    manifest = a.document(manifest_path)
    identity = a.document(run / "identity.json")
    if not isinstance(identity, dict):
        return
    checks = _field(manifest, "checks")
    entries = (
        [e for e in checks if isinstance(e, dict) and e.get("check_id") == identity.get("check_id")]
        if isinstance(checks, list)
        else []
    )
    if len(entries) != 1:
        a.finding(
            manifest_path,
            "entry",
            AuditCode.BINDING_MISMATCH,
            "the stored manifest does not hold exactly one entry for the run's check",
        )
        return
    # Every field of the approved entry, pins included, is bound into identity(check).
    for name, value in sorted(entries[0].items()):
        a.compare(manifest_path, f"entry {name}", value, identity.get(name))


# --- outcomes ------------------------------------------------------------------------


def read_outcome_lines(path: Path) -> list[bytes]:
    """The lines of an outcomes file as stored, without newlines.

    ``AuditInputError`` when the file is unreadable.
    """
    try:
        data = _read(path)
    except _Unreadable as exc:
        raise AuditInputError("outcomes_unreadable", f"{path}: {exc.message}") from exc
    if data and not data.endswith(b"\n"):
        raise AuditInputError("outcomes_unreadable", f"{path}: the last line has no newline")
    return data.split(b"\n")[:-1] if data else []


# An outcome line of ``kernel run``/``kernel replay`` (ADR-0013): the record,
# unchanged, in an envelope naming the attempt it answers. A bare record (the
# library's ``outcome_lines``) is still read; a line's kind is its own shape.
_ENVELOPE: Final = frozenset({"attempt_id", "attempt_index", "outcome"})

Outcome = ReplayAdapterResult | ReplayAdapterRefusal


@final
@attrs.frozen
class StoredOutcome:
    """One audited outcome line: its record, and whether it came in an envelope."""

    outcome: Outcome
    enveloped: bool


def _line_finding(
    a: _Auditor,
    name: str,
    subject: str,
    code: AuditCode,
    message: str,
    recorded: str | None = None,
    recomputed: str | None = None,
) -> None:
    # The outcomes file lives outside the audited root: named by its file name.
    a.checked += 1
    a.findings.append(AuditFinding(name, subject, code, recorded, recomputed, message))


def _expect(
    a: _Auditor, name: str, subject: str, recorded: object, recomputed: object, message: str
) -> None:
    if _same(recorded, recomputed):
        a.checked += 1
    else:
        _line_finding(
            a, name, subject, AuditCode.BINDING_MISMATCH, message,
            _text(recorded), _text(recomputed),
        )  # fmt: skip


def _unwrap(a: _Auditor, name: str, index: int, line: bytes) -> tuple[bytes, bool, str | None]:
    """The record's bytes, whether it came enveloped, the envelope's attempt id.

    Raises ``SerdeError`` for a line that is no JSON or no envelope/record
    shape. The envelope is covered by no id, so its position is compared
    here, its attempt id with the record's (``_audit_addresses``) and, with a
    bundle, with the run's (``_rederive``).
    """
    document = parse_json(line)
    if not (isinstance(document, dict) and "outcome" in document):
        return line, False, None
    if set(document) != _ENVELOPE:
        raise SerdeError("malformed_envelope", "$", "not {attempt_id, attempt_index, outcome}")
    attempt_id = document["attempt_id"]
    if attempt_id is not None and not isinstance(attempt_id, str):
        raise SerdeError("malformed_envelope", "$.attempt_id", "neither a string nor null")
    _expect(
        a, name, f"outcome[{index}] attempt_index", document["attempt_index"], index,
        "the envelope names another position than its line's",
    )  # fmt: skip
    return canonical_json(document["outcome"]), True, attempt_id


def _audit_outcomes(a: _Auditor, path: Path, lines: list[bytes]) -> list[StoredOutcome | None]:
    parsed: list[StoredOutcome | None] = []
    for index, line in enumerate(lines):
        subject = f"outcome[{index}]"
        outcome: Outcome
        try:
            record, enveloped, envelope_id = _unwrap(a, path.name, index, line)
            if "replay_refusal_id" in _field_names(record):
                outcome = loads(record, ReplayAdapterRefusal)
                recorded, recomputed = outcome.replay_refusal_id, refusal_id_of(outcome)
            else:
                outcome = loads(record, ReplayAdapterResult)
                recorded, recomputed = outcome.replay_result_id, result_id_of(outcome)
        except SerdeError as exc:
            _line_finding(a, path.name, subject, AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
            parsed.append(None)
            continue
        if recorded == recomputed:
            a.checked += 1
        else:
            _line_finding(
                a, path.name, f"{subject} id", AuditCode.ID_MISMATCH,
                "the outcome's id does not recompute from its fields", recorded, recomputed,
            )  # fmt: skip
        if isinstance(outcome, ReplayAdapterRefusal) and outcome.attempt_index is not None:
            _expect(
                a, path.name, f"{subject} attempt_index", outcome.attempt_index, index,
                "the refusal was addressed at another position than its line's",
            )  # fmt: skip
        # A refusal before identity names no attempt: only the bundle can tell.
        if enveloped and outcome.attempt_id is not None:
            _expect(
                a, path.name, f"{subject} attempt_id", envelope_id, outcome.attempt_id,
                "the envelope names another attempt than its outcome record",
            )  # fmt: skip
        parsed.append(StoredOutcome(outcome, enveloped))
    return parsed


def _field_names(record: bytes) -> set[str]:
    document = parse_json(record)
    return set(document) if isinstance(document, dict) else set()


def _link_outcomes(
    a: _Auditor,
    outcomes_name: str,
    stored: list[StoredOutcome | None],
    certifications: Mapping[str, CertificationEvidence | None],
) -> None:
    parsed = [s.outcome if s is not None else None for s in stored]
    named = {o.attempt_id for o in parsed if o is not None and o.attempt_id is not None}
    for attempt_id in sorted(set(certifications) - named):
        a.checked += 1
        a.finding(
            a.root / attempt_id,
            "attempt",
            AuditCode.UNDECLARED,
            "no outcome line names this attempt directory",
        )
    for index, outcome in enumerate(parsed):
        if not isinstance(outcome, ReplayAdapterResult):
            continue
        certified = (
            TARGET_CERTIFIED in outcome.proof_obligation_refs
            and outcome.replay_disposition.value == "contract_and_proof_closed"
        )
        evidence = certifications.get(outcome.attempt_id)
        if not certified and evidence is None:
            continue
        a.checked += 1
        if evidence is None:
            a.findings.append(
                AuditFinding(
                    outcomes_name,
                    f"outcome[{index}] certification",
                    AuditCode.MISSING,
                    None,
                    None,
                    f"a certified outcome without {outcome.attempt_id}/{CERTIFICATION_RECORD}",
                )
            )
            continue
        record = a.root / outcome.attempt_id / CERTIFICATION_RECORD
        a.compare(record, "candidate", evidence.request.candidate.digest, outcome.candidate_digest)
        a.compare(
            record,
            "author_session",
            evidence.request.candidate.author_session,
            author_session(outcome.run_id),
        )


@final
@attrs.frozen
class StoredCertifications:
    """An ``EvidenceProvider`` that hands back the certifications a work directory stored.

    It never runs anything: each contract-closed attempt gets the stored
    ``certification.json`` of its attempt directory (or nothing), and the pure
    proof authority judges it again.
    """

    work_dir: Path

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """The stored certification document of ``state``'s attempt, or ``()``."""
        replay_input = state.validated.request.replay_input
        if TARGET_CERTIFIED not in replay_input.proof_obligation_refs:
            return ()
        try:
            data = _read(self.work_dir / replay_input.attempt_id / CERTIFICATION_RECORD)
        except _Unreadable:
            return ()
        return (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, data.rstrip(b"\n")),)


def _rederive(
    a: _Auditor,
    outcomes_name: str,
    lines: list[bytes],
    stored: list[StoredOutcome | None],
    bundle: ReplayBundle,
) -> None:
    try:
        attempt_ids = [ready.attempt_id for ready in document_attempts(bundle)]
        outcomes = replay_bundle(bundle, CERTIFIED_MANIFEST, StoredCertifications(a.root))
    except ValueError as exc:
        raise AuditInputError("bundle_refused", str(exc)) from exc
    # Each line as the command would write it again, in the stored line's own
    # form: an envelope (its attempt id the run's) or a bare record.
    derived = [
        outcome_line(index, attempt_ids[index], outcome).rstrip(b"\n")
        if index < len(stored) and (s := stored[index]) is not None and s.enveloped
        else dumps(outcome)
        for index, outcome in enumerate(outcomes)
    ]
    a.checked += 1
    if len(derived) != len(lines):
        a.findings.append(
            AuditFinding(
                outcomes_name,
                "outcome count",
                AuditCode.OUTCOME_MISMATCH,
                str(len(lines)),
                str(len(derived)),
                "the bundle's attempts and the stored lines differ in number",
            )
        )
    for index, (line, again) in enumerate(zip(lines, derived, strict=False)):
        a.checked += 1
        if line != again:
            a.findings.append(
                AuditFinding(
                    outcomes_name,
                    f"outcome[{index}]",
                    AuditCode.OUTCOME_MISMATCH,
                    _line_id(line),
                    _line_id(again),
                    "re-derived from the bundle and the stored certifications, the outcome differs",
                )
            )


def _line_id(line: bytes) -> str | None:
    try:
        document = parse_json(line)
    except SerdeError:
        return None
    if isinstance(document, dict) and "outcome" in document:
        document = document["outcome"]
    for name in ("replay_result_id", "replay_refusal_id"):
        value = _field(document, name)
        if isinstance(value, str):
            return value
    return None


# --- the entry point -------------------------------------------------------------------
# --- the entry point -------------------------------------------------------------------


def detect_layout(root: Path) -> RunLayout:
    """The layout of ``root``; ``AuditInputError`` when it is neither."""
    if root.is_symlink() or not root.is_dir():
        raise AuditInputError("not_a_directory", f"{root}: not a directory")
    if (root / METADATA).exists() or (root / METADATA).is_symlink():
        return RunLayout.EXTERNAL_RUN
    try:
        if _attempt_dirs(root):
            return RunLayout.WORK_DIR
    except OSError as exc:
        raise AuditInputError("unreadable_run", f"{root}: {exc.strerror or exc}") from exc
    raise AuditInputError(
        "not_a_run_directory",
        f"{root}: neither an external run (metadata.json) nor a kernel run work directory",
    )


def audit_run(
    root: Path,
    *,
    outcomes: Path | None = None,
    bundle: ReplayBundle | None = None,
) -> AuditReport:
    """Recompute every id of the stored run at ``root``; report what does not reproduce.

    ``outcomes`` is the JSON Lines file ``kernel run`` wrote for a work
    directory; ``bundle`` (with ``outcomes``) re-derives each outcome from the
    stored certifications. Raises ``AuditInputError`` when ``root`` is not a
    stored run or an operator input (outcomes, bundle) is unusable; everything
    found wrong inside the run is a finding, never an exception.
    """
    root = Path(os.path.abspath(root))
    layout = detect_layout(root)
    a = _Auditor(root)
    lines = read_outcome_lines(outcomes) if outcomes is not None else None
    if bundle is not None and lines is None:
        raise AuditInputError("bundle_without_outcomes", "--bundle needs --outcomes")
    try:
        match layout:
            case RunLayout.EXTERNAL_RUN:
                _audit_external(a, root)
            case RunLayout.WORK_DIR:
                certifications = {d.name: _audit_attempt(a, d) for d in _attempt_dirs(root)}
                if lines is not None and outcomes is not None:
                    stored = _audit_outcomes(a, outcomes, lines)
                    _link_outcomes(a, outcomes.name, stored, certifications)
                    if bundle is not None:
                        _rederive(a, outcomes.name, lines, stored, bundle)
    except OSError as exc:
        raise AuditInputError("unreadable_run", f"{root}: {exc.strerror or exc}") from exc
    if layout is RunLayout.EXTERNAL_RUN and lines is not None and outcomes is not None:
        _audit_outcomes(a, outcomes, lines)
    return AuditReport(str(root), layout, a.checked, tuple(a.findings))


def report_document(report: AuditReport) -> JsonValue:
    """The JSON form of a report (``--format json``)."""
    return {
        "checked": report.checked,
        "findings": [
            {
                "code": f.code.value,
                "message": f.message,
                "path": f.path,
                "recomputed": f.recomputed,
                "recorded": f.recorded,
                "subject": f.subject,
            }
            for f in report.findings
        ],
        "intact": report.intact,
        "layout": report.layout.value,
        "root": report.root,
    }
