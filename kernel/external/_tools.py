"""The kernel's trusted base of system tools: found in ``/usr/bin`` and ``/bin`` only.

Never through ``PATH``: what wraps a step (bubblewrap, util-linux's
``setpriv``, ``prlimit``, ``unshare``, ``nsenter``, ``mount``, the system
shell) is the machine's, not the environment's (THREAT_MODEL.md).
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["TOOL_DIRS", "system_tool"]

TOOL_DIRS: Final = ("/usr/bin", "/bin")


def system_tool(name: str) -> str | None:
    """The executable ``name`` in ``/usr/bin`` or ``/bin``; None where neither has it."""
    for directory in TOOL_DIRS:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None
