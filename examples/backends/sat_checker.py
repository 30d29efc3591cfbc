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
- no numeral (``V``, ``C``, a literal of the formula or of a text proof) is
  longer than ``MAX_DIGITS`` (20) digits, and no binary literal longer than
  ``MAX_BINARY_BYTES`` (9) bytes, whatever ``PYTHONINTMAXSTRDIGITS`` says;
- a line ``%`` (the SATLIB convention) ends the formula at a clause boundary:
  after it only ``0`` tokens and blank lines may follow; anything else is refused.

Proof: text DRAT (ASCII tokens: ``d`` starts a deletion, literals, ``0`` ends
a step) or binary DRAT (``a``/``d`` byte, variable-length literals ``2v`` or
``2v+1``, ``0`` byte), read directly; a proof containing a NUL byte is
binary, any other is text. A proof may introduce new variables (extended
resolution); sparse variable numbers are renumbered, never allocated.

Checking (specified DRAT semantics, backward with core marking, as drat-trim):

- a deletion removes one copy of the clause (literals compared as sets, the
  copy added last); deleting an absent clause changes nothing. A deleted
  clause no longer propagates: a top-level literal it was the reason of is
  unassigned with everything after it on the trail and propagation is redone
  (so units forced only by deleted clauses never linger);
- the first added empty clause ends the proof (later steps are never read as
  lemmas); it must be RUP over the clauses in force before it, else the proof
  is ``rejected`` at that step;
