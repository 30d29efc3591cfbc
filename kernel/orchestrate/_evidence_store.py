"""An evidence store addressed by content, shared by runs, trusted for nothing (ADR-0019).

Theory of operation (seed 003 "Replay": the checker runs, not the producer):

- a key is the digest of ``{"store_version", "check_content_digest",
  "specification_digest"}``: the check's pins by content (ADR-0019) and the
  bytes of the certification problem. Neither the candidate, the run, nor
  any path enters it, so every run that poses the same problem to the same
  tools, wherever they are installed, finds the same entry;
- an entry is ``entries/<key>/`` holding ``entry.json`` (the key, both
  digests and each artifact's name, size and SHA-256) and ``artifacts/``
  with exactly those files. It is written whole under ``tmp/`` and published
  with one ``rename(2)`` of the directory, so a reader sees a complete entry
  or none; a writer killed mid-insert leaves only a ``tmp/`` directory that
  no reader opens. Two writers of one key: the first rename wins, the other
  finds the entry present (or, if its artifacts differ, reports a conflict:
  the producer is not deterministic) and removes its own copy;
- the store is untrusted input: ``load`` reads ``entry.json`` bounded and
  strictly, refuses symlinks, reads each artifact bounded by its recorded
  size and checks its SHA-256, and requires that the artifact list is the
  check's declared one. Any failure is a ``Miss`` with its reason, never an
  exception and never evidence; the caller runs the producer as without a
  store. A corrupt entry is moved aside to ``quarantine/`` (best effort) so
  that a fresh insert can replace it;
- whatever a hit returns still goes through the currently pinned checker
  with a fresh request (the caller's ``run_check(supplied_evidence=...)``):
  the store can make the kernel skip the producer, never a PASS.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Final, final

import attrs

from kernel.identity import JsonValue, canonical_json, digest, is_digest
from kernel.serde import SerdeError, parse_json

__all__ = [
    "STORE_VERSION",
    "EvidenceStore",
    "Hit",
    "InsertResult",
    "Miss",
    "MissReason",
    "store_key",
]

STORE_VERSION: Final = 1
_MAX_ENTRY_BYTES: Final = 64 * 1024
_MAX_ARTIFACT_BYTES: Final = 64 * 1024 * 1024


def store_key(check_content_digest: str, specification_digest: str) -> str:
    """The key of one certification problem posed to one check (content only)."""
    return digest(
        {
            "check_content_digest": check_content_digest,
            "specification_digest": specification_digest,
            "store_version": STORE_VERSION,
        }
    )


class MissReason(Enum):
    """Why a lookup gave no evidence; everything but ``absent`` is a corrupt entry."""

    ABSENT = "absent"
    NOT_REGULAR = "entry_not_regular"
    MALFORMED = "entry_malformed"
    KEY_MISMATCH = "entry_key_mismatch"
    ARTIFACTS_NOT_DECLARED = "entry_artifacts_not_declared"
    ARTIFACT_UNREADABLE = "artifact_unreadable"
    ARTIFACT_SIZE = "artifact_size_mismatch"
    ARTIFACT_DIGEST = "artifact_digest_mismatch"
    UNDECLARED_FILE = "entry_undeclared_file"


class InsertResult(Enum):
    """What an insert did."""

    STORED = "stored"
    PRESENT = "present"
    CONFLICT = "conflict"
    FAILED = "failed"


@final
@attrs.frozen
class Hit:
    """Stored evidence whose every byte was checked against its recorded digest."""

    key: str
    artifacts: tuple[tuple[str, bytes], ...]

    @property
    def evidence(self) -> dict[str, bytes]:
        return dict(self.artifacts)


@final
@attrs.frozen
class Miss:
    """No usable evidence, and why (``detail`` for the note)."""

    key: str
    reason: MissReason
    detail: str = ""

    @property
    def corrupt(self) -> bool:
        return self.reason is not MissReason.ABSENT


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _TooLong(OSError):
    """Internal: a file holds more bytes than it may."""


def _read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, never through a symlink; OSError else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _TooLong(f"{path.name} exceeds {limit} bytes")
    return data


def _entry_document(
    key: str, check_content: str, specification: str, artifacts: Mapping[str, bytes]
) -> JsonValue:
    return {
        "artifacts": [
            {"name": name, "sha256": _sha256(data), "size": len(data)}
            for name, data in sorted(artifacts.items())
        ],
        "check_content_digest": check_content,
        "key": key,
        "specification_digest": specification,
        "store_version": STORE_VERSION,
    }


def _absolute(value: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(value))


@final
@attrs.frozen
class EvidenceStore:
    """A directory of content-addressed evidence entries (``root`` absolute)."""

    root: Path = attrs.field(converter=_absolute)

    def _entry_dir(self, key: str) -> Path:
        return self.root / "entries" / key

    def load(self, key: str, declared: tuple[str, ...]) -> Hit | Miss:
        """The entry for ``key`` if every check holds, else a ``Miss``; never raises."""
        try:
            return self._load(key, declared)
        except Exception as exc:  # a hostile store is a miss, never a crash
            return Miss(key, MissReason.MALFORMED, f"{type(exc).__name__}: {exc}")

    def _load(self, key: str, declared: tuple[str, ...]) -> Hit | Miss:
        if not is_digest(key):
            raise ValueError("a store key is a SHA-256 hex digest")
        entry = self._entry_dir(key)
        if not entry.exists() and not entry.is_symlink():
            return Miss(key, MissReason.ABSENT)
        artifacts_dir = entry / "artifacts"
        for directory in (self.root / "entries", entry, artifacts_dir):
            if directory.is_symlink() or not directory.is_dir():
                return Miss(key, MissReason.NOT_REGULAR, f"{directory.name} is not a directory")
        try:
            raw = _read_regular(entry / "entry.json", _MAX_ENTRY_BYTES)
        except OSError as exc:
            return Miss(key, MissReason.NOT_REGULAR, f"entry.json: {exc}")
        try:
            document = parse_json(raw)
        except SerdeError as exc:
            return Miss(key, MissReason.MALFORMED, f"entry.json: {exc.message}")
        listed = _artifact_list(document)
        if listed is None:
            return Miss(key, MissReason.MALFORMED, "entry.json does not have the entry shape")
        if not isinstance(document, dict) or document.get("key") != key:
            return Miss(key, MissReason.KEY_MISMATCH, "entry.json names another key")
        if sorted(name for name, _, _ in listed) != sorted(declared):
            return Miss(key, MissReason.ARTIFACTS_NOT_DECLARED, "not the check's artifacts")
        present = sorted(p.name for p in artifacts_dir.iterdir())
        if present != sorted(name for name, _, _ in listed):
            return Miss(key, MissReason.UNDECLARED_FILE, f"artifacts/ holds {present}")
        loaded: list[tuple[str, bytes]] = []
        for name, size, sha in listed:
            try:
                data = _read_regular(artifacts_dir / name, min(size, _MAX_ARTIFACT_BYTES))
            except _TooLong as exc:
                return Miss(key, MissReason.ARTIFACT_SIZE, f"{name}: {exc}")
            except OSError as exc:
                return Miss(key, MissReason.ARTIFACT_UNREADABLE, f"{name}: {exc}")
            if len(data) != size:
                return Miss(key, MissReason.ARTIFACT_SIZE, f"{name}: {len(data)} != {size}")
            if _sha256(data) != sha:
                return Miss(key, MissReason.ARTIFACT_DIGEST, f"{name}: digest mismatch")
            loaded.append((name, data))
        return Hit(key, tuple(loaded))

    def quarantine(self, key: str) -> None:
        """Move a corrupt entry aside (best effort) so a fresh insert can replace it."""
        target = self.root / "quarantine" / f"{key}.{uuid.uuid4().hex}"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self._entry_dir(key), target)
        except OSError:
            pass

    def insert(
        self,
        key: str,
        *,
        check_content_digest: str,
        specification_digest: str,
        artifacts: Mapping[str, bytes],
    ) -> InsertResult:
        """Publish ``artifacts`` under ``key`` atomically; never raises.

        ``PRESENT`` when an intact entry with the same artifacts exists,
        ``CONFLICT`` when one exists with other artifacts (kept; the new ones
        are not mixed in), ``FAILED`` when the store cannot be written.
        """
        try:
            return self._insert(key, check_content_digest, specification_digest, artifacts)
        except Exception:  # a store that cannot be written is no store, never a failed run
            return InsertResult.FAILED

    def _insert(
        self, key: str, check_content: str, specification: str, artifacts: Mapping[str, bytes]
    ) -> InsertResult:
        if key != store_key(check_content, specification):
            raise ValueError("the key is not the content's")
        if any("/" in name or name in ("", ".", "..") for name in artifacts):
            raise ValueError("artifact names are plain file names")
        existing = self.load(key, tuple(artifacts))
        if isinstance(existing, Hit):
            return _same(existing, artifacts)
        if existing.corrupt:
            self.quarantine(key)
        staging = self.root / "tmp" / f"{key}.{os.getpid()}.{uuid.uuid4().hex}"
        (staging / "artifacts").mkdir(parents=True)
        try:
            for name, data in artifacts.items():
                _write_synced(staging / "artifacts" / name, data)
            document = _entry_document(key, check_content, specification, artifacts)
            _write_synced(staging / "entry.json", canonical_json(document) + b"\n")
            (self.root / "entries").mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, self._entry_dir(key))
            except OSError:
                # Another writer published first: keep theirs, compare.
                winner = self.load(key, tuple(artifacts))
                if isinstance(winner, Hit):
                    return _same(winner, artifacts)
                return InsertResult.FAILED
            _fsync_dir(self.root / "entries")
            return InsertResult.STORED
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _same(hit: Hit, artifacts: Mapping[str, bytes]) -> InsertResult:
    stored = {name: _sha256(data) for name, data in hit.artifacts}
    fresh = {name: _sha256(data) for name, data in artifacts.items()}
    return InsertResult.PRESENT if stored == fresh else InsertResult.CONFLICT


def _artifact_list(document: JsonValue) -> list[tuple[str, int, str]] | None:
    if not isinstance(document, dict) or sorted(document) != [
        "artifacts",
        "check_content_digest",
        "key",
        "specification_digest",
        "store_version",
    ]:
        return None
    if document["store_version"] != STORE_VERSION:
        return None
    items = document["artifacts"]
    if not isinstance(items, list):
        return None
    listed: list[tuple[str, int, str]] = []
    for item in items:
        if not isinstance(item, dict) or sorted(item) != ["name", "sha256", "size"]:
            return None
        name, size, sha = item["name"], item["size"], item["sha256"]
        if (
            type(name) is not str
            or "/" in name
            or name in ("", ".", "..")
            or type(size) is not int
            or size < 0
            or not is_digest(sha)
        ):
            return None
        listed.append((name, size, sha))
    if len({name for name, _, _ in listed}) != len(listed):
        return None
    return listed


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
