"""A step's output directory as a tmpfs bounded in bytes and entries, and what is kept of it.

Theory of operation:

- **Where it lives.** A holder process (``unshare``: a private mount
  namespace; for an ordinary user, a user namespace mapping its root to the
  kernel's uid) mounts a tmpfs over the output directory's own path, with
  ``size`` = the step's ``evidence_bytes`` and ``nr_inodes`` = its
  ``entries`` (plus its root and any kernel file copied in). The step's
  bubblewrap is started inside that namespace (``nsenter``, the
  ``output_holder`` of ``StepView``), so the ``--bind`` of the output path
  binds the tmpfs; on the host, the real directory is never the step's.
- **Bounded while it runs.** Writes past the size or the entry count fail
  with ``ENOSPC`` inside the step; nothing the step writes touches a disk.
  The tmpfs pages are charged to the memory cgroup of the process writing
  them, the step's own (``_step_cgroup``). ``usage()`` says afterwards
  whether a bound was reached (``disk_limit_reached``,
  ``entries_limit_reached``).
- **What is kept.** After the step's last process is gone (its PID
  namespace died with it), ``keep`` copies the declared names only, each a
  regular file reached without a symlink and within the limits, into the
  real directory: files 0644 and directories 0755, owned by the kernel's
  uid, whatever the step made. Nothing undeclared is ever on disk, nor
  anything of a refused step beyond its declared artifacts within the limits.
  The copy reads through ``/proc/<holder>/root``.
- **Crash safety.** The holder is a shell blocked reading a pipe whose other
  end only the kernel holds: when the kernel ends, however it ends, the
  holder reads end of file and exits, its namespace goes, and the tmpfs with
  it. Nothing is ever mounted where the host sees it.
- The tools (``unshare``, ``nsenter``, ``mount``, ``sh``) are util-linux's and
  the system shell from ``/usr/bin`` or ``/bin``, the kernel's trusted base.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external._tools import system_tool

__all__ = [
    "OutputHolder",
    "OutputUnavailableError",
    "OutputUsage",
    "bounded_output_shortfall",
    "holder_prefix",
    "keep_declared",
]

_READY_TIMEOUT_SECONDS: Final = 10.0
_CHUNK: Final = 1024 * 1024
# $1 the mount point, $2 the options. The shell stays as the holder, blocked in
# `read` on the kernel's pipe until the kernel closes it (or dies).
_HOLDER_SCRIPT: Final = (
    'mount -t tmpfs -o "$2" kernel-step-output "$1" || exit 1; echo ready; read -r _; exit 0'
)


class OutputUnavailableError(OSError):
    """No bounded output directory can be made here (the tools, or the namespaces)."""


def _tools() -> tuple[str, str, str]:
    unshare, nsenter, shell = system_tool("unshare"), system_tool("nsenter"), system_tool("sh")
    if unshare is None or nsenter is None or shell is None or system_tool("mount") is None:
        raise OutputUnavailableError(
            "unshare, nsenter, mount or sh is not in /usr/bin or /bin (util-linux)")
    return unshare, nsenter, shell


@final
@attrs.frozen
class OutputUsage:
    """Whether the step used up its output's bytes or its entries."""

    bytes_full: bool
    entries_full: bool


