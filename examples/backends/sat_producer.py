"""SAT producer (python-sat's CaDiCaL): a DRAT proof that the CNF is unsatisfiable.

Usage: python sat_producer.py REQUEST.json

Reads the DIMACS specification from the snapshot, solves it with CaDiCaL
1.9.5 (``with_proof=True``) and writes ``evidence/proof.drat`` (the DRAT lines
CaDiCaL emitted, ending with the empty clause) and ``evidence/answer.txt``
(``s UNSATISFIABLE`` or ``s SATISFIABLE``; on SAT the proof file is empty).
"""

from __future__ import annotations

import json
import os
import sys

from pysat.formula import CNF
from pysat.solvers import Solver


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    paths = request["paths"]
    formula = CNF(from_file=os.path.join(paths["snapshot"], request["claim"]["specification"]))
    with Solver(name="cadical195", bootstrap_with=formula.clauses, with_proof=True) as solver:
        satisfiable = solver.solve()
        proof = [] if satisfiable else solver.get_proof()
    with open(os.path.join(paths["evidence"], "proof.drat"), "w", encoding="ascii") as handle:
        handle.writelines(f"{line}\n" for line in proof)
    answer = "s SATISFIABLE" if satisfiable else "s UNSATISFIABLE"
    with open(os.path.join(paths["evidence"], "answer.txt"), "w", encoding="ascii") as handle:
        handle.write(answer + "\n")
    print(f"cadical195: {answer}, {len(proof)} DRAT lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
