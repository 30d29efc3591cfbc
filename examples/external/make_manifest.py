"""Write the example external manifest, pinned to the files on this machine.

Usage: python examples/external/make_manifest.py OUT_DIR

Run it with the interpreter that will run the backends (the project venv's
``python``, where z3-solver, cvc5 and python-sat are installed). It writes
``OUT_DIR/manifest.json`` whose executables and pins are absolute paths with
SHA-256 hashes computed here, which is why the manifest itself is generated
rather than committed. Its specification paths are relative to this folder
(``examples/external``): pass ``--repo examples/external`` to ``kernel check``.

Pins per command (seed 003 "Command identity"; nothing transitive is inferred,
so everything a command reads as code is listed):

- executable: this interpreter (``sys.executable``);
- dependencies: the backend script;
- trusted_tool_dependencies: libpython, plus the solver each backend loads
  (the z3 binary; cvc5's extension module and bundled libraries; python-sat's
  Python modules and extension modules). The SAT checker uses only the
  standard library and its own DRAT checker.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
BACKENDS = HERE.parent / "backends"


def pin(path: Path) -> dict[str, str]:
    absolute = Path(path).absolute()
    return {"path": str(absolute), "sha256": hashlib.sha256(absolute.read_bytes()).hexdigest()}


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name!r} is not installed for {sys.executable}")
    return Path(next(iter(spec.submodule_search_locations)))


def libpython() -> list[Path]:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    candidate = Path(sysconfig.get_config_var("LIBDIR") or "") / name
    return [candidate] if name and candidate.is_file() else []


def z3_tools() -> list[Path]:
    binary = Path(sys.executable).parent / "z3"
    if not binary.is_file():
        raise SystemExit(f"no z3 binary next to {sys.executable} (pip install z3-solver)")
    return [binary]


def cvc5_tools() -> list[Path]:
    package = package_dir("cvc5")
    files = [package / "__init__.py", *sorted(package.glob("*.so"))]
    libs = package.parent / "cvc5.libs"
    return files + (sorted(libs.glob("*.so*")) if libs.is_dir() else [])


def pysat_tools() -> list[Path]:
    package = package_dir("pysat")
    site = package.parent
    extensions = [
        p for name in ("pysolvers", "pycard", "pyformula") for p in site.glob(f"{name}*.so")
    ]
    return sorted(package.glob("*.py")) + sorted(extensions)


def command(script: str, extra: list[str], tools: list[Path]) -> dict[str, object]:
    script_path = BACKENDS / script
    return {
        "argv": ["{{python}}", str(script_path), *extra],
        "executable": pin(Path(sys.executable)),
        "dependencies": [pin(script_path)],
        "trusted_tool_dependencies": [pin(p) for p in libpython() + tools],
    }


def smt_entry(check_id: str, specification: str, obligations: list[str]) -> dict[str, object]:
    z3 = z3_tools()
    return {
        "check_id": check_id,
        "claim": {
            "specification": specification,
            "obligations": obligations,
            "assumptions": ["x and y are unbounded mathematical integers (SMT-LIB Int)"],
            "model_scope": "QF_LIA; all integer values of the free constants",
        },
        "assurance": "independent-solver-recheck",
        "inputs": [],
        "evidence_artifacts": [f"{name}.smt2" for name in obligations] + ["z3-answers.txt"],
        "producer": command("smt_producer.py", ["--z3", str(z3[0]), "{{request}}"], z3),
        "checker": command("smt_checker.py", ["{{request}}", "{{receipt}}"], cvc5_tools()),
    }


def manifest() -> dict[str, object]:
    return {
        "schema_version": 1,
        "checks": [
            smt_entry("smt-abs", "specs/abs.smt2", ["abs_nonnegative", "abs_triangle"]),
            smt_entry("smt-abs-false", "specs/abs_false.smt2", ["abs_below_100"]),
            {
                "check_id": "sat-php",
                "claim": {
                    "specification": "specs/php_6_5.cnf",
                    "obligations": ["php_6_5_unsat"],
                    "assumptions": ["the DIMACS CNF encodes the pigeonhole principle"],
                    "model_scope": "propositional; 6 pigeons, 5 holes",
                },
                "assurance": "independent-proof-check",
                "inputs": [],
                "evidence_artifacts": ["proof.drat", "answer.txt"],
                "producer": command("sat_producer.py", ["{{request}}"], pysat_tools()),
                "checker": command("sat_checker.py", ["{{request}}", "{{receipt}}"], []),
            },
        ],
    }


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    target = out / "manifest.json"
    target.write_text(json.dumps(manifest(), indent=2) + "\n", encoding="utf-8")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
