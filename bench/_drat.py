"""DRAT checking: the shipped checker against dratify's pure-Python engine, same proofs.

    python -m bench --drat                 # the run recorded in BENCHMARKS.md
    python -m bench --drat --rounds 3      # a quicker look

``examples/backends/sat_checker.py`` (the project's checker) and ``dratify``
0.1.10 (``engine="python"``; a bench-only dependency, the ``bench`` extra:
it is unsound on deletions, issue 13, and is never used to check anything)
each go from the DIMACS and DRAT text to a verdict on proofs CaDiCaL 1.9.5
(python-sat) writes for the instances below. Both must accept every proof
before anything is timed. Each round times each checker once, alternating
which goes first; the ratio is shipped time / dratify time within a round
(< 1: the shipped checker is faster; the issue's bound is 1.5).
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import itertools
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

Clause = list[int]


def _shipped() -> Callable[[bytes, bytes], tuple[str, str]]:
    spec = importlib.util.spec_from_file_location(
        "bench_sat_checker", ROOT / "examples" / "backends" / "sat_checker.py"
    )
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
    from pysat.solvers import Solver

    chosen = [
        ("php 7 into 6", *pigeonhole(6)),
        ("php 8 into 7", *pigeonhole(7)),
        ("php 9 into 8", *pigeonhole(8)),
        ("random 3-SAT, 170 vars", *random_3sat(170, 3)),
        ("random 3-SAT, 200 vars", *random_3sat(200, 1)),
        ("mutilated chessboard 8x8", *mutilated(8)),
    ]
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


def main(rounds: int) -> int:
    import dratify

    shipped = _shipped()

    def ours(instance: Instance) -> bool:
        return shipped(instance.formula, instance.proof)[0] == "accepted"

    def theirs(instance: Instance) -> bool:
        formula = dratify.parse_dimacs(instance.formula.decode())
        return bool(dratify.check_proof(formula, instance.proof.decode(), engine="python").ok)

    print(f"DRAT: shipped sat_checker.py vs dratify {dratify.__version__} (python engine), ")
    print(f"{rounds} rounds, order alternating; ratio = shipped / dratify per round")
    rows = []
    for instance in instances():
        assert ours(instance) and theirs(instance), instance.name
        shipped_s: list[float] = []
        dratify_s: list[float] = []
        for r in range(rounds):
            pair = [(shipped_s, ours), (dratify_s, theirs)]
            for times, run in pair if r % 2 == 0 else reversed(pair):
                times.append(_timed(functools.partial(run, instance)))
        ratios = [a / b for a, b in zip(shipped_s, dratify_s, strict=True)]
        row = (
            instance.name,
            f"{instance.lines:,}",
            f"{statistics.median(shipped_s):.2f}",
            f"{statistics.median(dratify_s):.2f}",
            f"{statistics.median(ratios):.2f}x",
            f"{min(ratios):.2f}-{max(ratios):.2f}",
        )
        rows.append(row)
        print("  " + " | ".join(row), flush=True)
    print()
    print("| instance | DRAT lines | shipped s | dratify (python) s | ratio (median) | min-max |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0
