"""SAT checker: an independent forward DRAT checker in plain Python.

Usage: python sat_checker.py REQUEST.json RECEIPT.json

python-sat 1.9.dev17 ships no DRAT checker (and no drat-trim is packaged
here), so this script is the checker. It shares no code with the producer or
with python-sat: it parses the DIMACS specification itself and replays the
proof forward:

- ``d`` lines delete a clause (deleting only weakens the formula, so checking
  against the rest stays sound for refutations);
- every added lemma must be RUP (asserting its negation and unit-propagating
  reaches a conflict) or, failing that, RAT on its first literal (every
  resolvent with a clause containing the negated pivot is RUP);
- the proof must add the empty clause, and that step must be RUP itself.

Accepted iff the whole proof checks and ends in the empty clause; a lemma that
fails is ``rejected``; a malformed or empty proof is ``unknown``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

Clause = tuple[int, ...]


def parse_dimacs(text: str) -> list[Clause]:
    clauses: list[Clause] = []
    current: list[int] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("c", "p", "%")):
            continue
        for token in line.split():
            literal = int(token)
            if literal == 0:
                clauses.append(tuple(current))
                current = []
            else:
                current.append(literal)
    if current:
        raise ValueError("last clause is not terminated by 0")
    return clauses


def propagate_conflicts(clauses: dict[Clause, int], assumption: list[int]) -> bool:
    """True iff unit propagation from ``assumption`` over ``clauses`` reaches a conflict."""
    value: dict[int, bool] = {}
    for literal in assumption:
        if value.get(-literal):
            return True
        value[literal] = True
    changed = True
    while changed:
        changed = False
        for clause in clauses:
            unassigned = None
            count = 0
            satisfied = False
            for literal in clause:
                if value.get(literal):
                    satisfied = True
                    break
                if not value.get(-literal):
                    count += 1
                    unassigned = literal
                    if count > 1:
                        break
            if satisfied or count > 1:
                continue
            if count == 0:
                return True
            assert unassigned is not None
            value[unassigned] = True
            changed = True
    return False


def is_rup(clauses: dict[Clause, int], lemma: Clause) -> bool:
    return propagate_conflicts(clauses, [-literal for literal in lemma])


def is_rat(clauses: dict[Clause, int], lemma: Clause) -> bool:
    if not lemma:
        return False
    pivot = lemma[0]
    for clause in clauses:
        if -pivot in clause:
            resolvent = tuple(dict.fromkeys(lemma + tuple(x for x in clause if x != -pivot)))
            if any(-x in resolvent for x in resolvent):
                continue  # tautology
            if not is_rup(clauses, resolvent):
                return False
    return True


def check_drat(formula: list[Clause], proof_text: str) -> tuple[str, str]:
    """(result, detail): accepted / rejected / unknown."""
    clauses: dict[Clause, int] = {}
    for clause in formula:
        key = tuple(sorted(set(clause)))
        clauses[key] = clauses.get(key, 0) + 1
    lines = [line.strip() for line in proof_text.splitlines() if line.strip()]
    if not lines:
        return "unknown", "empty proof"
    for number, line in enumerate(lines, start=1):
        tokens = line.split()
        delete = tokens[0] == "d"
        try:
            literals = [int(t) for t in (tokens[1:] if delete else tokens)]
        except ValueError:
            return "unknown", f"line {number}: not a DRAT line"
        if not literals or literals[-1] != 0 or 0 in literals[:-1]:
            return "unknown", f"line {number}: clause not terminated by a single 0"
        lemma = tuple(literals[:-1])
        key = tuple(sorted(set(lemma)))
        if delete:
            if key in clauses:
                clauses[key] -= 1
                if clauses[key] == 0:
                    del clauses[key]
            continue
        if not (is_rup(clauses, lemma) or is_rat(clauses, lemma)):
            return "rejected", f"line {number}: lemma {line!r} is neither RUP nor RAT"
        if not lemma:
            return "accepted", f"empty clause derived at line {number} of {len(lines)}"
        clauses[key] = clauses.get(key, 0) + 1
    return "unknown", "the proof never derives the empty clause"


def main() -> int:
    request_path, receipt_path = sys.argv[1], sys.argv[2]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    paths = request["paths"]
    with open(os.path.join(paths["snapshot"], request["claim"]["specification"]), "rb") as handle:
        spec_bytes = handle.read()
    if hashlib.sha256(spec_bytes).hexdigest() != request["specification_digest"]:
        print("specification in the snapshot does not match the request", file=sys.stderr)
        return 1
    with open(os.path.join(paths["evidence"], "proof.drat"), encoding="ascii") as handle:
        proof = handle.read()
    result, detail = check_drat(parse_dimacs(spec_bytes.decode("ascii")), proof)
    print(f"drat: {result}: {detail}")
    obligations = [
        {"name": name, "result": result, "evidence": ["proof.drat"]}
        for name in request["claim"]["obligations"]
    ]
    receipt = {
        "schema_version": 1,
        "job_id": request["job_id"],
        "run_id": request["run_id"],
        "check_id": request["check_id"],
        "check_digest": request["check_digest"],
        "specification_digest": request["specification_digest"],
        "identity": request["identity"],
        "evidence_digest": request["evidence_digest"],
        "verdict": result,
        "obligations": obligations,
    }
    with open(receipt_path, "w", encoding="utf-8") as handle:
        json.dump(receipt, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
