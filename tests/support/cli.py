"""The real command line, run as a user runs it: a fresh interpreter, no shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["KERNEL_MAIN", "kernel"]

# What the ``kernel`` console script runs; ``python -c KERNEL_MAIN ARGS...``
# is the command line with ``argv[0]`` as a user sees it in messages.
KERNEL_MAIN = "import sys; from kernel.cli import main; sys.argv[0] = 'kernel'; main()"


def kernel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
