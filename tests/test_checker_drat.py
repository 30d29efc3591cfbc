"""The shipped DRAT checker (``examples/backends/sat_checker.py``) against independent oracles.

- A corpus of unsatisfiable instances (pigeonhole, random 3-SAT, Tseitin
  parity, graph colouring, mutilated chessboards) is generated here, proved by
  CaDiCaL 1.9.5 (python-sat), and every proof is checked as given, in binary
  DRAT, and under more than ten corruption kinds.
- The oracle is written here from the DRAT definition, not from the checker:
  it replays a proof with unit propagation done by python-sat's MiniSat
  (each clause guarded by a selector literal, the current formula being the
  selectors assumed), under the specified deletion semantics (every deletion
  honoured) and the operational one (deletions of clauses that are unit under
  the top-level assignment ignored, as drat-trim does).
- The checker must agree with the specified-semantics oracle on the verdict
  and the failing step, and whatever either accepts must be unsatisfiable.
- Tiny formulas with random proofs are checked against brute force.

Longer runs: ``make fuzz`` (``HYPOTHESIS_PROFILE=deep``) widens the corpus seeds and the
random runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pysat.solvers import Solver  # type: ignore[import-untyped]  # python-sat ships no types

ROOT = Path(__file__).resolve().parent.parent
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"

Clause = list[int]
Step = tuple[bool, Clause]


SCRIPT = ROOT / "examples" / "backends" / "sat_checker.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shipped_sat_checker", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECKER = _load()


def checker_verdict(formula: bytes, proof: bytes) -> tuple[str, int | None]:
    result, detail = CHECKER.check_files(formula, proof)
    assert isinstance(result, str) and isinstance(detail, str)
    found = re.match(r"(?:empty clause derived at )?step (\d+)", detail)
    return result, int(found.group(1)) if found and result != "unknown" else None


def checker_core(
    variables: int, formula: list[Clause], steps: list[Step]
) -> tuple[str, int | None, list[int]]:
    """(result, step, core): the core is the step numbers of the refutation it checked."""
    result, detail, core = CHECKER.check_core(variables, formula, steps)
    assert isinstance(result, str) and isinstance(detail, str) and isinstance(core, list)
    found = re.match(r"(?:empty clause derived at )?step (\d+)", detail)
    return result, int(found.group(1)) if found and result != "unknown" else None, core


# --- text and binary encodings, written here ---------------------------------------


def dimacs(variables: int, clauses: list[Clause]) -> bytes:
    lines = [f"p cnf {variables} {len(clauses)}"]
    lines += [" ".join(map(str, [*clause, 0])) for clause in clauses]
    return ("\n".join(lines) + "\n").encode()


def text_drat(steps: list[Step]) -> bytes:
    return "".join(
        ("d " if deletion else "") + " ".join(map(str, [*clause, 0])) + "\n"
        for deletion, clause in steps
    ).encode()


def binary_drat(steps: list[Step]) -> bytes:
    out = bytearray()
    for deletion, clause in steps:
        out.append(ord("d") if deletion else ord("a"))
        for literal in clause:
            number = 2 * abs(literal) + (literal < 0)
            while number >= 0x80:
                out.append(number & 0x7F | 0x80)
                number >>= 7
            out.append(number)
        out.append(0)
    return bytes(out)


def parse_steps(lines: list[str]) -> list[Step]:
    steps: list[Step] = []
    for line in lines:
        tokens = line.split()
        deletion = tokens[0] == "d"
        numbers = [int(t) for t in tokens[1 if deletion else 0 :]]
        assert numbers[-1] == 0
        steps.append((deletion, numbers[:-1]))
    return steps


# --- the oracle ----------------------------------------------------------------------


class Oracle:
    """DRAT replay by definition; unit propagation is MiniSat's."""

    def __init__(self, formula: list[Clause], steps: list[Step], *, operational: bool) -> None:
        top = max((abs(x) for c in [*formula, *(s for _, s in steps)] for x in c), default=0)
        self.next_selector = top + 1
        self.solver = Solver(name="minisat22")
        self.operational = operational
        self.active: dict[int, frozenset[int]] = {}  # selector -> clause (insertion ordered)
        for clause in formula:
            self.add(clause)

    def close(self) -> None:
        self.solver.delete()

    def add(self, clause: Clause) -> None:
        selector = self.next_selector
        self.next_selector += 1
        self.solver.add_clause([*clause, -selector])
        self.active[selector] = frozenset(clause)

    def _propagate(self, extra: list[int]) -> tuple[bool, set[int]]:
        status, literals = self.solver.propagate(assumptions=[*self.active, *extra])
        return bool(status), set(literals)

    def rup(self, clause: Clause) -> bool:
        return not self._propagate([-x for x in clause])[0]

    def rat(self, clause: Clause) -> bool:
        if not clause:
            return False
        pivot = clause[0]
        for other in list(self.active.values()):
            if -pivot not in other:
                continue
            resolvent = set(clause) | (other - {-pivot})
            if any(-x in resolvent for x in resolvent):
                continue
            if not self.rup(sorted(resolvent)):
                return False
        return True

    def delete(self, clause: Clause) -> None:
        key = frozenset(clause)
        copies = [selector for selector, other in self.active.items() if other == key]
        if not copies:
            return
        selector = copies[-1]
        if self.operational:
            consistent, assigned = self._propagate([])
            true = [x for x in key if x in assigned]
            if consistent and len(true) == 1 and all(-x in assigned for x in key - set(true)):
                return  # unit under the top level: drat-trim ignores the deletion
        del self.active[selector]
        self.solver.add_clause([-selector])  # the guarded clause is satisfied for good

    def run(self, steps: list[Step]) -> tuple[str, int | None]:
        for number, (deletion, clause) in enumerate(steps, start=1):
            if deletion:
                self.delete(clause)
                continue
            if not (self.rup(clause) or self.rat(clause)):
                return "rejected", number
            if not clause:
                return "accepted", number
            self.add(clause)
        return "unknown", None


