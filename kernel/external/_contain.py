"""Containment of one step, and the exact bytes it executes (ADR 0009).

Theory of operation:

- **Levels.** ``SANDBOX`` (ADR 0018): everything ``NAMESPACE`` gives, in
  bubblewrap, plus a read-only filesystem but for the step's own output
  directory and a private tmpfs, no network, and resource limits; the view is
  described once (``kernel.external._sandbox.StepView``).
  ``NAMESPACE``: the step runs as PID 1 of its own user + PID namespace
  (``unshare --user --pid --fork --kill-child --mount-proc`` from util-linux).
  When the step's first process exits, Linux kills every other process of
  the namespace and ``unshare`` returns only once they are all reaped;
  ``setsid``, ``setpgid``, double forks and ignored signals do not leave a
  PID namespace.
  ``SUBREAPER``: where namespaces are refused, the launcher alone.
- **The guard.** At every level the kernel's first child is the launcher
  (``guard`` around the ``unshare`` or ``bwrap`` chain, ``reap`` around the
  command): a child subreaper, so every process orphaned below it is
  re-parented to it, and it kills and reaps all of them when the command
  ends, on SIGTERM (how the kernel stops a step), and when the kernel dies.
  The kernel's death is seen twice over: a parent-death signal (SIGTERM),
  and a pidfd of the kernel the guard waits on. A parent-death signal armed
  after the parent died is never sent, so each fork checks its parent after
  arming it; the wrappers do not (bubblewrap's own child, orphaned in that
  window, blocks for good on its dead parent: bubblewrap issue 633), which
  is why the guard, not ``setpriv --pdeathsig``, is what holds the chain.
- **Availability** is probed once per process by running the namespace chain
  on ``/bin/true``; a caller can cap the level (``max_level``), which is how a
  machine without namespaces is simulated in tests. Nothing is silently
  weaker: a check that requires more than is available ends BLOCKED.
- **Exact bytes.** The executable and every argument that names one of the
  command's pinned ``dependencies`` (its scripts) are copied into a sealed
  ``memfd`` (no write, grow, shrink, nor further seal changes, for anyone),
  the sealed copy is hashed, and the step runs *that* copy: the launcher
  ``execve``s ``/proc/self/fd/N`` with ``argv[0]`` still the pinned path (an
  interpreter finds its prefix and venv from ``argv[0]``), and a script
  argument becomes ``/dev/fd/M``. Swapping or editing the file on disk after
  it was hashed changes nothing that runs. One attempt seals each such file
  once (``SealedCopies``), when its identity is built, and both launches run
  those copies: a sealed copy cannot change, so it is not hashed again.
- The wrapper tools are searched in ``/usr/bin`` and ``/bin`` only (never the
  environment's ``PATH``); they and the kernel's own interpreter, which runs
  the launcher from source held in memory (``-I -S -c``), are the kernel's
  trusted base, not pinned by a manifest.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import functools
import hashlib
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, assert_never, final

import attrs

from kernel.external._fingerprint import Fingerprint, fingerprint_of
from kernel.external._reclaim import lend
from kernel.external._sandbox import StepView, sandbox_prefix, sandbox_tools
from kernel.external._seccomp import step_filter_bpf
from kernel.external._step_cgroup import cgroup_shortfall
from kernel.external._step_output import bounded_output_shortfall
from kernel.external._step_uids import acquire_step_uid, step_uid_range
from kernel.external._tools import system_tool

__all__ = [
    "ContainmentLevel",
    "ContainmentPart",
    "LAUNCHER_SOURCE",
    "SealedCopies",
    "SealedFile",
    "available_level",
    "available_parts",
    "close_sealed",
    "launcher_argv",
    "part_shortfall",
    "sandbox_shortfall",
    "seal_copy",
]

_PROBE_TIMEOUT_SECONDS: Final = 10.0
_CHUNK: Final = 1024 * 1024


@final
class ContainmentLevel(enum.Enum):
    """How strongly a step's processes are held; ordered weakest first."""

    SUBREAPER = "subreaper"
    NAMESPACE = "namespace"
    SANDBOX = "sandbox"

    @property
    def rank(self) -> int:
        """Position in the order weakest (0) to strongest."""
        return _RANKS[self]

    def satisfies(self, required: ContainmentLevel | None) -> bool:
        """Whether this level is at least ``required`` (None requires nothing)."""
        return required is None or self.rank >= required.rank


