"""The evidence a producer left: exactly the declared artifacts, bounded, then hashed.

Seed 003 step 3, with issue 18's bounds: every declared artifact is a regular
file reached without a symlink, nothing undeclared lies under ``evidence/``,
and each artifact and all of them together are within the run's limits,
counted by apparent and allocated size, *before* any byte is read; the hash
itself stops on cancellation or at the step's deadline (``StopWhen``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernel.external._attempt import Block
from kernel.external._files import (
    FileLedger,
    HashStopped,
    StopWhen,
    walk_tree,
)
from kernel.external._outcome import (
    FileDigest,
    Reason,
)
from kernel.external._settings import (
    RunLimits,
)

__all__ = ["KEPT_EVIDENCE_REASONS", "check_evidence_shape", "hash_evidence", "is_real_directory"]


def is_real_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def hash_evidence(
    evidence: Path,
    declared: tuple[str, ...],
    ledger: FileLedger | None = None,
    *,
    limits: RunLimits,
    stop: StopWhen,
    timeout_reason: Reason,
) -> tuple[FileDigest, ...]:
    """Seed 003 step 3: hash exactly the declared artifacts (through ``ledger``: by
    fingerprint once it hashed them); the list is exact.

    Issue 18, finding 5: every artifact's size is checked against ``limits``
    before any byte is read (``artifact_too_large``, ``evidence_too_large``),
    and the hash and the walk stop on ``stop``: ``cancelled``, or
    ``timeout_reason`` (the deadline of the step whose evidence this is).
    """
    if not is_real_directory(evidence):
        raise Block(Reason.ARTIFACT_SYMLINK, "evidence/ is no longer a plain directory")
    files = ledger if ledger is not None else FileLedger()
    found = [(relative, _declared_artifact(evidence, relative)) for relative in declared]
    _check_evidence_size(found, limits)
    digests: list[FileDigest] = []
    try:
        for relative, (path, _) in found:
            digests.append(
                FileDigest(relative, files.sha256(path, follow_symlinks=False, stop=stop))
            )
        entries = walk_tree(evidence, stop)
    except HashStopped as stopped:
        reason = timeout_reason if stopped.expired else Reason.CANCELLED
        raise Block(reason, f"evidence/: {stopped.detail}") from stopped
    _refuse_undeclared(entries, declared)
    return tuple(sorted(digests, key=lambda d: d.path))


def check_evidence_shape(evidence: Path, declared: tuple[str, ...], *, limits: RunLimits) -> None:
    """``hash_evidence``'s checks without the hash, in its order: raises its ``Block``.

    For a producer's bounded output (``_step_output``), read where the step
    left it, before only the declared artifacts are kept: what is not kept is
    still what the attempt is refused for. The walk is bounded by the tmpfs's
    entry count.
    """
    found = [(relative, _declared_artifact(evidence, relative)) for relative in declared]
    _check_evidence_size(found, limits)
    _refuse_undeclared(walk_tree(evidence), declared)


def _refuse_undeclared(entries: tuple[tuple[str, str], ...], declared: tuple[str, ...]) -> None:
    allowed = set(declared) | {
        "/".join(p.split("/")[:i]) for p in declared for i in range(1, p.count("/") + 1)
    }
    for relative, kind in entries:
        if relative not in allowed:
            raise Block(
                Reason.ARTIFACT_UNDECLARED, f"undeclared {kind} {relative!r} under evidence/"
            )


KEPT_EVIDENCE_REASONS = frozenset(
    {
        Reason.CANCELLED,
        Reason.PRODUCER_TIMEOUT,
        Reason.CHECKER_TIMEOUT,
        Reason.ARTIFACT_TOO_LARGE,
        Reason.EVIDENCE_TOO_LARGE,
    }
)
"""What ``hash_evidence`` can raise that a caller reporting ``evidence_changed`` keeps
as it is: a stop, or evidence over its limits, is that whenever it is seen."""


def _declared_artifact(evidence: Path, relative: str) -> tuple[Path, os.stat_result]:
    """The artifact's path and ``lstat``: a regular file reached without a symlink."""
    current = evidence
    parts = relative.split("/")
    for index, part in enumerate(parts):
        current = current / part
        try:
            status = os.lstat(current)
        except FileNotFoundError as exc:
            raise Block(Reason.ARTIFACT_MISSING, f"artifact {relative!r} is missing") from exc
        if stat.S_ISLNK(status.st_mode):
            raise Block(Reason.ARTIFACT_SYMLINK, f"artifact {relative!r} goes through a symlink")
        last = index == len(parts) - 1
        if (last and not stat.S_ISREG(status.st_mode)) or (
            not last and not stat.S_ISDIR(status.st_mode)
        ):
            raise Block(Reason.ARTIFACT_NOT_REGULAR, f"artifact {relative!r} is not a regular file")
    return current, status


def _occupied_bytes(status: os.stat_result) -> int:
    """What a file counts against the limits: the larger of its apparent size and the
    space allocated to it (a sparse file is large by the first, a file preallocated
    past its end by the second)."""
    return max(status.st_size, status.st_blocks * 512)


def _check_evidence_size(
    found: list[tuple[str, tuple[Path, os.stat_result]]], limits: RunLimits
) -> None:
    """Issue 18, finding 5: each artifact and all of them within ``limits``, before hashing."""
    total = 0
    for relative, (_, status) in found:
        size = _occupied_bytes(status)
        if size > limits.artifact_limit_bytes:
            raise Block(
                Reason.ARTIFACT_TOO_LARGE,
                f"artifact {relative!r} is {size} bytes (apparent {status.st_size}, "
                f"allocated {status.st_blocks * 512}), over the limit of "
                f"{limits.artifact_limit_bytes} bytes per artifact; nothing was hashed",
            )
        total += size
    if total > limits.evidence_limit_bytes:
        raise Block(
            Reason.EVIDENCE_TOO_LARGE,
            f"the {len(found)} declared artifacts are {total} bytes together, over the "
            f"evidence limit of {limits.evidence_limit_bytes} bytes; nothing was hashed",
        )