def judged_invalid(formula: list[Clause], steps: list[Step], number: int) -> bool:
    """Step ``number`` is a lemma neither RUP nor RAT over the clauses in force
    before it (every earlier step replayed unchecked, deletions specified)."""
    replay = Oracle(formula, steps, operational=False)
    try:
        for deletion, clause in steps[: number - 1]:
            if deletion:
                replay.delete(clause)
            else:
                replay.add(clause)
        deletion, clause = steps[number - 1]
        return not deletion and not (replay.rup(clause) or replay.rat(clause))
    finally:
        replay.close()


def oracle(
    formula: list[Clause], steps: list[Step], *, operational: bool
) -> tuple[str, int | None]:
    if not steps:
        return "unknown", None
    replay = Oracle(formula, steps, operational=operational)
    try:
        return replay.run(steps)
    finally:
        replay.close()


def unsatisfiable(clauses: list[Clause]) -> bool:
    with Solver(name="minisat22", bootstrap_with=clauses) as solver:
        return not solver.solve()


# --- the corpus ------------------------------------------------------------------------


def pigeonhole(holes: int) -> tuple[int, list[Clause]]:
    pigeons = holes + 1

    def v(i: int, j: int) -> int:
        return holes * i + j + 1

    clauses = [[v(i, j) for j in range(holes)] for i in range(pigeons)]
    for j in range(holes):
        for a, b in itertools.combinations(range(pigeons), 2):
            clauses.append([-v(a, j), -v(b, j)])
    return pigeons * holes, clauses


def random_3sat(variables: int, seed: int) -> tuple[int, list[Clause]]:
    rng = random.Random(seed)
    clauses = []
    for _ in range(round(variables * 5.2)):
        chosen = rng.sample(range(1, variables + 1), 3)
        clauses.append([x if rng.random() < 0.5 else -x for x in chosen])
    return variables, clauses


def tseitin(edges: list[tuple[int, int]], charged: set[int]) -> tuple[int, list[Clause]]:
    """Parity of the edges at each vertex = its charge; odd total charge: unsatisfiable."""
    vertices = sorted({v for e in edges for v in e})
    clauses: list[Clause] = []
    for vertex in vertices:
        incident = [i + 1 for i, e in enumerate(edges) if vertex in e]
        parity = 1 if vertex in charged else 0
        for signs in itertools.product((1, -1), repeat=len(incident)):
            # Forbid the assignment whose clause this is: x = (sign < 0).
            ones = sum(1 for s in signs if s < 0)
            if ones % 2 != parity:
                clauses.append([s * x for s, x in zip(signs, incident, strict=True)])
    return len(edges), clauses


def colouring(edges: list[tuple[int, int]], colours: int) -> tuple[int, list[Clause]]:
    vertices = sorted({v for e in edges for v in e})
    index = {v: i for i, v in enumerate(vertices)}

    def var(v: int, c: int) -> int:
        return colours * index[v] + c + 1

    clauses = [[var(v, c) for c in range(colours)] for v in vertices]
    for a, b in edges:
        clauses += [[-var(a, c), -var(b, c)] for c in range(colours)]
    return colours * len(vertices), clauses


