"""Parallel checks that pay (issue 10, deliverable 6): serial against executors.

``python -m bench --parallel`` (``make bench-parallel``: 3 full rounds of 1, 2
and 4 workers) and ``python -m bench --targets --only 6`` (part of ``make
bench``: 2 rounds of serial, pool x2 and Dask x2), both through ``compare``.
What is measured:

- the workload is the kernel's real certification path: ``replay_requests``
  over a search run of N attempts (default 200) of the shipped e2e scenario
  (candidate 0 of ``examples/build_e2e_bundle.py`` proposed N times), every
  one contract-closed and carrying ``target_certified``, certified by the
  real ``ExternalCertifier`` through the real external protocol
  (``run_check``: pins, sealed copies, user+PID namespace containment,
  receipt validation), with a pinned stand-in pair (``parallel_pair/``:
  stdlib producer and checker, by default no work beyond the protocol's
  files; ``compare(work=N)`` adds N x 64 KiB of hashing) instead of z3 and cvc5,
  which cost about 1.6 s per check under load;
- variants, interleaved per round with the order rotated: inline (serial),
  a process pool and a Dask ``LocalCluster`` of each worker count; each
  timing includes opening and closing the executor (a user's ``kernel run``
  pays that too); ``distributed`` itself is imported once before any timing;
- every variant's outcome bytes (JSON Lines) are compared with the serial
  bytes, every round; a difference aborts the benchmark.

A ratio is serial time / variant time within one round; the table gives the
median, the quartiles and the extremes over the rounds. The load average is
printed before and after, since the machine is shared.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kernel.commands.replay import outcome_lines
from kernel.external import (
    CheckEntry,
    Claim,
    Command,
    Pin,
    RunLimits,
    default_environment,
)
from kernel.orchestrate import (
    ExecutorKind,
    ExecutorSpec,
    ExternalCertifier,
    open_executor,
    replay_requests,
)
from kernel.orchestrate._tools import CERTIFY_OBLIGATION, CERTIFY_SPECIFICATION
from kernel.organs import CERTIFIED_MANIFEST, assess
from kernel.replay import ReplayBundle, ReplayRequest, build_replay_input, requests_from_bundle
from kernel.upstream import build_chain

ROOT: Final = Path(__file__).resolve().parents[1]
PAIR: Final = Path(__file__).resolve().parent / "parallel_pair"
CHECK_ID: Final = "bench-parallel-pair"


def _pin(path: Path | str) -> Pin:
    import hashlib

    return Pin(str(path), hashlib.sha256(Path(path).read_bytes()).hexdigest())


def pair_entry(work_rounds: int) -> CheckEntry:
    """The pinned stand-in pair: this interpreter runs ``parallel_pair/*.py``."""
    python = sys.executable
    rounds = str(work_rounds)
    return CheckEntry(
        check_id=CHECK_ID,
        claim=Claim(
            specification=CERTIFY_SPECIFICATION,
            obligations=(CERTIFY_OBLIGATION,),
            assumptions=("benchmark stand-in: fixed hashing work, no decision",),
            model_scope="benchmark only",
        ),
        assurance="benchmark-stand-in",
        inputs=(),
        evidence_artifacts=(f"{CERTIFY_OBLIGATION}.smt2", "z3-answer.txt"),
        producer=Command(
            argv=(
                "{{python}}",
                "-I",
                "-S",
                str(PAIR / "producer.py"),
                "--work",
                rounds,
                "{{request}}",
            ),
            executable=_pin(python),
            dependencies=(_pin(PAIR / "producer.py"),),
            trusted_tool_dependencies=(),
        ),
        checker=Command(
            argv=(
                "{{python}}",
                "-I",
                "-S",
                str(PAIR / "checker.py"),
                "--work",
                rounds,
                "{{request}}",
                "{{receipt}}",
            ),
            executable=_pin(python),
            dependencies=(_pin(PAIR / "checker.py"),),
            trusted_tool_dependencies=(),
        ),
    )


def search_run(attempts: int) -> tuple[ReplayRequest, ...]:
    """``attempts`` attempts of the e2e scenario's certified candidate, in one run."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import build_e2e_bundle as scenario  # type: ignore[import-not-found]  # examples/, above
    finally:
        sys.path.remove(str(ROOT / "examples"))
    drafts = (scenario.CANDIDATES[0],) * attempts
    chain = build_chain(
        scenario.ORIGINAL,
        assess(scenario.ORIGINAL),
        drafts,
        operator_set_id="arithmetic.repair_ops",
        operator_set_version="v1",
    )
    inputs = tuple(build_replay_input(chain, i, CERTIFIED_MANIFEST) for i in range(attempts))
    return requests_from_bundle(ReplayBundle(chain, inputs))


def certifier(work_dir: Path, entry: CheckEntry) -> ExternalCertifier:
    return ExternalCertifier(work_dir, entry, RunLimits(60.0, 60.0), default_environment())


def run_once(
    requests: tuple[ReplayRequest, ...], entry: CheckEntry, spec: ExecutorSpec, scratch: Path
) -> tuple[float, float, bytes]:
    """Wall seconds (executor open to close), of which the executor's start-up, and the bytes.

    The start-up is the time ``open_executor`` takes to hand back a ready
    executor (a pool's or a cluster's processes started, a client connected);
    it is inside the first figure, as a user's ``kernel run`` pays it once per
    run, and reported apart (issue 22: count the cluster's start-up separately).
    """
    work = Path(tempfile.mkdtemp(dir=scratch))
    provider = certifier(work, entry)
    started = time.perf_counter()
    with open_executor(spec) as executor:
        ready = time.perf_counter()
        outcomes = replay_requests(requests, CERTIFIED_MANIFEST, provider, executor=executor)
    elapsed = time.perf_counter() - started
    shutil.rmtree(work)
    return elapsed, ready - started, outcome_lines(outcomes)


def variants(workers: tuple[int, ...]) -> list[tuple[str, ExecutorSpec]]:
    """A process pool and a local Dask cluster of each worker count."""
    return [
        (f"{kind.value} x{count}", ExecutorSpec(kind, workers=count))
        for kind in (ExecutorKind.PROCESS, ExecutorKind.DASK)
        for count in workers
    ]


SERIAL: Final = ("serial (inline)", ExecutorSpec(ExecutorKind.INLINE))


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


@dataclass(frozen=True)
class Comparison:
    """Wall seconds per variant and round, serial / variant per round, load averages."""

    attempts: int
    times: dict[str, list[float]]
    ratios: dict[str, list[float]]
    loads: list[str]
    task_bytes: int  # one evidence task as pickled for a worker (ADR 0008: the certifier's task)
    startups: dict[str, list[float]]  # of each time above, the executor's start-up
    # serial / (variant - its start-up), per round: what the executor pays once a run is open
    ratios_after_startup: dict[str, list[float]]

    def median_ratio(self, name: str) -> float:
        return statistics.median(self.ratios[name])


def task_size(requests: tuple[ReplayRequest, ...], entry: CheckEntry) -> int:
    """Bytes pickled per evidence task: the certifier's task for one contract-closed attempt.

    That is what the driver hands the executor for ``ExternalCertifier``
    (ADR 0008); it holds no part of the run, so it does not grow with it.
    """
    import pickle

    from kernel.replay import ContractClosed, begin_attempt, facts_for

    state = begin_attempt(requests[0], CERTIFIED_MANIFEST, facts=facts_for(requests[0], None))
    assert isinstance(state, ContractClosed)
    return len(pickle.dumps(certifier(Path("/nonexistent"), entry).task_for(state)))


def compare(
    *,
    attempts: int = 200,
    rounds: int = 3,
    work: int = 0,
    workers: tuple[int, ...] = (1, 2, 4),
    curve_rounds: int | None = None,
    focus: int = 2,
    say: Callable[[str], None] = print,
) -> Comparison | None:
    """Run the interleaved rounds; ``None`` if any variant's outcome bytes differ (void).

    Every variant runs in the first ``curve_rounds`` rounds (default: all);
    after those, only the serial run and the ``focus``-worker variants (the
    targets), so a quick run still has a whole curve and several target rounds.
    """
    requests = search_run(attempts)
    entry = pair_entry(work)
    chosen = variants(workers)
    curve = rounds if curve_rounds is None else curve_rounds
    if any(spec.kind is ExecutorKind.DASK for _, spec in chosen):
        # Imported once before any timing, so the first Dask variant does not pay
        # the driver's import of distributed (1-2 s) that the later ones skip.
        import distributed  # noqa: F401
    say(
        f"parallel checks: {attempts} attempts, {rounds} rounds (curve {curve}), work {work}, "
        f"nproc {os.cpu_count()}, python {sys.version.split()[0]}, load average {_load()}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as scratch_dir:
        scratch = Path(scratch_dir)
        expected: bytes | None = None
        times: dict[str, list[float]] = {name: [] for name, _ in (SERIAL, *chosen)}
        startups: dict[str, list[float]] = {name: [] for name, _ in (SERIAL, *chosen)}
        ratios: dict[str, list[float]] = {name: [] for name, _ in chosen}
        after: dict[str, list[float]] = {name: [] for name, _ in chosen}
        loads: list[str] = []
        for round_index in range(rounds):
            order = [
                SERIAL,
                *(
                    (name, spec)
                    for name, spec in chosen
                    if round_index < curve or spec.workers == focus
                ),
            ]
            shift = round_index % len(order)
            order = order[shift:] + order[:shift]  # rotate: nobody always goes first
            this_round: dict[str, float] = {}
            this_startup: dict[str, float] = {}
            for name, spec in order:
                elapsed, startup, data = run_once(requests, entry, spec, scratch)
                if expected is None:
                    expected = data
                if data != expected:
                    say(f"{name}: outcome bytes differ from the first run: benchmark void")
                    return None
                this_round[name] = elapsed
                this_startup[name] = startup
                times[name].append(elapsed)
                startups[name].append(startup)
                say(
                    f"  round {round_index + 1}: {name}: {elapsed:.2f} s "
                    f"({elapsed / attempts * 1000:.0f} ms/attempt; start-up {startup:.2f} s), "
                    f"load {_load()}"
                )
            loads.append(_load())
            for name in this_round:
                if name != SERIAL[0]:
                    serial = this_round[SERIAL[0]]
                    ratios[name].append(serial / this_round[name])
                    after[name].append(serial / (this_round[name] - this_startup[name]))
    return Comparison(
        attempts, times, ratios, loads, task_size(requests, entry), startups, after
    )


def main(
    *,
    attempts: int = 200,
    rounds: int = 3,
    work: int = 0,
    workers: tuple[int, ...] = (1, 2, 4),
    say: Callable[[str], None] = print,
) -> int:
    """Run the comparison and print a Markdown table; 1 if any variant's bytes differ."""
    found = compare(attempts=attempts, rounds=rounds, work=work, workers=workers, say=say)
    if found is None:
        return 1
    serial = statistics.median(found.times[SERIAL[0]])
    say("")
    say(
        f"serial: median {serial:.1f} s for {attempts} attempts "
        f"({serial / attempts * 1000:.0f} ms per check, all in one process); "
        f"{found.task_bytes:,} bytes pickled per task"
    )
    say(f"load average after each round: {'; '.join(found.loads)}")
    say("")
    say("| variant | median s | of which start-up s | serial / variant (median) | IQR | "
        "min-max | serial / (variant - start-up) |")
    say("|---|---|---|---|---|---|---|")
    for name, values in found.ratios.items():
        q1, q3 = _quartiles(values)
        say(
            f"| {name} | {statistics.median(found.times[name]):.1f} | "
            f"{statistics.median(found.startups[name]):.2f} | "
            f"**{statistics.median(values):.2f}x** | {q1:.2f}-{q3:.2f} | "
            f"{min(values):.2f}-{max(values):.2f} | "
            f"{statistics.median(found.ratios_after_startup[name]):.2f}x |"
        )
    return 0
