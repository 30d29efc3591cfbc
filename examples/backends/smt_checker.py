"""SMT checker (cvc5 Python API): independently re-decides every obligation.

Usage: python smt_checker.py REQUEST.json RECEIPT.json

For each approved obligation, in manifest order:

1. rebuild the expected obligation text from the frozen specification in the
   snapshot; the evidence file must be byte-identical (a producer cannot
   weaken the claim it hands over);
2. parse that text with cvc5's own SMT-LIB parser and run its commands;
3. ``unsat`` from cvc5 and ``unsat`` recorded by z3 -> accepted; ``sat`` ->
   rejected; anything else (including a disagreement with z3) -> unknown.

The receipt binds every field the kernel checks (job, run, check digest,
specification digest, identity, evidence digest) to the request.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import cvc5


def obligation_text(specification: str, name: str) -> str:
    """Rebuilt independently of the producer (same documented rule)."""
    return f"{specification.rstrip()}\n(assert (not {name}))\n(check-sat)\n"


def cvc5_answer(text: str, name: str) -> str:
    solver = cvc5.Solver()
    symbols = cvc5.SymbolManager(solver)
    parser = cvc5.InputParser(solver, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, name)
    outputs = []
    while True:
        command = parser.nextCommand()
        if command.isNull():
            break
        outputs.append(command.invoke(solver, symbols).strip())
    answers = [line for line in outputs if line]
    return answers[-1] if answers else "error"


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
    specification = spec_bytes.decode("utf-8")
    with open(os.path.join(paths["evidence"], "z3-answers.txt"), encoding="utf-8") as handle:
        z3 = dict(line.split(" ", 1) for line in handle.read().splitlines() if " " in line)
    obligations = []
    for name in request["claim"]["obligations"]:
        with open(os.path.join(paths["evidence"], f"{name}.smt2"), encoding="utf-8") as handle:
            given = handle.read()
        if given != obligation_text(specification, name):
            result = "rejected"
            print(f"cvc5: {name}: obligation text does not match the specification")
        else:
            answer = cvc5_answer(given, name)
            print(f"cvc5: {name}: {answer} (z3 said {z3.get(name, 'nothing')})")
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
    if all(r == "accepted" for r in results):
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
