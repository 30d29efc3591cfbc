"""File helpers of the run directory: atomic writes, strict tree hashing, copies.

Rules:

- metadata and requests are written to a temporary file in the same
  directory and renamed with ``os.replace``: a reader sees the old file or
  the new one, never a torn one; only the commit point (``metadata.json``,
  written last) is fsynced, with its directory (and, by the caller, the
  directory holding the attempt: ADR 0009, "Lean steps");
- hashing a tree never follows a symlink, and reports every entry that is not
  a plain directory or regular file;
- a path digest list is ``[[path, sha256], ...]`` sorted by path, and its
  digest is the canonical digest of that list (seed 003: "digest of sorted
  evidence path/hash pairs");
- a ``FileLedger`` lets one attempt read each file once: see its docstring
  for when a stat fingerprint stands in for hashing the bytes again;
- a long hash can be stopped: given a ``StopWhen``, it is checked before
  every chunk (1 MiB), so a cancellation or a passed deadline ends the hash
  within one chunk's read, as ``HashStopped`` (issue 18, finding 5).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external._fingerprint import Fingerprint, fingerprint_of
from kernel.external._outcome import FileDigest
from kernel.identity import JsonValue, canonical_json, digest

__all__ = [
    "FileLedger",
    "HashStopped",
    "StopWhen",
    "TreeEntry",
    "copy_hashed",
    "fsync_directory",
    "list_digest",
    "open_regular",
    "read_capped",
    "sha256_nofollow",
    "walk_tree",
    "write_atomic",
    "write_json_new",
    "write_new",
]

_CHUNK: Final = 1024 * 1024


class HashStopped(Exception):
    """A hash (or a walk of a tree to hash) was abandoned: cancelled, or its deadline
    passed (``expired``)."""

    def __init__(self, detail: str, *, expired: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.expired = expired


@final
@attrs.frozen
class StopWhen:
    """When a long hash gives up: ``cancel`` is set, or the monotonic clock reaches
    ``deadline`` (a ``time.monotonic()`` value). Either may be None (never)."""

    cancel: threading.Event | None = None
    deadline: float | None = None

    @classmethod
    def within(cls, seconds: float, cancel: threading.Event | None) -> StopWhen:
        """Stop on ``cancel``, or ``seconds`` from now."""
        return cls(cancel, time.monotonic() + seconds)

    def check(self, doing: str) -> None:
        """Raise ``HashStopped`` if what the caller is ``doing`` must stop now."""
        if self.cancel is not None and self.cancel.is_set():
            raise HashStopped(f"cancelled while {doing}", expired=False)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise HashStopped(f"the deadline passed while {doing}", expired=True)


def _exclusive_temp(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path`` (``O_EXCL``), created with mode 0666 & ~umask.

    A run store holds evidence, not secrets: the user's umask decides who may
    read it (``mkstemp``'s 0600 would hide it from an auditing colleague). The
    kernel applies the umask at ``open``, so nothing reads it here (reading it
    without setting it, race-free, meant parsing ``/proc/self/status`` per file).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        temp = os.path.join(path.parent, f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(path.parent))


def write_atomic(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    Readers see the old file or the new one, never a torn one. ``durable``
    (the run's commit point, ``metadata.json``) also fsyncs the file before
    the rename and the directory after it; other files are not fsynced: the
    metadata records the digest of each one that matters, so one lost in a
    crash is detected, not trusted.
    """
    fd, temp = _exclusive_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        fsync_directory(path.parent)


def write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, which must not exist (``O_EXCL``, no symlink followed).

    For the files of a fresh attempt (job, identity, requests, logs): each is
    written once, so there is no old file to keep whole and no temporary or
    rename to pay for. None is a commit point: ``metadata.json`` records the
    digest of each, so a file torn by a crash is detected, not trusted
    (ADR 0009, "One commit point"). ``FileExistsError`` if anything holds the
    name already: a file planted there is never written through nor replaced.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)


