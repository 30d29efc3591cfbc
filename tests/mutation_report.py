"""Figures of the last ``make mutate`` run, per module (the table in RELIABILITY.md).

Reads the ``*.meta`` files mutmut 3 writes beside each mutated module in
``mutants/`` (JSON: ``exit_code_by_key`` maps each mutant to the exit code of
its test run, ``null`` when not yet run) and prints, per module and in total:
killed, survived, timeout, no tests, not checked, total and the score.
Exit codes follow mutmut's own table: 1 and 3 kill, 0 survives, 5 and 33 mean
no test covers the mutant, 24/-24/36/152/255 are timeouts.

Two scores are printed, because "the share of mutants killed" can be counted
two ways and RELIABILITY.md states both:

- **raw**: (killed + timeout) / every mutant; a survivor judged equivalent
  still counts against it;
- **excluding equivalents**: (killed + timeout) / (every mutant - the
  survivors judged equivalent). The equivalent mutants are the names written
  in backticks in RELIABILITY.md's section "Surviving mutants judged
  equivalent", each under the reason it is equivalent. A listed name that is
  not a survivor of this run (killed, renamed after a source change, or not
  run) is reported and not excluded, so the list cannot inflate the score.

Run from the repository root: ``python tests/mutation_report.py``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3}
SURVIVED = {0}
NO_TESTS = {5, 33}
TIMEOUT = {24, -24, 36, 152, 255}
COLUMNS = ("killed", "survived", "equivalent", "timeout", "no tests", "not checked", "other")
EQUIVALENTS_HEADING = "## Surviving mutants judged equivalent"
MUTANT_NAME = re.compile(r"`(kernel\.[^`\s]+__mutmut_\d+)`")


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


def listed_equivalents(reliability: Path) -> set[str]:
    """The mutant names listed under the equivalents heading of ``reliability``."""
    if not reliability.exists():
        return set()
    text = reliability.read_text("utf-8")
    start = text.find(EQUIVALENTS_HEADING)
    if start < 0:
        return set()
    end = text.find("\n## ", start + len(EQUIVALENTS_HEADING))
    section = text[start : end if end >= 0 else len(text)]
    return set(MUTANT_NAME.findall(section))


def main() -> int:
    root = Path("mutants")
    metas = sorted(root.glob("kernel/**/*.py.meta"))
    if not metas:
        print("no mutmut results in mutants/: run `make mutate` first", file=sys.stderr)
        return 1
    equivalents = listed_equivalents(Path("RELIABILITY.md"))
    used: set[str] = set()
    total: Counter[str] = Counter()
    print(f"| module | {' | '.join(COLUMNS)} | total | raw | excl. equivalents |")
    print(f"|---|{'---:|' * (len(COLUMNS) + 3)}")
    for meta in metas:
        codes: dict[str, int | None] = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
        if not codes:
            continue
        counts: Counter[str] = Counter()
        for name, code in codes.items():
            kind = status(code)
            if kind == "survived" and name in equivalents:
                kind = "equivalent"
                used.add(name)
            counts[kind] += 1
        total.update(counts)
        print(_row(module_of(meta, root), counts))
    print(_row("**all**", total))
    stale = sorted(equivalents - used)
    if stale:
        print(f"\nlisted as equivalent but not a survivor of this run ({len(stale)}):")
        for name in stale:
            print(f"  {name}")
    return 0


def _row(name: str, counts: Counter[str]) -> str:
    n = sum(counts.values())
    killed = counts["killed"] + counts["timeout"]
    raw = killed / n if n else 0.0
    judged = n - counts["equivalent"]
    excluding = f"{killed / judged:.1%}" if judged else "n/a (all equivalent)"
    cells = " | ".join(str(counts[c]) for c in COLUMNS)
    return f"| {name} | {cells} | {n} | {raw:.1%} | {excluding} |"


if __name__ == "__main__":
    raise SystemExit(main())
