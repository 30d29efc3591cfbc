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

from kernel.external._step_output import holder_prefix
from kernel.external._tools import system_tool
from kernel.serde import OPTIONAL_ON_INPUT

__all__ = [
    "DEFAULT_STEP_LIMITS",
    "ETC_ENTRIES",
    "MASKED_ROOT",
    "PROC_READ_ONLY",
    "SYSTEM_DIRS",
    "StepLimits",
    "StepView",
    "sandbox_environment",
    "sandbox_prefix",
    "sandbox_tools",
]

#: The directory a sandboxed step gets as a private tmpfs (and as HOME, TMPDIR).
MASKED_ROOT: Final = "/tmp"
#: The system directories every step sees read-only (a merged-/usr symlink stays a symlink).
SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_PREFIXES: Final = frozenset({"/", "/usr", "/usr/local"})
#: What of /etc a program reads to start and to name things: the loader's cache,
#: name-service configuration without secrets, time zone, certificates. Never
#: /etc/shadow, /etc/gshadow, /etc/ssh or anything an operator keeps private.
ETC_ENTRIES: Final = (
    "/etc/alternatives", "/etc/ca-certificates", "/etc/group", "/etc/host.conf",
    "/etc/hosts", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
    "/etc/locale.alias", "/etc/localtime", "/etc/mime.types", "/etc/nsswitch.conf",
    "/etc/passwd", "/etc/ssl", "/etc/timezone",
)
#: Host-wide knobs of /proc that stay read-only even where the step is uid 0 of
#: its own user namespace (bubblewrap covers only /proc/irq and /proc/bus).
PROC_READ_ONLY: Final = ("/proc/sys", "/proc/sysrq-trigger")
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
    With a bounded output (``kernel.external._step_output``), ``evidence_bytes``
    and ``entries`` also bound the step's output directory while it runs: its
    bytes and the number of files and directories it may create there.
    ``entries`` may be left out of a manifest (its default applies).
    """

    memory_bytes: int = attrs.field(default=1024**3, validator=_positive)
    processes: int = attrs.field(default=256, validator=_positive)
    open_files: int = attrs.field(default=256, validator=_positive)
    file_size_bytes: int = attrs.field(default=256 * 1024**2, validator=_positive)
    cpu_seconds: int = attrs.field(default=600, validator=_positive)
    tmpfs_bytes: int = attrs.field(default=64 * 1024**2, validator=_positive)
    artifact_bytes: int = attrs.field(default=256 * 1024**2, validator=_positive)
    evidence_bytes: int = attrs.field(default=1024**3, validator=_positive)
    entries: int = attrs.field(default=4096, validator=_positive,
                               metadata={OPTIONAL_ON_INPUT: True})


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


def _step_uid(instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    # A uid: never root's; a pid: never 0 (the caller's group) nor negative.
    if value is not None and (type(value) is not int or value <= 0):
        raise ValueError(f"{attribute.name} must be a positive integer")


@final
@attrs.frozen
class StepView:
    """What one step may see, write and use: built once per launch, then translated.

    ``output`` is the only directory it may write (besides its private tmpfs);
    ``read_only`` are files inside ``output`` that stay read-only (its
    request); ``needed`` are the paths it is given to read (its attempt
    directory, its pinned files, the launcher's interpreter): each is bound
    read-only with its resolved path and, for an interpreter, its prefix
    (``visible``), and nothing else of the machine but the system directories
    is there; ``workdir`` is where it starts.

    ``step_uid`` is the host uid the step runs as when the kernel is root
    (never uid 0, never the kernel's own; ``kernel.external._step_uids``):
    then bubblewrap builds the view with root's rights and ``setpriv`` drops
    to that uid, with no capability and no way back, before anything of the
    step runs. ``None`` (the kernel is an ordinary user): the step is uid 0
    of a user namespace of its own, mapped to the kernel's uid.
    ``seccomp_fd`` is a descriptor holding the compiled syscall filter
    (``kernel.external._seccomp``), read once by bubblewrap; ``None`` runs
    without one. ``cgroup_procs`` are the ``cgroup.procs`` files of the
    step's own cgroup (``kernel.external._step_cgroup``: its memory and
    process count as a whole), which the kernel's launcher joins before the
    step's chain starts; empty where no cgroup could be had.
    ``output_holder`` is the pid of the process whose mount namespace has the
    bounded tmpfs over ``output`` (``kernel.external._step_output``): the
    step's bubblewrap starts there (``nsenter``), so its output is that
    tmpfs, never the host's directory; the holder's user namespace is entered
    too where there is no ``step_uid`` (an ordinary user's holder has one).
    ``None``: the output is the host's directory itself, bound writable.
    """

    output: str = attrs.field(validator=_absolute)
    read_only: tuple[str, ...] = attrs.field(validator=_all_absolute)
    needed: tuple[str, ...] = attrs.field(validator=_all_absolute)
    workdir: str = attrs.field(validator=_absolute)
    limits: StepLimits = DEFAULT_STEP_LIMITS
    step_uid: int | None = attrs.field(default=None, validator=_step_uid)
    seccomp_fd: int | None = None
    cgroup_procs: tuple[str, ...] = attrs.field(default=(), validator=_all_absolute)
    output_holder: int | None = attrs.field(default=None, validator=_step_uid)

    def visible(self) -> tuple[str, ...]:
        """Every path bound read-only into the step beyond the system, sorted, outermost only.

        Each needed path as written and as resolved; for an executable in a
        ``bin/`` directory whose parent is an interpreter's prefix (a
        ``pyvenv.cfg``, or a ``lib/pythonX.Y``), that prefix, and the prefix a
        venv's ``pyvenv.cfg`` names as its ``home``: what an interpreter reads
        besides its executable. A path inside another visible directory is
        left out (the outer bind already shows it).
        """
        found: set[str] = set()
        for path in self.needed:
            for candidate in (path, _resolved(path)):
                found.add(candidate)
                found.update(_interpreter_prefixes(candidate))
        found.discard("/")
        outermost: list[str] = []
        for path in sorted(found):
            if any(path == system or path.startswith(system + "/") for system in SYSTEM_DIRS):
                continue  # shown already, read-only, as part of the system
            if not any(path.startswith(kept + "/") for kept in outermost):
                outermost.append(path)
        return tuple(outermost)


def _interpreter_prefixes(path: str) -> tuple[str, ...]:
    """The prefix (and a venv's base prefix) of an interpreter at ``path``, if it is one."""
    directory = os.path.dirname(path)
    if os.path.basename(directory) != "bin":
        return ()
    prefix = os.path.dirname(directory)
    if prefix in _SYSTEM_PREFIXES:
        return ()
    found: list[str] = []
    config = os.path.join(prefix, "pyvenv.cfg")
    if os.path.isfile(config):
        found.append(prefix)
        home = _venv_home(config)
        if home is not None:
            base = os.path.dirname(os.path.normpath(home))
            found.extend(_resolved(p) for p in (base,) if _is_python_prefix(base))
    elif _is_python_prefix(prefix):
        found.append(prefix)
    return tuple(p for p in found if os.path.isabs(p) and p not in _SYSTEM_PREFIXES)


def _is_python_prefix(prefix: str) -> bool:
    library = os.path.join(prefix, "lib")
    try:
        return any(name.startswith("python3") for name in os.listdir(library))
    except OSError:
        return False


def _venv_home(config: str) -> str | None:
    try:
        with open(config, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "home" and os.path.isabs(value.strip()):
                    return value.strip()
    except (OSError, UnicodeError):
        return None
    return None


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


def sandbox_tools() -> tuple[str, str, str] | None:
    """``setpriv``, ``prlimit``, ``bwrap`` from ``/usr/bin`` or ``/bin``; None if one is absent."""
    setpriv, prlimit, bwrap = system_tool("setpriv"), system_tool("prlimit"), system_tool("bwrap")
    if setpriv is None or prlimit is None or bwrap is None:
        return None
    return setpriv, prlimit, bwrap


def _system_mounts() -> list[str]:
    mounts: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            mounts += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            mounts += ["--ro-bind", path, path]
    # Made here, 0755: a parent bubblewrap makes for a bind is 0700, which the
    # step's own uid could not list nor search (the loader's cache included).
    mounts += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC_ENTRIES:
        if os.path.lexists(path):
            mounts += ["--ro-bind-try", path, path]
    return mounts


def _ancestors(paths: tuple[str, ...]) -> tuple[str, ...]:
    """Every proper ancestor of ``paths`` the step's root does not have, parents first."""
    made = {"/", MASKED_ROOT, "/dev", "/proc", *SYSTEM_DIRS}
    found: set[str] = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in made and parent not in found:
            found.add(parent)
            parent = os.path.dirname(parent)
    return tuple(sorted(found))


def sandbox_prefix(view: StepView) -> tuple[str, ...]:
    """The argv prefix that runs a command inside ``view``; raises ``OSError`` without the tools.

    The root of the step is an empty tmpfs of bubblewrap's: only what is
    bound there exists for the step (the system directories, a few files of
    ``/etc``, ``/dev``, its own ``/proc`` with the host-wide knobs read-only,
    a private ``/tmp`` and ``/dev/shm``, ``view.visible()`` read-only, its
    output directory writable, its request read-only on top).
    """
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
    mounts: list[str] = _system_mounts()
    mounts += ["--dev", "/dev", "--proc", "/proc"]
    for path in PROC_READ_ONLY:
        mounts += ["--ro-bind-try", path, path]
    mounts += ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", "/dev/shm"]
    mounts += ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", MASKED_ROOT]
    visible = view.visible()
    # The directories leading to what is bound are made here, 0755: bubblewrap
    # would copy a 0700 parent (a run root, /root, a pytest base), and the
    # step's uid could not reach what it was given.
    ancestors = _ancestors((*visible, view.output, *view.read_only))
    # Under the private /tmp, whose every directory uid 0 of a user namespace
    # would own, the path to what is bound sits in a tmpfs of its own per top
    # directory, made read-only once the binds are in (below).
    under_tmp = tuple(p for p in ancestors if os.path.dirname(p) == MASKED_ROOT)
    for path in under_tmp:
        mounts += ["--perms", "0755", "--size", "65536", "--tmpfs", path]
    for path in ancestors:
        if path not in under_tmp:
            mounts += ["--perms", "0755", "--dir", path]
    for path in visible:
        mounts += ["--ro-bind", path, path]
    mounts += ["--bind", view.output, view.output]
    for path in view.read_only:
        mounts += ["--ro-bind", path, path]
    # Last, the step's root itself (bubblewrap's tmpfs, with the directories
    # made above) and its /dev (a tmpfs too) become read-only: uid 0 of a user
    # namespace owns them, and they would otherwise be places to write outside
    # the output directory. Device nodes stay usable; /dev/shm is its own mount.
    for path in under_tmp:
        mounts += ["--remount-ro", path]
    mounts += ["--remount-ro", "/dev", "--remount-ro", "/"]
    if view.seccomp_fd is not None:
        mounts += ["--seccomp", str(view.seccomp_fd)]
    common = (
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--new-session",
    )  # fmt: skip
    if view.step_uid is None:
        # An ordinary user: uid 0 of a user namespace of its own, no capability.
        namespaces: tuple[str, ...] = (
            "--unshare-user", *common, "--disable-userns", "--cap-drop", "ALL")
        drop: tuple[str, ...] = ()
    else:
        # Root: bubblewrap mounts with root's rights, then setpriv (inside the
        # view) becomes the step's own uid: every capability and the bounding set
        # gone, no new privileges; uid-checked host knobs (/proc/sys, per-uid
        # quotas, RLIMIT_NPROC, SO_PEERCRED) now see an ordinary user.
        uid = str(view.step_uid)
        namespaces = common
        drop = (
            setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        )  # fmt: skip
    enter: tuple[str, ...] = ()
    if view.output_holder is not None:
        enter = holder_prefix(view.output_holder, user_namespace=view.step_uid is None)
    return (
        setpriv, "--pdeathsig", "KILL", "--",
        *enter,
        prlimit, *rlimits, "--",
        bwrap, *namespaces, *mounts,
        "--chdir", view.workdir,
        "--", *drop,
    )  # fmt: skip


def sandbox_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment a sandboxed step gets: no ``PYTHON*`` or ``LD_*`` from outside."""
    kept = {
        name: value
        for name, value in environment.items()
        if not name.startswith(("PYTHON", "LD_")) and name not in ("HOME", "TMPDIR")
    }
    return {**kept, **_KEPT_PYTHON, "HOME": MASKED_ROOT, "TMPDIR": MASKED_ROOT}
