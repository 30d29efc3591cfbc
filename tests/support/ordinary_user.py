"""Run a command as an ordinary (unprivileged) user, from a suite that runs as root.

CI and these machines run the suite as root, so every containment guarantee
is tested a second time with the kernel as an ordinary user (issue 34,
deliverable 7). The user is a uid with no passwd entry (``ORDINARY_UID``,
outside the kernel's step-uid range) and no capability. On these machines
the venv's interpreter lives under ``/root`` (0700), which that uid cannot
reach: the command runs in a private mount namespace (bubblewrap, as root,
no other namespace) in which ``/root`` is an empty 0755 tmpfs with only the
interpreter's ``/root/.pyenv`` bound back read-only, so the ordinary user
runs the very venv the suite runs, and reads nothing else of ``/root``.
Elsewhere (an interpreter outside ``/root``) the same wrapper just changes
uid.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Final

__all__ = ["ORDINARY_UID", "as_ordinary_user", "ordinary_home"]

ORDINARY_UID: Final = 2_099_000_001


def _under_root(path: str) -> str | None:
    resolved = os.path.realpath(path)
    if resolved.startswith("/root/"):
        return "/root/" + resolved[len("/root/"):].split("/")[0]
    return None


def ordinary_home() -> Path:
    """A fresh directory under ``/tmp`` the ordinary user owns (its HOME and work area).

    Not under pytest's base, which is root's 0700; the caller removes it.
    """
    home = Path(tempfile.mkdtemp(prefix="kernel-ordinary-", dir="/tmp"))
    os.chown(home, ORDINARY_UID, ORDINARY_UID)
    os.chmod(home, 0o755)
    return home


def as_ordinary_user(argv: list[str]) -> list[str]:
    """``argv`` run as ``ORDINARY_UID`` (no capability, no groups), reaching the venv."""
    assert os.geteuid() == 0, "only a root suite needs to become an ordinary user"
    mounts: list[str] = []
    kept = {p for p in (_under_root(sys.executable), _under_root(sys.base_prefix)) if p}
    if kept:
        mounts += ["--perms", "0755", "--tmpfs", "/root"]
        for path in sorted(kept):
            mounts += ["--ro-bind", path, path]
    uid = str(ORDINARY_UID)
    return [
        "/usr/bin/bwrap", "--dev-bind", "/", "/", *mounts, "--die-with-parent", "--",
        "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--", *argv,
    ]  # fmt: skip
