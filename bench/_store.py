"""Target 8 (issue 21): the evidence store, wall and CPU as ratios within one round.

One search run of ``attempts`` real certifications of the e2e scenario
(z3 produces, cvc5 checks, each step in bwrap), where the first half are
distinct certification problems (trays 1..n/2, 12 per tray, 6 boxes) and the
second half repeat them in the same order. Per round, three runs, inline:

- ``none``: no store (every attempt runs producer and checker);
- ``store``: a fresh store (the run's first occurrences warm it; each repeat
  reuses its first's passed certification whole, ADR 0019 "A repeat within
  a run": no step runs for it);
- ``rerun``: the same run again on the store the ``store`` run left (each
  first occurrence a hit: producer skipped, the checker runs; each repeat
  reuses it);
- ``checked``: that re-run with the within-run reuse switched off by an
  instrument (``_NoRepeatReuse``), so that the checker runs for every
  attempt, as 8b was first defined.

8a is none / store, 8b is none / rerun (and none / checked, reported
beside it), each for wall time and for CPU (this
process plus its reaped children, ``getrusage``). The outcome bytes of the
three runs must be identical (the benchmark is void otherwise); how many
evidence-source records say ``reused`` is checked against what the store
promises (n/2 and n).

CPU of the sandboxed steps: ``RUSAGE_CHILDREN`` counts a descendant only
once it is reaped and its reaper is reaped in turn, up to this process. A
step runs under ``bwrap --unshare-pid``, whose outer process exits as soon
as the namespace's PID 1 reports the command's exit status (an eventfd),
without waiting for it: PID 1, which reaped the command, is re-parented to
the system's init and its CPU (z3's, cvc5's, the interpreters') never
reaches this process. So the benchmark makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``): those orphans are re-parented here, and are
reaped after each run (inline: no other child of this process is running
then), which adds their CPU to ``RUSAGE_CHILDREN``. Without it the CPU
column was the kernel's own work plus bwrap's, about 6 ms per step.

``parts(n)`` splits one attempt into the producer step P, the checker step
C (each ``run_process`` call: wall, and CPU with its orphans reaped) and the
kernel's own work K (the rest of the attempt's wall time; its CPU is this
process's), for a run with no store and a run where every attempt hits.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import attrs

from kernel.bundles import outcome_line
from kernel.external import RunLimits, default_environment
from kernel.orchestrate import (
    EVIDENCE_SOURCE,
    EvidenceStore,
    EvidenceTask,
    ExternalCertifier,
    FirstOfKey,
    certification_entry,
    discover_tools,
    replay_requests,
)
from kernel.organs import CERTIFIED_MANIFEST, assess
from kernel.replay import (
    ProofEvidence,
    ReplayBundle,
    ReplayRequest,
    build_replay_input,
    requests_from_bundle,
)
from kernel.upstream import CandidateDraft, build_chain

ROOT: Final = Path(__file__).resolve().parents[1]


def search_run(attempts: int) -> tuple[ReplayRequest, ...]:
    """``attempts`` attempts: ``attempts // 2`` distinct problems, then each once more."""
    distinct = max(1, attempts // 2)
    return repeating_run([i % distinct for i in range(attempts)])


def repeating_run(problems: Sequence[int]) -> tuple[ReplayRequest, ...]:
    """``repeating_bundle(problems)``'s requests, one per attempt."""
    return requests_from_bundle(repeating_bundle(problems))


def repeating_bundle(problems: Sequence[int]) -> ReplayBundle:
    """One attempt per item of ``problems``; equal items pose the same certification problem.

    Problem ``i`` is the e2e scenario's certified candidate with ``1 + i``
    trays (12 per tray, 6 boxes), so distinct items are distinct problems.
    """
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import build_e2e_bundle as scenario  # type: ignore[import-not-found]  # examples/
    finally:
        sys.path.remove(str(ROOT / "examples"))
    frames = {
        i: attrs.evolve(
            scenario.whole(scenario.BOXES),
            bindings=(attrs.evolve(scenario.TRAYS, value=1 + i), scenario.PER_TRAY, scenario.BOXES),
        )
        for i in sorted(set(problems))
    }
    drafts = [CandidateDraft(frames[i], scenario.OP, "v1") for i in problems]
    chain = build_chain(
        scenario.ORIGINAL,
        assess(scenario.ORIGINAL),
        drafts,
        operator_set_id="arithmetic.repair_ops",
        operator_set_version="v1",
    )
    inputs = tuple(build_replay_input(chain, i, CERTIFIED_MANIFEST) for i in range(len(problems)))
    return ReplayBundle(chain, inputs)


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    outcomes: bytes
    reused: int


_PR_SET_CHILD_SUBREAPER: Final = 36


def adopt_orphans() -> bool:
    """Make this process a child subreaper (Linux); False where it is refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                data = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            if int(data[data.rindex(b")") + 2 :].split()[1]) == me:
                found.append(int(entry.name))
    return found


def reap_orphans(settle_seconds: float = 2.0) -> int:
    """Reap every exited child (the sandbox's adopted PID 1s); wait briefly for dying ones.

    Called only when no step is running, so nothing ``subprocess`` waits for is
    taken from it. Children that stay alive (a pool's helper) are left alone.
    """
    reaped = 0
    deadline = time.monotonic() + settle_seconds
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid:
            reaped += 1
            continue
        bwrap = [p for p in _children() if _comm(p) == "bwrap"]
        if not bwrap or time.monotonic() > deadline:
            return reaped
        time.sleep(0.01)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _children_cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def _self_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


class _NoRepeatReuse(FirstOfKey[EvidenceTask]):
    """An instrument: the run's memory that never notes a first, so every hit runs the checker.

    It measures the re-run as 8b was first defined (the checker still runs for
    every attempt), beside the re-run the kernel does (a repeat within the run
    reuses the first's certification whole).
    """

    def note(self, key: str | None, position: int, task: EvidenceTask,
             evidence: tuple[ProofEvidence, ...]) -> None:
        return None


def run_once(
    requests: tuple[ReplayRequest, ...], scratch: Path, store: Path | None,
    *, checker_per_attempt: bool = False,
) -> Timing:
    entry = certification_entry(discover_tools(Path(sys.executable)))
    work = Path(tempfile.mkdtemp(dir=scratch))
    provider = ExternalCertifier(
        work, entry, RunLimits(60.0, 60.0), default_environment(),
        store=None if store is None else EvidenceStore(store),
    )  # fmt: skip
    reap_orphans()
    cpu, started = _cpu(), time.perf_counter()
    memory = _NoRepeatReuse() if checker_per_attempt else None
    outcomes = replay_requests(requests, CERTIFIED_MANIFEST, provider, reuse=memory)
    wall = time.perf_counter() - started
    reap_orphans()  # the last steps' PID 1s, so that their CPU is counted
    cpu = _cpu() - cpu
    lines = b"".join(
        outcome_line(i, r.replay_input.attempt_id, o)
        for i, (r, o) in enumerate(zip(requests, outcomes, strict=True))
    )
    reused = sum(
        json.loads(p.read_bytes())["evidence"] == "reused"
        for p in work.glob(f"*/{EVIDENCE_SOURCE}")
    )
    shutil.rmtree(work)
    return Timing(wall, cpu, lines, reused)


@dataclass(frozen=True)
class Found:
    attempts: int
    ratios: dict[str, list[float]]
    timings: dict[str, list[Timing]]
    void: str = ""


def compare(attempts: int, rounds: int, say: Callable[[str], None] = print) -> Found:
    if not adopt_orphans():
        say("note: not a child subreaper: the CPU column misses the sandboxed steps")
    requests = search_run(attempts)
    ratios: dict[str, list[float]] = {
        "store wall": [], "store cpu": [], "rerun wall": [], "rerun cpu": [],
        "checked wall": [], "checked cpu": [],
    }  # fmt: skip
    timings: dict[str, list[Timing]] = {"none": [], "store": [], "rerun": [], "checked": []}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as scratch_name:
        scratch = Path(scratch_name)
        for number in range(rounds):
            store = scratch / f"store-{number}"
            # Rotate the order of the first two runs; the re-run needs the store's.
            none = run_once(requests, scratch, None) if number % 2 == 0 else None
            cold = run_once(requests, scratch, store)
            if none is None:
                none = run_once(requests, scratch, None)
            warm = run_once(requests, scratch, store)
            checked = run_once(requests, scratch, store, checker_per_attempt=True)
            for name, timing in (("none", none), ("store", cold), ("rerun", warm),
                                 ("checked", checked)):  # fmt: skip
                timings[name].append(timing)
            if not none.outcomes == cold.outcomes == warm.outcomes == checked.outcomes:
                return Found(attempts, ratios, timings, "the outcome bytes differ")
            repeats = attempts - max(1, attempts // 2)
            counts = (none.reused, cold.reused, warm.reused, checked.reused)
            if counts != (0, repeats, attempts, attempts):
                return Found(attempts, ratios, timings,
                             f"reused counts {'/'.join(map(str, counts))}")
            for name, timing in (("store", cold), ("rerun", warm), ("checked", checked)):
                ratios[f"{name} wall"].append(none.wall / timing.wall)
                ratios[f"{name} cpu"].append(none.cpu / timing.cpu)
            say(
                f"round {number + 1}: none {none.wall:.1f} s wall {none.cpu:.1f} s cpu; "
                f"store {cold.wall:.1f}/{cold.cpu:.1f} s ({none.wall / cold.wall:.2f}x wall, "
                f"{none.cpu / cold.cpu:.2f}x cpu); rerun {warm.wall:.1f}/{warm.cpu:.1f} s "
                f"({none.wall / warm.wall:.2f}x wall, {none.cpu / warm.cpu:.2f}x cpu); "
                f"rerun, checker per attempt {checked.wall:.1f}/{checked.cpu:.1f} s "
                f"({none.wall / checked.wall:.2f}x wall, {none.cpu / checked.cpu:.2f}x cpu)"
            )
    return Found(attempts, ratios, timings)


@dataclass(frozen=True)
class Parts:
    """Per attempt, in ms: producer step, checker step (wall, CPU), kernel's own (wall, CPU)."""

    name: str
    producer_wall: float
    producer_cpu: float
    checker_wall: float
    checker_cpu: float
    kernel_wall: float
    kernel_cpu: float
    attempt_wall: float


def parts(attempts: int, say: Callable[[str], None] = print) -> list[Parts]:
    """P, C and K of one attempt: a run with no store, then a run where every attempt hits.

    Each step is timed around ``run_process`` (monkeypatched in this process
    only: an instrument, never a behaviour), with the sandbox's orphaned
    PID 1 reaped right after it, so that its CPU is the step's.
    """
    import kernel.external._steps as steps

    adopt_orphans()
    requests = repeating_run(list(range(attempts)))
    entry = certification_entry(discover_tools(Path(sys.executable)))
    calls: list[tuple[float, float]] = []
    namespace = vars(steps)  # the name _steps calls, replaced for this measurement only
    real = namespace["run_process"]

    def timed(*args: Any, **kwargs: Any) -> Any:
        reap_orphans(0.0)
        cpu, started = _children_cpu(), time.perf_counter()
        result = real(*args, **kwargs)
        wall = time.perf_counter() - started
        reap_orphans()
        calls.append((wall, _children_cpu() - cpu))
        return result

    found = []
    namespace["run_process"] = timed
    try:
        with tempfile.TemporaryDirectory(prefix="bench-parts-") as scratch_name:
            scratch = Path(scratch_name)
            store = EvidenceStore(scratch / "store")
            for name, with_store in (("warm-up", False), ("none", False), ("fill", True),
                                     ("hits", True)):  # fmt: skip
                provider = ExternalCertifier(
                    scratch / name, entry, RunLimits(60.0, 60.0), default_environment(),
                    store=store if with_store else None,
                )  # fmt: skip
                calls.clear()
                own, started = _self_cpu(), time.perf_counter()
                replay_requests(requests, CERTIFIED_MANIFEST, provider)
                wall, own = time.perf_counter() - started, _self_cpu() - own
                produced = name != "hits"
                producer = calls[0::2] if produced else []
                checker = calls[1::2] if produced else calls
                assert len(checker) == attempts, (name, len(calls))

                def ms(total: float, count: int = attempts) -> float:
                    return 1000 * total / max(1, count)

                steps_wall = sum(w for w, _ in calls)
                row = Parts(
                    name,
                    ms(sum(w for w, _ in producer), len(producer)),
                    ms(sum(c for _, c in producer), len(producer)),
                    ms(sum(w for w, _ in checker)),
                    ms(sum(c for _, c in checker)),
                    ms(wall - steps_wall),
                    ms(own),
                    ms(wall),
                )
                found.append(row)
                say(f"{name}: attempt {row.attempt_wall:.0f} ms wall; P {row.producer_wall:.0f} ms "
                    f"wall {row.producer_cpu:.0f} ms cpu; C {row.checker_wall:.0f} ms wall "
                    f"{row.checker_cpu:.0f} ms cpu; K {row.kernel_wall:.0f} ms wall "
                    f"{row.kernel_cpu:.0f} ms cpu (this process)")  # fmt: skip
    finally:
        namespace["run_process"] = real
    return found


if __name__ == "__main__":
    # python -m bench._store parts N | compare N ROUNDS
    if sys.argv[1:2] == ["parts"]:
        parts(int(sys.argv[2]))
    else:
        compare(int(sys.argv[2]), int(sys.argv[3]))
