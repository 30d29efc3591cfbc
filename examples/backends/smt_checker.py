"""SMT checker (cvc5 Python API): decides every obligation by posing its own query.

Usage: python smt_checker.py REQUEST.json RECEIPT.json

What it proves. ``accepted`` for obligation ``N`` means: in the frozen
specification (an SMT-LIB 2.6 prelude in the grammar below), the Boolean
constant ``N`` defined there holds for every interpretation of the declared
symbols, because cvc5 answers ``unsat`` to the query "not N" that this
script builds and poses itself, the prelude alone is satisfiable (nothing
holds vacuously), and z3's recorded answer (from the producer) is also
``unsat`` (a disagreement is ``unknown``, never a verdict).

What is trusted: this file, the Python interpreter, cvc5 1.4.2 (its parser
and solver), and the kernel's binding of the snapshot to the request's
``specification_digest`` (re-checked here). The producer is not trusted: its
obligation files must be byte-identical to what the documented rule builds
from the specification (else ``rejected``), and its z3 answers can only
turn an ``unsat`` into ``unknown``.

The specification grammar (anything outside it is ``unknown``, with a reason):

- UTF-8; ``;`` comments (any text); outside comments only ASCII tokens:
  parentheses, simple symbols, numerals, decimals, ``#x``/``#b`` literals.
  No string literals, quoted symbols or keywords (so no annotations); an
  atom must be followed by whitespace, a parenthesis, a comment or the end;
  nesting at most ``MAX_DEPTH`` deep; at most ``MAX_BYTES`` bytes.
- Commands: at most one ``(set-logic L)``, first, with ``L`` in ``LOGICS``
  (without one, the checker sets ``ALL``: everything cvc5 supports); then
  only ``declare-const``, ``declare-fun``, ``declare-sort``, ``define-sort``
  and ``define-fun``. Every other command (``assert``,
  ``check-sat``, ``exit``, ``reset``, ``push``/``pop``, ``set-option``,
  ``set-info``, ``get-*``, ``define-fun-rec``, ``include``, ...) is refused.
- Every name is bound once: no symbol is declared or defined by two
  commands (sorts and functions counted apart, as SMT-LIB does); every
  declared or defined name and parameter is a ``NAME`` (letters, digits,
  ``_``) that is not a symbol of a theory (``THEORY``, ``SORTS``, and any
  name starting with ``bv``); the parameters of one ``define-fun`` or
  ``define-sort`` are distinct.
- Every obligation name is a simple symbol defined exactly as
  ``(define-fun N () Bool BODY)``; a claim with no obligation is ``unknown``.

How it decides: cvc5 runs with strict parsing, a per-query time limit
(``QUERY_MS``) and safe mode. The declarations and definitions are handed to
cvc5's parser one command at a time (each must parse as the command the
grammar saw) and only those are executed; nothing the specification says
can set an option, print, or write a file. cvc5 does not raise when it
refuses a command while running it (it prints ``(error "...")``): every
command must run with an empty output, else the obligation is ``unknown``
with cvc5's message as the reason. The checker then asks
``check-sat`` of the prelude (must be ``sat``) and, per obligation,
``check-sat-assuming (not N)``: ``unsat`` -> accepted (with z3's ``unsat``),
``sat`` -> rejected, anything else (``unknown``, time limit, a cvc5 error)
-> unknown with the reason.

The receipt binds every field the kernel checks (job, run, check digest,
specification digest, identity, evidence digest) to the request.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys

import cvc5

LOGICS = (
    "QF_LIA", "QF_LRA", "QF_LIRA", "QF_NIA", "QF_NRA", "QF_UF", "QF_UFLIA", "QF_UFLRA",
    "QF_UFNIA", "QF_BV", "QF_ABV", "QF_AUFLIA", "LIA", "LRA", "NIA", "NRA", "UFLIA",
)  # fmt: skip
DECLARATIONS = ("declare-const", "declare-fun", "declare-sort", "define-sort", "define-fun")
# cvc5's name for the command it parsed, per grammar command.
CVC5_NAMES = {"declare-const": "declare-fun", "set-logic": "set-logic"}
MAX_DEPTH = 100
MAX_BYTES = 1 << 20
QUERY_MS = 20_000
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Symbols of the theories of ``LOGICS``: never declared or defined again
# (cvc5 lets a declaration shadow some of them, z3 keeps its own: issue 19).
THEORY = frozenset((
    "true", "false", "not", "and", "or", "xor", "distinct", "ite",
    "div", "mod", "abs", "to_real", "to_int", "is_int", "select", "store",
    "concat", "extract", "repeat", "zero_extend", "sign_extend", "rotate_left", "rotate_right",
))  # fmt: skip
SORTS = frozenset(("Bool", "Int", "Real", "Array", "BitVec"))

Node = str | list["Node"]

_ATOM = re.compile(
    r"#x[0-9A-Fa-f]+|#b[01]+|(?:0|[1-9][0-9]*)\.[0-9]+|0|[1-9][0-9]*"
    r"|[A-Za-z~!@$%^&*_+=<>.?/\-][A-Za-z0-9~!@$%^&*_+=<>.?/\-]*"
)
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


def prelude(text: str, names: list[str]) -> list[tuple[str, str]]:
    """The (command, text) pairs cvc5 may run, after checking the grammar."""
    parsed = commands(text)
    allowed: list[tuple[str, str]] = []
    defined: dict[str, bool] = {}
    bound: dict[tuple[str, str], int] = {}  # (namespace, symbol) -> the command binding it
    for number, command in enumerate(parsed, start=1):
        head = command[0] if command and isinstance(command[0], str) else ""
        if head == "set-logic":
            if number != 1 or len(command) != 2 or command[1] not in LOGICS:
                raise Refused(f"command {number}: only one leading (set-logic L), L in LOGICS")
        elif head not in DECLARATIONS:
            raise Refused(f"command {number}: {head or 'a list'!r} is not allowed")
        if head == "define-fun" and len(command) == 5 and isinstance(command[1], str):
            defined[command[1]] = command[2] == [] and command[3] == "Bool"
        if head != "set-logic":
            _bind_once(number, head, command, bound)
        allowed.append((head, render(command)))
    if not allowed or allowed[0][0] != "set-logic":
        # cvc5's strict parsing needs a logic; without one the prelude means
        # what SMT-LIB gives an unset logic: everything cvc5 supports.
        allowed.insert(0, ("set-logic", "(set-logic ALL)"))
    for name in names:
        if not NAME.match(name) or not defined.get(name):
            raise Refused(f"obligation {name!r} is not defined as (define-fun {name} () Bool ...)")
    return allowed


def _bind_once(
    number: int, head: str, command: list[Node], bound: dict[tuple[str, str], int]
) -> None:
    """Refuse a second binding of a symbol, a theory symbol, or repeated parameters.

    SMT-LIB makes each an error, and cvc5 reports it only as output while
    going on (issue 19): a failed first definition followed by a second one
    would let the second decide what the obligation means.
    """
    name = command[1] if len(command) > 1 else None
    space = "sort" if head in ("declare-sort", "define-sort") else "function"
    parameters: list[Node] = []
    if head == "define-fun" and len(command) > 2 and isinstance(command[2], list):
        parameters = [p[0] if isinstance(p, list) and p else p for p in command[2]]
    elif head == "define-sort" and len(command) > 2 and isinstance(command[2], list):
        parameters = command[2]
    for symbol in (name, *parameters):
        if not (isinstance(symbol, str) and NAME.match(symbol)) or _theory(symbol):
            shown = render(symbol) if symbol is not None else "nothing"
            raise Refused(f"command {number}: {head} binds {shown[:40]!r}, not a free NAME")
    assert isinstance(name, str)
    if (space, name) in bound:
        first = bound[(space, name)]
        raise Refused(f"command {number}: {name!r} is bound again (first by command {first})")
    bound[(space, name)] = number
    if len(set(map(render, parameters))) != len(parameters):
        raise Refused(f"command {number}: {head} {name} repeats a parameter name")


def _theory(symbol: str) -> bool:
    return symbol in THEORY or symbol in SORTS or symbol.startswith("bv")


def solver() -> tuple[cvc5.TermManager, cvc5.Solver, cvc5.SymbolManager]:
    terms = cvc5.TermManager()
    session = cvc5.Solver(terms)
    # Expert options first: safe mode refuses them once it is on.
    session.setOption("parsing-mode", "strict")
    session.setOption("incremental", "true")
    session.setOption("tlimit-per", str(QUERY_MS))
    session.setOption("safe-mode", "safe")
    return terms, session, cvc5.SymbolManager(terms)


def run_command(session: cvc5.Solver, symbols: cvc5.SymbolManager, head: str, source: str) -> None:
    parser = cvc5.InputParser(session, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, source, "specification")
    command = parser.nextCommand()
    if command.isNull() or command.getCommandName() != CVC5_NAMES.get(head, head):
        raise Refused(f"cvc5 did not parse {head} as the grammar did")
    output = command.invoke(session, symbols)
    if output.strip():  # cvc5 refused it while running it: never ignored (issue 19)
        raise Refused(f"cvc5 refused {head}: {' '.join(output.split())[:300]}")
    if not parser.nextCommand().isNull():
        raise Refused(f"cvc5 read more than one command in {head}")


def term(session: cvc5.Solver, symbols: cvc5.SymbolManager, source: str) -> cvc5.Term:
    parser = cvc5.InputParser(session, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, source, "term")
    found = parser.nextTerm()
    if found.isNull() or not parser.nextTerm().isNull() or not found.getSort().isBoolean():
        raise Refused(f"{source!r} is not a Boolean term")
    return found


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


def answers(specification: bytes, names: list[str]) -> dict[str, tuple[str, str]]:
    """Per obligation: (cvc5 answer ``unsat``/``sat``/``unknown``, reason)."""
    if not names:
        return {}
    try:
        if len(specification) > MAX_BYTES:
            raise Refused(f"specification larger than {MAX_BYTES} bytes")
        try:
            text = specification.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused("specification is not UTF-8") from None
        allowed = prelude(text, names)
        terms, session, symbols = solver()
        for head, source in allowed:
            run_command(session, symbols, head, source)
        alone = session.checkSat()
        if not alone.isSat():
            raise Refused(f"the prelude alone is not satisfiable ({alone})")
        queries = {
            name: terms.mkTerm(cvc5.Kind.NOT, term(session, symbols, name)) for name in names
        }
    except Refused as refused:
        return {name: ("unknown", str(refused)) for name in names}
    except RuntimeError as error:  # cvc5 refused the input
        return {name: ("unknown", f"cvc5: {one_line(error)}") for name in names}
    found: dict[str, tuple[str, str]] = {}
    for name, query in queries.items():
        try:
            result = session.checkSatAssuming(query)
        except RuntimeError as error:
            found[name] = ("unknown", f"cvc5: {one_line(error)}")
            continue
        if result.isUnsat():
            found[name] = ("unsat", "the negation is unsatisfiable")
        elif result.isSat():
            found[name] = ("sat", "the negation is satisfiable")
        else:
            found[name] = ("unknown", f"cvc5: {result.getUnknownExplanation()}")
    return found


def obligation_text(specification: str, name: str) -> str:
    """Rebuilt independently of the producer (same documented rule)."""
    return f"{specification.rstrip()}\n(assert (not {name}))\n(check-sat)\n"


def read_z3(evidence: str) -> dict[str, str]:
    try:
        with open(os.path.join(evidence, "z3-answers.txt"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    pairs = (line.split(" ", 1) for line in lines if " " in line)
    return {name: answer for name, answer in pairs}


def read_obligation(evidence: str, name: str) -> bytes | None:
    if not NAME.match(name):
        return None
    try:
        with open(os.path.join(evidence, f"{name}.smt2"), "rb") as handle:
            return handle.read()
    except OSError:
        return None


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
    names = list(request["claim"]["obligations"])
    z3 = read_z3(paths["evidence"])
    decided = answers(spec_bytes, names)
    obligations = []
    for name in names:
        answer, reason = decided[name]
        given = read_obligation(paths["evidence"], name)
        try:
            expected = obligation_text(spec_bytes.decode("utf-8"), name).encode("utf-8")
        except UnicodeDecodeError:
            expected = None
        if expected is not None and given != expected:
            result = "rejected"
            print(f"cvc5: {name}: obligation text does not match the specification")
        else:
            print(f"cvc5: {name}: {answer} (z3 said {z3.get(name, 'nothing')}): {reason}")
            if answer == "unsat" and z3.get(name) == "unsat":
                result = "accepted"
            elif answer == "sat":
                result = "rejected"
            else:
                result = "unknown"
        obligations.append(
            {"name": name, "result": result, "evidence": [f"{name}.smt2", "z3-answers.txt"]}
        )
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
        json.dump(receipt, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
