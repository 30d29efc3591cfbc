"""Boundary helpers shared by the commands: read strictly, write safely, refuse in one line.

``-`` names stdin wherever a command reads a path and stdout wherever it
writes one. Files are written atomically (a temporary file renamed into
place) with the mode the user's umask gives (``0666 & ~umask``), unless the
caller says they hold secrets (``0600``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NoReturn, TypeVar

import typer

from kernel.bundles import BUNDLE_LIMITS, is_stream_header
from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, loads

T = TypeVar("T")
STDIO = "-"
_stdin_bytes: dict[int, bytes] = {}


def refuse(code: str, message: str, *, exit_code: int = 2) -> NoReturn:
    """Print ``error: <code>: <message>`` on stderr and exit (2: input refused)."""
    typer.echo(f"error: {code}: {message}", err=True)
    raise typer.Exit(exit_code)


def is_stdio(path: Path | str | None) -> bool:
    return path is not None and str(path) == STDIO


def refuse_stdio(**paths: Path | None) -> None:
    """Refuse ``-`` where a command needs a named file or directory (exit 2).

    A run directory, a manifest (its folder is the default repository), a
    key or a signed envelope is read by name: ``-`` there used to be looked up
    as a file called ``-`` ("No such file or directory", or a file of that
    name written). Keyword names are the options' (``run_dir`` -> RUN_DIR).
    """
    for name, path in paths.items():
        if is_stdio(path):
            label = name.upper() if name.isupper() else f"--{name.replace('_', '-')}"
            refuse("stdin_not_supported",
                   f"{label}: '-' (stdin/stdout) is not accepted here; name the file or directory")


def open_input(path: Path) -> BinaryIO:
    """A binary handle on ``path`` (``-``: stdin); a device, FIFO or directory is refused."""
    if is_stdio(path):
        return sys.stdin.buffer
    try:
        if path.exists() and not path.is_file():
            refuse("not_a_regular_file", f"{path}: not a regular file")
        return path.open("rb")
    except OSError as exc:
        refuse("unreadable_file", f"{path}: {exc.strerror or exc}")


def read_bounded(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file (or stdin) of at most ``limit``; else a refusal.

    Reads at most one byte past the limit, so a device or FIFO (``/dev/zero``)
    or a file growing while read can never exhaust memory or hang the reader.
    Stdin is read once and remembered, so a command may read it twice.
    """
    if is_stdio(path) and limit in _stdin_bytes:
        return _stdin_bytes[limit]
    handle = open_input(path)
    try:
        data = handle.read(limit + 1)
    except OSError as exc:
        refuse("unreadable_file", f"{path}: {exc.strerror or exc}")
    finally:
        if not is_stdio(path):
            handle.close()
    if len(data) > limit:
        refuse("document_too_large", f"{path}: more than {limit} bytes")
    if is_stdio(path):
        _stdin_bytes[limit] = data
    return data


def refuse_a_stream(path: Path, hint: str) -> None:
    """Refuse a bundle stream where one JSON document is read, saying so (exit 2).

    Without it a stream is refused as malformed JSON ("Extra data") or, past
    the document limit, as too large: true, but no help to whoever holds one.
    """
    if is_stdio(path):
        first = read_bounded(path).split(b"\n", 1)[0]
    else:
        handle = open_input(path)
        try:
            first = handle.readline(BUNDLE_LIMITS.line_bytes + 1)
        except OSError as exc:
            refuse("unreadable_file", f"{path}: {exc.strerror or exc}")
        finally:
            handle.close()
    if is_stream_header(first):
        refuse("bundle_stream_not_supported", f"{path}: a bundle stream (JSON Lines); {hint}")


def read_document(path: Path, cls: type[T]) -> T:
    """Load ``path`` strictly as ``cls``; every failure is a one-line refusal (exit 2)."""
    data = read_bounded(path)
    try:
        return loads(data, cls)
    except SerdeError as exc:
        refuse(exc.code, f"{path}: {exc.message}")


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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutputFile:
    """Bytes written to ``path`` as they come and renamed into place on ``commit``.

    ``-`` writes to stdout directly. Until ``commit`` a reader sees the old
    file or none; ``discard`` (or leaving the ``with`` block by an exception)
    removes the partial file. Mode: ``0666 & ~umask``, or ``0600`` for secrets.
    """

    def __init__(self, path: Path, *, secret: bool = False) -> None:
        self.path = path
        self._stdout = is_stdio(path)
        self._tmp: str | None = None
        if self._stdout:
            self._handle: BinaryIO = sys.stdout.buffer
            return
        directory = path.parent if str(path.parent) else Path(".")
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        except OSError as exc:
            refuse("unwritable_output", f"{path}: {exc.strerror or exc}")
        if not secret:
            os.fchmod(fd, 0o666 & ~_umask())
        self._handle = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        try:
            self._handle.write(data)
        except BrokenPipeError:
            if self._stdout:
                raise  # the reader left (| head): exit 141 at the top, not a refusal
            self.discard()
            refuse("unwritable_output", f"{self.path}: broken pipe")
        except OSError as exc:
            self.discard()
            refuse("unwritable_output", f"{self.path}: {exc.strerror or exc}")

    def commit(self) -> None:
        if self._stdout:
            self._handle.flush()
            return
        if self._tmp is None:
            return
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.discard()
            refuse("unwritable_output", f"{self.path}: {exc.strerror or exc}")
        self._tmp = None

    def discard(self) -> None:
        if self._tmp is not None:
            self._handle.close()
            Path(self._tmp).unlink(missing_ok=True)
            self._tmp = None

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def write_atomically(path: Path, data: bytes, *, secret: bool = False) -> None:
    """Replace ``path`` with ``data`` so a reader never sees a partial file (``-``: stdout)."""
    with OutputFile(path, secret=secret) as out:
        out.write(data)
        out.commit()