def fsync_directory(path: Path) -> None:
    """Make the entries of directory ``path`` durable (part of a commit point)."""
    directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_json_new(path: Path, value: JsonValue) -> bytes:
    """Write canonical JSON (plus a newline) to a new file (``write_new``); return the bytes."""
    data = canonical_json(value) + b"\n"
    write_new(path, data)
    return data


def open_regular(path: Path | str, *, follow_symlinks: bool = False) -> int:
    """A read-only descriptor of a regular file; raises ``OSError`` for anything else.

    ``O_NONBLOCK``: opening a FIFO never waits for a writer (it is then refused
    as not regular); reads of a regular file are unaffected.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags if follow_symlinks else flags | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_nofollow(path: Path) -> str:
    """SHA-256 of a regular file, refusing a symlink at the last component."""
    fd = open_regular(path)
    try:
        hasher = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            hasher.update(chunk)
        return hasher.hexdigest()
    finally:
        os.close(fd)


def read_capped(path: Path | str, limit: int, *, follow_symlinks: bool = False) -> bytes:
    """At most ``limit + 1`` bytes of a regular file (no symlink at the last component
    unless ``follow_symlinks``); a FIFO, device or directory raises ``OSError``."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0 and (chunk := os.read(fd, min(_CHUNK, remaining))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


TreeEntry = tuple[str, str]
"""(relative POSIX path, kind) with kind one of dir, file, symlink, other."""


def walk_tree(root: Path, stop: StopWhen | None = None) -> tuple[TreeEntry, ...]:
    """Every entry under ``root`` (never following symlinks), sorted by path.

    Iterative, so a directory chain deeper than the interpreter's recursion
    limit (a producer can build one) is walked, not a ``RecursionError``; a
    path past ``PATH_MAX`` is an ``OSError`` like any other I/O failure.
    ``stop`` is checked before each entry (a tree of millions of files is
    walked until it says stop: ``HashStopped``).
    """
    entries: list[TreeEntry] = []
    pending: list[tuple[Path, str]] = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as it:
            for item in it:
                if stop is not None:
                    stop.check(f"listing {root}")
                relative = f"{prefix}{item.name}"
                mode = item.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    entries.append((relative, "symlink"))
                elif stat.S_ISDIR(mode):
                    entries.append((relative, "dir"))
                    pending.append((Path(item.path), f"{relative}/"))
                elif stat.S_ISREG(mode):
                    entries.append((relative, "file"))
                else:
                    entries.append((relative, "other"))
    return tuple(sorted(entries))


def copy_hashed(source: Path, target: Path, ledger: FileLedger | None = None) -> str:
    """Copy a regular file (no symlink at the last component) to a new ``target`` and
    return the SHA-256 of the copy's bytes.

    The source is read once, by the kernel (``copy_file_range``; a plain
    read/write loop where the filesystems refuse it), and the copy is then
    hashed from its own descriptor: the digest is of the bytes the snapshot
    holds. With a ``ledger``, the copy is recorded there under its
    fingerprint, so a later check need not read it again.
    """
    fd = open_regular(source)
    try:
        # O_EXCL: never through an existing file or symlink; 0o666 less the umask, as open("x").
        out = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            _copy_all(fd, out)
            sha256, written = _hash_descriptor(out, str(target))
        finally:
            os.close(out)
    finally:
        os.close(fd)
    if ledger is not None:
        ledger.note(target, written, sha256, follow_symlinks=False)
    return sha256


def _copy_all(source: int, target: int) -> None:
    copied = 0
    try:
        while count := os.copy_file_range(source, target, 1 << 30):
            copied += count
    except OSError:
        if copied:
            raise
        # Refused before any byte moved (another filesystem type, an old kernel): copy here.
        while chunk := os.read(source, _CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(target, view) :]


_BUFFERS: Final = threading.local()


