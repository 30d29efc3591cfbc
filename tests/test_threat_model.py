"""THREAT_MODEL.md names, for every guarantee, the test that covers it.

A row whose test was renamed or deleted would be a guarantee nobody checks any
more, so every ``tests/file.py::name`` (and every ``::name`` continuing the
previous file) cited there must be a test function defined in that file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)`")


def _cited() -> list[tuple[str, str]]:
    text = (ROOT / "THREAT_MODEL.md").read_text(encoding="utf-8")
    cited: list[tuple[str, str]] = []
    for line in text.splitlines():
        current: str | None = None
        for match in CITATION.finditer(line):
            path, name = match.group(1), match.group(2)
            current = path or current
            assert current is not None, f"a citation without a file: {line}"
            cited.append((current, name))
    return cited


def _test_functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def test_every_guarantee_cites_at_least_one_test() -> None:
    text = (ROOT / "THREAT_MODEL.md").read_text(encoding="utf-8")
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| guarantee") and "---" not in line
    ]
    guarantee_rows = [row for row in rows if row.count("|") >= 4 and "attacker" not in row]
    missing = [row for row in guarantee_rows if "tests/" not in row and "::" not in row]
    # The attackers table has no tests by design; every guarantee row has one.
    assert [row for row in missing if not row.startswith("| malicious")
            and not row.startswith("| compromised") and not row.startswith("| tampered")
            and not row.startswith("| hostile") and not row.startswith("| a pipeline")] == []


def test_every_cited_test_exists() -> None:
    cited = _cited()
    assert len(cited) >= 40, "the threat model cites too few tests to be the map it claims"
    absent = [
        f"{path}::{name}" for path, name in cited if name not in _test_functions(path)
    ]
    assert absent == []
