"""Certification checker (cvc5 Python API): decides the certification problem itself.

Usage: python smt_certify_checker.py REQUEST.json RECEIPT.json

Run by the certifier (``ExternalCertifier``, kernel/orchestrate/_certifier.py)
under the external verifier
protocol (seed 003, ADR-0004). Standalone: standard library and cvc5 only.

What it proves. ``accepted`` means: the frozen specification is a
certification problem in exactly the shape ``kernel.organs.certification_problem``
writes, the problem without its final "targets differ" assertion is
satisfiable (the bindings and relations have a solution, so nothing holds
vacuously), and with that assertion it is unsatisfiable (every answer target
has one value), per cvc5; z3's recorded answer (from the producer) must also
be ``unsat`` (a disagreement is ``unknown``, never a verdict).

What is trusted: this file, the Python interpreter, cvc5 1.4.2 (its parser
and solver), and the kernel's binding of the snapshot to the request's
``specification_digest`` (re-checked here). The producer is not trusted:
``evidence/<name>.smt2`` must be byte-identical to the specification (else
``rejected``) and its z3 answer can only turn an ``unsat`` into ``unknown``.

The specification grammar (anything else is ``unknown`` with a reason):

- UTF-8 text of at most ``MAX_BYTES`` bytes; ``;`` comments; outside comments
  only parentheses, simple symbols and numerals (no strings, quoted symbols,
  keywords, decimals); nesting at most ``MAX_DEPTH`` deep;
- ``(set-logic QF_NIA)`` first; then ``(declare-const q<i>_<1|2> Int)``
  (each name declared once) and ``(assert TERM)`` commands (at least one
  assertion); then one final
  ``(check-sat)``, followed by nothing but whitespace;
- the last assertion is the "targets differ" assertion: ``(distinct q<i>_1
  q<i>_2)`` or ``(or (distinct ...) (distinct ...) ...)``.

How it decides: cvc5 runs with strict parsing, a per-query time limit
(``QUERY_MS``) and safe mode. Declarations are handed to cvc5's parser one at
a time (each must parse as a declaration) and executed, and each must run
with an empty output: cvc5 reports a command it refuses while running it as
``(error "...")`` output, not as an exception, and that is ``unknown`` with
cvc5's message (issue 19); each assertion's term
is parsed as a term, never run as a command, so nothing the specification says
can set an option, print or write a file, and no ``check-sat`` it contains is
ever what answers. The checker asserts every term but the last and asks
``check-sat`` (must be ``sat``), then ``check-sat-assuming`` the last:
``unsat`` -> accepted (with z3's ``unsat``), ``sat`` -> rejected, anything
else (``unknown``, time limit, a cvc5 error) -> unknown.

The receipt binds every field the kernel validates (job, run, check id, check
digest, specification digest, identity, evidence digest) to the request; the
kernel, not this script, decides whether it counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

import cvc5

MAX_DEPTH = 100
MAX_BYTES = 16 << 20
QUERY_MS = 20_000
QUANTITY = re.compile(r"q(?:0|[1-9][0-9]*)_[12]\Z")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Node = str | list["Node"]

_ATOM = re.compile(r"0|[1-9][0-9]*|[A-Za-z~!@$%^&*_+=<>.?/\-][A-Za-z0-9~!@$%^&*_+=<>.?/\-]*")
_SEPARATORS = " \t\r\n();"


class Refused(Exception):
    """Input outside the grammar: the obligation is ``unknown`` with this reason."""


def commands(text: str) -> list[list[Node]]:
    """Top-level commands as S-expressions; raises ``Refused``."""
    found: list[list[Node]] = []
    stack: list[list[Node]] = []
    i, size = 0, len(text)
    while i < size:
        char = text[i]
        if char in " \t\r\n":
            i += 1
        elif char == ";":
            end = text.find("\n", i)
            i = size if end < 0 else end + 1
        elif char == "(":
            if len(stack) >= MAX_DEPTH:
                raise Refused(f"nesting deeper than {MAX_DEPTH} at offset {i}")
            stack.append([])
            i += 1
        elif char == ")":
            if not stack:
                raise Refused(f"unbalanced ')' at offset {i}")
            done = stack.pop()
            i += 1
            if stack:
                stack[-1].append(done)
            else:
                found.append(done)
        else:
            match = _ATOM.match(text, i)
            if match is None or (match.end() < size and text[match.end()] not in _SEPARATORS):
                raise Refused(f"token outside the grammar at offset {i}: {text[i : i + 20]!r}")
            if not stack:
                raise Refused(f"atom outside a command at offset {i}")
            stack[-1].append(match.group())
            i = match.end()
    if stack:
        raise Refused("unbalanced '(' at the end")
    return found


def render(node: Node) -> str:
    """The text cvc5 is given: rebuilt from the checked tree, so comments and
    layout never reach it and it reads exactly what the grammar saw."""
    if isinstance(node, str):
        return node
    return "(" + " ".join(render(item) for item in node) + ")"


def _is_distinct(node: Node) -> bool:
    if not (isinstance(node, list) and len(node) == 3 and node[0] == "distinct"):
        return False
    first, second = node[1], node[2]
    return (
        isinstance(first, str)
        and isinstance(second, str)
        and QUANTITY.match(first) is not None
        and first.endswith("_1")
        and second == first[:-1] + "2"
    )


def _differ(node: Node) -> bool:
    if _is_distinct(node):
        return True
    return (
        isinstance(node, list)
        and len(node) >= 3
        and node[0] == "or"
        and all(_is_distinct(item) for item in node[1:])
    )


def problem(text: str) -> tuple[list[str], list[str], str]:
    """(declarations, assertion terms but the last, the last): the grammar, checked."""
    parsed = commands(text)
    if len(parsed) < 3 or parsed[0] != ["set-logic", "QF_NIA"]:
        raise Refused("the problem does not start with (set-logic QF_NIA)")
    if parsed[-1] != ["check-sat"] or not text.rstrip().endswith("(check-sat)"):
        raise Refused("the problem does not end with one (check-sat) and nothing after it")
    declarations: list[str] = []
    declared: set[str] = set()
    assertions: list[Node] = []
    for number, command in enumerate(parsed[1:-1], start=2):
        match command:
            case ["declare-const", str(name), "Int"] if QUANTITY.match(name):
                if name in declared:
                    raise Refused(f"command {number} declares {name} a second time")
                declared.add(name)
                declarations.append(render(command))
            case ["assert", body]:
                assertions.append(body)
            case _:
                raise Refused(f"command {number} is not a declaration or an assertion")
    if not assertions:
        raise Refused("the problem has no assertion")
    last = assertions.pop()
    if not _differ(last):
        raise Refused("the last assertion is not 'targets differ' (distinct q<i>_1 q<i>_2)")
    return declarations, [render(body) for body in assertions], render(last)


def solver() -> tuple[cvc5.Solver, cvc5.SymbolManager]:
    terms = cvc5.TermManager()
    session = cvc5.Solver(terms)
    # Expert options first: safe mode refuses them once it is on.
    session.setOption("parsing-mode", "strict")
    session.setOption("incremental", "true")
    session.setOption("tlimit-per", str(QUERY_MS))
    session.setOption("safe-mode", "safe")
    return session, cvc5.SymbolManager(terms)


def _parser(session: cvc5.Solver, symbols: cvc5.SymbolManager, source: str) -> cvc5.InputParser:
    parser = cvc5.InputParser(session, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, source, "certification")
    return parser


def _declare(session: cvc5.Solver, symbols: cvc5.SymbolManager, source: str) -> None:
    parser = _parser(session, symbols, source)
    command = parser.nextCommand()
    if command.isNull() or command.getCommandName() not in ("declare-fun", "set-logic"):
        raise Refused(f"cvc5 did not parse {source!r} as the grammar did")
    output = command.invoke(session, symbols)
    if output.strip():  # refused while running: never ignored (issue 19)
        raise Refused(f"cvc5 refused {source!r}: {' '.join(output.split())[:300]}")
    if not parser.nextCommand().isNull():
        raise Refused(f"cvc5 read more than one command in {source!r}")


def _term(session: cvc5.Solver, symbols: cvc5.SymbolManager, source: str) -> cvc5.Term:
    parser = _parser(session, symbols, source)
    found = parser.nextTerm()
    if found.isNull() or not parser.nextTerm().isNull() or not found.getSort().isBoolean():
        raise Refused(f"{source.strip()[:60]!r} is not a Boolean term")
    return found


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


def answer(specification: bytes) -> tuple[str, str]:
    """(cvc5's answer ``unsat``/``sat``/``unknown``, reason) for the problem."""
    try:
        if len(specification) > MAX_BYTES:
            raise Refused(f"specification larger than {MAX_BYTES} bytes")
        try:
            text = specification.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused("specification is not UTF-8") from None
        declarations, base, differ = problem(text)
        session, symbols = solver()
        _declare(session, symbols, "(set-logic QF_NIA)")
        for source in declarations:
            _declare(session, symbols, source)
        for source in base:
            session.assertFormula(_term(session, symbols, source))
        goal = _term(session, symbols, differ)
        alone = session.checkSat()
        if not alone.isSat():
            raise Refused(f"without 'targets differ' the problem is not satisfiable ({alone})")
        result = session.checkSatAssuming(goal)
    except Refused as refused:
        return "unknown", str(refused)
    except RuntimeError as error:  # cvc5 refused the input
        return "unknown", f"cvc5: {_one_line(error)}"
    if result.isUnsat():
        return "unsat", "targets cannot differ"
    if result.isSat():
        return "sat", "two solutions differ on a target"
    return "unknown", f"cvc5: {result.getUnknownExplanation()}"


def z3_answers(evidence: str) -> dict[str, str]:
    try:
        with open(os.path.join(evidence, "z3-answer.txt"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    pairs = (line.split(" ", 1) for line in lines if " " in line)
    return {name: value for name, value in pairs}


def _given(evidence: str, name: str) -> bytes | None:
    if not NAME.match(name):
        return None
    try:
        with open(os.path.join(evidence, f"{name}.smt2"), "rb") as handle:
            return handle.read()
    except OSError:
        return None


def decide(request: dict[str, object]) -> list[dict[str, object]]:
    """One receipt obligation entry per approved obligation, in manifest order."""
    paths = request["paths"]
    claim = request["claim"]
    assert isinstance(paths, dict) and isinstance(claim, dict)
    with open(os.path.join(paths["snapshot"], claim["specification"]), "rb") as handle:
        specification = handle.read()
    if hashlib.sha256(specification).hexdigest() != request["specification_digest"]:
        raise SystemExit("specification in the snapshot does not match the request")
    names = [str(name) for name in claim["obligations"]]
    z3 = z3_answers(paths["evidence"])
    decided = answer(specification) if names else ("unknown", "no obligation")
    obligations: list[dict[str, object]] = []
    for name in names:
        if _given(paths["evidence"], name) != specification:
            result = "rejected"
            print(f"cvc5: {name}: the obligation is not the specification")
        else:
            said, reason = decided
            print(f"cvc5: {name}: {said} (z3 said {z3.get(name, 'nothing')}): {reason}")
            if said == "unsat" and z3.get(name) == "unsat":
                result = "accepted"
            elif said == "sat":
                result = "rejected"
            else:
                result = "unknown"
        obligations.append(
            {"name": name, "result": result, "evidence": [f"{name}.smt2", "z3-answer.txt"]}
        )
    return obligations


def main() -> int:
    request_path, receipt_path = sys.argv[1], sys.argv[2]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    obligations = decide(request)
    results = [o["result"] for o in obligations]
    if not results:
        verdict = "unknown"
        print("cvc5: the claim has no obligation")
    elif all(r == "accepted" for r in results):
        verdict = "accepted"
    elif "rejected" in results:
        verdict = "rejected"
    else:
        verdict = "unknown"
    receipt = {
        "schema_version": 1,
        "job_id": request["job_id"],
        "run_id": request["run_id"],
        "check_id": request["check_id"],
        "check_digest": request["check_digest"],
        "specification_digest": request["specification_digest"],
        "identity": request["identity"],
        "evidence_digest": request["evidence_digest"],
        "verdict": verdict,
        "obligations": obligations,
    }
    with open(receipt_path, "w", encoding="utf-8") as handle:
        json.dump(receipt, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
