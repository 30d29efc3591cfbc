"""Certification checker (cvc5 Python API): independently re-decide the obligation.

Usage: python smt_certify_checker.py REQUEST.json RECEIPT.json

Run by ``kernel.orchestrate.ExternalCertifier`` under the external verifier
protocol (seed 003, ADR-0004). For each approved obligation, in manifest order:

1. the frozen specification must hash to the request's
   ``specification_digest``, and ``evidence/<name>.smt2`` must be byte-identical
   to it (a producer cannot hand over a weaker problem);
2. cvc5 parses that text with its own SMT-LIB parser and runs its commands;
3. ``unsat`` from cvc5 and ``unsat`` recorded by z3 -> accepted; ``sat`` from
   cvc5 -> rejected; anything else (including a disagreement with z3) ->
   unknown.

The receipt binds every field the kernel validates (job, run, check id, check
digest, specification digest, identity, evidence digest) to the request; the
kernel, not this script, decides whether it counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import cvc5


def cvc5_answer(text: str, name: str) -> str:
    """cvc5's last non-empty command output for ``text``, or ``error``."""
    solver = cvc5.Solver()
    symbols = cvc5.SymbolManager(solver)
    parser = cvc5.InputParser(solver, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, name)
    outputs: list[str] = []
    try:
        while True:
            command = parser.nextCommand()
            if command.isNull():
                break
            outputs.append(str(command.invoke(solver, symbols)).strip())
    except RuntimeError as exc:
        print(f"cvc5: {name}: {exc}", file=sys.stderr)
        return "error"
    answers = [line for line in outputs if line]
    return answers[-1] if answers else "error"


def z3_answers(evidence: str) -> dict[str, str]:
    with open(os.path.join(evidence, "z3-answer.txt"), encoding="utf-8") as handle:
        pairs = (line.split(" ", 1) for line in handle.read().splitlines() if " " in line)
        return {name: answer for name, answer in pairs}


def decide(request: dict[str, object]) -> list[dict[str, object]]:
    """One receipt obligation entry per approved obligation, in manifest order."""
    paths = request["paths"]
    claim = request["claim"]
    assert isinstance(paths, dict) and isinstance(claim, dict)
    with open(os.path.join(paths["snapshot"], claim["specification"]), "rb") as handle:
        specification = handle.read()
    if hashlib.sha256(specification).hexdigest() != request["specification_digest"]:
        raise SystemExit("specification in the snapshot does not match the request")
    z3 = z3_answers(paths["evidence"])
    obligations: list[dict[str, object]] = []
    for name in claim["obligations"]:
        with open(os.path.join(paths["evidence"], f"{name}.smt2"), "rb") as handle:
            given = handle.read()
        if given != specification:
            result = "rejected"
            print(f"cvc5: {name}: the obligation is not the specification")
        else:
            answer = cvc5_answer(given.decode("utf-8"), name)
            print(f"cvc5: {name}: {answer} (z3 said {z3.get(name, 'nothing')})")
            if answer == "unsat" and z3.get(name) == "unsat":
                result = "accepted"
            elif answer == "sat":
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
        json.dump(receipt, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
