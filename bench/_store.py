"""Target 8 (issue 21): the evidence store, wall and CPU as ratios within one round.

One search run of ``attempts`` real certifications of the e2e scenario
(z3 produces, cvc5 checks, each step in bwrap), where the first half are
distinct certification problems (trays 1..n/2, 12 per tray, 6 boxes) and the
second half repeat them in the same order. Per round, three runs, inline:

- ``none``: no store (every attempt runs producer and checker);
- ``store``: a fresh store (the run's first occurrences warm it; each repeat
  is a hit: producer skipped, the checker still runs);
- ``rerun``: the same run again on the store the ``store`` run left (every
  attempt a hit).

8a is none / store, 8b is none / rerun, each for wall time and for CPU (this
process plus its reaped children, ``getrusage``). The outcome bytes of the
three runs must be identical (the benchmark is void otherwise); how many
evidence-source records say ``reused`` is checked against what the store
promises (n/2 and n).
"""

from __future__ import annotations

import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import attrs

from kernel.bundles import outcome_line
from kernel.external import RunLimits, default_environment
from kernel.orchestrate import (
    EVIDENCE_SOURCE,
    EvidenceStore,
    ExternalCertifier,
    certification_entry,
    discover_tools,
    replay_requests,
)
from kernel.organs import CERTIFIED_MANIFEST, assess
from kernel.replay import ReplayBundle, ReplayRequest, build_replay_input, requests_from_bundle
from kernel.upstream import CandidateDraft, build_chain

ROOT: Final = Path(__file__).resolve().parents[1]


def search_run(attempts: int) -> tuple[ReplayRequest, ...]:
    """``attempts`` attempts: ``attempts // 2`` distinct problems, then each once more."""
    distinct = max(1, attempts // 2)
    return repeating_run([i % distinct for i in range(attempts)])


def repeating_run(problems: Sequence[int]) -> tuple[ReplayRequest, ...]:
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
    return requests_from_bundle(ReplayBundle(chain, inputs))


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    outcomes: bytes
    reused: int


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_once(
    requests: tuple[ReplayRequest, ...], scratch: Path, store: Path | None
) -> Timing:
    entry = certification_entry(discover_tools(Path(sys.executable)))
    work = Path(tempfile.mkdtemp(dir=scratch))
    provider = ExternalCertifier(
        work, entry, RunLimits(60.0, 60.0), default_environment(),
        store=None if store is None else EvidenceStore(store),
    )  # fmt: skip
    cpu, started = _cpu(), time.perf_counter()
    outcomes = replay_requests(requests, CERTIFIED_MANIFEST, provider)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
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
    requests = search_run(attempts)
    ratios: dict[str, list[float]] = {
        "store wall": [], "store cpu": [], "rerun wall": [], "rerun cpu": []
    }  # fmt: skip
    timings: dict[str, list[Timing]] = {"none": [], "store": [], "rerun": []}
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
            for name, timing in (("none", none), ("store", cold), ("rerun", warm)):
                timings[name].append(timing)
            if not none.outcomes == cold.outcomes == warm.outcomes:
                return Found(attempts, ratios, timings, "the outcome bytes differ")
            repeats = attempts - max(1, attempts // 2)
            if (none.reused, cold.reused, warm.reused) != (0, repeats, attempts):
                return Found(attempts, ratios, timings,
                             f"reused counts {none.reused}/{cold.reused}/{warm.reused}")
            ratios["store wall"].append(none.wall / cold.wall)
            ratios["store cpu"].append(none.cpu / cold.cpu)
            ratios["rerun wall"].append(none.wall / warm.wall)
            ratios["rerun cpu"].append(none.cpu / warm.cpu)
            say(
                f"round {number + 1}: none {none.wall:.1f} s wall {none.cpu:.1f} s cpu; "
                f"store {cold.wall:.1f}/{cold.cpu:.1f} s ({none.wall / cold.wall:.2f}x wall, "
                f"{none.cpu / cold.cpu:.2f}x cpu); rerun {warm.wall:.1f}/{warm.cpu:.1f} s "
                f"({none.wall / warm.wall:.2f}x wall, {none.cpu / warm.cpu:.2f}x cpu)"
            )
    return Found(attempts, ratios, timings)