def mutilated(rows: int, columns: int) -> tuple[int, list[Clause]]:
    cells = {(r, c) for r in range(rows) for c in range(columns)}
    cells -= {(0, 0), (rows - 1, columns - 1)}
    dominoes = [
        (a, b) for a in sorted(cells) for b in ((a[0] + 1, a[1]), (a[0], a[1] + 1)) if b in cells
    ]
    clauses: list[Clause] = []
    for cell in sorted(cells):
        covering = [i + 1 for i, d in enumerate(dominoes) if cell in d]
        clauses.append(covering)
        clauses += [[-a, -b] for a, b in itertools.combinations(covering, 2)]
    return len(dominoes), clauses


def cycle(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def complete(n: int) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(n), 2))


def wheel(rim: int) -> list[tuple[int, int]]:
    return [*cycle(rim), *((rim, i) for i in range(rim))]


def corpus() -> Iterator[tuple[str, int, list[Clause]]]:
    for holes in (2, 3, 4, 5, 6, *((7,) if DEEP else ())):
        yield f"php{holes + 1}_{holes}", *pigeonhole(holes)
    found = 0
    seed = 0
    wanted = 60 if DEEP else 22
    while found < wanted:
        size = 14 + seed % 17 if found < 20 else 45 + seed % 20
        instance = random_3sat(size, seed)
        seed += 1
        if unsatisfiable(instance[1]):
            found += 1
            yield f"r3sat{size}_s{seed - 1}", *instance
    for n in (3, 4, 5, 6, 7):
        yield f"tseitin_k{n}", *tseitin(complete(n) if n < 6 else cycle(n + 2), {0})
    yield (
        "tseitin_grid",
        *tseitin(
            [(r * 3 + c, r * 3 + c + 1) for r in range(3) for c in range(2)]
            + [(r * 3 + c, r * 3 + c + 3) for r in range(2) for c in range(3)],
            {4},
        ),
    )
    for n, k in ((4, 3), (5, 4), (6, 5)):
        yield f"colour_k{n}_{k}", *colouring(complete(n), k)
    for rim in (5, 7, 9):
        yield f"colour_wheel{rim}_3", *colouring(wheel(rim), 3)
    for rows, columns in ((4, 4), (3, 5), (5, 3), (2, 6), (4, 2), (4, 6)):
        yield f"mutilated_{rows}x{columns}", *mutilated(rows, columns)


def cadical_proof(clauses: list[Clause]) -> list[Step]:
    with Solver(name="cadical195", bootstrap_with=clauses, with_proof=True) as solver:
        assert solver.solve() is False
        return parse_steps(solver.get_proof())


Instance = tuple[str, int, list[Clause], list[Step]]


@pytest.fixture(scope="module")
def instances() -> list[Instance]:
    built = []
    for name, variables, clauses in corpus():
        assert unsatisfiable(clauses), name
        steps = cadical_proof(clauses)
        # CaDiCaL 1.9.5 (through python-sat) ends a few proofs without adding
        # the empty clause (a refutation found while simplifying); such a
        # proof is incomplete (the checker says unknown) and is left out.
        if steps and steps[-1] == (False, []):
            built.append((name, variables, clauses, steps))
    return built


def test_the_corpus_is_at_least_forty_unsatisfiable_instances(instances: list[Instance]) -> None:
    assert len(instances) >= 40
    families = {name.split("_")[0].rstrip("0123456789") for name, *_ in instances}
    assert families >= {"php", "r3sat", "tseitin", "colour", "mutilated"}
    assert all(steps and steps[-1] == (False, []) for *_, steps in instances)


# --- corruptions -------------------------------------------------------------------------

Corruption = Callable[[random.Random, list[Clause], list[Step]], tuple[list[Clause], list[Step]]]


def _additions(steps: list[Step]) -> list[int]:
    return [i for i, (deletion, clause) in enumerate(steps) if not deletion and clause]


