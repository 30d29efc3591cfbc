"""The stat fingerprint of a file: what a ``FileLedger`` compares instead of re-reading it."""

from __future__ import annotations

import os

__all__ = ["Fingerprint", "fingerprint_of"]

Fingerprint = tuple[int, int, int, int, int]
"""(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of a file."""


def fingerprint_of(status: os.stat_result) -> Fingerprint:
    """The fingerprint of a ``stat`` result."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
