"""Benchmark producer: hand over the obligation after a fixed amount of hashing work.

Usage: python producer.py --work N REQUEST.json

A stand-in for z3 in ``make bench-parallel`` (bench/_parallel.py): it writes
``evidence/<obligation>.smt2`` = the specification and ``z3-answer.txt`` with
``unsat``, after hashing 64 KiB N times (a fixed amount of CPU, so a check
costs about the same wherever it runs). It decides nothing about the problem.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys


def work(rounds: int) -> str:
    block = b"\x5a" * 65536
    state = hashlib.sha256()
    for _ in range(rounds):
        state.update(block)
    return state.hexdigest()


def main() -> int:
    rounds, request_path = int(sys.argv[2]), sys.argv[3]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    paths = request["paths"]
    with open(os.path.join(paths["snapshot"], request["claim"]["specification"]), "rb") as handle:
        specification = handle.read()
    work(rounds)
    answers = []
    for name in request["claim"]["obligations"]:
        with open(os.path.join(paths["evidence"], f"{name}.smt2"), "wb") as handle:
            handle.write(specification)
        answers.append(f"{name} unsat\n")
    with open(os.path.join(paths["evidence"], "z3-answer.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
