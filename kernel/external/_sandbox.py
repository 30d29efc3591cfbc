"""The sandbox of one step, described as a value and turned into one command (ADR 0018).

Theory of operation:

- **One description.** A ``StepView`` says everything a step may see, write
  and use: the one directory it may write (the producer: ``evidence/``; the
  checker: its receipt's directory), the files inside it that stay read-only
  (its request), the paths it needs that a private mount would otherwise hide
  (the attempt directory, the pinned files, the kernel's interpreter), its
  working directory and its ``StepLimits``. Network is never part of it.
- **One translation.** ``sandbox_prefix`` turns a view into the command of an
  existing tool, bubblewrap (``bwrap``), wrapped by util-linux ``prlimit``
  (the resource limits) and ``setpriv --pdeathsig KILL`` (the sandbox dies
  with the kernel). Nothing else in the kernel assembles mounts.
- **What the step gets.** New user, PID, IPC, UTS, network and (where the
  kernel allows) cgroup namespaces; every capability dropped, no new user
  namespace inside, no new privileges; the whole filesystem read-only
  (``--ro-bind / /``), then a private, empty, size-bounded tmpfs on
  ``/tmp`` (also ``$HOME`` and ``$TMPDIR``) and ``/dev/shm``, a minimal
  ``/dev`` and the namespace's own ``/proc``; what the step needs from under
  ``/tmp`` is bound back read-only; last, its one output directory is bound
  writable and its request read-only on top of it. So nothing a step can
  write is outside its output directory or its private tmpfs, and nothing it
  writes there is code that a later step loads.
- **Environment.** ``PYTHON*`` and ``LD_*`` variables never reach a
  sandboxed step; it gets ``PYTHONNOUSERSITE``, ``PYTHONSAFEPATH`` and
  ``PYTHONDONTWRITEBYTECODE`` set and ``HOME`` = ``TMPDIR`` = ``/tmp``.
- The tools are looked up in ``/usr/bin`` and ``/bin`` only, never through
  ``PATH``. They are the kernel's trusted base (THREAT_MODEL.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, final

import attrs

__all__ = [
    "DEFAULT_STEP_LIMITS",
    "MASKED_ROOT",
    "StepLimits",
    "StepView",
    "sandbox_environment",
    "sandbox_prefix",
    "sandbox_tools",
]

_TOOL_DIRS: Final = ("/usr/bin", "/bin")
#: The directory a sandboxed step gets as a private tmpfs (and as HOME, TMPDIR).
MASKED_ROOT: Final = "/tmp"
_KEPT_PYTHON: Final = {
    "PYTHONNOUSERSITE": "1",
    "PYTHONSAFEPATH": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    # Exact int: a bool or a float is not a limit (the manifest is strict JSON).
    if type(value) is not int or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive integer")


@final
@attrs.frozen
class StepLimits:
    """What one step may use, and how much evidence it may leave (ADR 0018).

    Each field is a positive integer. The process limits are rlimits applied
    to every process of the step (``memory_bytes`` is its address space,
    ``file_size_bytes`` the largest file it may write, ``cpu_seconds`` per
    process); ``tmpfs_bytes`` bounds its private ``/tmp`` and ``/dev/shm``;
    ``artifact_bytes`` and ``evidence_bytes`` bound each declared artifact
    and their total (apparent and allocated size), checked before hashing.
    """

    memory_bytes: int = attrs.field(default=1024**3, validator=_positive)
    processes: int = attrs.field(default=256, validator=_positive)
    open_files: int = attrs.field(default=256, validator=_positive)
    file_size_bytes: int = attrs.field(default=256 * 1024**2, validator=_positive)
    cpu_seconds: int = attrs.field(default=600, validator=_positive)
    tmpfs_bytes: int = attrs.field(default=64 * 1024**2, validator=_positive)
    artifact_bytes: int = attrs.field(default=256 * 1024**2, validator=_positive)
    evidence_bytes: int = attrs.field(default=1024**3, validator=_positive)


DEFAULT_STEP_LIMITS: Final = StepLimits()


def _check_absolute(name: str, path: str) -> None:
    if not os.path.isabs(path) or os.path.normpath(path) != path or path.startswith("//"):
        raise ValueError(f"{name}: {path!r} is not an absolute normalized path")


def _absolute(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    _check_absolute(attribute.name, value)


def _all_absolute(
    instance: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
) -> None:
    for path in value:
        _check_absolute(attribute.name, path)


@final
@attrs.frozen
class StepView:
    """What one step may see, write and use: built once per launch, then translated.

    ``output`` is the only directory it may write (besides its private tmpfs);
    ``read_only`` are files inside ``output`` that stay read-only (its
    request); ``needed`` are paths it must see even where a private mount
    covers them (only those under ``/tmp`` are bound back, read-only);
    ``workdir`` is where it starts.
    """

    output: str = attrs.field(validator=_absolute)
    read_only: tuple[str, ...] = attrs.field(validator=_all_absolute)
    needed: tuple[str, ...] = attrs.field(validator=_all_absolute)
    workdir: str = attrs.field(validator=_absolute)
    limits: StepLimits = DEFAULT_STEP_LIMITS

    def rebound(self) -> tuple[str, ...]:
        """The top-level entries under ``/tmp`` to bind back read-only, sorted.

        A needed path under ``/tmp`` (or the path a symlink there leads to)
        brings back its first component: enough for an interpreter to find
        its ``pyvenv.cfg`` beside its ``bin/``, and only read-only.
        """
        found: set[str] = set()
        under = MASKED_ROOT + "/"
        for path in (*self.needed, self.output, self.workdir):
            # Both are absolute and normalised (the fields' validators; the kernel's
            # answer): a prefix test is what ``os.path.relpath`` decided, without its
            # abspath calls.
            for candidate in (path, _resolved(path)):
                if candidate.startswith(under):
                    found.add(under + candidate[len(under):].split("/")[0])
        return tuple(sorted(found))


def _resolved(path: str) -> str:
    """``path`` with every symlink resolved, as the kernel names what it opens.

    Three system calls through an ``O_PATH`` descriptor (nothing is read; a
    FIFO does not block) instead of ``os.path.realpath``'s ``lstat`` per
    component, for every needed path of every launch; ``realpath`` where the
    descriptor cannot be had (an absent path, no ``/proc``).
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        named = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    return named if named.startswith("/") and not named.endswith(" (deleted)") else (
        os.path.realpath(path)
    )


