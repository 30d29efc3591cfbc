"""Handing a step's output directory to the step, and taking it back (issue 34).

- **Before** a step run under a uid of its own (a root kernel), its one
  output directory is given to that uid (``lend``): the only thing on the
  host that uid can write.
- **After** the step (every process of it gone: its PID namespace is empty),
  ``reclaim`` walks the directory without following a link and, for every
  entry: gives it back to the kernel's uid and gid where the step's uid owns
  it, and clears what a run store must never keep: setuid, setgid and
  sticky bits, and group or world write. Directories become 0755, files
  0644 (0755 where the step made them executable). An entry the step's uid
  does not own (the kernel's own request, a hard link the step could not
  have made) keeps its owner and gets the same mode rules. So whatever the
  step left is owned by the kernel and cannot be run by another local user
  as anybody else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["lend", "reclaim"]


def lend(directory: Path, uid: int) -> None:
    """Make ``directory`` (empty, the kernel's) writable by ``uid`` alone: owner ``uid``, 0700."""
    os.chown(directory, uid, uid, follow_symlinks=False)
    os.chmod(directory, 0o700)


def _mode_for(info: os.stat_result) -> int:
    if stat.S_ISDIR(info.st_mode):
        return 0o755
    if stat.S_ISREG(info.st_mode):
        return 0o755 if info.st_mode & 0o111 else 0o644
    return 0o600


def _take_back(path: str, info: os.stat_result, step_uid: int | None) -> None:
    if stat.S_ISLNK(info.st_mode):
        if step_uid is not None and info.st_uid == step_uid:
            os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
        return  # a link has no mode of its own on Linux
    if step_uid is not None and info.st_uid == step_uid:
        os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
    wanted = _mode_for(info)
    if stat.S_IMODE(info.st_mode) != wanted:
        # Not a link (lstat said so) and nothing of the step runs any more to swap one in.
        os.chmod(path, wanted)


def reclaim(directory: Path, step_uid: int | None) -> None:
    """Give everything under ``directory`` back to the kernel, with run-store modes.

    Raises ``OSError``.

    Called once the step's last process is gone, so nothing changes under
    the walk. ``step_uid`` is the uid the step ran as (``None``: it ran as
    the kernel's own uid in a user namespace; only the modes are mended).
    """
    root = os.fspath(directory)
    _take_back(root, os.lstat(root), step_uid)
    # Iterative, as walk_tree: a producer's 3,000-deep chain is walked, not a
    # RecursionError; a directory is mended before it is listed.
    pending = [root]
    while pending:
        parent = pending.pop()
        with os.scandir(parent) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                _take_back(entry.path, info, step_uid)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
