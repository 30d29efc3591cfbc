"""DRAT checking: the shipped checker against drat-trim and dratify, same proofs.

    make drat-trim                         # build drat-trim (benchmark only; below)
    python -m bench --drat                 # the run recorded in BENCHMARKS.md
    python -m bench --drat --rounds 3      # a quicker look
    python -m bench --drat --no-dratify    # skip dratify (the largest proofs take minutes)
    DRAT_INSTANCES="php 9,php 10" python -m bench --drat    # only these instances (substrings)
    DRAT_BASELINE=/tmp/old.py python -m bench --drat        # also time another sat_checker.py

``examples/backends/sat_checker.py`` (the project's checker), drat-trim (C,
the reference backward checker; built from its public source by
``make drat-trim``, which runs ``DRAT_TRIM_BUILD`` below into
``build/drat-trim``; it is never a runtime dependency and its code is never
committed) and ``dratify`` 0.1.10 (``engine="python"``; a bench-only
dependency, the ``bench`` extra: it is unsound on deletions, issue 13, and is
never used to check anything) each go from the DIMACS and DRAT text to a
verdict on proofs CaDiCaL 1.9.5 (python-sat) writes for the instances below.
Every checker must accept every proof before anything is timed. Each round
times each checker once, rotating which goes first; the ratios are shipped
time / drat-trim time (issue 19's target: at most 5) and shipped time /
dratify time (< 1: the shipped checker is faster), within a round. drat-trim
runs as a process on files (``drat-trim F P -w``, its own parse included);
the shipped checker and dratify run in-process on bytes already read.
``DRAT_BASELINE`` names another ``sat_checker.py`` (e.g. ``git show
main:examples/backends/sat_checker.py``) timed the same way as "baseline":
shipped / baseline below 1 means the shipped checker is faster than it.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import itertools
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRAT_TRIM = Path(os.environ.get("DRAT_TRIM", ROOT / "build" / "drat-trim" / "drat-trim"))
# What ``make drat-trim`` runs (marijnheule/drat-trim, the commit measured in
# BENCHMARKS.md; its own Makefile's flags).
DRAT_TRIM_COMMIT = "effa1dcce85c878236f8313133dff1a2b766cd7c"
DRAT_TRIM_BUILD = (
    "git clone https://github.com/marijnheule/drat-trim build/drat-trim"
    f" && git -C build/drat-trim checkout {DRAT_TRIM_COMMIT}"
    " && gcc build/drat-trim/drat-trim.c -std=c99 -O2 -o build/drat-trim/drat-trim"
)

Clause = list[int]


def _shipped(
    path: Path = ROOT / "examples" / "backends" / "sat_checker.py", name: str = "bench_sat_checker"
) -> Callable[[bytes, bytes], tuple[str, str]]:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    check: Callable[[bytes, bytes], tuple[str, str]] = module.check_files
    return check


def pigeonhole(holes: int) -> tuple[int, list[Clause]]:
    def v(i: int, j: int) -> int:
        return holes * i + j + 1

    clauses = [[v(i, j) for j in range(holes)] for i in range(holes + 1)]
    for j in range(holes):
        for a, b in itertools.combinations(range(holes + 1), 2):
            clauses.append([-v(a, j), -v(b, j)])
    return (holes + 1) * holes, clauses


def random_3sat(variables: int, seed: int) -> tuple[int, list[Clause]]:
    rng = random.Random(seed)
    clauses = []
    for _ in range(round(variables * 4.6)):
        chosen = rng.sample(range(1, variables + 1), 3)
        clauses.append([x if rng.random() < 0.5 else -x for x in chosen])
    return variables, clauses


def mutilated(size: int) -> tuple[int, list[Clause]]:
    cells = {(r, c) for r in range(size) for c in range(size)} - {(0, 0), (size - 1, size - 1)}
    dominoes = [
        (a, b) for a in sorted(cells) for b in ((a[0] + 1, a[1]), (a[0], a[1] + 1)) if b in cells
    ]
    clauses: list[Clause] = []
    for cell in sorted(cells):
        covering = [i + 1 for i, d in enumerate(dominoes) if cell in d]
        clauses.append(covering)
        clauses += [[-a, -b] for a, b in itertools.combinations(covering, 2)]
    return len(dominoes), clauses


@dataclass(frozen=True)
class Instance:
    name: str
    formula: bytes
    proof: bytes
    lines: int


def instances() -> list[Instance]:
    from pysat.solvers import Solver  # type: ignore[import-untyped]  # python-sat ships no types

    chosen = [
        ("php 7 into 6", *pigeonhole(6)),
        ("php 8 into 7", *pigeonhole(7)),
        ("php 9 into 8", *pigeonhole(8)),
        ("php 10 into 9", *pigeonhole(9)),
        ("random 3-SAT, 170 vars", *random_3sat(170, 3)),
        ("random 3-SAT, 200 vars", *random_3sat(200, 1)),
        ("random 3-SAT, 250 vars", *random_3sat(250, 1)),
        ("mutilated chessboard 8x8", *mutilated(8)),
    ]
    wanted = [w.strip() for w in os.environ.get("DRAT_INSTANCES", "").split(",") if w.strip()]
    if wanted:
        chosen = [c for c in chosen if any(w in c[0] for w in wanted)]
    built = []
    for name, variables, clauses in chosen:
        with Solver(name="cadical195", bootstrap_with=clauses, with_proof=True) as solver:
            if solver.solve():
                continue  # a satisfiable random draw has no proof to check
            proof = solver.get_proof()
        header = f"p cnf {variables} {len(clauses)}\n"
        formula = header + "".join(" ".join(map(str, [*c, 0])) + "\n" for c in clauses)
        text = "".join(line + "\n" for line in proof)
        built.append(Instance(name, formula.encode(), text.encode(), len(proof)))
    return built


def _timed(run: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    finally:
        gc.enable()


def _drat_trim(instance: Instance, folder: Path) -> bool:
    formula, proof = folder / "formula.cnf", folder / "proof.drat"
    if not formula.exists():
        formula.write_bytes(instance.formula)
        proof.write_bytes(instance.proof)
    done = subprocess.run(
        [str(DRAT_TRIM), str(formula), str(proof), "-w", "-t", "20000"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "s VERIFIED" in done.stdout


def main(rounds: int, *, with_dratify: bool = True) -> int:
    shipped = _shipped()
    if not DRAT_TRIM.is_file():
        print(f"no drat-trim at {DRAT_TRIM}: run `make drat-trim`, i.e.\n  {DRAT_TRIM_BUILD}")
        return 2

    def ours(instance: Instance) -> bool:
        return shipped(instance.formula, instance.proof)[0] == "accepted"

    def theirs(instance: Instance) -> bool:
        # optional (the `bench` extra); typed (py.typed) when installed
        import dratify  # type: ignore[import-not-found, unused-ignore]

        formula = dratify.parse_dimacs(instance.formula.decode())
        return bool(dratify.check_proof(formula, instance.proof.decode(), engine="python").ok)

    baseline_path = os.environ.get("DRAT_BASELINE")
    baseline = _shipped(Path(baseline_path), "bench_sat_baseline") if baseline_path else None

    def base(instance: Instance) -> bool:
        assert baseline is not None
        return baseline(instance.formula, instance.proof)[0] == "accepted"

    names = ["shipped", "drat-trim", *(["dratify"] if with_dratify else [])]
    names += ["baseline"] if baseline else []
    print(f"DRAT: shipped sat_checker.py vs drat-trim ({DRAT_TRIM_COMMIT[:7]}, {DRAT_TRIM})")
    if with_dratify:
        # optional (the `bench` extra); typed (py.typed) when installed
        import dratify  # type: ignore[import-not-found, unused-ignore]

        print(f"  and dratify {dratify.__version__} (python engine)")
    print(f"{rounds} rounds, order rotating; ratio = shipped / other per round")
    print(f"drat-trim built with: {DRAT_TRIM_BUILD}")
    if baseline_path:
        print(f"baseline: {baseline_path}")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for number, instance in enumerate(instances()):
            folder = Path(scratch) / str(number)
            folder.mkdir()
            runs = {
                "shipped": functools.partial(ours, instance),
                "drat-trim": functools.partial(_drat_trim, instance, folder),
                "dratify": functools.partial(theirs, instance),
                "baseline": functools.partial(base, instance),
            }
            assert all(runs[name]() for name in names), instance.name
            times: dict[str, list[float]] = {name: [] for name in names}
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    times[name].append(_timed(runs[name]))
            row = [instance.name, f"{instance.lines:,}"]
            row += [f"{statistics.median(times[name]):.2f}" for name in names]
            for other in names[1:]:
                ratios = [a / b for a, b in zip(times["shipped"], times[other], strict=True)]
                row += [f"{statistics.median(ratios):.2f}x", f"{min(ratios):.2f}-{max(ratios):.2f}"]
            rows.append(tuple(row))
            print("  " + " | ".join(row), flush=True)
    print()
    header = ["instance", "DRAT lines", *(f"{name} s" for name in names)]
    for other in names[1:]:
        header += [f"shipped / {other} (median)", "min-max"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    return 0
