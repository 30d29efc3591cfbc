"""Reading a named input, ``-`` or a FIFO, bounded: light, so every command can import it."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from kernel.job.errors import JobRefused

__all__ = ["STDIO", "bounded_lines", "is_stdio", "is_stream", "open_input"]

STDIO: Final = "-"


def is_stdio(path: Path | str | None) -> bool:
    return path is not None and str(path) == STDIO


def is_stream(path: Path) -> bool:
    """``-`` (stdin) or a FIFO/pipe (``<(cat file)``): read once, front to back."""
    if is_stdio(path):
        return True
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_input(path: Path) -> BinaryIO:
    """A binary handle on ``path`` (``-``: stdin); a device or directory is refused.

    A FIFO or pipe is read as a stream, as stdin is: every reader bounds what
    it reads, so a stream can never exhaust memory. A device (``/dev/zero``)
    is refused: it never ends.
    """
    if is_stdio(path):
        return sys.stdin.buffer
    try:
        if path.exists() and not (path.is_file() or is_stream(path)):
            raise JobRefused("not_a_regular_file", f"{path}: not a regular file")
        return path.open("rb")
    except OSError as exc:
        raise JobRefused("unreadable_file", f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path
        raise JobRefused("unreadable_file", f"{path}: {exc}") from None


def bounded_lines(handle: BinaryIO, cap: int) -> Iterator[bytes | None]:
    """Each line of ``handle`` without its newline; ``None`` for a line longer than ``cap``.

    An over-long line is skipped in chunks, never held whole, so one line can
    never exhaust memory whatever the file holds.
    """
    while True:
        line = handle.readline(cap + 2)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1] if len(line) - 1 <= cap else None
            continue
        if len(line) <= cap:
            yield line  # the last line, without a newline
            continue
        while True:  # skip the rest of the over-long line
            chunk = handle.readline(1 << 20)
            if not chunk or chunk.endswith(b"\n"):
                break
        yield None