def _read_buffer() -> bytearray:
    """This thread's one read buffer for hashing (``_CHUNK`` bytes), made once.

    A fresh 1 MiB ``bytearray`` per file costs a zeroing and a page fault per
    page before the first byte is read: about 0.1 ms, which every file of a
    snapshot paid. Reuse is safe: a thread hashes one file at a time, and the
    buffer is only ever read back through ``view[:count]`` of the latest read.
    """
    buffer: bytearray | None = getattr(_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = bytearray(_CHUNK)
        _BUFFERS.buffer = buffer
    return buffer


def _hash_descriptor(fd: int, name: str, stop: StopWhen | None = None) -> tuple[str, Fingerprint]:
    """SHA-256 of the whole file open at ``fd`` (read with ``pread``) and its fingerprint,
    which must be the same before and after the read, else ``OSError``; ``stop`` is
    checked before each chunk (``HashStopped``)."""
    before = os.fstat(fd)
    hasher = hashlib.sha256()
    buffer = _read_buffer()
    view = memoryview(buffer)
    offset = 0
    while True:
        if stop is not None:
            stop.check(f"hashing {name}")
        count = os.preadv(fd, [buffer], offset)
        if not count:
            break
        hasher.update(view[:count])
        offset += count
    after = fingerprint_of(os.fstat(fd))
    if fingerprint_of(before) != after:
        raise OSError(f"{name} changed while it was hashed")
    return hasher.hexdigest(), after


# --- reading each file once --------------------------------------------------------------

# Filesystems whose every write path (write, truncate, fallocate, copy and clone
# ranges, and the first write through each shared mapping: page_mkwrite) sets
# the inode's ctime to the current time. tmpfs is not one: a write through a
# shared mapping leaves its timestamps alone.
_STAMPING_FILESYSTEMS: Final = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})
# A ctime this much older than the clock cannot be stamped again by a later
# write, whatever the filesystem's timestamp granularity (1 s at worst here).
_SETTLED_NS: Final = 2_000_000_000


@final
@attrs.frozen
class _Known:
    fingerprint: Fingerprint
    sha256: str
    settled: bool  # a later change of the file would change its fingerprint


def _filesystem_types() -> dict[int, str]:
    """Device number -> filesystem type, from ``/proc/self/mountinfo`` (Linux)."""
    types: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if "-" not in fields:
                    continue
                major, _, minor = fields[2].partition(":")
                kind = fields[fields.index("-") + 1]
                device = os.makedev(int(major), int(minor))
                # One device mounted twice is one filesystem; anything odd is unknown.
                types[device] = kind if types.get(device, kind) == kind else "?"
    except (OSError, ValueError, IndexError):
        return {}
    return types


