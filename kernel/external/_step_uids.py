"""The host uid a step runs as when the kernel is root (issue 34, ADR 0021).

Theory of operation:

- **A range, no passwd entries.** As Nix runs builds as its ``nixbld``
  users and never as its daemon's root, a step started by a root kernel runs
  as a uid of its own, taken from a range that needs no account:
  ``DEFAULT_STEP_UIDS`` (2,100,000,000 to 2,100,065,535: far above every
  distribution's system and user ranges and the usual ``/etc/subuid``
  blocks, below 2**31 for tools that keep uids signed). An operator moves it
  with ``KERNEL_STEP_UIDS=FIRST-LAST``, read where the command starts. A uid
  that has a passwd entry, or that owns the kernel's own process, is never
  taken.
- **One step, one uid, at a time.** A uid is held by an exclusive ``flock``
  on ``LOCK_DIR/<uid>.lock`` (a root-only 0700 directory) for as long as
  the step runs: concurrent steps in pool workers, Dask workers or other
  kernels on the host get distinct uids, so one step's processes never
  count against, signal, or read another's (RLIMIT_NPROC and the per-uid
  quotas of Linux are per uid). A lock dies with its holder; nothing needs
  cleaning after a crash.
- **Nothing of the kernel's is owned by it.** The step's uid owns its
  output directory during the step and nothing else; the kernel gives every
  file back to its own uid afterwards (``kernel.external._files.reclaim``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import pwd
from collections.abc import Mapping
from typing import Final, final

import attrs

__all__ = [
    "DEFAULT_STEP_UIDS",
    "LOCK_DIR",
    "StepUidError",
    "StepUidRange",
    "StepUidSlot",
    "acquire_step_uid",
    "step_uid_range",
]

LOCK_DIR: Final = "/run/replay-kernel/step-uids"
_ENVIRONMENT_KEY: Final = "KERNEL_STEP_UIDS"
_UID_MAX: Final = 2**31 - 2


class StepUidError(OSError):
    """No step uid can be had: a bad range, every uid busy, or no lock directory."""


@final
@attrs.frozen
class StepUidRange:
    """The uids steps may run as, both ends included."""

    first: int
    last: int

    def __attrs_post_init__(self) -> None:
        if not 1000 <= self.first <= self.last <= _UID_MAX:
            raise StepUidError(
                f"step uids {self.first}-{self.last}: need 1000 <= FIRST <= LAST <= {_UID_MAX}"
            )


DEFAULT_STEP_UIDS: Final = StepUidRange(2_100_000_000, 2_100_065_535)


def step_uid_range(environment: Mapping[str, str]) -> StepUidRange:
    """The range ``KERNEL_STEP_UIDS=FIRST-LAST`` names, else the default (``StepUidError``)."""
    text = environment.get(_ENVIRONMENT_KEY)
    if text is None or not text.strip():
        return DEFAULT_STEP_UIDS
    first, sep, last = text.strip().partition("-")
    if not sep or not first.isdigit() or not last.isdigit():
        raise StepUidError(f"{_ENVIRONMENT_KEY}={text!r}: expected FIRST-LAST, two integers")
    return StepUidRange(int(first), int(last))


@final
class StepUidSlot:
    """One uid held for one step; ``release`` (or leaving the ``with``) frees it."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        """Free the uid (closing the lock file drops the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StepUidSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_dir() -> str:
    try:
        os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
        info = os.lstat(LOCK_DIR)
    except OSError as exc:
        raise StepUidError(f"{LOCK_DIR}: {exc.strerror or exc}") from exc
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise StepUidError(f"{LOCK_DIR} is not a 0700 directory of the kernel's user")
    return LOCK_DIR


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def acquire_step_uid(uids: StepUidRange, start: int = 0) -> StepUidSlot:
    """Hold the first free uid of ``uids`` (searching from ``start``); raises ``StepUidError``.

    ``start`` spreads concurrent callers over the range (a pid, say) so that
    they do not all contend for its first locks.
    """
    directory = _lock_dir()
    count = uids.last - uids.first + 1
    for step in range(min(count, 4096)):
        uid = uids.first + (start + step) % count
        if uid in (os.getuid(), os.geteuid()) or _has_account(uid):
            continue
        path = os.path.join(directory, f"{uid}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                continue
            raise StepUidError(f"{path}: {exc.strerror or exc}") from exc
        return StepUidSlot(uid, fd)
    raise StepUidError(f"every step uid of {uids.first}-{uids.last} that was tried is busy")
