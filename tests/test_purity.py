"""The pure core stays pure (ADR-0229 §15, ARCHITECTURE.md "Layers").

Every module of the pure core is parsed; each import must come from an
allowlist of value-only facilities or another pure kernel module, and no call
may reach a builtin that touches the world. Upstream records must not import
the replay adapter (no reverse dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "kernel"

PURE_PATHS = [
    "identity.py", "serde.py", "frames.py", "upstream.py", "_values.py", "drafts.py",
    "schemas.py", "bundles.py", "replay", "verification", "organs",
]
ALLOWED_MODULES = {
    "__future__", "typing", "typing_extensions", "collections", "collections.abc", "enum",
    "re", "hashlib", "types", "json", "fractions", "itertools", "functools", "operator", "math",
    "attrs", "attr", "cattrs", "cattrs.cols", "cattrs.gen", "cattrs.errors", "cattrs.preconf",
    # orjson: a pure, deterministic serializer (bytes from the value alone; no
    # I/O, clock or randomness). kernel.identity uses it only where
    # tests/test_identity_fast.py proves its bytes equal to json.dumps (ADR-0007).
    "orjson",
    # decimal: exact int <-> text conversion that the interpreter's int/str
    # limit does not reach (kernel.identity.int_text; construction and str()
    # of an integral Decimal ignore the context, so the result is the value's).
    "decimal",
    # contextvars: kernel.identity.validated_payloads scopes the payload path
    # to the calling thread/task (ADR-0007); it holds no value from the world.
    "contextvars",
}
PURE_KERNEL_PREFIXES = (
    "kernel.identity", "kernel.serde", "kernel.frames", "kernel.upstream", "kernel._values",
    "kernel.drafts", "kernel.schemas", "kernel.bundles",
    "kernel.replay", "kernel.verification", "kernel.organs",
)
FORBIDDEN_CALLS = {
    "open", "eval", "exec", "compile", "__import__", "input", "breakpoint", "globals",
    "locals", "vars", "id", "hash",
}
# Modules that must never import the replay adapter (one-way authority).
UPSTREAM_OF_REPLAY = {
    "frames.py", "upstream.py", "identity.py", "serde.py", "_values.py", "drafts.py",
}


def pure_files() -> list[Path]:
    files: list[Path] = []
    for entry in PURE_PATHS:
        path = ROOT / entry
        if path.is_dir():
            files += sorted(path.rglob("*.py"))
        elif path.exists():
            files.append(path)
    return files


def violations(source: str, *, upstream: bool = False) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(f"relative import at line {line}")
                continue
            names = [node.module or ""]
        for name in names:
            if name.startswith("kernel"):
                if name == "kernel" or not name.startswith(PURE_KERNEL_PREFIXES):
                    found.append(f"impure kernel import {name!r} at line {line}")
                if upstream and name.startswith("kernel.replay"):
                    found.append(f"reverse import {name!r} at line {line}")
            elif name not in ALLOWED_MODULES:
                found.append(f"import {name!r} at line {line}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(f"call {node.func.id}() at line {line}")
        if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv", "system"}:
            found.append(f"attribute .{node.attr} at line {line}")
    return found


def test_the_pure_core_is_not_empty() -> None:
    names = {p.name for p in pure_files()}
    assert {"identity.py", "serde.py", "frames.py", "upstream.py"} <= names


@pytest.mark.parametrize("path", pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_and_calls_nothing_impure(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert violations(source, upstream=path.name in UPSTREAM_OF_REPLAY) == []


@pytest.mark.parametrize(
    "snippet",
    [
        "import os",
        "import subprocess",
        "from time import time",
        "import random",
        "import uuid",
        "from datetime import datetime",
        "import importlib",
        "from pathlib import Path",
        "import socket",
        "from kernel.external import run_check",
        "from kernel import cli",
        "from . import sibling",
        "x = open('f')",
        "__import__('os')",
        "import json\nx = json.loads(y).environ",
    ],
)
def test_the_checker_catches_known_impurity(snippet: str) -> None:
    assert violations(snippet) != []


def test_the_checker_catches_a_reverse_import_from_upstream() -> None:
    assert violations("from kernel.replay import validate", upstream=True) != []
    assert violations("from kernel.replay import validate", upstream=False) == []