def drop_empty(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    return f, [step for step in s if step != (False, [])]


def only_empty(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    return f, [(False, [])]


def drop_lemma(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    adds = _additions(s)
    if not adds:
        return f, s
    gone = set(rng.sample(adds, max(1, len(adds) // 3)))
    return f, [step for i, step in enumerate(s) if i not in gone]


def flip_literal(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    adds = _additions(s)
    if not adds:
        return f, s
    i = rng.choice(adds)
    clause = list(s[i][1])
    k = rng.randrange(len(clause))
    clause[k] = -clause[k]
    return f, [*s[:i], (False, clause), *s[i + 1 :]]


def shrink_lemma(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    wide = [i for i in _additions(s) if len(s[i][1]) > 1]
    if not wide:
        return f, s
    i = rng.choice(wide)
    clause = list(s[i][1])
    del clause[rng.randrange(len(clause))]
    return f, [*s[:i], (False, clause), *s[i + 1 :]]


def delete_original(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    at = rng.randrange(len(s))
    victims = [(True, list(c)) for c in rng.sample(f, min(3, len(f)))]
    return f, [*s[:at], *victims, *s[at:]]


def swap_lemmas(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    adds = _additions(s)
    if len(adds) < 2:
        return f, s
    i, j = sorted(rng.sample(adds, 2))
    out = list(s)
    out[i], out[j] = out[j], out[i]
    return f, out


def bogus_unit(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    variable = rng.randrange(1, max(abs(x) for c in f for x in c) + 1)
    return f, [(False, [rng.choice((variable, -variable))]), *s]


def truncate(rng: random.Random, f: list[Clause], s: list[Step]) -> tuple[list[Clause], list[Step]]:
    return f, [*s[: len(s) // 2], (False, [])]


def rename_variable(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    adds = _additions(s)
    if not adds:
        return f, s
    top = max(abs(x) for c in f for x in c)
    i = rng.choice(adds)
    clause = list(s[i][1])
    k = rng.randrange(len(clause))
    clause[k] = rng.randrange(1, top + 1) * (1 if clause[k] > 0 else -1)
    return f, [*s[:i], (False, clause), *s[i + 1 :]]


def delete_right_after(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    out: list[Step] = []
    for deletion, clause in s:
        out.append((deletion, clause))
        if not deletion and clause and rng.random() < 0.3:
            out.append((True, list(clause)))
    return f, out


def empty_first(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    return f, [(False, []), *s]


def weaken_formula(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    gone = rng.randrange(len(f))
    return [c for i, c in enumerate(f) if i != gone], s


def delete_reasons(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    """Delete every unit lemma again a few steps later (deletions of top-level units)."""
    out: list[Step] = []
    pending: list[Clause] = []
    for deletion, clause in s:
        out.append((deletion, clause))
        if not deletion and len(clause) == 1:
            pending.append(clause)
        elif pending and rng.random() < 0.5:
            out.append((True, pending.pop(0)))
    return f, out


def unused_invalid_lemma(
    rng: random.Random, f: list[Clause], s: list[Step]
) -> tuple[list[Clause], list[Step]]:
    """A bogus unit, deleted again at once: no later check can use it (issue 19)."""
    variable = rng.randrange(1, max(abs(x) for c in f for x in c) + 1)
    unit = [rng.choice((variable, -variable))]
    at = rng.randrange(len(s))
    return f, [*s[:at], (False, unit), (True, unit), *s[at:]]


CORRUPTIONS: dict[str, Corruption] = {
    "drop_empty": drop_empty,
    "only_empty": only_empty,
    "drop_lemma": drop_lemma,
    "flip_literal": flip_literal,
    "shrink_lemma": shrink_lemma,
    "delete_original": delete_original,
    "swap_lemmas": swap_lemmas,
    "bogus_unit": bogus_unit,
    "truncate": truncate,
    "rename_variable": rename_variable,
    "delete_right_after": delete_right_after,
    "empty_first": empty_first,
    "weaken_formula": weaken_formula,
    "delete_reasons": delete_reasons,
    "unused_invalid_lemma": unused_invalid_lemma,
}


def _agree(name: str, variables: int, formula: list[Clause], steps: list[Step]) -> str:
    """The checker against the forward, specified-semantics oracle. Returns its verdict.

    The checker verifies only the lemmas the refutation needs (backward, core
    first), so it may accept a proof whose unused lemmas are invalid; then:

    - whatever the oracle accepts, the checker accepts at the same step;
    - whatever the checker accepts is unsatisfiable, and the core it checked
      (its lemmas and deletions, in proof order) is a refutation the oracle
      accepts on its own;
    - a rejection names a step the oracle judges neither RUP nor RAT over the
      clauses in force before it (so the oracle rejects too, no later);
    - ``unknown`` only for a proof that never adds the empty clause.
    """
    expected = oracle(formula, steps, operational=False)
    result, step, core = checker_core(variables, formula, steps)
    assert (result, step) == checker_verdict(dimacs(variables, formula), text_drat(steps)), name
    if expected[0] == "accepted":
        assert (result, step) == expected, name
    if result == "accepted":
        assert unsatisfiable(formula), name
        assert core and core[-1] == step, name
        trimmed = [steps[number - 1] for number in core]
        assert oracle(formula, trimmed, operational=False) == ("accepted", len(trimmed)), name
    elif result == "rejected":
        assert step is not None and judged_invalid(formula, steps, step), name
        assert expected[0] == "rejected" and expected[1] is not None and expected[1] <= step, name
    else:
        assert (False, []) not in steps and expected[0] != "accepted", name
    operational = oracle(formula, steps, operational=True)
    if operational[0] == "accepted":
        assert unsatisfiable(formula), name
    return result


def test_every_cadical_proof_checks_in_text_and_binary(instances: list[Instance]) -> None:
    for name, variables, formula, steps in instances:
        assert _agree(name, variables, formula, steps) == "accepted"
        assert oracle(formula, steps, operational=True)[0] == "accepted", name
        binary = checker_verdict(dimacs(variables, formula), binary_drat(steps))
        assert binary == ("accepted", len(steps)), name


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupted_proofs_agree_with_the_oracle(kind: str, instances: list[Instance]) -> None:
    verdicts = []
    for index, (name, variables, formula, steps) in enumerate(instances):
        rng = random.Random(f"{kind}-{index}")
        corrupt_formula, corrupt_steps = CORRUPTIONS[kind](rng, formula, steps)
        verdicts.append(_agree(f"{name}/{kind}", variables, corrupt_formula, corrupt_steps))
    # A corruption that never changes anything would test nothing.
    if kind not in (
        "delete_right_after",
        "delete_reasons",
        "delete_original",
        "swap_lemmas",
        "unused_invalid_lemma",
    ):
        assert any(v != "accepted" for v in verdicts), kind


def test_unused_invalid_lemmas_are_accepted_when_the_refutation_does_not_use_them(
    instances: list[Instance],
) -> None:
    # Issue 19: only the lemmas the refutation needs are checked (drat-trim's
    # backward mode). The forward oracle rejects most of these proofs; the
    # checker must accept every one, and its core must check on its own
    # (both inside _agree).
    forward_rejected = 0
    for index, (name, variables, formula, steps) in enumerate(instances):
        rng = random.Random(f"unused-{index}")
        _, corrupt = unused_invalid_lemma(rng, formula, steps)
        assert _agree(f"{name}/unused", variables, formula, corrupt) == "accepted", name
        forward_rejected += oracle(formula, corrupt, operational=False)[0] == "rejected"
    assert forward_rejected >= len(instances) // 2


# --- the deletion semantics, by hand ------------------------------------------------------


def test_a_deleted_reason_no_longer_forces_its_unit() -> None:
    # dratify 0.1.10 accepts this (issue 13): the formula (1)(-1 2) is satisfiable.
    formula = b"p cnf 2 2\n1 0\n-1 2 0\n"
    proof = b"d -1 2 0\n-2 0\n0\n"
    assert checker_verdict(formula, proof) == ("rejected", 3)
    assert oracle([[1], [-1, 2]], parse_steps(proof.decode().splitlines()), operational=False) == (
        "rejected",
        3,
    )


def test_deleting_a_conflicting_clause_restores_consistency() -> None:
    assert checker_verdict(b"p cnf 1 2\n1 0\n-1 0\n", b"0\n") == ("accepted", 1)
    assert checker_verdict(b"p cnf 1 2\n1 0\n-1 0\n", b"d 1 0\n0\n") == ("rejected", 2)
    assert checker_verdict(b"p cnf 1 2\n1 0\n-1 0\n", b"d 1 0\nd -1 0\n1 0\n0\n")[0] == "rejected"


def test_one_copy_of_a_duplicated_clause_survives_its_deletion() -> None:
    assert checker_verdict(b"p cnf 1 3\n1 0\n1 0\n-1 0\n", b"d 1 0\n0\n") == ("accepted", 2)
    assert checker_verdict(b"p cnf 1 3\n1 0\n1 0\n-1 0\n", b"d 1 0\nd 1 0\n0\n") == (
        "rejected",
        3,
    )


def test_rat_lemmas_with_new_variables_are_accepted() -> None:
    # Extended resolution: 3 <-> (1 and 2) by RAT on 3, then refute (1)(2)(-1 -2) via 3.
    formula = b"p cnf 2 3\n1 0\n2 0\n-1 -2 0\n"
    proof = b"3 -1 -2 0\n-3 1 0\n-3 2 0\n0\n"
    assert checker_verdict(formula, proof) == ("accepted", 4)
    # Huge variable numbers are renumbered, never allocated (same judgements).
    big = proof.replace(b"3", b"987654321987")
    assert checker_verdict(formula, big) == ("accepted", 4)
    huge = b"p cnf 99999999999999 3\n1 0\n99999999999999 0\n-1 -99999999999999 0\n"
    assert checker_verdict(huge, b"0\n") == ("accepted", 1)
    assert checker_verdict(huge, b"d 1 0\n0\n") == ("rejected", 2)


def test_an_unused_invalid_lemma_is_accepted_and_a_used_one_rejected() -> None:
    # (1 2)(1 -2)(-1 2)(-1 -2)(3 4): '-3' is neither RUP nor RAT, '1' is RUP.
    formula = b"p cnf 4 5\n1 2 0\n1 -2 0\n-1 2 0\n-1 -2 0\n3 4 0\n"
    proof = b"-3 0\n1 0\n0\n"
    steps = parse_steps(proof.decode().splitlines())
    clauses = [[1, 2], [1, -2], [-1, 2], [-1, -2], [3, 4]]
    assert oracle(clauses, steps, operational=False) == ("rejected", 1)
    assert checker_core(4, clauses, steps) == ("accepted", 3, [2, 3])
    assert checker_verdict(formula, binary_drat(steps)) == ("accepted", 3)
    # Satisfiable (1 2)(-1 2): the invalid '-2' is what the empty clause needs.
    assert checker_verdict(b"p cnf 2 2\n1 2 0\n-1 2 0\n", b"-2 0\n0\n") == ("rejected", 1)


# --- renumbering at huge variable indices --------------------------------------------------

HUGE = 10**19 - 1  # 19 digits, the largest V below MAX_DIGITS that binary DRAT can also carry
BINARY_HUGE = (1 << 62) - 1


def _renamed(
    formula: list[Clause], steps: list[Step], top: int, rng: random.Random
) -> tuple[list[Clause], list[Step]]:
    used = sorted({abs(x) for c in [*formula, *(c for _, c in steps)] for x in c})
    names = dict(zip(used, rng.sample(range(top // 2, top + 1), len(used)), strict=True))

    def rename(clause: Clause) -> Clause:
        return [names[abs(x)] * (1 if x > 0 else -1) for x in clause]

    return [rename(c) for c in formula], [(d, rename(c)) for d, c in steps]


def test_huge_variable_indices_are_renumbered_to_the_same_judgements(
    instances: list[Instance],
) -> None:
    for index, (name, variables, formula, steps) in enumerate(instances[::4]):
        rng = random.Random(f"huge-{index}")
        for kind in ("drop_lemma", "flip_literal", "unused_invalid_lemma", "delete_reasons"):
            corrupt_formula, corrupt = CORRUPTIONS[kind](random.Random(index), formula, steps)
            small = checker_verdict(dimacs(variables, corrupt_formula), text_drat(corrupt))
            for top, encode in ((HUGE, text_drat), (BINARY_HUGE, binary_drat)):
                big_formula, big = _renamed(corrupt_formula, corrupt, top, rng)
                assert checker_verdict(dimacs(top, big_formula), encode(big)) == small, name


@pytest.mark.parametrize(
    ("formula", "proof", "expected"),
    [
        # Extended resolution: F <-> (1 and 2), then the empty clause via F.
        (b"p cnf 2 3\n1 2 0\n1 -2 0\n-1 -2 0\n", b"F -1 0\nF 1 0\n-F 1 0\n0\n", "rejected"),
        (b"p cnf 2 3\n1 0\n2 0\n-1 -2 0\n", b"F -1 -2 0\n-F 1 0\n-F 2 0\n0\n", "accepted"),
        (b"p cnf 2 4\n1 2 0\n1 -2 0\n-1 2 0\n-1 -2 0\n", b"F 1 0\n-F 1 0\n1 0\n0\n", "accepted"),
        (b"p cnf 2 2\n1 2 0\n-1 2 0\n", b"F -2 0\n-F 0\n0\n", "rejected"),
    ],
)
def test_new_huge_variables_of_a_proof_are_renumbered(
    formula: bytes, proof: bytes, expected: str
) -> None:
    small = checker_verdict(formula, proof.replace(b"F", b"3"))
    assert small[0] == expected
    for fresh in (HUGE, HUGE * 10 + 9, 2**62 + 1):  # 20 digits: within MAX_DIGITS, beyond V
        assert checker_verdict(formula, proof.replace(b"F", str(fresh).encode())) == small


# --- numerals beyond the checker's bound (issue 19) -----------------------------------------

_LONG = b"9" * 5000  # beyond Python's default int() limit of 4,300 digits
_OVER = b"1" * 21  # beyond MAX_DIGITS, within any int() limit


@pytest.mark.parametrize(
    ("formula", "proof"),
    [
        (b"p cnf " + _LONG + b" 1\n1 0\n", b"0\n"),
        (b"p cnf 1 " + _LONG + b"\n1 0\n", b"0\n"),
        (b"p cnf 1 2\n1 0\n-" + _LONG + b" 0\n", b"0\n"),
        (b"p cnf 1 2\n1 0\n-1 0\n", _LONG + b" 0\n0\n"),
        (b"p cnf 1 2\n1 0\n-1 0\n", b"d -" + _LONG + b" 0\n0\n"),
        (b"p cnf " + _OVER + b" 2\n1 0\n-1 0\n", b"0\n"),
        (b"p cnf 1 2\n1 0\n-1 0\n", _OVER + b" 0\n0\n"),
        (b"p cnf 1 2\n1 0\n-1 0\n", b"a" + b"\xff" * 9 + b"\x01\x00a\x00"),
        (b"p cnf 1 2\n1 0\n-1 0\n", b"a" + b"\xff" * 5000 + b"\x01\x00"),
    ],
)
def test_numerals_beyond_the_bound_are_unknown_whatever_the_int_limit(
    formula: bytes, proof: bytes
) -> None:
    for limit in (4300, 0):  # the default, and PYTHONINTMAXSTRDIGITS=0 (no limit)
        previous = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(limit)
        try:
            result, detail = CHECKER.check_files(formula, proof)
        finally:
            sys.set_int_max_str_digits(previous)
        assert result == "unknown" and "longer than" in detail, detail


def test_the_longest_numerals_within_the_bound_still_check() -> None:
    top = b"9" * CHECKER.MAX_DIGITS
    formula = b"p cnf " + top + b" 2\n" + top + b" 0\n-" + top + b" 0\n"
    assert checker_verdict(formula, b"0\n") == ("accepted", 1)
    binary = b"a" + b"\xff" * 8 + b"\x01\x00" + b"a\x00"  # a 9-byte literal, then '0'
    assert checker_verdict(b"p cnf 1 2\n1 0\n-1 0\n", binary) == ("accepted", 2)


def test_an_oversized_header_gives_a_receipt_not_a_traceback(tmp_path: Path) -> None:
    snapshot, evidence = tmp_path / "snapshot", tmp_path / "evidence"
    snapshot.mkdir()
    evidence.mkdir()
    formula = b"p cnf " + _LONG + b" 2\n1 0\n-1 0\n"
    (snapshot / "f.cnf").write_bytes(formula)
    (evidence / "proof.drat").write_bytes(b"0\n")
    request = {
        "job_id": "job", "run_id": "run", "check_id": "check", "check_digest": "c" * 64,
        "specification_digest": hashlib.sha256(formula).hexdigest(), "identity": "i" * 64,
        "evidence_digest": "e" * 64, "claim": {"specification": "f.cnf", "obligations": ["u"]},
        "paths": {"snapshot": str(snapshot), "evidence": str(evidence)},
    }  # fmt: skip
    (tmp_path / "request.json").write_text(json.dumps(request))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "request.json"), str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "unknown"
    assert "longer than 20 digits" in done.stdout


# --- strict DIMACS -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("formula", "reason"),
    [
        (b"1 0\n-1 0\n", "before the 'p cnf"),
        (b"p cnf 1 2\n1 0\n", "1 clauses, the header declares 2"),
        (b"p cnf 1 1\n1 0\n-1 0\n", "2 clauses, the header declares 1"),
        (b"p cnf 1 2\n1 0\n-2 0\n", "exceeds V=1"),
        (b"p cnf 1 1\np cnf 1 1\n1 0\n", "a second problem line"),
        (b"p cnf 1 1\n1\n", "not ended by 0"),
        (b"p cnf 1 1\n+1 0\n", "not a literal"),
        (b"p cnf 1 1\n01 0\n", "not a literal"),
        ("p cnf 1 1\n\u0661 0\n".encode(), "not ASCII"),
        (b"p cnf 1 1\n1 x 0\n", "not a literal"),
        (b"p cnf 1 2\n1 0\n%\n-1 0\n", "only '0' may follow"),
        (b"p cnf 1 2\n1\n%\n0\n", "'%' inside an unterminated clause"),
        (b"p cnf 1\n1 0\n", "not 'p cnf V C'"),
        (b"p dnf 1 1\n1 0\n", "not 'p cnf V C'"),
        (b"p cnf -1 1\n1 0\n", "decimal numerals"),
        (b"", "no 'p cnf V C' line"),
    ],
)
def test_malformed_formulas_are_unknown(formula: bytes, reason: str) -> None:
    result, detail = CHECKER.check_files(formula, b"0\n")
    assert (result, reason in detail) == ("unknown", True), detail


def test_the_satlib_percent_line_ends_the_formula() -> None:
    # Issue 13: read on past '%', the SATLIB '0' became an empty clause and
    # this satisfiable formula was certified unsatisfiable.
    satlib = b"c SATLIB style\np cnf 2 2\n1 2 0\n-1 0\n%\n0\n\n"
    assert checker_verdict(satlib, b"0\n") == ("rejected", 1)
    assert checker_verdict(b"p cnf 1 2\n1 0\n-1 0\n%\n0\n", b"0\n") == ("accepted", 1)


@pytest.mark.parametrize(
    "proof",
    [
        b"",
        b"1 2\n",
        b"d\n",
        b"1 d 0\n",
        b"x 0\n",
        b"1 0 0 d 0\n-",
        b"a\x02",
        b"z\x02\x00",
        b"a\x01\x00",
    ],
)
def test_malformed_proofs_are_unknown(proof: bytes) -> None:
    assert CHECKER.check_files(b"p cnf 1 2\n1 0\n-1 0\n", proof)[0] == "unknown"


def reference_text_steps(data: bytes) -> list[Step] | None:
    """Text DRAT read token by token from its grammar (None: refused)."""
    steps: list[Step] = []
    deletion = False
    current: list[int] = []
    for token in data.split():
        if token == b"0":
            steps.append((deletion, current))
            deletion, current = False, []
        elif token == b"d" and not current and not deletion:
            deletion = True
        elif re.fullmatch(rb"-?[1-9][0-9]{0,19}", token):
            current.append(int(token))
        else:
            return None
    return None if current or deletion else steps


# Pieces from which well-formed and subtly malformed text proofs are glued.
PIECES = [b"d", b"0", b"-", b"1", b"7", b"9" * 19, b"00", b"-0", b" ", b"\n", b"\t", b"\x0b", b"x"]


@given(st.lists(st.sampled_from(PIECES), max_size=14))
def test_text_proofs_read_in_bulk_agree_with_the_grammar(pieces: list[bytes]) -> None:
    # The checker reads well-formed text proofs in bulk (no per-token match);
    # whatever the bytes, it must give the grammar's steps or refuse.
    data = b"".join(pieces)
    expected = reference_text_steps(data)
    if b"\0" in data:
        return
    try:
        steps = CHECKER.parse_proof(data)
    except CHECKER.Refused:
        assert expected is None, data
    else:
        assert steps == expected, data


def test_a_large_text_proof_reads_as_its_steps() -> None:
    rng = random.Random(7)
    steps: list[Step] = [
        (rng.random() < 0.3, [rng.choice((1, -1)) * rng.randint(1, 10**19) for _ in range(k)])
        for k in (rng.randint(0, 12) for _ in range(3000))
    ]
    data = text_drat(steps).replace(b" ", b"\t", 500).replace(b"\n", b" \r\n", 700)
    assert CHECKER.parse_proof(data) == steps == reference_text_steps(data)


# --- tiny formulas against brute force ----------------------------------------------------


def brute_unsat(variables: int, clauses: list[Clause]) -> bool:
    for bits in range(1 << variables):
        if all(any((bits >> (abs(x) - 1)) & 1 == (x > 0) for x in c) for c in clauses):
            return False
    return True


literal = st.integers(1, 4).flatmap(lambda v: st.sampled_from((v, -v)))
clause = st.lists(literal, min_size=0, max_size=3)


@given(
    formula=st.lists(clause.filter(bool), min_size=1, max_size=8),
    steps=st.lists(st.tuples(st.booleans(), clause), min_size=0, max_size=8),
    end=st.booleans(),
)
def test_tiny_random_proofs_agree_with_the_oracle_and_brute_force(
    formula: list[Clause], steps: list[Step], end: bool
) -> None:
    proof = [*steps, (False, [])] if end else steps
    verdict = _agree("tiny", 4, formula, proof)
    if verdict == "accepted":
        assert brute_unsat(4, formula)


def test_seeded_tiny_random_proofs_against_brute_force() -> None:
    rng = random.Random(13)
    accepted = 0
    for _ in range(200_000 if DEEP else 6_000):
        variables = rng.randint(1, 4)
        formula = [
            [rng.choice((1, -1)) * rng.randint(1, variables) for _ in range(rng.randint(1, 3))]
            for _ in range(rng.randint(1, 9))
        ]
        # Lemmas mostly drawn from resolvents and the formula, so that some proofs are valid.
        steps: list[Step] = []
        for _ in range(rng.randint(0, 6)):
            pick = rng.random()
            if pick < 0.25:
                steps.append((True, list(rng.choice(formula))))
            else:
                width = rng.randint(0, 2)
                steps.append(
                    (False, [rng.choice((1, -1)) * rng.randint(1, variables) for _ in range(width)])
                )
        steps.append((False, []))
        verdict = _agree("seeded", variables, formula, steps)
        if verdict == "accepted":
            accepted += 1
            assert brute_unsat(variables, formula)
    assert accepted > 0
