"""The pinned files of a whole run, read once per process rather than once per attempt.

Theory of operation (ADR 0009, "Each file read once", widened from an
attempt to a run; issue 21's measurements put about three quarters of the
kernel's own work per certification in hashing the same pins again):

- a ``PinCache`` holds a ``FileLedger`` for pinned files only and the
  sealed copies of the pinned executables and scripts. Every attempt of a
  run given the cache checks its pins through that ledger: a pinned file
  already hashed, whose settled record still has the file's current
  fingerprint, is not read again (the ledger's docstring says why an equal
  fingerprint means equal bytes, and when a record is not trusted);
- a sealed copy is reused by a later attempt only if the file on disk
  still has the fingerprint it had while it was copied and the ledger's
  record of it is settled; otherwise a fresh copy is made (the old one stays
  open: a launch of another thread may be running it). What runs is still a
  sealed copy whose hash is compared with the pin before every launch;
- snapshot copies and evidence stay in each attempt's own ledger: they are
  the attempt's files, never shared;
- ``process_pin_cache()`` is the cache of this process (a pool or Dask
  worker has its own; a forked child starts a fresh one, since a lock held
  by another thread at the fork would never be released there). Its sealed
  copies live as long as the process: a few descriptors, one per pinned
  executable and script.

Nothing here decides a verdict: a pin that does not hold is found exactly as
with a fresh ledger (the file is hashed whenever its fingerprint is not the
recorded, settled one), and the outcome records are the same bytes.
"""

from __future__ import annotations

import os
import threading
from typing import final

from kernel.external._contain import SealedFile, seal_copy
from kernel.external._files import FileLedger

__all__ = ["PinCache", "process_pin_cache"]


@final
class PinCache:
    """The pin ledger and the sealed copies shared by the attempts of one process."""

    def __init__(self) -> None:
        self.files = FileLedger()
        self._copies: dict[str, SealedFile] = {}
        self._retired: list[SealedFile] = []  # replaced copies stay open: they may be running
        self._lock = threading.Lock()
        self.copies_made = 0  # what the reuse saved is visible (tests, benchmarks)

    def sealed(self, path: str) -> SealedFile:
        """The sealed copy of ``path``: the cached one while the file provably holds the
        bytes copied, else a fresh one (raises ``OSError``)."""
        with self._lock:
            copy = self._copies.get(path)
            if copy is not None and self.files.holds(path, copy.source):
                return copy
            fresh = seal_copy(path)
            self.copies_made += 1
            if copy is not None:
                self._retired.append(copy)
            self._copies[path] = fresh
            return fresh


_process_cache: PinCache | None = None
_process_lock = threading.Lock()


def process_pin_cache() -> PinCache:
    """This process's ``PinCache`` (made on first use; a forked child gets its own)."""
    global _process_cache
    with _process_lock:
        if _process_cache is None:
            _process_cache = PinCache()
        return _process_cache


def _forget_after_fork() -> None:
    # A lock held by another thread at the fork is never released in the child.
    global _process_cache, _process_lock
    _process_cache = None
    _process_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
