"""Certification producer (z3): hand over the obligation and z3's answer.

Usage: python smt_certify_producer.py --z3 /abs/path/to/z3 REQUEST.json

Run by the certifier (``ExternalCertifier``, kernel/orchestrate/_certifier.py)
under the external verifier
protocol (seed 003, ADR-0004): the request names the frozen snapshot, the
claim and the evidence directory. The specification is a complete SMT-LIB 2
script (``kernel.organs.certification_problem``) whose answer is ``unsat``
iff every answer target has exactly one value. For each approved obligation
the producer writes ``evidence/<name>.smt2`` = the specification, byte for
byte, runs the pinned z3 binary on it, and records ``<name> <answer>`` lines in
``evidence/z3-answer.txt``. It decides nothing: the checker re-decides.

Standard library only; exit status 0 unless the request cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

Z3_SECONDS = 60


def z3_answer(z3: str, path: str) -> str:
    """z3's last output line for ``path`` (``sat``/``unsat``/``unknown``), or ``error``."""
    try:
        done = subprocess.run(
            [z3, "-smt2", path],
            capture_output=True,
            text=True,
            timeout=Z3_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"z3: {type(exc).__name__}: {exc}", file=sys.stderr)
        return "error"
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if lines else "error"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--z3", required=True)
    parser.add_argument("request")
    args = parser.parse_args()
    with open(args.request, encoding="utf-8") as handle:
        request = json.load(handle)
    paths = request["paths"]
    spec_path = os.path.join(paths["snapshot"], request["claim"]["specification"])
    with open(spec_path, "rb") as handle:
        specification = handle.read()
    answers = []
    for name in request["claim"]["obligations"]:
        target = os.path.join(paths["evidence"], f"{name}.smt2")
        with open(target, "wb") as handle:
            handle.write(specification)
        answer = z3_answer(args.z3, target)
        answers.append(f"{name} {answer}\n")
        print(f"z3: {name}: {answer}")
    with open(os.path.join(paths["evidence"], "z3-answer.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