def _tool(name: str) -> str | None:
    for directory in _TOOL_DIRS:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def sandbox_tools() -> tuple[str, str, str] | None:
    """``setpriv``, ``prlimit``, ``bwrap`` from ``/usr/bin`` or ``/bin``; None if one is absent."""
    setpriv, prlimit, bwrap = _tool("setpriv"), _tool("prlimit"), _tool("bwrap")
    if setpriv is None or prlimit is None or bwrap is None:
        return None
    return setpriv, prlimit, bwrap


def sandbox_prefix(view: StepView) -> tuple[str, ...]:
    """The argv prefix that runs a command inside ``view``; raises ``OSError`` without the tools."""
    tools = sandbox_tools()
    if tools is None:
        raise OSError("setpriv, prlimit or bwrap is not installed in /usr/bin or /bin")
    setpriv, prlimit, bwrap = tools
    limits = view.limits
    rlimits = (
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--nofile={limits.open_files}",
        f"--fsize={limits.file_size_bytes}",
        f"--cpu={limits.cpu_seconds}",
        "--core=0",
    )
    mounts: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    mounts += ["--size", str(limits.tmpfs_bytes), "--tmpfs", "/dev/shm"]
    mounts += ["--size", str(limits.tmpfs_bytes), "--tmpfs", MASKED_ROOT]
    for path in view.rebound():
        mounts += ["--ro-bind", path, path]
    mounts += ["--bind", view.output, view.output]
    for path in view.read_only:
        mounts += ["--ro-bind", path, path]
    return (
        setpriv, "--pdeathsig", "KILL", "--",
        prlimit, *rlimits, "--",
        bwrap,
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
        "--unshare-uts", "--unshare-cgroup-try", "--disable-userns",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        *mounts,
        "--chdir", view.workdir,
        "--",
    )  # fmt: skip


def sandbox_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment a sandboxed step gets: no ``PYTHON*`` or ``LD_*`` from outside."""
    kept = {
        name: value
        for name, value in environment.items()
        if not name.startswith(("PYTHON", "LD_")) and name not in ("HOME", "TMPDIR")
    }
    return {**kept, **_KEPT_PYTHON, "HOME": MASKED_ROOT, "TMPDIR": MASKED_ROOT}
