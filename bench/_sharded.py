"""Sharded replay through the command line: serial against ``--workers 2`` and Dask (issue 22).

For one size N, a bundle stream of N attempts is written once (``kernel
bundle --layout stream``); then, in interleaved rounds, ``kernel replay``
serial, ``kernel replay --workers 2`` and ``kernel replay --executor dask
--workers 2`` (a local cluster, started and stopped by the command: its
start-up is inside the wall time) each classify it, fresh processes, wall
time and CPU (the whole process tree: ``wait4`` of the command, which reaps
its workers) recorded with the load average. Every output is compared with
the serial one byte for byte (cmp); a difference voids the figures.

Each round also measures the machine's own ceiling (``ceiling``): one
serial ``kernel replay`` of a smaller bundle alone, then two of them started
together. ``2 x alone / together`` is the most any two processes could gain
over one at that moment, whatever the kernel does: on a virtual machine
whose two cores slow each other down (a shared cache, a host that runs one
busy thread faster), it is below 2, and a sharded run cannot beat it.

``--shards`` measures the per-shard overhead instead: ``--workers 1`` at
several shard sizes against serial, per attempt, from which the default
shard size is chosen and the cluster estimate in BENCHMARKS.md is derived.

    python -m bench._sharded 100000            # the side-by-side figures (make bench: 8, 9)
    python -m bench._sharded --shards 10000    # per-shard overhead by shard size
"""

from __future__ import annotations

import filecmp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench._stream import _draft, _measured

VARIANTS: dict[str, tuple[str, ...]] = {
    "serial": (),
    "workers 2": ("--workers", "2"),
    "dask 2": ("--executor", "dask", "--workers", "2"),
}


@dataclass(frozen=True)
class Sample:
    variant: str
    round: int
    wall_s: float
    cpu_s: float
    peak_rss_kib: int
    load: str


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def bundle(directory: Path, attempts: int) -> Path:
    draft = _draft(directory, attempts)
    path = directory / f"bundle-{attempts}.jsonl"
    _measured("bundle", draft, "--layout", "stream", "--out", path)
    draft.unlink()
    return path


#: The variants of the machine's ceiling (``ceiling``): one serial replay alone, two at once.
ALONE = "ceiling: 1 serial alone"
TOGETHER = "ceiling: 2 serial at once"


def _ceiling(path: Path, directory: Path, index: int, say: Callable[[str], None]
             ) -> list[Sample]:
    """One serial replay of ``path`` alone, then two started together (wall: the later end)."""
    before = _load()
    wall, cpu, rss, _ = _measured("replay", path, "--quiet", "--out", directory / "alone.jsonl")
    alone = Sample(ALONE, index, wall, cpu, rss, f"{before}-{_load()}")
    before = _load()
    with ThreadPoolExecutor(2) as pool:
        pair = list(pool.map(
            lambda n: _measured("replay", path, "--quiet", "--out", directory / f"pair{n}.jsonl"),
            (0, 1)))
    together = Sample(TOGETHER, index, max(p[0] for p in pair), sum(p[1] for p in pair),
                      max(p[2] for p in pair), f"{before}-{_load()}")
    for sample in (alone, together):
        say(f"  round {index + 1} {sample.variant:<10} wall {sample.wall_s:8.1f} s  "
            f"cpu {sample.cpu_s:8.1f} s  load {sample.load}")
    return [alone, together]


def ceilings(samples: list[Sample]) -> list[float]:
    """Per round with a ceiling measured: 2 x (one alone) / (two at once), walls."""
    alone = {s.round: s.wall_s for s in samples if s.variant == ALONE}
    return [2 * alone[s.round] / s.wall_s for s in samples if s.variant == TOGETHER]


def compare(
    attempts: int, rounds: int = 1, say: Callable[[str], None] = print,
    variants: dict[str, tuple[str, ...]] = VARIANTS, ceiling: int = 0,
) -> list[Sample]:
    """Interleaved rounds of every variant on one bundle; outputs compared with serial's.

    With ``ceiling`` > 0, each round also measures the machine's ceiling on a
    bundle of that many attempts (``_ceiling``).
    """
    found: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="kernel-sharded-") as tmp:
        directory = Path(tmp)
        path = bundle(directory, attempts)
        small = bundle(directory, ceiling) if ceiling else None
        reference = directory / "serial.jsonl"
        for index in range(rounds):
            if small is not None:
                found += _ceiling(small, directory, index, say)
            order = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name in order:
                out = reference if name == "serial" else directory / "out.jsonl"
                before = _load()
                wall, cpu, rss, _ = _measured("replay", path, "--quiet", "--out", out,
                                              *variants[name])
                sample = Sample(name, index, wall, cpu, rss, f"{before}-{_load()}")
                found.append(sample)
                say(f"  round {index + 1} {name:<10} wall {wall:8.1f} s  cpu {cpu:8.1f} s  "
                    f"peak {rss / 1024:6.0f} MiB  load {sample.load}")
                if name != "serial" and reference.exists():
                    if not filecmp.cmp(reference, out, shallow=False):
                        raise SystemExit(f"{name}: outcome bytes differ from serial's")
                    out.unlink()
            if "serial" not in variants:
                continue
    return found


def ratios(samples: list[Sample]) -> dict[str, tuple[float, list[float]]]:
    """Per variant: the median over rounds of serial wall / variant wall (within a round)."""
    serial = {s.round: s.wall_s for s in samples if s.variant == "serial"}
    per: dict[str, list[float]] = {}
    for s in samples:
        if s.variant not in ("serial", ALONE, TOGETHER):
            per.setdefault(s.variant, []).append(serial[s.round] / s.wall_s)
    return {name: (statistics.median(values), values) for name, values in per.items()}


def shard_overhead(attempts: int, sizes: tuple[int, ...], say: Callable[[str], None] = print
                   ) -> list[tuple[str, float, float]]:
    """(label, wall s, cpu s) of serial and ``--workers 1 --shard-size S`` for each S."""
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="kernel-sharded-") as tmp:
        directory = Path(tmp)
        path = bundle(directory, attempts)
        runs = [("serial", ())] + [
            (f"workers 1, shard {size}", ("--workers", "1", "--shard-size", str(size)))
            for size in sizes
        ]
        for label, options in runs:
            started = _load()
            wall, cpu, _, _ = _measured("replay", path, "--quiet", "--out",
                                        directory / "out.jsonl", *options)
            rows.append((label, wall, cpu))
            say(f"  {label:<24} wall {wall:7.1f} s  cpu {cpu:7.1f} s  "
                f"cpu/attempt {cpu / attempts * 1000:6.3f} ms  load {started}-{_load()}")
    return rows


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    say = lambda line: print(line, flush=True)  # noqa: E731
    print(f"nproc {os.cpu_count()}, load average {os.getloadavg()}", flush=True)
    if argv[:1] == ["--shards"]:
        attempts = int(argv[1]) if len(argv) > 1 else 10_000
        shard_overhead(attempts, (10, 50, 200, 500, 2000), say)
    else:
        attempts = int(argv[0]) if argv else 10_000
        rounds = int(argv[1]) if len(argv) > 1 else 1
        samples = compare(attempts, rounds, say)
        for name, (median, values) in ratios(samples).items():
            print(f"serial / {name}: {median:.2f}x wall (rounds: "
                  f"{', '.join(f'{v:.2f}' for v in values)})")
    print(f"took {time.perf_counter() - started:.0f} s; load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
