"""SAT checker: an independent DRAT checker in plain Python (standard library only).

Usage: python sat_checker.py REQUEST.json RECEIPT.json

What it proves. ``accepted`` means: the DIMACS formula in the frozen snapshot
(strictly parsed, below) is unsatisfiable, because the DRAT proof in
``evidence/proof.drat`` checks against it under the specified DRAT semantics
and derives the empty clause. It shares no code with the producer, with
python-sat or with any other DRAT checker.

What is trusted: this file, the Python interpreter that runs it, and the
kernel's binding of the snapshot to the request's ``specification_digest``
(re-checked here). Nothing the producer wrote is trusted: ``answer.txt`` is
never read, and the proof is only a list of steps to re-check.

Formula (refused as ``unknown`` with a reason when it does not hold):

- ASCII; comment lines start with ``c``; exactly one problem line
  ``p cnf V C`` (decimal numerals) before the first clause;
- clauses are decimal literals (``-?[1-9][0-9]*``) with ``|literal| <= V``,
  each ended by ``0``, possibly across lines; exactly ``C`` clauses;
- a line ``%`` (the SATLIB convention) ends the formula at a clause boundary:
  after it only ``0`` tokens and blank lines may follow; anything else is refused.

Proof: text DRAT (ASCII tokens: ``d`` starts a deletion, literals, ``0`` ends
a step) or binary DRAT (``a``/``d`` byte, variable-length literals ``2v`` or
``2v+1``, ``0`` byte), read directly; a proof containing a NUL byte is
binary, any other is text. A proof may introduce new variables (extended
resolution); sparse variable numbers are renumbered, never allocated.

Checking (specified DRAT semantics, forward, two watched literals):

- a deletion removes one copy of the clause (literals compared as sets);
  deleting an absent clause changes nothing. A deleted clause no longer
  propagates: if it was the reason of a top-level literal, that literal and
  everything after it on the top-level trail are unassigned and propagation
  is redone (so units forced only by deleted clauses never linger);
- an added lemma must be RUP (asserting its negation and unit-propagating
  over the current clauses reaches a conflict) or, failing that, RAT on its
  first literal (every non-tautological resolvent with a current clause
  containing the negated pivot is RUP);
- the first added empty clause that checks ends the proof: ``accepted``.

A lemma that fails is ``rejected`` (the step number is reported); a malformed
or empty proof, or one that never adds the empty clause, is ``unknown``.
Every obligation of the claim gets the one verdict; a claim with no
obligation is ``unknown``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

Step = tuple[bool, list[int]]  # (is a deletion, DIMACS literals)

_LITERAL = re.compile(rb"-?[1-9][0-9]*\Z")
_NUMERAL = re.compile(rb"(?:0|[1-9][0-9]*)\Z")


class Refused(Exception):
    """An input outside the accepted grammar: the verdict is ``unknown``."""


# --- DIMACS ------------------------------------------------------------------------


def parse_dimacs(data: bytes) -> tuple[int, list[list[int]]]:
    """``(V, clauses)`` of a strict DIMACS CNF (module docstring); raises ``Refused``."""
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        raise Refused("formula: not ASCII") from None
    declared: tuple[int, int] | None = None
    clauses: list[list[int]] = []
    current: list[int] = []
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(b"c"):
            continue
        if line.startswith(b"p"):
            fields = line.split()
            if declared is not None:
                raise Refused(f"formula line {number}: a second problem line")
            if len(fields) != 4 or fields[:2] != [b"p", b"cnf"]:
                raise Refused(f"formula line {number}: the problem line is not 'p cnf V C'")
            if not (_NUMERAL.match(fields[2]) and _NUMERAL.match(fields[3])):
                raise Refused(f"formula line {number}: V and C must be decimal numerals")
            declared = (int(fields[2]), int(fields[3]))
            continue
        if declared is None:
            raise Refused(f"formula line {number}: clause before the 'p cnf V C' line")
        if line == b"%":
            if current:
                raise Refused(f"formula line {number}: '%' inside an unterminated clause")
            rest = b" ".join(lines[number:]).split()
            if any(token != b"0" for token in rest):
                raise Refused(f"formula line {number}: only '0' may follow the '%' line")
            break
        variables = declared[0]
        for token in line.split():
            if token == b"0":
                clauses.append(current)
                current = []
            elif _LITERAL.match(token):
                literal = int(token)
                if abs(literal) > variables:
                    raise Refused(f"formula line {number}: literal {literal} exceeds V={variables}")
                current.append(literal)
            else:
                raise Refused(f"formula line {number}: {token[:20]!r} is not a literal")
    if declared is None:
        raise Refused("formula: no 'p cnf V C' line")
    if current:
        raise Refused("formula: the last clause is not ended by 0")
    if len(clauses) != declared[1]:
        raise Refused(f"formula: {len(clauses)} clauses, the header declares {declared[1]}")
    return declared[0], clauses


# --- DRAT proofs -------------------------------------------------------------------


def parse_proof(data: bytes) -> list[Step]:
    """The steps of a text or binary DRAT proof; raises ``Refused``."""
    return _parse_binary(data) if b"\0" in data else _parse_text(data)


def _parse_text(data: bytes) -> list[Step]:
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        raise Refused("proof: text DRAT that is not ASCII") from None
    steps: list[Step] = []
    deletion = False
    current: list[int] = []
    for token in data.split():
        if token == b"0":
            steps.append((deletion, current))
            deletion, current = False, []
        elif token == b"d" and not current and not deletion:
            deletion = True
        elif _LITERAL.match(token):
            current.append(int(token))
        else:
            raise Refused(f"proof step {len(steps) + 1}: {token[:20]!r} is not DRAT")
    if current or deletion:
        raise Refused("proof: the last step is not ended by 0")
    return steps


def _parse_binary(data: bytes) -> list[Step]:
    steps: list[Step] = []
    index, size = 0, len(data)
    while index < size:
        marker = data[index]
        index += 1
        if marker not in (0x61, 0x64):  # 'a', 'd'
            raise Refused(f"proof step {len(steps) + 1}: binary step marker {marker:#x}")
        current: list[int] = []
        while True:
            value = shift = 0
            while True:
                if index >= size:
                    raise Refused("proof: the last binary step is not ended by a 0 byte")
                byte = data[index]
                index += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
                if shift > 63:
                    raise Refused(f"proof step {len(steps) + 1}: literal encoding too long")
            if value == 0:
                break
            if value < 2:
                raise Refused(f"proof step {len(steps) + 1}: binary literal {value}")
            current.append(-(value >> 1) if value & 1 else value >> 1)
        steps.append((marker == 0x64, current))
    return steps


# --- the checker -------------------------------------------------------------------
#
# Literal codes: variable v is 2v (positive) and 2v+1 (negative); code ^ 1
# negates. ``value[code]`` is 1 (true), -1 (false) or 0. A clause is a list of
# codes whose first two are watched (a unit clause has no watches and is kept
# in ``units``). The top-level trail holds what unit propagation over the
# current clauses forces; ``reason[v]`` is the clause that forced ``v``.


class DratChecker:
    def __init__(self, variables: int, formula: list[list[int]]) -> None:
        size = 2 * variables + 2
        self.value = [0] * size
        self.watches: list[list[int]] = [[] for _ in range(size)]
        self.reason = [-1] * (variables + 1)
        self.position = [0] * (variables + 1)
        self.trail: list[int] = []
        self.head = 0
        self.clauses: list[list[int] | None] = []
        self.index: dict[tuple[int, ...], list[int]] = {}
        self.units: set[int] = set()
        self.empties = 0  # current empty clauses
        self.conflict = -1  # clause falsified at the top level, or -1
        for clause in formula:
            self.add(clause)

    # -- top level
    def _assign(self, code: int, reason: int) -> None:
        self.value[code] = 1
        self.value[code ^ 1] = -1
        self.reason[code >> 1] = reason
        self.position[code >> 1] = len(self.trail)
        self.trail.append(code)

    def _backtrack(self, size: int) -> None:
        value, trail = self.value, self.trail
        for code in trail[size:]:
            value[code] = value[code ^ 1] = 0
        del trail[size:]

    def _propagate(self) -> int:
        """Unit-propagate from ``self.head``; the conflicting clause, or -1."""
        value, watches, clauses, trail = self.value, self.watches, self.clauses, self.trail
        reason, position = self.reason, self.position
        head = self.head
        while head < len(trail):
            false = trail[head] ^ 1
            head += 1
            watching = watches[false]
            keep = 0
            count = len(watching)
            i = 0
            while i < count:
                cid = watching[i]
                i += 1
                clause = clauses[cid]
                if clause is None:
                    continue  # deleted: drop the stale watch
                first = clause[0]
                if first == false:
                    first = clause[1]
                    clause[0] = first
                    clause[1] = false
                if value[first] == 1:
                    watching[keep] = cid
                    keep += 1
                    continue
                for k in range(2, len(clause)):
                    other = clause[k]
                    if value[other] != -1:
                        clause[1] = other
                        clause[k] = false
                        watches[other].append(cid)
                        break
                else:
                    watching[keep] = cid
                    keep += 1
                    if value[first] == -1:
                        while i < count:
                            watching[keep] = watching[i]
                            keep += 1
                            i += 1
                        del watching[keep:]
                        self.head = head
                        return cid
                    value[first] = 1
                    value[first ^ 1] = -1
                    reason[first >> 1] = cid
                    position[first >> 1] = len(trail)
                    trail.append(first)
            del watching[keep:]
        self.head = head
        return -1

    def _settle(self) -> None:
        """Bring the top level to the fixpoint of the current clauses (or a conflict)."""
        if self.conflict < 0 and not self.empties:
            self.conflict = self._propagate()

    def _rebuild(self, size: int) -> None:
        """Undo the top level from trail position ``size`` and propagate again from scratch."""
        self._backtrack(size)
        self.conflict = -1
        self.head = 0
        value = self.value
        for cid in self.units:
            clause = self.clauses[cid]
            assert clause is not None
            code = clause[0]
            if value[code] == 0:
                self._assign(code, cid)
            elif value[code] == -1:
                self.conflict = cid
                return
        self._settle()

    # -- the formula
    def add(self, literals: list[int]) -> None:
        codes = list(dict.fromkeys(2 * x if x > 0 else -2 * x + 1 for x in literals))
        cid = len(self.clauses)
        self.clauses.append(codes)
        self.index.setdefault(tuple(sorted(codes)), []).append(cid)
        if not codes:
            self.empties += 1
            return
        value = self.value
        if len(codes) == 1:
            self.units.add(cid)
            if self.conflict >= 0 or self.empties:
                return
            if value[codes[0]] == 0:
                self._assign(codes[0], cid)
                self._settle()
            elif value[codes[0]] == -1:
                self.conflict = cid
            return
        # Watch two non-false literals when there are; else the implied or
        # true literal and the false literal assigned last.
        position = self.position
        codes.sort(key=lambda c: (value[c] != -1, position[c >> 1] if value[c] else 0))
        codes.reverse()
        self.watches[codes[0]].append(cid)
        self.watches[codes[1]].append(cid)
        if self.conflict >= 0 or self.empties or value[codes[1]] != -1:
            return
        if value[codes[0]] == 0:
            self._assign(codes[0], cid)
            self._settle()
        elif value[codes[0]] == -1:
            self.conflict = cid

    def delete(self, literals: list[int]) -> None:
        codes = {2 * x if x > 0 else -2 * x + 1 for x in literals}
        key = tuple(sorted(codes))
        copies = self.index.get(key)
        if not copies:
            return  # absent: nothing to delete
        cid = copies.pop()
        if not copies:
            del self.index[key]
        clause = self.clauses[cid]
        assert clause is not None
        self.clauses[cid] = None  # watches are dropped lazily
        if not clause:
            self.empties -= 1
            if not self.empties:
                self._rebuild(len(self.trail))
            return
        if len(clause) == 1:
            self.units.discard(cid)
        if self.conflict == cid:
            self._rebuild(len(self.trail))
        variable = clause[0] >> 1
        if self.value[clause[0]] == 1 and self.reason[variable] == cid:
            self._rebuild(self.position[variable])

    # -- checks
    def _refuted(self, codes: list[int]) -> bool:
        """Assuming the negation of ``codes`` on top of the current trail conflicts."""
        value = self.value
        for code in codes:
            if value[code] == 1:
                return True
            if value[code] == 0:
                self._assign(code ^ 1, -1)
        return self._propagate() >= 0

    def is_rup(self, literals: list[int]) -> bool:
        if self.conflict >= 0 or self.empties:
            return True
        codes = [2 * x if x > 0 else -2 * x + 1 for x in literals]
        size, head = len(self.trail), self.head
        try:
            return self._refuted(codes)
        finally:
            self._backtrack(size)
            self.head = head

    def is_rat(self, literals: list[int]) -> bool:
        if not literals:
            return False
        codes = [2 * x if x > 0 else -2 * x + 1 for x in literals]
        pivot = codes[0] ^ 1  # the negated pivot
        size, head = len(self.trail), self.head
        try:
            if self._refuted(codes):
                return True
            level, level_head = len(self.trail), self.head
            for clause in self.clauses:
                if clause is None or pivot not in clause:
                    continue
                refuted = self._refuted([c for c in clause if c != pivot])
                self._backtrack(level)
                self.head = level_head
                if not refuted:
                    return False
            return True
        finally:
            self._backtrack(size)
            self.head = head


def _compact(formula: list[list[int]], steps: list[Step]) -> tuple[list[list[int]], list[Step]]:
    """The same clauses over variables renumbered 1..n in order of appearance.

    A bijection on variables changes no RUP or RAT judgement; it bounds the
    checker's arrays by the input's size, whatever numbers it uses.
    """
    number: dict[int, int] = {}

    def renamed(clause: list[int]) -> list[int]:
        return [number.setdefault(abs(x), len(number) + 1) * (1 if x > 0 else -1) for x in clause]

    return [renamed(c) for c in formula], [(d, renamed(c)) for d, c in steps]


def check_drat(variables: int, formula: list[list[int]], steps: list[Step]) -> tuple[str, str]:
    """(result, detail): ``accepted`` / ``rejected`` / ``unknown``.

    ``variables`` is the header's ``V``: formula literals are already within
    it; a proof may add new variables (extended resolution) of any number.
    """
    if not steps:
        return "unknown", "empty proof"
    shown_steps = steps
    size = sum(len(c) for c in formula) + sum(len(c) for _, c in steps)
    largest = max((abs(x) for c in [*formula, *(c for _, c in steps)] for x in c), default=0)
    if largest > 2 * size + 64:  # sparse numbering: renumber rather than allocate
        formula, steps = _compact(formula, steps)
        largest = max((abs(x) for c in [*formula, *(c for _, c in steps)] for x in c), default=0)
    checker = DratChecker(largest, formula)
    for number, (deletion, clause) in enumerate(steps, start=1):
        if deletion:
            checker.delete(clause)
            continue
        if not (checker.is_rup(clause) or checker.is_rat(clause)):
            shown = " ".join([*map(str, shown_steps[number - 1][1]), "0"])
            return "rejected", f"step {number}: lemma '{shown}' is neither RUP nor RAT"
        if not clause:
            return "accepted", f"empty clause derived at step {number} of {len(steps)}"
        checker.add(clause)
    return "unknown", "the proof never adds the empty clause"


def check_files(formula: bytes, proof: bytes) -> tuple[str, str]:
    """The verdict for a DIMACS formula and a DRAT proof, as bytes."""
    try:
        variables, clauses = parse_dimacs(formula)
        steps = parse_proof(proof)
    except Refused as refused:
        return "unknown", str(refused)
    return check_drat(variables, clauses, steps)


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
    names = request["claim"]["obligations"]
    try:
        with open(os.path.join(paths["evidence"], "proof.drat"), "rb") as handle:
            proof = handle.read()
    except OSError as error:
        result, detail = "unknown", f"proof.drat unreadable: {error.strerror or error}"
    else:
        if names:
            result, detail = check_files(spec_bytes, proof)
        else:
            result, detail = "unknown", "the claim has no obligation"
    print(f"drat: {result}: {detail}")
    obligations = [{"name": name, "result": result, "evidence": ["proof.drat"]} for name in names]
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
