"""Figures of the last ``make mutate`` run, per module (the table in RELIABILITY.md).

Reads the ``*.meta`` files mutmut 3 writes beside each mutated module in
``mutants/`` (JSON: ``exit_code_by_key`` maps each mutant to the exit code of
its test run, ``null`` when not yet run) and prints, per module and in total:
killed, survived, timeout, no tests, not checked, total and the score
(killed + timeout over total). Exit codes follow mutmut's own table: 1 and 3
kill, 0 survives, 5 and 33 mean no test covers the mutant, 24/-24/36/152/255
are timeouts. Run from the repository root: ``python tests/mutation_report.py``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3}
SURVIVED = {0}
NO_TESTS = {5, 33}
TIMEOUT = {24, -24, 36, 152, 255}
COLUMNS = ("killed", "survived", "timeout", "no tests", "not checked", "other")


def status(code: int | None) -> str:
    if code is None:
        return "not checked"
    for name, codes in (
        ("killed", KILLED),
        ("survived", SURVIVED),
        ("no tests", NO_TESTS),
        ("timeout", TIMEOUT),
    ):
        if code in codes:
            return name
    return "other"


def module_of(meta: Path, root: Path) -> str:
    return str(meta.relative_to(root)).removesuffix(".meta")


def main() -> int:
    root = Path("mutants")
    metas = sorted(root.glob("kernel/**/*.py.meta"))
    if not metas:
        print("no mutmut results in mutants/: run `make mutate` first", file=sys.stderr)
        return 1
    total: Counter[str] = Counter()
    print(f"| module | {' | '.join(COLUMNS)} | total | score |")
    print(f"|---|{'---:|' * (len(COLUMNS) + 2)}")
    for meta in metas:
        codes = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
        counts = Counter(status(code) for code in codes.values())
        if not codes:
            continue
        total.update(counts)
        print(_row(module_of(meta, root), counts))
    print(_row("**all**", total))
    return 0


def _row(name: str, counts: Counter[str]) -> str:
    n = sum(counts.values())
    score = (counts["killed"] + counts["timeout"]) / n if n else 0.0
    cells = " | ".join(str(counts[c]) for c in COLUMNS)
    return f"| {name} | {cells} | {n} | {score:.1%} |"


if __name__ == "__main__":
    raise SystemExit(main())
