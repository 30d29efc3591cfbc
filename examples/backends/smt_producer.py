"""SMT producer (z3): one SMT-LIB obligation per approved obligation, and z3's answers.

Usage: python smt_producer.py --z3 /abs/path/to/z3 REQUEST.json

The specification (an SMT-LIB prelude) defines one Boolean constant per
obligation name. For each obligation the producer writes
``evidence/<name>.smt2`` = specification + ``(assert (not <name>))`` +
``(check-sat)`` and runs the pinned z3 binary on it; ``unsat`` means the
claim holds for every value of the free constants. Answers go to
``evidence/z3-answers.txt`` as ``<name> <answer>`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def obligation_text(specification: str, name: str) -> str:
    """The obligation file for ``name``: the checker rebuilds exactly these bytes."""
    return f"{specification.rstrip()}\n(assert (not {name}))\n(check-sat)\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--z3", required=True)
    parser.add_argument("request")
    args = parser.parse_args()
    with open(args.request, encoding="utf-8") as handle:
        request = json.load(handle)
    paths = request["paths"]
    spec_path = os.path.join(paths["snapshot"], request["claim"]["specification"])
    with open(spec_path, encoding="utf-8") as handle:
        specification = handle.read()
    answers = []
    for name in request["claim"]["obligations"]:
        target = os.path.join(paths["evidence"], f"{name}.smt2")
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(obligation_text(specification, name))
        done = subprocess.run(
            [args.z3, "-smt2", target], capture_output=True, text=True, timeout=120, check=False
        )
        answer = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "error"
        answers.append(f"{name} {answer}\n")
        print(f"z3: {name}: {answer}")
    with open(os.path.join(paths["evidence"], "z3-answers.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