_RANKS: Final = {
    ContainmentLevel.SUBREAPER: 0,
    ContainmentLevel.NAMESPACE: 1,
    ContainmentLevel.SANDBOX: 2,
}


@final
class ContainmentPart(enum.Enum):
    """One part of the sandbox level that a machine gives or not (ADR 0021).

    ``view`` (the allow-list filesystem) and ``filter`` (the syscall filter)
    make the ``sandbox`` level: without either it is not had at all. The
    others hold where the machine can give them, and then always: ``uid``
    (a root kernel's steps run as uids of their own), ``cgroup`` (memory and
    processes bounded per step as a whole), ``bounded_output`` (the output
    directory a tmpfs bounded in bytes and entries, only declared artifacts
    kept). A manifest entry may require any of them.
    """

    BOUNDED_OUTPUT = "bounded_output"
    CGROUP = "cgroup"
    FILTER = "filter"
    UID = "uid"
    VIEW = "view"


def part_shortfall(part: ContainmentPart) -> str | None:
    """Why ``part`` cannot be had on this machine (probed once); None if it can."""
    match part:
        case ContainmentPart.VIEW | ContainmentPart.FILTER:
            return sandbox_shortfall()
        case ContainmentPart.UID:
            if os.geteuid() != 0:
                return ("the kernel is not root: its steps run as its own uid, in a user "
                        "namespace of their own")
            return sandbox_shortfall()
        case ContainmentPart.CGROUP:
            return cgroup_shortfall()
        case ContainmentPart.BOUNDED_OUTPUT:
            return sandbox_shortfall() or bounded_output_shortfall()
        case _:
            assert_never(part)


def available_parts() -> frozenset[ContainmentPart]:
    """The parts of the sandbox level this machine gives (empty without the sandbox)."""
    return frozenset(part for part in ContainmentPart if part_shortfall(part) is None)


def _namespace_prefix() -> tuple[str, ...] | None:
    setpriv, unshare = system_tool("setpriv"), system_tool("unshare")
    if setpriv is None or unshare is None:
        return None
    return (
        setpriv, "--pdeathsig", "KILL", "--",
        unshare, "--user", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
    )  # fmt: skip


@functools.cache
def _namespaces_work() -> bool:
    prefix = _namespace_prefix()
    true = system_tool("true")
    if prefix is None or true is None or not hasattr(os, "memfd_create"):
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-namespace-probe-") as scratch:
            return _probe(ContainmentLevel.NAMESPACE, true, Path(scratch), None, ())
    except (OSError, subprocess.SubprocessError):
        return False


def _probe(level: ContainmentLevel, true: str, cwd: Path, view: StepView | None,
           pass_fds: tuple[int, ...]) -> bool:
    """``true`` run at ``level`` exactly as a step runs: under the guard (``run_process``).

    An interrupt while the chain starts then leaves no orphan behind (issue 35,
    item 11: an unguarded probe's bubblewrap outlived the kernel once in a loop
    of interrupted runs). Imported here: ``_process`` imports this module.
    """
    from kernel.external._process import ProcessStatus, run_process

    sealed = seal_copy(true)
    try:
        done = run_process(
            [true], cwd=cwd, env={"PATH": "/usr/bin:/bin"},
            timeout_seconds=_PROBE_TIMEOUT_SECONDS, cancel=None, stdout_limit=0,
            stderr_limit=4096, containment=level, executable_fd=sealed.fd,
            pass_fds=pass_fds, view=view,
        )
    finally:
        os.close(sealed.fd)
    return done.status is ProcessStatus.EXITED and done.returncode == 0


