"""What every part of the audit shares (ADR-0010): findings, bounded reads, the auditor.

Stored files are opened without following a symlink and without blocking on
a FIFO; each comparison is counted, and each failed one becomes an
``AuditFinding``. The layouts' audits (``_audit_external``,
``_audit_work_dir``, ``_audit_outcomes``) build on these.
"""

from __future__ import annotations

import enum
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, TypeVar, final

import attrs

from kernel.identity import JsonValue, digest
from kernel.orchestrate import OrchestrateError
from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, dumps, loads, parse_json

_T = TypeVar("_T")
_CHUNK: Final = 1024 * 1024
METADATA: Final = "metadata.json"
# Where kernel attest writes its envelope by default (kernel.audit._attest).
ATTESTATION_FILE: Final = "attestation.dsse.json"
# ... and the SLSA Verification Summary beside it (kernel.audit._summary).
SUMMARY_FILE: Final = "verification-summary.dsse.json"


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
    RECEIPT_INVALID = "receipt_invalid"


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


class Unreadable(Exception):
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
        raise Unreadable(AuditCode.MISSING, "absent") from exc
    except OSError as exc:
        raise Unreadable(AuditCode.NOT_REGULAR, f"cannot be opened: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Unreadable(AuditCode.NOT_REGULAR, "not a regular file")
    return fd


def read_bounded(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    fd = _open_nofollow(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(AuditCode.MALFORMED, f"more than {limit} bytes")
    return data


def sha256_file(path: Path) -> str:
    fd = _open_nofollow(path)
    hasher = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def pairs_digest(items: Sequence[tuple[str, str]]) -> str:
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


def tree_names(root: Path) -> set[str]:
    if not root.is_dir() or root.is_symlink():
        return set()
    names: set[str] = set()
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*filenames, *(d for d in dirnames if (Path(directory) / d).is_symlink())]:
            names.add((Path(directory) / name).relative_to(root).as_posix())
    return names


class Auditor:
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
        if same_json(recorded, recomputed):
            return True
        self.finding(
            path,
            subject,
            code,
            "does not reproduce",
            as_text(recorded),
            as_text(recomputed),
        )
        return False

    def document(self, path: Path) -> JsonValue | None:
        """Strict JSON of ``path``, or ``None`` with a finding."""
        try:
            return parse_json(read_bounded(path))
        except Unreadable as exc:
            self.finding(path, "file", exc.code, exc.message)
        except SerdeError as exc:
            self.finding(path, "file", AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
        return None

    def typed(self, path: Path, cls: type[_T]) -> _T | None:
        try:
            return loads(read_bounded(path), cls)
        except Unreadable as exc:
            self.finding(path, "file", exc.code, exc.message)
        except SerdeError as exc:
            self.finding(path, "file", AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
        return None

    def file_digest(self, path: Path, subject: str, recorded: str | None) -> None:
        """Hash ``path`` and compare with the digest a record holds for it."""
        try:
            actual: str | None = sha256_file(path)
        except Unreadable as exc:
            self.checked += 1
            self.finding(path, subject, exc.code, exc.message, recorded, None)
            return
        self.compare(path, subject, recorded, actual, AuditCode.DIGEST_MISMATCH)


def same_json(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return dumps(value).decode("utf-8")
    except Exception:  # a value canonical JSON refuses is still reported, as repr
        return repr(value)


def field_of(document: JsonValue | None, name: str) -> JsonValue | None:
    if isinstance(document, dict):
        return document.get(name)
    return None
