"""Content pins: the SHA-256 of the bytes a pinned path delivers right now.

Rules (seed 003, "Command identity"):

- a pin is checked by hashing the file at its absolute path, following
  symlinks (an interpreter is often reached through a venv symlink: what
  runs is the target's bytes, and those are what the pin covers);
- the target must be a regular file; a missing, unreadable or non-regular
  target is a mismatch, never a pass;
- pins are re-checked, never cached across runs: a cache keyed on mtime
  would miss an ordinary same-size, same-second replacement. Within one
  attempt, a ``FileLedger`` hashes each pinned file once and compares its
  full stat fingerprint (ctime in nanoseconds included, which no process can
  set) at each later check, hashing again on any difference or wherever a
  fingerprint cannot be trusted (``kernel.external._files.FileLedger``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterable
from typing import Final, final

import attrs

from kernel.external._contain import SealedCopies
from kernel.external._files import FileLedger, open_regular
from kernel.external._manifest import Pin
from kernel.external.errors import PinMismatchError

__all__ = ["PinFailure", "file_sha256", "first_pin_failure", "verify_pins"]

_CHUNK: Final = 1024 * 1024


def file_sha256(path: str) -> str:
    """SHA-256 of the regular file reached through ``path``; raises ``OSError``."""
    fd = open_regular(path, follow_symlinks=True)  # a FIFO is refused, never waited on
    try:
        hasher = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            hasher.update(chunk)
        return hasher.hexdigest()
    finally:
        os.close(fd)


@final
@attrs.frozen
class PinFailure:
    """One pin that does not hold: expected hash, actual hash (None if unreadable)."""

    path: str
    expected: str
    actual: str | None
    detail: str


def first_pin_failure(
    pins: Iterable[Pin],
    ledger: FileLedger | None = None,
    *,
    sealed: SealedCopies | None = None,
    sealing: Collection[str] = (),
) -> PinFailure | None:
    """The first pin whose file does not hash to its declared SHA-256, or None.

    With a ``ledger``, a file it has already hashed is compared by fingerprint.
    A path in ``sealing`` is checked through its sealed copy in ``sealed``
    (made now if needed, and recorded in the ledger): the copy is read from
    the file once and hashed, and that hash is the file's.
    """
    for pin in pins:
        try:
            if sealed is not None and pin.path in sealing:
                copy = sealed.get(pin.path)
                if ledger is not None:
                    ledger.note(pin.path, copy.source, copy.sha256, follow_symlinks=True)
                actual = copy.sha256
            elif ledger is None:
                actual = file_sha256(pin.path)
            else:
                actual = ledger.sha256(pin.path, follow_symlinks=True)
        except OSError as exc:
            return PinFailure(pin.path, pin.sha256, None, f"{pin.path}: {exc.strerror or exc}")
        if actual != pin.sha256:
            return PinFailure(
                pin.path, pin.sha256, actual, f"{pin.path}: sha256 {actual} != pinned {pin.sha256}"
            )
    return None


def verify_pins(pins: Iterable[Pin]) -> None:
    """Raise ``PinMismatchError`` unless every pin holds."""
    failure = first_pin_failure(pins)
    if failure is not None:
        raise PinMismatchError("pin_mismatch", failure.detail)