@functools.cache
def _sandbox_works() -> bool:
    """The whole sandbox chain runs ``/bin/true`` in a view of a fresh directory."""
    true = system_tool("true")
    if sandbox_tools() is None or true is None or not hasattr(os, "memfd_create"):
        return False
    try:
        with contextlib.ExitStack() as held:
            scratch = held.enter_context(
                tempfile.TemporaryDirectory(prefix="kernel-sandbox-probe-"))
            # The interpreter is needed inside: the chain ends in the kernel's launcher.
            view = StepView(output=scratch, read_only=(), needed=(sys.executable,),
                            workdir=scratch)
            program = os.memfd_create("kernel-probe-filter", os.MFD_CLOEXEC)
            held.callback(os.close, program)
            os.write(program, step_filter_bpf())
            os.lseek(program, 0, os.SEEK_SET)
            view = attrs.evolve(view, seccomp_fd=program)
            if os.geteuid() == 0:  # the chain a root kernel's steps run: under a uid of their own
                slot = held.enter_context(acquire_step_uid(step_uid_range(os.environ)))
                lend(Path(scratch), slot.uid)
                view = attrs.evolve(view, step_uid=slot.uid)
            return _probe(ContainmentLevel.SANDBOX, true, Path(scratch), view, (program,))
    except (OSError, subprocess.SubprocessError):  # SeccompUnavailableError is an OSError
        return False


def _subreaper_works() -> bool:
    return sys.platform == "linux" and hasattr(os, "memfd_create")


def sandbox_shortfall() -> str | None:
    """Why the ``sandbox`` level cannot be had here, with what to install; None if it can.

    For a command to refuse before its first attempt (issue 35, finding 5),
    not BLOCKED attempt by attempt.
    """
    if _sandbox_works():
        return None
    missing = [name for name in ("bwrap", "setpriv", "prlimit") if system_tool(name) is None]
    if "bwrap" in missing:
        return ("bubblewrap is not installed in /usr/bin or /bin: install it "
                "(Debian and Ubuntu: apt-get install bubblewrap)")
    if missing:
        return (f"{', '.join(missing)} not found in /usr/bin or /bin: install util-linux "
                "(Debian and Ubuntu: apt-get install util-linux)")
    try:
        step_filter_bpf()
    except OSError as exc:
        return (f"the syscall filter cannot be built ({exc}): install libseccomp "
                "(Debian and Ubuntu: apt-get install libseccomp2)")
    return ("bubblewrap is installed but cannot start a sandbox here: an ordinary user "
            "needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0); a root kernel needs /run writable for its "
            "step uids")


def available_level(max_level: ContainmentLevel | None = None) -> ContainmentLevel | None:
    """The strongest level this machine gives, capped at ``max_level``; None if none."""
    cap = max_level.rank if max_level is not None else ContainmentLevel.SANDBOX.rank
    if cap >= ContainmentLevel.SANDBOX.rank and _sandbox_works():
        return ContainmentLevel.SANDBOX
    if cap >= ContainmentLevel.NAMESPACE.rank and _namespaces_work():
        return ContainmentLevel.NAMESPACE
    if _subreaper_works():
        return ContainmentLevel.SUBREAPER
    return None


# --- exact bytes ----------------------------------------------------------------------


@final
@attrs.frozen
class SealedFile:
    """A sealed in-memory copy of a pinned file: its descriptor, the SHA-256 of its
    bytes, and the fingerprint the file had (unchanged) while it was copied."""

    path: str
    fd: int
    sha256: str
    source: Fingerprint


