"""Boundary helpers shared by the replay-side commands: read strictly, refuse in one line."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import NoReturn, TypeVar

import typer

from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, loads

T = TypeVar("T")


def refuse(code: str, message: str, *, exit_code: int = 2) -> NoReturn:
    """Print ``error: <code>: <message>`` on stderr and exit (2: input refused)."""
    typer.echo(f"error: {code}: {message}", err=True)
    raise typer.Exit(exit_code)


def read_bounded(path: Path) -> bytes:
    """The bytes of a regular file of at most ``MAX_DOCUMENT_BYTES``; else a refusal.

    Reads at most one byte past the limit, so a device or FIFO (``/dev/zero``)
    or a file growing while read can never exhaust memory or hang the reader.
    """
    try:
        if path.exists() and not path.is_file():
            refuse("not_a_regular_file", f"{path}: not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        refuse("unreadable_file", f"{path}: {exc.strerror or exc}")
    if len(data) > MAX_DOCUMENT_BYTES:
        refuse("document_too_large", f"{path}: more than {MAX_DOCUMENT_BYTES} bytes")
    return data


def read_document(path: Path, cls: type[T]) -> T:
    """Load ``path`` strictly as ``cls``; every failure is a one-line refusal (exit 2)."""
    data = read_bounded(path)
    try:
        return loads(data, cls)
    except SerdeError as exc:
        refuse(exc.code, f"{path}: {exc.message}")


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader never sees a partial file."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
