"""An attempt directory as values: taken on the worker that certified it, landed on the driver.

Theory of operation (ADR 0022, "The evidence comes home"):

- On the worker, once its certification has ended, ``take_record`` reads
  the attempt directory (directories and regular files only, never a link)
  into an ``AttemptRecord``, a plain value that crosses the executor with
  the evidence. The worker's copy stays where it is, a cache, never the
  record: where the worker shares the driver's file system it is the very
  directory the driver reads, and a later repeat of the same problem in
  the run (ADR-0019) reads the first attempt's run there.
- On the driver, ``land_record`` writes the record into the driver's work
  directory, byte for byte and mode for mode; where the directory is
  there already (a shared file system), ``matches_record`` requires it to
  hold exactly the record instead. It writes into a staging
  directory first and renames that into place, so a reader sees the whole
  attempt or none of it. It refuses an entry that could escape the attempt
  directory, a mode with setuid, setgid, sticky or group/world write, and
  a record larger than its bound. The driver then derives the certification
  again from the landed directory (the certifier's ``keep``); the record is
  evidence of nothing until then.

Every refusal is a sentence (``RecordRefused``), which the certifier turns
into no evidence plus a note. A refused record never becomes a PASS.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Final, final

import attrs

__all__ = [
    "AttemptRecord", "RecordEntry", "RecordRefused", "is_staging", "land_record",
    "matches_record", "take_record",
]

#: Permission bits a landed entry may carry: no setuid/setgid/sticky, no group/world write.
_ALLOWED_MODE: Final = 0o755
_STAGING_PREFIX: Final = ".landing-"


class RecordRefused(Exception):
    """An attempt record that cannot be taken or landed; the message says why."""


@final
@attrs.frozen
class RecordEntry:
    """One directory (``data`` None) or regular file of an attempt, by its path inside it."""

    path: str
    mode: int
    data: bytes | None


@final
@attrs.frozen
class AttemptRecord:
    """Everything an attempt directory holds, in path order (its own root excluded)."""

    attempt_id: str
    mode: int
    entries: tuple[RecordEntry, ...]

    @property
    def size(self) -> int:
        """The bytes of its files together."""
        return sum(len(e.data) for e in self.entries if e.data is not None)


def take_record(attempt: Path, limit: int) -> AttemptRecord:
    """Read ``attempt`` into a record. Raises ``RecordRefused`` (and ``OSError``)."""
    entries: list[RecordEntry] = []
    total = 0
    for root, dirs, files in os.walk(attempt, followlinks=False):
        dirs.sort()
        here = Path(root)
        for name in sorted([*dirs, *files]):
            path = here / name
            info = path.lstat()
            relative = path.relative_to(attempt).as_posix()
            if stat.S_ISDIR(info.st_mode):
                entries.append(RecordEntry(relative, stat.S_IMODE(info.st_mode), None))
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > limit:
                    raise RecordRefused(f"{attempt.name}: its record is over {limit} bytes")
                entries.append(RecordEntry(relative, stat.S_IMODE(info.st_mode),
                                           path.read_bytes()))
            else:
                raise RecordRefused(f"{attempt.name}/{relative}: not a directory or regular file")
    entries.sort(key=lambda e: PurePosixPath(e.path).parts)
    mode = stat.S_IMODE(attempt.lstat().st_mode)
    return AttemptRecord(attempt.name, mode, tuple(entries))


def _checked_parts(entry: RecordEntry, directories: set[tuple[str, ...]]) -> tuple[str, ...]:
    if not isinstance(entry, RecordEntry) or type(entry.path) is not str or "\0" in entry.path:
        raise RecordRefused("an entry that is not a path")
    pure = PurePosixPath(entry.path)
    parts = pure.parts
    if (pure.is_absolute() or not parts or any(p in ("", ".", "..") for p in parts)
            or pure.as_posix() != entry.path):
        raise RecordRefused(f"{entry.path!r}: a path that leaves the attempt directory")
    if parts[:-1] and parts[:-1] not in directories:
        raise RecordRefused(f"{entry.path}: its directory is not in the record before it")
    if type(entry.mode) is not int or entry.mode & ~_ALLOWED_MODE:
        raise RecordRefused(f"{entry.path}: mode {entry.mode!r} (setuid, setgid, sticky or "
                            "group/world write)")
    if entry.data is not None and type(entry.data) is not bytes:
        raise RecordRefused(f"{entry.path}: data that is not bytes")
    return parts


def land_record(work_dir: Path, record: AttemptRecord, attempt_id: str, limit: int) -> Path:
    """Write ``record`` as ``work_dir/attempt_id``, atomically. Raises ``RecordRefused``.

    ``attempt_id`` is the attempt the driver asked about: a record naming
    another is refused, as is one over ``limit`` bytes or a target that
    already exists (an attempt directory is never reused).
    """
    if not isinstance(record, AttemptRecord) or record.attempt_id != attempt_id:
        raise RecordRefused(f"a record for another attempt than {attempt_id[:16]}")
    if type(record.entries) is not tuple:
        raise RecordRefused("a record whose entries are not a tuple")
    if type(record.mode) is not int or record.mode & ~_ALLOWED_MODE:
        raise RecordRefused(f"{attempt_id[:16]}: mode {record.mode!r} for its directory")
    directories: set[tuple[str, ...]] = set()
    seen: set[tuple[str, ...]] = set()
    for entry in record.entries:
        parts = _checked_parts(entry, directories)
        if parts in seen:
            raise RecordRefused(f"{entry.path}: twice in the record")
        seen.add(parts)
        if entry.data is None:
            directories.add(parts)
    if record.size > limit:
        raise RecordRefused(f"{attempt_id[:16]}: its record is over {limit} bytes")
    target = work_dir / attempt_id
    if target.exists() or target.is_symlink():
        raise RecordRefused(f"{target} already exists (an attempt directory is never reused)")
    staging = work_dir / f"{_STAGING_PREFIX}{attempt_id}"
    if staging.exists() or staging.is_symlink():
        shutil.rmtree(staging)
    staging.mkdir(mode=0o700)
    try:
        modes: list[tuple[Path, int]] = []
        for entry in record.entries:
            path = staging.joinpath(*PurePosixPath(entry.path).parts)
            if entry.data is None:
                path.mkdir(mode=0o700)
            else:
                with path.open("xb") as handle:
                    handle.write(entry.data)
                    os.fsync(handle.fileno())
            modes.append((path, entry.mode))
        # Deepest first, the directory itself last: a mode never stops a write below it.
        for path, mode in reversed(modes):
            path.chmod(mode)
        staging.chmod(record.mode)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def matches_record(attempt: Path, record: AttemptRecord, limit: int) -> bool:
    """Whether the directory ``attempt`` holds exactly ``record`` (paths, modes, bytes)."""
    try:
        here = take_record(attempt, limit)
    except (RecordRefused, OSError):
        return False
    return here == attrs.evolve(record, attempt_id=attempt.name)


def is_staging(name: str) -> bool:
    """Whether ``name`` is a landing left by an interrupt (to be removed on resume)."""
    return name.startswith(_STAGING_PREFIX)