_SEALS: Final = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def seal_copy(path: str) -> SealedFile:
    """Copy the regular file reached through ``path`` into a sealed memfd; hash the copy.

    The hash is taken *after* sealing, from the memfd itself: those are the
    bytes any process given the descriptor reads or executes. The file's
    fingerprint (``fstat`` of the descriptor copied from) must be the same
    before and after the copy, else ``OSError``: it is then the fingerprint of
    the bytes copied. Raises ``OSError``.
    """
    source = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        before = os.fstat(source)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path} is not a regular file")
        sealed = os.memfd_create("pinned", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            while chunk := os.read(source, _CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(sealed, view) :]
            if fingerprint_of(os.fstat(source)) != fingerprint_of(before):
                raise OSError(f"{path} changed while it was copied")
            fcntl.fcntl(sealed, fcntl.F_ADD_SEALS, _SEALS)
            hasher = hashlib.sha256()
            offset = 0
            while chunk := os.pread(sealed, _CHUNK, offset):
                hasher.update(chunk)
                offset += len(chunk)
        except BaseException:
            os.close(sealed)
            raise
    finally:
        os.close(source)
    return SealedFile(path, sealed, hasher.hexdigest(), fingerprint_of(before))


def close_sealed(files: Sequence[SealedFile]) -> None:
    """Close every sealed copy (after the step ended)."""
    for sealed in files:
        with contextlib.suppress(OSError):
            os.close(sealed.fd)


@final
class SealedCopies:
    """The sealed copies of one attempt, one per pinned path, shared by its launches.

    A sealed copy cannot change (for anyone), so the producer and the checker
    can both run the copy made once; the attempt closes them all at its end.
    """

    def __init__(self, shared: Callable[[str], SealedFile] | None = None) -> None:
        self._copies: dict[str, SealedFile] = {}
        # A run's cache (``PinCache.sealed``): it owns the copies it hands out.
        self._shared = shared

    def get(self, path: str) -> SealedFile:
        """The sealed copy of ``path``, made now if this attempt has none; raises ``OSError``."""
        copy = self._copies.get(path)
        if copy is None:
            make = seal_copy if self._shared is None else self._shared
            copy = self._copies[path] = make(path)
        return copy

    def close(self) -> None:
        """Close every copy the attempt made itself (the attempt is over)."""
        if self._shared is not None:
            self._copies.clear()
            return
        close_sealed(tuple(self._copies.values()))
        self._copies.clear()


# --- the launcher ----------------------------------------------------------------------

# Run by the kernel's own interpreter with ``-I -S -c`` (no site, no environment,
# no module of its own read from disk: "ns" uses only the frozen ``os`` and the
# built-in ``sys``). ``ns REPORT FD ARGV...``: exec /proc/self/fd/FD with
# ARGV; a failed exec is written to the pipe REPORT (closed on a successful
# exec), so the kernel tells "could not start" from "exited 127".
# ``reap REPORT PARENT FD ARGV...``: become a child subreaper, run the command, then
# kill and reap every descendant (a blocking wait after each round of kills, no
# polling); SIGTERM (also the parent-death signal) does the same at once.
# ``guard REPORT PARENT ARGV...``: the same guard around a plain path (the
# ``unshare`` or ``prlimit``/``bwrap`` chain, whose inner "ns" launcher inherits
# REPORT). A parent-death signal armed after the parent died is never sent,
# so each fork checks its parent *after* arming it, the guard also waits on a
# pidfd of the kernel (readable once it is gone, whatever became of the
# signal), and whatever a dying wrapper orphans (bubblewrap's own child,
# before it arms its signal, blocks for good on its dead parent) is
# re-parented to the guard and killed.
# Exit status: the command's (a signal is re-raised).
LAUNCHER_SOURCE: Final = r"""
import os, sys
def run(report, fd, argv):
    os.set_inheritable(report, False)
    try:
        os.execve("/proc/self/fd/%d" % fd, argv, os.environ)
    except OSError as exc:
        os.write(report, ("cannot execute %s: %s" % (argv[0], exc)).encode())
        os._exit(127)
def chain(report, argv):
    # The step's cgroup, joined before anything of the step runs: every process
    # of it is born inside. The variable is the kernel's, never the step's.
    procs = os.environ.pop("KERNEL_STEP_CGROUP_PROCS", "")
    for path in procs.split("\n") if procs else ():
        try:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        except OSError as exc:
            os.write(report, ("cannot join the step's cgroup %s: %s" % (path, exc)).encode())
            os._exit(127)
    try:
        os.execv(argv[0], argv)
    except OSError as exc:
        os.write(report, ("cannot execute %s: %s" % (argv[0], exc)).encode())
        os._exit(127)
def children(me):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        if int(fields[1]) == me:
            found.append(int(name))
    return found
def kill_all(me):
    # Kill every child, then block until one of them is reaped: each was just
    # sent SIGKILL, so the wait ends without spinning; orphans re-parented
    # meanwhile are found by the next scan. Done when no child is left.
    while True:
        for pid in children(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
def finish(status):
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if status is not None else 125)
def reap(report, parent, start):
    # Only here: signal, select and ctypes are read from disk; the "ns" path runs on
    # the frozen os and the built-in sys alone.
    global signal
    import ctypes, select, signal
    libc = ctypes.CDLL(None, use_errno=True)
    me = os.getpid()
    def stop(signum, frame):
        kill_all(me)
        os._exit(128 + signal.SIGTERM)
    signal.signal(signal.SIGTERM, stop)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    # The parent is also watched through a pidfd, opened before the parent is
    # checked (so it names that parent, not a reused pid): readable once the
    # kernel is gone, however the parent-death signal fared.
    try:
        kernel = os.pidfd_open(parent)
    except OSError:
        os._exit(125)
    if os.getppid() != parent:
        os._exit(125)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        os.write(report, b"kernel launcher: PR_SET_CHILD_SUBREAPER refused")
        os._exit(125)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != me:
            os._exit(125)
        start()
    command = os.pidfd_open(pid)
    while True:
        ready = select.select([command, kernel], [], [])[0]
        if kernel in ready:
            kill_all(me)
            os._exit(128 + signal.SIGTERM)
        if command in ready:
            break
    while True:
        done, status = os.waitpid(pid, 0)
        if done == pid:
            break
    kill_all(me)
    finish(status)
mode, report = sys.argv[1], int(sys.argv[2])
if mode == "ns":
    run(report, int(sys.argv[3]), sys.argv[4:])
elif mode == "reap":
    fd, argv = int(sys.argv[4]), sys.argv[5:]
    reap(report, int(sys.argv[3]), lambda: run(report, fd, argv))
else:
    argv = sys.argv[4:]
    reap(report, int(sys.argv[3]), lambda: chain(report, argv))
"""


def launcher_argv(
    level: ContainmentLevel,
    report_fd: int,
    executable_fd: int,
    argv: Sequence[str],
    view: StepView | None = None,
) -> tuple[str, ...]:
    """The argv that runs ``argv`` (whose program is the memfd ``executable_fd``) at ``level``.

    A failed ``execve`` is reported on the pipe ``report_fd``. ``SANDBOX``
    needs the step's ``view`` (what it may see, write and use).
    """
    launcher = (sys.executable, "-I", "-S", "-c", LAUNCHER_SOURCE)
    guard = (*launcher, "guard", str(report_fd), str(os.getpid()))
    match level:
        case ContainmentLevel.SANDBOX:
            if view is None:
                raise ValueError("the sandbox level needs the step's view")
            return (
                *guard, *sandbox_prefix(view),
                *launcher, "ns", str(report_fd), str(executable_fd), *argv,
            )  # fmt: skip
        case ContainmentLevel.NAMESPACE:
            prefix = _namespace_prefix()
            if prefix is None:  # available_level said yes: a tool vanished since
                raise OSError("setpriv or unshare is no longer available")
            return (*guard, *prefix, *launcher, "ns", str(report_fd), str(executable_fd), *argv)
        case ContainmentLevel.SUBREAPER:
            return (
                *launcher, "reap", str(report_fd), str(os.getpid()), str(executable_fd), *argv
            )  # fmt: skip
        case _:
            assert_never(level)