- then, backward from it, every lemma the refutation uses (the clauses its
  checks' conflicts came from, transitively) is checked over exactly the
  clauses in force before it: RUP (asserting its negation and
  unit-propagating reaches a conflict) or, failing that, RAT on its first
  literal (every non-tautological resolvent with a clause in force that
  contains the negated pivot is RUP). Propagation prefers clauses already in
  the core. A lemma the refutation never uses is not checked: a proof may
  contain invalid lemmas and still be ``accepted`` when none is needed, since
  the checked lemmas are a refutation by themselves (``check_core`` returns
  them; the tests re-check them with an independent forward checker).

A needed lemma that fails is ``rejected`` (the step number is reported); a
malformed or empty proof, or one that never adds the empty clause, is
``unknown``. Every obligation of the claim gets the one verdict; a claim with
no obligation is ``unknown``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import sys

Step = tuple[bool, list[int]]  # (is a deletion, DIMACS literals)

# Numerals are bounded by the checker, not by Python's int() digit limit
# (PYTHONINTMAXSTRDIGITS): a longer one is refused, never converted.
MAX_DIGITS = 20
_LITERAL = re.compile(rb"-?[1-9][0-9]{0,%d}\Z" % (MAX_DIGITS - 1))
_NUMERAL = re.compile(rb"(?:0|[1-9][0-9]{0,%d})\Z" % (MAX_DIGITS - 1))
_LONG = re.compile(rb"-?[0-9]{%d,}\Z" % (MAX_DIGITS + 1))
# A binary literal is at most 9 bytes of 7 bits: below 2**63.
MAX_BINARY_BYTES = 9


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
            if any(_LONG.match(field) for field in fields[2:]):
                raise Refused(f"formula line {number}: a numeral longer than {MAX_DIGITS} digits")
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
            elif _LONG.match(token):
                raise Refused(f"formula line {number}: a literal longer than {MAX_DIGITS} digits")
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


# Text proofs are read in bulk when C-level counts over the bytes show that
# every token is ``d``, ``0`` or ``-?[1-9][0-9]*`` below 10**MAX_DIGITS, with
# no per-token match; anything else goes to the token-by-token reader, which
# gives the reason. A ``d`` token becomes _DELETE for int(), a value no
# literal within MAX_DIGITS can have.
_TOKEN_BYTES = b"0123456789d- \t\n\r\f\v"
_SPACES = bytes.maketrans(b"\t\n\r\f\v", b"     ")
_BOUND = 10**MAX_DIGITS
_DELETE = 10**MAX_DIGITS * 1000


def _parse_text(data: bytes) -> list[Step]:
    steps = _bulk_text(data)
    return _read_text(data) if steps is None else steps


def _bulk_text(data: bytes) -> list[Step] | None:
    """The steps of a text proof whose tokens are all well formed, else None."""
    if data.translate(None, _TOKEN_BYTES):
        return None
    spaced = b" " + data.translate(_SPACES) + b" "
    deletions = spaced.count(b" d ")
    if (
        spaced.count(b"d") != deletions  # a 'd' inside a token, or two in a row
        or spaced.count(b"-") != spaced.count(b" -")  # a '-' inside a token
        or spaced.count(b"-0")  # a "-0"
        or spaced.count(b"- ")  # a lone "-"
    ):
        return None
    steps: list[Step] = []
    try:
        tokens = spaced.replace(b" d ", b" %d " % _DELETE).split()
        if tokens.count(b"0") != spaced.count(b" 0"):
            return None  # a leading zero
        numbers = list(map(int, tokens))
        if numbers and (min(numbers) <= -_BOUND or sum(map(_BOUND.__le__, numbers)) != deletions):
            return None  # more than MAX_DIGITS digits
        start, size, find = 0, len(numbers), numbers.index
        while start < size:
            end = find(0, start)  # ValueError: the last step is not ended
            deletion = end > start and numbers[start] == _DELETE
            steps.append((deletion, numbers[start + deletion : end]))
            start = end + 1
    except ValueError:
        return None
    if sum(deletion for deletion, _ in steps) != deletions:
        return None  # a 'd' after a literal
    return steps


def _read_text(data: bytes) -> list[Step]:
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
        elif _LONG.match(token):
            raise Refused(f"proof step {len(steps) + 1}: a literal longer than {MAX_DIGITS} digits")
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
                if shift >= 7 * MAX_BINARY_BYTES:
                    raise Refused(
                        f"proof step {len(steps) + 1}: a binary literal longer than"
                        f" {MAX_BINARY_BYTES} bytes"
                    )
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
# negates. ``value[code]`` is 1 (true), -1 (false) or 0. Every clause copy of
# the formula and the proof has an id (``cid``, its index in ``clauses``): a
# list of codes whose first two are watched (a unit clause has no watches and
# is kept in ``units``); ``state[cid] & ALIVE`` says whether it is in the
# current formula, ``state[cid] & MARKED`` whether it is in the core. The
# top-level trail holds what unit propagation over the alive
# clauses forces; ``reason[v]`` is the clause that forced ``v`` (-1: assumed).
#
# Theory of operation: backward checking with core marking (as drat-trim).
#
# 1. Forward, judging nothing: find the first added empty clause (step k) and
#    the clause copy each deletion removes.
# 2. The formula in force before step k is propagated at the top level: the
#    empty clause is RUP iff that conflicts. The clauses the conflict used
#    (the conflicting clause and the reasons of its literals, transitively)
#    are marked.
# 3. Backward from step k-1, each step is undone: an added lemma leaves the
#    formula, a deleted clause comes back, so the formula is always exactly the
#    one in force at that step (the specified deletion semantics: a top-level
#    literal whose reason leaves is unassigned with everything after it, and
#    propagation is redone before the next check). A marked lemma is checked,
#    RUP then RAT, against the formula in force before it, and the clauses its
#    check used are marked in turn.
#
# A marked lemma that fails is one a forward checker rejects at the same step
# over the same clauses. Unmarked lemmas are never checked: the marked lemmas
# and the deletions of marked clauses are a DRAT refutation by themselves
# (every check used marked clauses only; a RAT check considered every alive
# clause, so it holds for any subset), which ``core`` returns.
#
# Speed (issue 19): the checks are incremental, never a propagation from
# scratch per lemma: the top-level trail is kept at its fixpoint and only cut
# back where a leaving clause was a reason; a check assumes the lemma's
# negation on top of it and backtracks to it. Propagation is one flat loop
# over integer lists (blocker literals, swap-removal, core first, and a unit
# found by a non-core clause returns to the core before that list goes on, as
# drat-trim does); conflict analysis stops at top-level literals whose
# reasons are already marked.


class DratChecker:
    def __init__(self, variables: int, clauses: list[list[int]], alive: list[bool]) -> None:
        size = 2 * variables + 2
        self.value = [0] * size
        # Watch lists are flat: ``[blocker, cid, blocker, cid, ...]``, the
        # blocker being a literal of the clause (the other watch when it was
        # added). A true blocker settles the clause without reading it, which
        # is most visits; a removed watch is swapped with the list's last pair.
        self.watches: list[list[int]] = [[] for _ in range(size)]
        self.core: list[list[int]] = [[] for _ in range(size)]
        # Binary clauses are not watched: each literal lists ``(other, cid)``
        # of the binary clauses it is in, always propagated with the core.
        self.binaries: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        self.reason = [-1] * (variables + 1)
        self.position = [0] * (variables + 1)
        self.seen = [0] * (variables + 1)
        self.trail: list[int] = []
        self.core_head = self.other_head = 0  # trail literals propagated over each kind
        self.clauses = clauses
        # Per clause: ALIVE (in the formula in force) | MARKED (in the core).
        # Core watch lists hold marked clauses only; an entry whose clause is
        # no longer ALIVE | MARKED (core) or ALIVE (the others) is dropped
        # when met, so one byte decides whether a watch still counts.
        self.state = [0] * len(clauses)
        # Variables on the top-level trail whose reasons are all marked: a
        # conflict analysis stops there instead of walking the same top-level
        # implications again for every check (cleared when they leave the trail).
        self.justified = [0] * (variables + 1)
        self.level = 0  # the top-level trail's length when a check started
        self.units: set[int] = set()
        self.empties: set[int] = set()
        self.conflict = -1  # an alive clause falsified at the top level, or -1
        self.dirty = False  # the trail is not yet the fixpoint of the alive clauses
        for cid, keep in enumerate(alive):
            if keep:
                self.attach(cid)
        self._rebuild()

    # -- the top level
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
        if size < self.level:  # the top level itself shrinks
            justified = self.justified
            for code in trail[size : self.level]:
                justified[code >> 1] = 0
            self.level = size
        del trail[size:]
        self.core_head = min(self.core_head, size)
        self.other_head = min(self.other_head, size)

    def _propagate(self) -> int:
        """Unit-propagate, core first; the conflicting clause, or -1.

        Marked clauses are watched in ``core``, the others in ``watches``:
        every literal is first propagated over marked clauses, and an
        unmarked clause is only visited when the marked ones are exhausted
        (as drat-trim does), so conflicts are found with clauses already in
        the core whenever they can be, and the core stays small.

        One flat loop with everything in locals: this is where the time goes
        (about ten million watch visits on PHP 9 into 8).
        """
        value, clauses, trail, state = self.value, self.clauses, self.trail, self.state
        reason, position = self.reason, self.position
        core, watches, binaries = self.core, self.watches, self.binaries
        core_head, other_head = self.core_head, self.other_head
        conflict = -1
        # Where to go on in the non-core list of ``held`` after a detour to the
        # core (-1: nowhere): as in drat-trim, a unit found by a non-core clause
        # sends propagation back to the core at once, so a long non-core list is
        # often left before its end because the core then conflicts.
        resume = held = -1
        while True:
            if core_head < len(trail):
                false = trail[core_head] ^ 1
                core_head += 1
                implied = binaries[false]
                if implied:
                    stale = False
                    for other, cid in implied:
                        if value[other] == 1:
                            continue
                        if not state[cid] & ALIVE:
                            stale = True
                        elif value[other]:
                            conflict = cid
                            break
                        else:
                            value[other] = 1
                            value[other ^ 1] = -1
                            reason[other >> 1] = cid
                            position[other >> 1] = len(trail)
                            trail.append(other)
                    if stale:  # undone lemmas never come back
                        implied[:] = [pair for pair in implied if state[pair[1]] & ALIVE]
                    if conflict >= 0:
                        break
                lists, kind, i = core, CORE, 0
            elif resume >= 0:
                false = held
                lists, kind, i = watches, ALIVE, resume
            elif other_head < len(trail):
                false = held = trail[other_head] ^ 1
                other_head += 1
                lists, kind, i = watches, ALIVE, 0
            else:
                break
            # The clauses of one kind (``state == kind``) watched by ``false``.
            watching = lists[false]
            if not watching:
                continue
            full = size = len(watching)
            while i < size:
                blocker = watching[i]
                if value[blocker] == 1:
                    i += 2
                    continue
                cid = watching[i + 1]
                if state[cid] != kind:  # undone for good, or now watched in the core lists
                    size -= 2
                    watching[i] = watching[size]
                    watching[i + 1] = watching[size + 1]
                    continue
                clause = clauses[cid]
                first = clause[0]
                if first == false:
                    first = clause[1]
                    slot = 0
                else:
                    slot = 1
                if first != blocker and value[first] == 1:
                    watching[i] = first
                    i += 2
                    continue
                # A non-false literal to watch instead, usually the third.
                other = clause[2]
                k = 2
                if value[other] == -1:
                    for k in range(3, len(clause)):
                        other = clause[k]
                        if value[other] != -1:
                            break
                    else:  # unit or conflicting: ``first`` stays watched
                        i += 2
                        if value[first] == -1:
                            conflict = cid
                            break
                        value[first] = 1
                        value[first ^ 1] = -1
                        reason[first >> 1] = cid
                        position[first >> 1] = len(trail)
                        trail.append(first)
                        if kind == ALIVE:
                            break
                        continue
                clause[slot] = other
                clause[k] = false
                lists[other] += (first, cid)
                size -= 2
                watching[i] = watching[size]
                watching[i + 1] = watching[size + 1]
            else:
                i = -1  # the list is done
            if kind == ALIVE:
                resume = i
            if size < full:
                del watching[size:]
            if conflict >= 0:
                break
        self.core_head, self.other_head = core_head, other_head
        return conflict

    def _rebuild(self) -> None:
        """Propagate the kept trail again from its start, to the fixpoint (or a conflict)."""
        self.dirty = False
        self.conflict = -1
        self.core_head = self.other_head = 0
        if self.empties:
            return
        value = self.value
        for cid in self.units:
            code = self.clauses[cid][0]
            if value[code] == 0:
                self._assign(code, cid)
            elif value[code] == -1:
                self.conflict = cid
                return
        self.conflict = self._propagate()

    # -- the formula in force
    def attach(self, cid: int) -> None:
        """``cid`` enters the formula (built, or a deletion undone)."""
        self.state[cid] |= ALIVE
        codes = self.clauses[cid]
        if not codes:
            self.empties.add(cid)
            return
        value = self.value
        settled = not self.dirty and self.conflict < 0 and not self.empties
        if len(codes) == 1:
            self.units.add(cid)
            if settled and value[codes[0]] == 0:
                self._assign(codes[0], cid)
                self.conflict = self._propagate()
            elif settled and value[codes[0]] == -1:
                self.conflict = cid
            return
        if len(codes) == 2:
            first, second = codes
            self.binaries[first].append((second, cid))
            self.binaries[second].append((first, cid))
            if not settled or (value[first] != -1 and value[second] != -1):
                return
            if value[first] == -1 and value[second] == -1:
                self.conflict = cid
            elif value[first] == 0 or value[second] == 0:
                self._assign(first if value[first] == 0 else second, cid)
                self.conflict = self._propagate()
            return
        # Watch two non-false literals when there are; else the implied or
        # true literal and the false literal assigned last.
        position = self.position
        codes.sort(key=lambda c: (value[c] != -1, position[c >> 1] if value[c] else 0))
        codes.reverse()
        lists = self.core if self.state[cid] & MARKED else self.watches
        lists[codes[0]] += (codes[1], cid)
        lists[codes[1]] += (codes[0], cid)
        if not settled or value[codes[1]] != -1:
            return
        if value[codes[0]] == 0:
            self._assign(codes[0], cid)
            self.conflict = self._propagate()
        elif value[codes[0]] == -1:
            self.conflict = cid

    def detach(self, cid: int) -> None:
        """``cid`` leaves the formula (a lemma's addition undone)."""
        self.state[cid] &= ~ALIVE
        codes = self.clauses[cid]
        if not codes:
            self.empties.discard(cid)
            return
        if len(codes) == 1:
            self.units.discard(cid)
        if self.conflict == cid:
            self.dirty = True
        for code in codes[:2]:  # the implied literal: the first, or either of a binary
            variable = code >> 1
            if self.value[code] == 1 and self.reason[variable] == cid:
                self._backtrack(self.position[variable])
                self.dirty = True

    # -- checks and marks
    def _mark(self, cid: int) -> None:
        """Mark ``cid`` and the reasons of its false literals, transitively."""
        state, reason, clauses, seen = self.state, self.reason, self.clauses, self.seen
        core, justified, position, level = self.core, self.justified, self.position, self.level
        pending = [cid]
        touched = []
        while pending:
            why = pending.pop()
            clause = clauses[why]
            if not state[why] & MARKED:  # into the core, watched on the same literals
                state[why] |= MARKED
                if len(clause) > 2:
                    core[clause[0]] += (clause[1], why)
                    core[clause[1]] += (clause[0], why)
            for code in clause:
                variable = code >> 1
                if not seen[variable]:
                    seen[variable] = 1
                    touched.append(variable)
                    if reason[variable] >= 0 and not justified[variable]:
                        pending.append(reason[variable])
        for variable in touched:
            seen[variable] = 0
            if position[variable] < level and reason[variable] >= 0:
                justified[variable] = 1

    def _into_core(self, cid: int) -> None:
        """Mark ``cid``; from now on it is watched (on the same literals) in ``core``."""
        if self.state[cid] & MARKED:
            return
        self.state[cid] |= MARKED
        clause = self.clauses[cid]
        if len(clause) > 2:
            self.core[clause[0]] += (clause[1], cid)
            self.core[clause[1]] += (clause[0], cid)

    def _mark_literal(self, code: int) -> None:
        why = self.reason[code >> 1]
        if why >= 0:
            self._mark(why)

    def _refute(self, codes: list[int]) -> bool:
        """Assume the negation of ``codes`` on top of the trail; on a conflict, mark it."""
        value = self.value
        for code in codes:
            if value[code] == 1:
                self._mark_literal(code)
                return True
            if value[code] == 0:
                self._assign(code ^ 1, -1)
        conflict = self._propagate()
        if conflict < 0:
            return False
        self._mark(conflict)
        return True

    def settled(self) -> bool:
        """Bring the trail to the fixpoint; whether the formula in force is refuted,
        marking what refutes it."""
        if self.dirty:
            self._rebuild()
        if self.empties:
            self._into_core(next(iter(self.empties)))
            return True
        if self.conflict >= 0:
            self._mark(self.conflict)
            return True
        return False

    def check(self, cid: int, first: int) -> bool:
        """Is lemma ``cid`` RUP, or RAT on ``first`` (its first literal as written: the
        watches reorder its codes in place), over the formula in force?"""
        if self.settled():
            return True
        codes = self.clauses[cid]
        size = self.level = len(self.trail)
        try:
            if self._refute(codes):
                return True
            if not codes:
                return False
            pivot = first ^ 1  # the negated pivot
            level = len(self.trail)  # a fixpoint: both heads are here
            state = self.state
            for other, clause in enumerate(self.clauses):
                if not state[other] & ALIVE or pivot not in clause:
                    continue
                refuted = self._refute([c for c in clause if c != pivot])
                self._backtrack(level)
                self.core_head = self.other_head = level
                if not refuted:
                    return False
            return True
        finally:
            self._backtrack(size)
            self.core_head = self.other_head = size


ALIVE, MARKED = 1, 2
CORE = ALIVE | MARKED


def _compact(formula: list[list[int]], steps: list[Step]) -> tuple[list[list[int]], list[Step]]:
    """The same clauses over variables renumbered 1..n in order of appearance.

    A bijection on variables changes no RUP or RAT judgement; it bounds the
    checker's arrays by the input's size, whatever numbers it uses.
    """
    number: dict[int, int] = {}

    def renamed(clause: list[int]) -> list[int]:
        return [number.setdefault(abs(x), len(number) + 1) * (1 if x > 0 else -1) for x in clause]

    return [renamed(c) for c in formula], [(d, renamed(c)) for d, c in steps]


def _codes(literals: list[int]) -> list[int]:
    codes = [2 * x if x > 0 else 1 - 2 * x for x in literals]
    return codes if len(set(codes)) == len(codes) else list(dict.fromkeys(codes))


def _largest(formula: list[list[int]], steps: list[Step]) -> int:
    """The largest variable number used."""
    clauses = [*formula, *(c for _, c in steps)]
    return max([max(max(c), -min(c)) for c in clauses if c], default=0)


def check_core(
    variables: int, formula: list[list[int]], steps: list[Step]
) -> tuple[str, str, list[int]]:
    """(result, detail, core): ``accepted`` / ``rejected`` / ``unknown``.

    ``variables`` is the header's ``V``: formula literals are already within
    it; a proof may add new variables (extended resolution) of any number.
    ``core`` (when accepted) lists the step numbers of a refutation by
    themselves: the marked lemmas, the deletions of marked clauses and the
    empty clause, in proof order.
    """
    if not steps:
        return "unknown", "empty proof", []
    shown_steps = steps
    size = sum(map(len, formula)) + sum(len(c) for _, c in steps)
    largest = _largest(formula, steps)
    if largest > 2 * size + 64:  # sparse numbering: renumber rather than allocate
        formula, steps = _compact(formula, steps)
        largest = _largest(formula, steps)
    # 1. Forward: the clause copies, which one each deletion removes, and step k.
    clauses = [_codes(c) for c in formula]
    copies: dict[tuple[int, ...], list[int]] = {}
    for cid, codes in enumerate(clauses):
        copies.setdefault(tuple(sorted(codes)), []).append(cid)
    events: list[int] = []  # per step before k: the lemma's cid, or -2 - cid deleted, or -1
    firsts: list[int] = []  # per step before k: a lemma's first literal (RAT's pivot)
    end = 0
    for number, (deletion, clause) in enumerate(steps, start=1):
        if not deletion and not clause:
            end = number
            break
        codes = _codes(clause)
        key = tuple(sorted(codes))
        if deletion:
            found = copies.get(key)
            events.append(-2 - found.pop() if found else -1)  # -1: deletes nothing
            firsts.append(-1)
            continue
        copies.setdefault(key, []).append(len(clauses))
        events.append(len(clauses))
        firsts.append(codes[0])
        clauses.append(codes)
    if not end:
        return "unknown", "the proof never adds the empty clause", []
    alive = [True] * len(clauses)
    for event in events:
        if event < -1:
            alive[-2 - event] = False
    # 2. The empty clause, over the formula in force before it.
    checker = DratChecker(largest, clauses, alive)
    if not checker.settled():
        return "rejected", f"step {end}: lemma '0' is neither RUP nor RAT", []
    # 3. Backward: undo every step; check the marked lemmas.
    lemmas = checked = 0
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event < 0:
            if event < -1:
                checker.attach(-2 - event)
            continue
        lemmas += 1
        checker.detach(event)
        if not checker.state[event] & MARKED:
            continue
        checked += 1
        if not checker.check(event, firsts[index]):
            shown = " ".join([*map(str, shown_steps[index][1]), "0"])
            return "rejected", f"step {index + 1}: lemma '{shown}' is neither RUP nor RAT", []
    marked = [state & MARKED for state in checker.state]
    core = [
        index + 1
        for index, event in enumerate(events)
        if (event >= 0 and marked[event]) or (event < -1 and marked[-2 - event])
    ]
    detail = (
        f"empty clause derived at step {end} of {len(steps)}"
        f" ({checked} of {lemmas} lemmas needed, all checked)"
    )
    return "accepted", detail, [*core, end]


def check_drat(variables: int, formula: list[list[int]], steps: list[Step]) -> tuple[str, str]:
    """(result, detail): ``accepted`` / ``rejected`` / ``unknown`` (see ``check_core``)."""
    result, detail, _ = check_core(variables, formula, steps)
    return result, detail


def check_files(formula: bytes, proof: bytes) -> tuple[str, str]:
    """The verdict for a DIMACS formula and a DRAT proof, as bytes."""
    # Millions of lists that live until the verdict and hold no cycles: the
    # cyclic collector would only walk them again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        variables, clauses = parse_dimacs(formula)
        steps = parse_proof(proof)
        return check_drat(variables, clauses, steps)
    except Refused as refused:
        return "unknown", str(refused)
    finally:
        if collecting:
            gc.enable()


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
