"""File helpers of the run directory: atomic writes, strict tree hashing, copies.

Rules:

- metadata and requests are written to a temporary file in the same
  directory and renamed with ``os.replace``: a reader sees the old file or
  the new one, never a torn one; only the commit point (``metadata.json``,
  written last) is fsynced, with its directory;
- hashing a tree never follows a symlink, and reports every entry that is not
  a plain directory or regular file;
- a path digest list is ``[[path, sha256], ...]`` sorted by path, and its
  digest is the canonical digest of that list (seed 003: "digest of sorted
  evidence path/hash pairs").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from kernel.external._outcome import FileDigest
from kernel.identity import JsonValue, canonical_json, digest

__all__ = [
    "TreeEntry",
    "copy_hashed",
    "list_digest",
    "open_regular",
    "read_capped",
    "sha256_nofollow",
    "walk_tree",
    "write_atomic",
    "write_json_atomic",
]

_CHUNK: Final = 1024 * 1024


def process_umask() -> int:
    """This process's umask, read without changing it.

    ``os.umask`` can only be read by setting it, which races with the threads
    that drain a step's output; Linux reports it in ``/proc/self/status``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # fallback: a brief, restrictive value
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    Readers see the old file or the new one, never a torn one. ``durable``
    (the run's commit point, ``metadata.json``) also fsyncs the file before
    the rename and the directory after it; other files are not fsynced: the
    metadata records the digest of each one that matters, so one lost in a
    crash is detected, not trusted.
    """
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # A run store holds evidence, not secrets: the user's umask decides who
        # may read it (mkstemp's 0600 would hide it from an auditing colleague).
        os.fchmod(fd, 0o666 & ~process_umask())
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
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def write_json_atomic(path: Path, value: JsonValue) -> bytes:
    """Write canonical JSON (plus a newline) atomically; return the bytes written."""
    data = canonical_json(value) + b"\n"
    write_atomic(path, data)
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


def walk_tree(root: Path) -> tuple[TreeEntry, ...]:
    """Every entry under ``root`` (never following symlinks), sorted by path.

    Iterative, so a directory chain deeper than the interpreter's recursion
    limit (a producer can build one) is walked, not a ``RecursionError``; a
    path past ``PATH_MAX`` is an ``OSError`` like any other I/O failure.
    """
    entries: list[TreeEntry] = []
    pending: list[tuple[Path, str]] = [(root, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as it:
            for item in it:
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


def copy_hashed(source: Path, target: Path) -> str:
    """Copy a regular file (no symlink at the last component) and return the SHA-256
    of the bytes written: read once, hashed and written in the same pass."""
    fd = open_regular(source)
    try:
        hasher = hashlib.sha256()
        with open(target, "xb") as out:
            while chunk := os.read(fd, _CHUNK):
                hasher.update(chunk)
                out.write(chunk)
        return hasher.hexdigest()
    finally:
        os.close(fd)


def list_digest(items: Iterable[FileDigest]) -> str:
    """Canonical digest of the sorted ``[[path, sha256], ...]`` list."""
    pairs = sorted([item.path, item.sha256] for item in items)
    return digest(pairs)
