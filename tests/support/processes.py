"""The one ``/proc`` scanner of the test suite, and the assertions built on it.

Tests that start real processes (producers, checkers, pool and Dask workers,
``kernel`` itself) prove that nothing they started outlives them. Three views
of the process table serve them, all read here from ``/proc/<pid>/stat`` and
``/proc/<pid>/cmdline``:

- by what a process names: every process a step starts mentions the test's
  ``tmp_path`` in its command line (``processes_mentioning``);
- by ancestry: pool workers mention no test path, but descend from this
  interpreter (``descendants``);
- by census: (pid, start time) pairs, so that a reused pid counts as new,
  plus the working and root directory for processes that left the test's
  command line behind (``census``, ``new_processes``).

Zombies (``Z``) and dead entries (``X``) are not alive: they hold no
resources and wait only for a reaper.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Set
from pathlib import Path

import attrs
import pytest

__all__ = [
    "ProcessStat",
    "assert_no_leftover",
    "assert_no_new_descendants",
    "assert_process_gone",
    "census",
    "cmdline",
    "descendants",
    "described",
    "kill_all",
    "live_pids",
    "new_processes",
    "processes_mentioning",
    "seen_by_some_process",
    "stat",
]

_DEAD = frozenset({"Z", "X"})


@attrs.frozen
class ProcessStat:
    """The fields of ``/proc/<pid>/stat`` the tests read."""

    state: str
    parent: int
    start_time: int  # clock ticks after boot: with the pid, names one process for good

    @property
    def alive(self) -> bool:
        return self.state not in _DEAD


def stat(pid: int) -> ProcessStat | None:
    """The process's ``stat`` fields; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    # The command name (second field) is in parentheses and may hold spaces.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcessStat(fields[0], int(fields[1]), int(fields[19]))


def cmdline(pid: int) -> bytes:
    """The raw command line (arguments separated by NUL); empty when unreadable."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _cmdline_text(pid: int) -> str:
    return cmdline(pid).replace(b"\0", b" ").decode(errors="replace")


def live_pids() -> dict[int, ProcessStat]:
    """Every live (non-zombie) process on the machine, with its ``stat`` fields."""
    found: dict[int, ProcessStat] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := stat(int(entry))) is not None and info.alive:
            found[int(entry)] = info
    return found


# --- by what a process names ------------------------------------------------------------


def processes_mentioning(marker: str) -> list[int]:
    """Live processes other than this one whose command line contains ``marker``."""
    me, needle = os.getpid(), marker.encode()
    return sorted(pid for pid in live_pids() if pid != me and needle in cmdline(pid))


def assert_process_gone(pid: int, *, within: float = 5.0) -> None:
    """The process no longer runs: absent, or a zombie awaiting a reaper (dead)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        info = stat(pid)
        if info is None or not info.alive:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} is still running (state {info.state})")
        time.sleep(0.05)


