"""Interleaved timing: every round times each variant once, in rotating order."""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kernel.identity import set_fast_path


@dataclass(frozen=True)
class Variant:
    """One way of doing the work; ``fast_path`` is the identity setting it runs under."""

    label: str
    run: Callable[[], object]
    fast_path: bool = True


@dataclass(frozen=True)
class Comparison:
    """A baseline and one or more variants of the same work, timed side by side."""

    group: str
    case: str
    baseline: Variant
    variants: tuple[Variant, ...]

    @property
    def all_variants(self) -> tuple[Variant, ...]:
        return (self.baseline, *self.variants)


@dataclass(frozen=True)
class Ratio:
    """baseline time / variant time, one value per round (> 1: the variant is faster)."""

    baseline: Variant
    variant: Variant
    number: int  # calls per timing
    baseline_us: tuple[float, ...]  # per call, one per round
    variant_us: tuple[float, ...]

    @property
    def per_round(self) -> tuple[float, ...]:
        return tuple(b / v for b, v in zip(self.baseline_us, self.variant_us, strict=True))

    @property
    def median(self) -> float:
        return statistics.median(self.per_round)

    @property
    def quartiles(self) -> tuple[float, float]:
        q = statistics.quantiles(self.per_round, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def extremes(self) -> tuple[float, float]:
        return min(self.per_round), max(self.per_round)


# The clock every timing reads; ``cpu_clock`` swaps it for this process's CPU
# time, so that on a loaded machine the time spent waiting for a core that
# another job holds is not counted. Interleaving and GC handling stay the same.
_clock: Callable[[], float] = time.perf_counter


@contextlib.contextmanager
def cpu_clock(enabled: bool = True) -> Iterator[str]:
    """Within the block, timings read the process CPU clock (when ``enabled``); yields its name."""
    global _clock
    previous = _clock
    _clock = time.process_time if enabled else time.perf_counter
    try:
        yield "process CPU time" if enabled else "wall (perf_counter)"
    finally:
        _clock = previous


def standalone_parser(prog: str) -> argparse.ArgumentParser:
    """The options every group runnable alone (``python -m bench._NAME``) shares."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--target-ms", type=float, default=40.0)
    parser.add_argument(
        "--cpu", action="store_true",
        help="time with this process's CPU clock instead of the wall clock (a loaded machine)",
    )
    return parser


def time_per_call(variant: Variant, number: int) -> float:
    """Seconds per call over ``number`` calls, with the GC off (as timeit does)."""
    previous = set_fast_path(variant.fast_path)
    run = variant.run
    gc.collect()
    gc.disable()
    try:
        start = _clock()
        for _ in range(number):
            run()
        elapsed = _clock() - start
    finally:
        gc.enable()
        set_fast_path(previous)
    return elapsed / number


def calibrate(comparison: Comparison, target_s: float) -> int:
    """Calls per timing so that the slowest variant takes about ``target_s``."""
    slowest = 0.0
    for variant in comparison.all_variants:
        time_per_call(variant, 1)  # warm-up: caches, lazy imports
        slowest = max(slowest, time_per_call(variant, 3))
    return max(1, round(target_s / max(slowest, 1e-9)))


def measure(comparison: Comparison, *, rounds: int, target_s: float) -> tuple[Ratio, ...]:
    """Time every variant once per round, rotating which goes first; one Ratio per variant."""
    variants = comparison.all_variants
    number = calibrate(comparison, target_s)
    times: list[list[float]] = [[] for _ in variants]
    for r in range(rounds):
        shift = r % len(variants)
        for i in (*range(shift, len(variants)), *range(shift)):
            times[i].append(time_per_call(variants[i], number) * 1e6)
    return tuple(
        Ratio(comparison.baseline, variant, number, tuple(times[0]), tuple(times[i]))
        for i, variant in enumerate(variants)
        if i > 0
    )
