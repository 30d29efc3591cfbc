"""Boundary helpers shared by the commands: read strictly, write safely, refuse in one line.

``-`` names stdin wherever a command reads a path and stdout wherever it
writes one. A FIFO or pipe named as an input (``<(cat bundle.json)``) is read
as a stream, like stdin, within the same size limits; a device or directory
is refused.

Outputs never destroy what they point at (adr/0013, "Outputs"):

- nothing there, or a regular file: written atomically (a temporary file in
  the same directory renamed into place) with the mode the user's umask
  gives (``0666 & ~umask``), unless the caller says they hold secrets
  (``0600``);
- a symlink is followed: the rules apply to what it points at, and the link
  itself is never replaced;
- a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named
  pipe) is written through, never replaced: there is nothing to make atomic;
- anything else (a directory, a block device, a socket) is refused
  (``output_not_writable``, exit 2);
- an output that is one of the command's inputs (the same file by device and
  inode, or by real path) is refused before anything runs
  (``output_is_input``, exit 2);
- a write the machine cannot complete (a full disk or quota, an I/O error, a
  read-only filesystem) is the environment's failure, not the input's nor a
  verdict: ``error: no_space|io_error|read_only_filesystem: ...``, exit 4
  (``ENVIRONMENT_EXIT``), and the partial file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NoReturn, TypeVar

import typer

from kernel.job import STDIO as STDIO
from kernel.job import JobRefused, RefusalKind
from kernel.job import bounded_lines as bounded_lines
from kernel.job import is_stdio as is_stdio
from kernel.job import is_stream as is_stream
from kernel.job import open_input as job_open_input
from kernel.serde import MAX_DOCUMENT_BYTES, SerdeError, loads

T = TypeVar("T")
#: The exit code of a command its environment stopped (adr/0013): never 1 (a
#: verdict), 2 (the input) or 3 (integrity), so a pipeline retries elsewhere.
ENVIRONMENT_EXIT = 4
_REFUSAL_EXIT = {RefusalKind.INPUT: 2, RefusalKind.INTEGRITY: 3,
                 RefusalKind.ENVIRONMENT: ENVIRONMENT_EXIT}
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: "no_space",
    errno.EDQUOT: "no_space",
    errno.EIO: "io_error",
    errno.EROFS: "read_only_filesystem",
}
_stream_bytes: dict[tuple[str, int], bytes] = {}


def refuse(code: str, message: str, *, exit_code: int = 2) -> NoReturn:
    """Print ``error: <code>: <message>`` on stderr and exit (2: input refused)."""
    typer.echo(f"error: {code}: {message}", err=True)
    raise typer.Exit(exit_code)


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """A ``JobRefused`` from the job layer as the command's one ``error:`` line and exit
    code: 2 for the input, 3 for integrity, 4 for the environment (adr/0013)."""
    try:
        yield
    except JobRefused as exc:
        refuse(exc.code, exc.message, exit_code=_REFUSAL_EXIT[exc.kind])


def environment_code(exc: BaseException) -> str | None:
    """The stable code of an ``OSError`` the machine caused (a full disk, an I/O
    error, a read-only filesystem); None for any other error."""
    return _ENVIRONMENT_ERRNOS.get(exc.errno) if isinstance(exc, OSError) and exc.errno else None


def refuse_write(path: Path | str, exc: OSError, *, label: str = "") -> NoReturn:
    """One line for a write that failed: the environment's (exit 4), else ``unwritable_output``."""
    where = f"{label} {path}" if label else str(path)
    code = environment_code(exc)
    if code is not None:
        refuse(code, f"{where}: {exc.strerror or exc}; nothing was written there",
               exit_code=ENVIRONMENT_EXIT)
    refuse("unwritable_output", f"{where}: {exc.strerror or exc}")


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
    """``kernel.job.open_input``, its refusals as the command's (exit 2): a device or
    directory is refused, a FIFO or stdin read once as a stream."""
    with refusals():
        return job_open_input(path)


