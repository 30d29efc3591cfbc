"""Benchmark checker: accept an obligation whose evidence is the specification.

Usage: python checker.py --work N REQUEST.json RECEIPT.json

A stand-in for cvc5 in ``make bench-parallel`` (bench/_parallel.py): after
the same fixed hashing work as the producer, it accepts each obligation whose
``evidence/<name>.smt2`` is the snapshot's specification byte for byte and
whose ``z3-answer.txt`` line says ``unsat``, and writes the receipt the
kernel validates. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def work(rounds: int) -> str:
    block = b"\xa5" * 65536
    state = hashlib.sha256()
    for _ in range(rounds):
        state.update(block)
    return state.hexdigest()


def main() -> int:
    rounds, request_path, receipt_path = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    paths, claim = request["paths"], request["claim"]
    with open(os.path.join(paths["snapshot"], claim["specification"]), "rb") as handle:
        specification = handle.read()
    if hashlib.sha256(specification).hexdigest() != request["specification_digest"]:
        raise SystemExit("specification in the snapshot does not match the request")
    work(rounds)
    try:
        with open(os.path.join(paths["evidence"], "z3-answer.txt"), encoding="utf-8") as handle:
            said = dict(line.split(" ", 1) for line in handle.read().splitlines() if " " in line)
    except OSError:
        said = {}
    obligations = []
    for name in claim["obligations"]:
        try:
            with open(os.path.join(paths["evidence"], f"{name}.smt2"), "rb") as handle:
                given = handle.read()
        except OSError:
            given = None
        ok = given == specification and said.get(name) == "unsat"
        obligations.append(
            {
                "name": name,
                "result": "accepted" if ok else "rejected",
                "evidence": [f"{name}.smt2", "z3-answer.txt"],
            }
        )
    results = [o["result"] for o in obligations]
    verdict = "accepted" if results and all(r == "accepted" for r in results) else "rejected"
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