@final
class OutputHolder:
    """The live holder of one step's bounded output (a context manager's value)."""

    def __init__(self, process: subprocess.Popen[bytes], output: str, *, user_namespace: bool):
        self._process = process
        self.output = output
        self.user_namespace = user_namespace

    @property
    def pid(self) -> int:
        """The holder's pid: its namespaces are where the step's sandbox starts."""
        return self._process.pid

    def path(self, relative: str = "") -> str:
        """Where the kernel reaches the tmpfs (or ``relative`` inside it) from outside."""
        inside = self.output if not relative else f"{self.output}/{relative}"
        return f"/proc/{self.pid}/root{inside}"

    def usage(self) -> OutputUsage:
        """Whether a bound of the tmpfs was reached (read after the step)."""
        status = os.statvfs(self.path())
        return OutputUsage(bytes_full=status.f_bavail == 0, entries_full=status.f_favail == 0)

    def copy_in(self, source: Path, relative: str) -> None:
        """Put a kernel file (a checker's request) into the tmpfs before the step."""
        data = source.read_bytes()
        fd = os.open(self.path(relative), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)
            _write_all(fd, data)
        finally:
            os.close(fd)

    def close(self) -> None:
        """End the holder: its namespace, the tmpfs and all it held go with it."""
        process = self._process
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        if process.stderr is not None:
            process.stderr.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def bounded_output(
    output: str, *, size_bytes: int, entries: int, owner_uid: int | None
) -> Iterator[OutputHolder]:
    """A tmpfs over ``output`` in a namespace of its own, for one step; raises
    ``OutputUnavailableError``.

    ``entries`` counts what the step may create; the tmpfs's own root and the
    kernel's copied-in files are added by the caller. ``owner_uid`` is the
    step's uid (a root kernel), which owns the tmpfs root (0700); None: the
    root of the holder's user namespace, the kernel's uid (0755).
    """
    unshare, _, shell = _tools()
    user_namespace = os.geteuid() != 0
    options = f"size={size_bytes},nr_inodes={entries},nosuid,nodev"
    options += ",mode=0755" if owner_uid is None else f",mode=0700,uid={owner_uid},gid={owner_uid}"
    namespaces = ["--user", "--map-root-user"] if user_namespace else []
    argv = [unshare, *namespaces, "--mount", "--propagation", "private", "--",
            shell, "-c", _HOLDER_SCRIPT, "sh", output, options]
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"}, close_fds=True, start_new_session=True)
    except OSError as exc:
        raise OutputUnavailableError(f"cannot start the output holder: {exc}") from exc
    holder = OutputHolder(process, output, user_namespace=user_namespace)
    try:
        _await_ready(process)
        yield holder
    finally:
        holder.close()


def _await_ready(process: subprocess.Popen[bytes]) -> None:
    assert process.stdout is not None and process.stderr is not None
    ready, _, _ = select.select([process.stdout], [], [], _READY_TIMEOUT_SECONDS)
    line = process.stdout.readline() if ready else b""
    if line == b"ready\n":
        return
    process.kill()
    process.wait()
    why = process.stderr.read(4096).decode("utf-8", "backslashreplace").strip()
    raise OutputUnavailableError(
        "the output tmpfs cannot be mounted"
        + (f": {why}" if why else " (no answer from the holder)" if not ready else ""))


def holder_prefix(pid: int, *, user_namespace: bool) -> tuple[str, ...]:
    """The argv prefix that starts a command in holder ``pid``'s namespaces."""
    _, nsenter, _ = _tools()
    namespaces = ("--user", "--preserve-credentials") if user_namespace else ()
    return (nsenter, f"--target={pid}", "--mount", *namespaces, "--")


@functools.cache
def bounded_output_shortfall() -> str | None:
    """Why a bounded output cannot be had here (probed once); None if it can."""
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-output-probe-") as scratch, \
                bounded_output(scratch, size_bytes=65536, entries=4, owner_uid=None) as holder:
            holder.usage()
    except OSError as exc:
        return str(exc)
    return None


# --- what is kept ------------------------------------------------------------------


def keep_declared(
    holder: OutputHolder,
    target: Path,
    declared: tuple[str, ...],
    *,
    artifact_limit: int,
    total_limit: int,
) -> None:
    """Copy each declared name that is a regular file, reached without a symlink and
    within the limits, from the tmpfs into ``target`` (an empty kernel directory).

    Any other declared name is left behind: the caller's own checks of the
    output (the evidence's, the receipt's) say why, from ``holder.path()``.
    A copy is at most ``artifact_limit`` + 1 bytes, so a reader capped at
    the limit still sees that it was over.
    """
    total = 0
    for relative in declared:
        status = _regular_without_symlink(holder, relative)
        if status is None:
            continue
        size = min(status.st_size, artifact_limit + 1)
        if total + size > total_limit + 1:
            break
        total += size
        _copy(holder.path(relative), target, relative, size)


def _regular_without_symlink(holder: OutputHolder, relative: str) -> os.stat_result | None:
    parts = relative.split("/")
    for index in range(len(parts)):
        try:
            status = os.lstat(holder.path("/".join(parts[: index + 1])))
        except OSError:
            return None
        last = index == len(parts) - 1
        if not (stat.S_ISREG(status.st_mode) if last else stat.S_ISDIR(status.st_mode)):
            return None
    return status


def _copy(source: str, target: Path, relative: str, size: int) -> None:
    destination = target
    for part in relative.split("/")[:-1]:
        destination = destination / part
        with contextlib.suppress(FileExistsError):
            destination.mkdir()
            os.chmod(destination, 0o755)
    source_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(target / relative,
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)
            left = size
            while left > 0:
                chunk = os.read(source_fd, min(_CHUNK, left))
                if not chunk:
                    break
                _write_all(fd, chunk)
                left -= len(chunk)
        finally:
            os.close(fd)
    finally:
        os.close(source_fd)