def read_bounded(path: Path, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file, stdin or a FIFO of at most ``limit``; else a refusal.

    Reads at most one byte past the limit, so a FIFO fed without end or a
    file growing while read can never exhaust memory or hang the reader.
    Stdin and FIFOs are read once and remembered, so a command may read them
    twice (a FIFO cannot be opened again for the same bytes).
    """
    key = (str(path), limit)
    stream = is_stream(path)
    if stream and key in _stream_bytes:
        return _stream_bytes[key]
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
    if stream:
        _stream_bytes[key] = data
    return data


def refuse_a_stream(path: Path, hint: str) -> None:
    """Refuse a bundle stream where one JSON document is read, saying so (exit 2).

    Without it a stream is refused as malformed JSON ("Extra data") or, past
    the document limit, as too large: true, but no help to whoever holds one.
    """
    # Here, not at the top: the bundle reader pulls in the replay machine, which
    # commands that never read a bundle (kernel check run) need not import.
    from kernel.bundles import BUNDLE_LIMITS, is_stream_header

    if is_stream(path):  # read once: the bytes are remembered for the real read
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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same device and inode, or real path."""
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):
            return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _stdin_is(path: Path) -> bool:
    """Whether stdin is redirected from the regular file ``path`` names."""
    try:
        given, named = os.fstat(sys.stdin.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISREG(given.st_mode) and (given.st_dev, given.st_ino) == (
        named.st_dev, named.st_ino)


def refuse_output_is_input(out: Path | None, *inputs: Path | None, label: str = "--out") -> None:
    """Refuse (exit 2, ``output_is_input``) an output that names one of the inputs.

    Called before anything is read or run: ``kernel replay same.json -o
    same.json`` used to replace its own input with its outcomes. A hard link
    or a symlink to the input is the same file (device and inode); ``-`` as
    the input is stdin, the same file when it is redirected from the output
    (``< b.json``); stdout (``-``) as the output is never the same file.
    """
    if out is None or is_stdio(out):
        return
    for source in inputs:
        if source is None:
            continue
        if is_stdio(source):
            if _stdin_is(out):  # kernel replay - -o b.json < b.json
                refuse("output_is_input",
                       f"{label} {out}: is the file on stdin, which this command reads; "
                       "nothing was read or written (write to another file)")
            continue
        if _same_file(out, source):
            refuse("output_is_input",
                   f"{label} {out}: is {source}, which this command reads; nothing was "
                   "read or written (write to another file)")


def refuse_unless_replaceable(path: Path, label: str, why: str) -> None:
    """Refuse (exit 2, ``output_not_writable``) an output that is not a regular file.

    For a command that writes more than one file from one option (``kernel
    attest --out``: the envelope, and the summary beside it) a device or FIFO
    cannot be written through: there is nothing "beside" it. Absent, a regular
    file, or a symlink to either (followed, as ``OutputFile`` does) is accepted;
    ``why`` says why the rest is refused.
    """
    try:
        mode = os.stat(path).st_mode  # through any symlink
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        refuse("unwritable_output", f"{label} {path}: {getattr(exc, 'strerror', None) or exc}")
    if not stat.S_ISREG(mode):
        refuse("output_not_writable", f"{label} {path}: not a regular file; {why}")


class OutputFile:
    """Bytes written to ``path`` as they come, in place on ``commit``; never destroying.

    What ``path`` is decides how it is written (the module's rules):

    - ``-``: stdout directly;
    - absent, or a regular file: a temporary file in the same directory,
      renamed over it on ``commit``. Until then a reader sees the old file or
      none; ``discard`` (or leaving the ``with`` block by an exception)
      removes the partial file. Mode ``0666 & ~umask``, or ``0600`` for secrets;
    - a symlink: followed, and the rules apply to its target (the link stays);
    - a character device or FIFO: opened and written through (``/dev/null``
      stays a device, a FIFO's reader gets the bytes); what was written before
      an error cannot be taken back, as with stdout;
    - anything else: refused (``output_not_writable``, exit 2).
    """

    def __init__(self, path: Path, *, secret: bool = False) -> None:
        self.path = path
        self._stdout = is_stdio(path)
        self._through = False
        self._tmp: str | None = None
        self._target = path
        if self._stdout:
            self._handle: BinaryIO = sys.stdout.buffer
            return
        try:
            mode: int | None = os.stat(path).st_mode  # through any symlink
        except FileNotFoundError:
            mode = None
        except (OSError, ValueError) as exc:
            refuse("unwritable_output", f"{path}: {getattr(exc, 'strerror', None) or exc}")
        if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            # Opened by the name given: /dev/stdout -> /proc/self/fd/1 -> a
            # pipe has no real path to open.
            self._open_through()
            return
        # A symlink is followed to what it points at (or would point at).
        self._target = Path(os.path.realpath(path))
        if mode is not None and not stat.S_ISREG(mode):
            refuse("output_not_writable",
                   f"{path}: not a regular file, character device or FIFO; not replaced")
        directory = self._target.parent
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self._target.name}.", dir=directory)
        except OSError as exc:
            refuse_write(path, exc)
        if not secret:
            os.fchmod(fd, 0o666 & ~_umask())
        self._handle = os.fdopen(fd, "wb")

    def _open_through(self) -> None:
        # No O_CREAT, no O_TRUNC: the device or FIFO is used, never made anew.
        # Opening a FIFO waits for its reader, as the shell's ``>`` does.
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as exc:
            refuse("unwritable_output", f"{self.path}: {exc.strerror or exc}")
        self._through = True
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
            refuse_write(self.path, exc)

    def commit(self) -> None:
        if self._stdout:
            self._handle.flush()
            return
        if self._through:
            try:
                self._handle.close()  # flushes; a device or FIFO has nothing to fsync
            except OSError as exc:
                refuse_write(self.path, exc)
            self._through = False
            return
        if self._tmp is None:
            return
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self._tmp, self._target)
        except OSError as exc:
            self.discard()
            refuse_write(self.path, exc)
        self._tmp = None

    def discard(self) -> None:
        if self._through:
            self._through = False
            with contextlib.suppress(OSError):  # the reader left; nothing to undo
                self._handle.close()
        if self._tmp is not None:
            # Closing flushes what is buffered, which fails again on a full disk:
            # the file goes anyway, and the first error is the one reported.
            with contextlib.suppress(OSError):
                self._handle.close()
            with contextlib.suppress(OSError):
                Path(self._tmp).unlink(missing_ok=True)
            self._tmp = None

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def write_atomically(path: Path, data: bytes, *, secret: bool = False) -> None:
    """Write ``data`` to ``path`` by ``OutputFile``'s rules: a regular file is replaced
    atomically, a device or FIFO written through, a symlink followed (``-``: stdout)."""
    with OutputFile(path, secret=secret) as out:
        out.write(data)
        out.commit()