@final
class FileLedger:
    """What one attempt has hashed: each file is read once, then compared by fingerprint.

    A file is hashed from one descriptor, with ``fstat`` before and after: the
    fingerprint (device, inode, size, mtime and ctime in nanoseconds) is that
    of the bytes hashed, and a file that changed meanwhile is an ``OSError``.
    Asked again, the ledger compares the path's current fingerprint with the
    recorded one and returns the recorded hash only if they are equal *and*
    the record is settled; otherwise it hashes again.

    Why an equal fingerprint means equal bytes: on the filesystems listed in
    ``_STAMPING_FILESYSTEMS`` every way of changing a file's bytes stamps its
    ctime with the current time, and no process can set a ctime (``utime``
    sets mtime, and stamps ctime itself). Renaming another file over the path
    changes the inode, or, if the old inode's number is reused, its ctime. So
    a change is invisible only if it is stamped with the recorded ctime
    itself, which needs the change to happen in the same clock tick as the
    file's last recorded change. A record is settled (trusted) when that is
    impossible for every later change: its ctime is older than the clock by
    more than any timestamp granularity (``_SETTLED_NS``), or older than the
    ctime of a file written on the same filesystem afterwards (``settle``,
    with the request file the kernel writes right before each launch: any
    change by the launched step is stamped at least that late). Elsewhere
    (tmpfs, network and FUSE filesystems, an unknown device) every check hashes.

    Not covered, as with hashing at fixed points: a process that already held
    a writable shared mapping of the file before the record was taken can
    write through it without a new stamp until the page is written back. Only
    a process running concurrently with the attempt can hold one (a step's
    processes start after the record and are dead before the next check).
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, bool], _Known] = {}
        self._types: dict[int, str] | None = None
        self.hashed_bytes = 0  # bytes read to hash: what the fingerprints saved is visible
        # A run's pin ledger (``PinCache``) is shared by the attempts of its
        # threads (a Dask worker runs several): settle() iterates the records.
        self._lock = threading.Lock()

    def _stamping(self, device: int) -> bool:
        if self._types is None:
            self._types = _filesystem_types()
        return self._types.get(device) in _STAMPING_FILESYSTEMS

    def _settled(self, fingerprint: Fingerprint) -> bool:
        device, ctime_ns = fingerprint[0], fingerprint[4]
        return self._stamping(device) and ctime_ns < time.time_ns() - _SETTLED_NS

    def note(
        self, path: Path | str, fingerprint: Fingerprint, sha256: str, *, follow_symlinks: bool
    ) -> None:
        """Record that the file at ``path``, with ``fingerprint``, has ``sha256``
        (the caller read or wrote exactly those bytes, from one descriptor)."""
        key = (os.fspath(path), follow_symlinks)
        with self._lock:
            was = self._known.get(key)
            # The same record again (a later attempt's sealed copy) stays settled.
            same = was is not None and (was.fingerprint, was.sha256) == (fingerprint, sha256)
            settled = (same and was is not None and was.settled) or self._settled(fingerprint)
            self._known[key] = _Known(fingerprint, sha256, settled)

    def holds(self, path: Path | str, fingerprint: Fingerprint) -> bool:
        """True if the file at ``path`` (symlinks followed) still has ``fingerprint``
        and the ledger's settled record of it has that fingerprint too: its bytes are
        then the ones recorded (see the class docstring)."""
        known = self._known.get((os.fspath(path), True))
        if known is None or not known.settled or known.fingerprint != fingerprint:
            return False
        try:
            return fingerprint_of(os.stat(path)) == fingerprint
        except OSError:
            return False

    def settle(self, probe: Path | str) -> None:
        """Settle every record older than ``probe``, a file the kernel has just written.

        Any later change of a recorded file on the probe's filesystem is
        stamped no earlier than the probe's ctime, so a record whose ctime is
        strictly older can no longer change without changing its fingerprint.
        """
        try:
            status = os.stat(probe)
        except OSError:  # nothing settled: every record is hashed again
            return
        if not self._stamping(status.st_dev):
            return
        with self._lock:
            for key, known in self._known.items():
                if (
                    not known.settled
                    and known.fingerprint[0] == status.st_dev
                    and known.fingerprint[4] < status.st_ctime_ns
                ):
                    self._known[key] = attrs.evolve(known, settled=True)

    def sha256(
        self, path: Path | str, *, follow_symlinks: bool, stop: StopWhen | None = None
    ) -> str:
        """SHA-256 of the regular file at ``path`` (a symlink at the last component is
        followed only with ``follow_symlinks``); raises ``OSError``, or ``HashStopped``
        when ``stop`` ends the read (nothing is recorded then)."""
        key = (os.fspath(path), follow_symlinks)
        known = self._known.get(key)
        if known is not None and known.settled:
            current = os.stat(path) if follow_symlinks else os.lstat(path)
            if fingerprint_of(current) == known.fingerprint:
                return known.sha256
        fd = open_regular(path, follow_symlinks=follow_symlinks)
        try:
            sha256, recorded = _hash_descriptor(fd, os.fspath(path), stop)
        finally:
            os.close(fd)
        known = _Known(recorded, sha256, self._settled(recorded))
        with self._lock:
            self.hashed_bytes += recorded[2]
            self._known[key] = known
        return sha256


def list_digest(items: Iterable[FileDigest]) -> str:
    """Canonical digest of the sorted ``[[path, sha256], ...]`` list."""
    pairs = sorted([item.path, item.sha256] for item in items)
    return digest(pairs)
