"""Shared values for the orchestrator tests (no tests of its own).

Digests are recomputed here with ``hashlib`` and ``json``, independently of
``kernel.identity``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Set
from pathlib import Path
from typing import Any

from kernel.external import CheckEntry, RunLimits, default_environment
from kernel.orchestrate import ExternalCertifier, certification_entry, discover_tools
from kernel.replay import ReplayBundle
from kernel.serde import loads

__all__ = [
    "E2E_BUNDLE",
    "ROOT",
    "assert_no_new_descendants",
    "certifier",
    "descendants",
    "e2e_bundle",
    "hand_digest",
    "shipped_entry",
]

ROOT = Path(__file__).resolve().parents[1]
E2E_BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"


def hand_digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``, computed without the kernel."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.cache
def e2e_bundle() -> ReplayBundle:
    return loads(E2E_BUNDLE.read_bytes(), ReplayBundle)


@functools.cache
def shipped_entry() -> CheckEntry:
    """The pinned entry for the package's own scripts on this machine."""
    return certification_entry(discover_tools(Path(sys.executable)))


def certifier(
    work_dir: Path, entry: CheckEntry | None = None, *, producer_seconds: float = 60.0
) -> ExternalCertifier:
    return ExternalCertifier(
        work_dir,
        entry or shipped_entry(),
        RunLimits(producer_seconds, 60.0),
        default_environment(),
    )


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from ``/proc/<pid>/stat``; None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[0] not in ("Z", "X"):
            parents[int(entry.name)] = stat[1]
    return parents


def _ancestry(pid: int, parents: dict[int, int], top: int) -> list[int] | None:
    """The processes between ``top`` and ``pid`` (``pid`` first); None if not under ``top``."""
    chain = [pid]
    current = parents.get(pid)
    while current is not None and current != top:
        chain.append(current)
        current = parents.get(current)
    return chain if current == top else None


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
        and "resource_tracker" not in _cmdline(pid)
    )


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
    assert not left, f"processes left behind: {sorted((p, _cmdline(p)[:80]) for p in left)}"
