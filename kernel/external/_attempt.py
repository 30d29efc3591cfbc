"""One attempt of a run or replay: its directory, its guard, and the draft of its record.

``Block`` is how a guard ends the attempt BLOCKED with a ``Reason``; a
``Recorder`` collects what the attempt learns and is frozen into
``RunMetadata`` at the end (``_steps.finish``); an ``Attempt`` is the fresh
directory it works in, with the ledger that reads each of its files once and
the sealed copies its launches run (ADR 0009).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs

from kernel.external._contain import (
    ContainmentLevel,
    ContainmentPart,
    SealedCopies,
)
from kernel.external._files import (
    FileLedger,
)
from kernel.external._manifest import Command, check_identifier
from kernel.external._outcome import (
    METADATA_SCHEMA_VERSION,
    CheckedDigests,
    Decision,
    Execution,
    FileDigest,
    ProcessSummary,
    Reason,
    RunIdentity,
    RunKind,
    RunMetadata,
    Status,
    Verdict,
)
from kernel.external._pin_cache import PinCache
from kernel.external._sandbox import StepLimits
from kernel.external._settings import (
    Role,
)
from kernel.external.errors import ManifestError, RunDirectoryError
from kernel.text import escaped

__all__ = ["Attempt", "Block", "Recorder", "fresh_attempt", "require_utf8_path"]


class Block(Exception):
    """A guard failed: the run ends BLOCKED with ``reason``."""

    def __init__(self, reason: Reason, detail: str, summary: ProcessSummary | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.summary = summary


@attrs.define
class Recorder:
    """Mutable draft of the metadata; frozen into ``RunMetadata`` at the end."""

    kind: RunKind
    run_id: str
    replay_of: str | None
    check_id: str
    manifest_path: str
    repository_root: str
    job_id: str
    job_digest: str
    containment: ContainmentLevel | None = None
    containment_parts: tuple[ContainmentPart, ...] = ()
    limits: StepLimits | None = None
    check_digest: str | None = None
    input_digest: str | None = None
    inputs: tuple[FileDigest, ...] = ()
    specification_digest: str | None = None
    artifacts: tuple[FileDigest, ...] = ()
    evidence_digest: str | None = None
    producer: ProcessSummary | None = None
    checker: ProcessSummary | None = None
    producer_request_sha256: str | None = None
    checker_request_sha256: str | None = None
    receipt_sha256: str | None = None
    verdict: Verdict | None = None

    def freeze(self, status: Status, reason: Reason | None, detail: str) -> RunMetadata:
        # A detail can quote a path a command created with undecodable bytes
        # (an OSError's filename); the metadata is strict UTF-8, so escape them.
        detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
        # It can also quote what a step wrote (a receipt's field, an error): the
        # record holds no control character that a terminal printing it obeys.
        detail = escaped(detail)
        return RunMetadata(
            metadata_schema_version=METADATA_SCHEMA_VERSION,
            run=RunIdentity(
                kind=self.kind,
                run_id=self.run_id,
                replay_of=self.replay_of,
                check_id=self.check_id,
                manifest_path=self.manifest_path,
                repository_root=self.repository_root,
                job_id=self.job_id,
                job_digest=self.job_digest,
            ),
            containment=self.containment,
            containment_parts=(self.containment_parts
                               if self.containment is ContainmentLevel.SANDBOX else None),
            limits=self.limits,
            checked=CheckedDigests(
                check_digest=self.check_digest,
                input_digest=self.input_digest,
                inputs=self.inputs,
                specification_digest=self.specification_digest,
                artifacts=self.artifacts,
                evidence_digest=self.evidence_digest,
            ),
            execution=Execution(
                producer=self.producer,
                checker=self.checker,
                producer_request_sha256=self.producer_request_sha256,
                checker_request_sha256=self.checker_request_sha256,
                receipt_sha256=self.receipt_sha256,
            ),
            decision=Decision(verdict=self.verdict, status=status, reason=reason, detail=detail),
        )


@attrs.frozen
class Attempt:
    """One attempt directory; ``files`` reads each of its files once (then compares
    fingerprints), ``pins`` does the same for the pinned files, ``sealed`` holds the
    sealed copies both launches run. ``pins`` and ``sealed`` are the attempt's own,
    or a run's ``PinCache`` shared by every attempt of this process."""

    root: Path
    files: FileLedger = attrs.field(factory=FileLedger, eq=False, repr=False)
    pins: FileLedger = attrs.field(
        default=attrs.Factory(lambda self: self.files, takes_self=True), eq=False, repr=False
    )
    sealed: SealedCopies = attrs.field(factory=SealedCopies, eq=False, repr=False)
    # Joined once: the checks after each step name the snapshot once per file.
    snapshot: Path = attrs.field(
        init=False, eq=False, repr=False,
        default=attrs.Factory(lambda self: self.root / "snapshot", takes_self=True),
    )
    evidence: Path = attrs.field(
        init=False, eq=False, repr=False,
        default=attrs.Factory(lambda self: self.root / "evidence", takes_self=True),
    )

    def role_dir(self, role: Role) -> Path:
        return self.root / role.value

    def placeholders(self, command: Command, role: Role) -> dict[str, str]:
        return {
            "python": command.executable.path,
            "snapshot": str(self.snapshot),
            "run_dir": str(self.root),
            "request": str(self.role_dir(role) / "request.json"),
            "evidence": str(self.evidence),
            "receipt": str(self.role_dir(role) / "receipt.json"),
        }


def require_utf8_path(path: Path | str, what: str) -> None:
    """Refuse a path that is not valid UTF-8: requests and metadata are strict JSON."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RunDirectoryError(
            "path_not_utf8", f"{what} {os.fspath(path)!r} is not valid UTF-8"
        ) from exc


def fresh_attempt(parent: Path, attempt_id: str, pins: PinCache | None = None) -> Attempt:
    """Create ``parent/attempt_id``; raises ``RunDirectoryError`` if it exists. With
    ``pins``, the attempt checks its pinned files through that run-wide cache."""
    try:
        check_identifier(attempt_id, "run id")
    except ManifestError as exc:
        raise RunDirectoryError("invalid_run_id", exc.message) from exc
    require_utf8_path(os.path.abspath(parent), "run root")
    try:
        # A new run root is the kernel's alone (0700): other local users reach no
        # attempt, and no step's uid any path leading to one (issue 34). An
        # attempt never has group or world write, whatever the umask.
        parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        root = Path(os.path.realpath(parent)) / attempt_id
        require_utf8_path(root, "attempt directory")
        root.mkdir(mode=0o755)
        os.chmod(root, stat.S_IMODE(os.stat(root).st_mode) & ~0o022)
    except FileExistsError as exc:
        raise RunDirectoryError("run_dir_exists", f"{parent / attempt_id} already exists") from exc
    except OSError as exc:
        raise RunDirectoryError("run_dir_unwritable", f"{parent}: {exc.strerror}") from exc
    if pins is None:
        return Attempt(root)
    return Attempt(root, pins=pins.files, sealed=SealedCopies(pins.sealed))
