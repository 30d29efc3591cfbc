"""A cgroup per step: its memory and its processes bounded as a whole (issue 34, ADR 0021).

Theory of operation:

- **Where.** A step's cgroup is a fresh child of the cgroup the kernel
  itself runs in, never elsewhere in the hierarchy: read from
  ``/proc/self/cgroup``, found through ``/proc/self/mountinfo``. On cgroup
  v1 (these machines) there is one child in the ``memory`` hierarchy and
  one in ``pids``; on v2 one child of the kernel's own cgroup in the unified
  hierarchy, which must list ``memory`` and ``pids`` in its
  ``cgroup.subtree_control`` (a delegated cgroup, as systemd gives a
  service with ``Delegate=yes``; the kernel does not enable controllers
  itself, since v2 forbids them on a cgroup that holds processes).
- **What it bounds.** ``memory_bytes`` is the step's memory as a whole:
  anonymous pages, memfds, shared memory and the pages of its private tmpfs
  are all charged to the memory controller, whatever process holds them
  (v1 ``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where
  swap accounting is on; v2 ``memory.max`` and ``memory.swap.max`` = 0).
  ``processes`` is its process count as a whole (``pids.max``), enforced for
  every uid, root's too.
- **How a step joins.** The kernel's launcher (the guard, ADR 0009) writes
  its own pid into each ``cgroup.procs`` the kernel names, in the child it
  forks for the step's chain and before that child runs anything: every
  process of the step is born inside.
- **Why it stopped.** After a step that failed, ``stop_reason`` says
  whether a limit was what stopped it: the OOM killer acted inside the
  cgroup (v1 ``memory.oom_control`` ``oom_kill``, v2 ``memory.events``
  ``oom_kill`` or ``oom``), or a fork met ``pids.max`` (``pids.events``
  ``max``).
- **Where neither can be had** (no controller mounted, the kernel's cgroup
  not writable, v2 without delegation), ``create`` raises
  ``CgroupUnavailableError``; the caller runs the step without the cgroup
  part only where the check does not require it (``cgroup_available``).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import secrets
import signal
from typing import Final, final

__all__ = [
    "CgroupUnavailableError",
    "StepCgroup",
    "StopReason",
    "cgroup_available",
    "cgroup_shortfall",
    "own_cgroup_dirs",
]

_PREFIX: Final = "replay-kernel-step-"


class CgroupUnavailableError(OSError):
    """No cgroup can be made for a step here, with the reason."""


@final
class StopReason(enum.Enum):
    """Which total stopped a step."""

    MEMORY = "memory"
    PROCESSES = "processes"


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) -> the kernel's own cgroup path."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


@functools.cache
def own_cgroup_dirs() -> tuple[str, ...]:
    """The kernel's own cgroup directories a step's cgroup is made under: v1 memory and
    pids, or the one v2 directory; raises ``CgroupUnavailableError``."""
    try:
        mounts, own = _mounts(), _own_paths()
    except (OSError, ValueError) as exc:
        raise CgroupUnavailableError(f"cannot read the kernel's cgroup: {exc}") from exc
    v1 = {}
    for point, kind, options in mounts:
        for controller in ("memory", "pids"):
            if kind == "cgroup" and controller in options and controller in own:
                v1[controller] = os.path.join(point, own[controller].lstrip("/"))
    if len(v1) == 2:
        return (v1["memory"], v1["pids"])
    for point, kind, _ in mounts:
        if kind == "cgroup2" and "" in own:
            directory = os.path.join(point, own[""].lstrip("/"))
            try:
                with open(os.path.join(directory, "cgroup.subtree_control"),
                          encoding="utf-8") as handle:
                    enabled = set(handle.read().split())
            except OSError:
                continue
            if {"memory", "pids"} <= enabled:
                return (directory,)
    raise CgroupUnavailableError(
        "no memory and pids cgroup to delegate: cgroup v1 needs both hierarchies mounted, "
        "v2 a cgroup of the kernel's with memory and pids in its cgroup.subtree_control")


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(value)


def _read_keyed(path: str) -> dict[str, int]:
    found: dict[str, int] = {}
    with contextlib.suppress(OSError), open(path, encoding="ascii") as handle:
        for line in handle:
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                found[key] = int(value)
    return found


@final
class StepCgroup:
    """The cgroup(s) of one step; ``remove`` (or leaving the ``with``) kills and removes them."""

    def __init__(self, directories: tuple[str, ...], v2: bool) -> None:
        self.directories = directories
        self.v2 = v2

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> StepCgroup:
        """A fresh child of the kernel's own cgroup, with both limits set; raises
        ``CgroupUnavailableError``."""
        parents = own_cgroup_dirs()
        name = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        made: list[str] = []
        step = cls(tuple(os.path.join(p, name) for p in parents), v2=len(parents) == 1)
        try:
            for directory in step.directories:
                os.mkdir(directory, 0o700)
                made.append(directory)
            if step.v2:
                (only,) = step.directories
                _write(os.path.join(only, "memory.max"), str(memory_bytes))
                with contextlib.suppress(FileNotFoundError):
                    _write(os.path.join(only, "memory.swap.max"), "0")
                _write(os.path.join(only, "pids.max"), str(processes))
            else:
                memory, pids = step.directories
                _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
                with contextlib.suppress(FileNotFoundError):
                    _write(os.path.join(memory, "memory.memsw.limit_in_bytes"),
                           str(memory_bytes))
                _write(os.path.join(pids, "pids.max"), str(processes))
        except OSError as exc:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
            raise CgroupUnavailableError(f"cannot make a step cgroup under {parents[0]}: "
                                         f"{exc.strerror or exc}") from exc
        return step

    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a process writes its pid into to join."""
        return tuple(os.path.join(d, "cgroup.procs") for d in self.directories)

    def stop_reason(self) -> StopReason | None:
        """Which total the step met, if any (read after it ended)."""
        if self.v2:
            (only,) = self.directories
            memory = _read_keyed(os.path.join(only, "memory.events"))
            if memory.get("oom_kill", 0) or memory.get("oom", 0):
                return StopReason.MEMORY
            pids = _read_keyed(os.path.join(only, "pids.events"))
        else:
            memory_dir, pids_dir = self.directories
            oom = _read_keyed(os.path.join(memory_dir, "memory.oom_control"))
            # Only the OOM killer: v1's failcnt also counts page-cache reclaim
            # (an honest step writing its evidence), which stops nothing.
            if oom.get("oom_kill", 0):
                return StopReason.MEMORY
            pids = _read_keyed(os.path.join(pids_dir, "pids.events"))
        return StopReason.PROCESSES if pids.get("max", 0) else None

    def remove(self) -> None:
        """Kill whatever is still inside, then remove every directory (idempotent)."""
        for directory in self.directories:
            for _ in range(100):
                try:
                    with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as h:
                        pids = [int(p) for p in h.read().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                os.sched_yield()
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def __enter__(self) -> StepCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@functools.cache
def cgroup_shortfall() -> str | None:
    """Why no step cgroup can be made here (probed once: made and removed); None if one can."""
    try:
        StepCgroup.create(64 * 1024**2, 16).remove()
    except CgroupUnavailableError as exc:
        return str(exc)
    return None


def cgroup_available() -> bool:
    """Whether a step cgroup can be made here (``cgroup_shortfall`` is None)."""
    return cgroup_shortfall() is None