def assert_no_leftover(tmp_path: Path, *, within: float = 5.0) -> None:
    """No process started for this test (they all mention tmp_path) is still alive."""
    deadline = time.monotonic() + within
    while (alive := processes_mentioning(str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, "processes left behind: " + "; ".join(map(described, alive))


def described(pid: int) -> str:
    """``pid`` with its state, parent and command line, for a failure message."""
    info = stat(pid)
    where = f"state {info.state}, parent {info.parent}" if info is not None else "gone"
    return f"{pid} ({where}{_signals(pid)}): {_cmdline_text(pid)[:300]}"


def _signals(pid: int) -> str:
    """The pending, blocked and caught signal masks (hexadecimal), when readable."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return ""
    wanted = ("SigPnd", "ShdPnd", "SigBlk", "SigCgt")
    masks = [line.replace("\t", " ") for line in lines if line.startswith(wanted)]
    return ", " + ", ".join(masks)


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` that still exists (cleanup: never leave them running)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- by ancestry ------------------------------------------------------------------------


def _ancestry(pid: int, parents: dict[int, int], top: int) -> list[int] | None:
    """The processes between ``top`` and ``pid`` (``pid`` first); None if not under ``top``."""
    chain = [pid]
    current = parents.get(pid)
    while current is not None and current != top:
        chain.append(current)
        current = parents.get(current)
    return chain if current == top else None


def _parents() -> dict[int, int]:
    return {pid: info.parent for pid, info in live_pids().items()}


def descendants(root: int | None = None) -> frozenset[int]:
    """Live (non-zombie) processes descending from ``root`` (default: this process).

    Pool workers and Dask nannies/workers run ``python -c ...spawn_main...``
    and mention no test path, so ``processes_mentioning`` cannot see them;
    the parent chain can. multiprocessing's resource tracker, which lives as
    long as this interpreter by design, is not counted.
    """
    top = os.getpid() if root is None else root
    parents = _parents()
    return frozenset(
        pid
        for pid in parents
        if pid != top
        and _ancestry(pid, parents, top) is not None
        and "resource_tracker" not in _cmdline_text(pid)
    )


def pool_workers(pid: int) -> list[int]:
    """The worker processes of command ``pid``'s pool or local cluster, oldest first.

    A spawned worker runs ``python -c ...spawn_main...``; a forked one
    (``kernel replay --workers``) is a child of ``pid`` with ``pid``'s own
    command line.
    """
    own = cmdline(pid)
    found = []
    for child in descendants(pid):
        info = stat(child)
        line = cmdline(child)
        if info is not None and (b"spawn_main" in line or (info.parent == pid and line == own)):
            found.append((info.start_time, child))
    return [child for _, child in sorted(found)]


def assert_no_new_descendants(
    before: Set[int],
    *,
    within: float = 15.0,
    exempt: Callable[[], Set[int]] = frozenset,
) -> None:
    """Every process started since ``before`` was taken has ended (waits up to ``within``).

    Processes under a process of ``before``, and those ``exempt()`` names
    (the workers of a module-wide Dask cluster, which its in-process nannies
    restart after a worker is killed), are not the test's.
    """

    def new() -> list[int]:
        top, parents, shared = os.getpid(), _parents(), set(before) | set(exempt())
        return [
            pid
            for pid in descendants() - before
            if not set(_ancestry(pid, parents, top) or ()) & shared
        ]

    deadline = time.monotonic() + within
    while (left := new()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {sorted((p, _cmdline_text(p)[:80]) for p in left)}"


# --- by census --------------------------------------------------------------------------


def census() -> set[tuple[int, int]]:
    """Every live process on the machine, as (pid, start time) so a reused pid is new."""
    return {(pid, info.start_time) for pid, info in live_pids().items()}


def _related(pid: int, marker: str) -> bool:
    """Whether the process names ``marker`` in its command line, working or root directory."""
    if marker.encode() in cmdline(pid):
        return True
    try:
        return any(
            os.readlink(f"/proc/{pid}/{link}").startswith(marker) for link in ("cwd", "root")
        )
    except OSError:
        return False


def new_processes(before: set[tuple[int, int]], marker: str) -> list[int]:
    """Processes alive now that were not before and belong to this test's files.

    The machine is shared (other processes come and go), so a newcomer counts
    when it names the test's directory, as every process a step starts does.
    """
    me = os.getpid()
    return sorted(pid for pid, _ in census() - before if pid != me and _related(pid, marker))


def communicate_while_killing(
    process: subprocess.Popen[bytes], victims: Callable[[], list[int]], *, timeout: float = 300
) -> bytes:
    """``process``'s stderr once it exits, every pid ``victims()`` names SIGKILLed meanwhile
    (every 50 ms): workers that keep dying, whatever the command does about them."""
    stop = threading.Event()

    def keep_killing() -> None:
        while not stop.is_set():
            for pid in victims():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    killer = threading.Thread(target=keep_killing, daemon=True)
    killer.start()
    try:
        _, stderr = process.communicate(timeout=timeout)
    finally:
        stop.set()
        killer.join()
    return stderr


def seen_by_some_process(path: Path | str) -> bool:
    """Whether ``path`` exists for some process of the machine, in its own mount
    namespace: a sandboxed step's bounded output is a tmpfs that only its holder's
    namespace has (ADR 0021), so the host never sees what the step writes there."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.path.lexists(f"/proc/{pid}/root{path}"):
                return True
    return False


def in_a_large_write(tid: int) -> bool:
    """True while thread ``tid`` of the calling process is inside write(2) of more than 1 MiB
    (a worker's result on its way to the parent: the moment the pool tests kill it in)."""
    try:
        fields = Path(f"/proc/self/task/{tid}/syscall").read_text().split()
    except OSError:
        return False
    # "<number> <arg1> <arg2> <arg3> ...": write(2) is 1 on x86_64, 64 on aarch64.
    return len(fields) > 3 and fields[0] in ("1", "64") and int(fields[3], 16) > 1 << 20


def finished_within(
    process: subprocess.Popen[bytes], seconds: float, hung: str
) -> tuple[bytes, bytes]:
    """``process``'s output once it has ended; past ``seconds`` its process group (it was
    started with ``start_new_session``) is killed and the test fails with ``hung``."""
    try:
        return process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{hung}: {stdout!r} {stderr[-2000:]!r}")
