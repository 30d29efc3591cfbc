"""The tests' toolkit itself (tests/support/, ADR 0016): it must be able to fail.

The reference hasher stays independent of the package (ADR-0229 §17) and is
the only canonical-JSON writer in the suite; the process scanner finds a
process a test left behind, by what it names, by ancestry and by census,
and does not count a zombie as alive.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import reference
from tests.support.processes import (
    assert_no_leftover,
    assert_no_new_descendants,
    assert_process_gone,
    census,
    descendants,
    new_processes,
    processes_mentioning,
    stat,
)

pytestmark = pytest.mark.usefixtures("no_leftovers")

TESTS = Path(__file__).resolve().parent
REFERENCE = TESTS / "support" / "reference.py"


# --- the reference hasher ------------------------------------------------------------------


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def test_the_reference_hasher_needs_only_the_standard_library() -> None:
    # kernel.frames and kernel.upstream name the record types it reads fields
    # from; nothing of the package computes a byte of what it hashes.
    tree = ast.parse(REFERENCE.read_text(encoding="utf-8"))
    assert _imports(tree) <= {
        "__future__", "hashlib", "json", "pathlib", "typing", "kernel.frames", "kernel.upstream",
    }  # fmt: skip
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not called & {"payload", "canonical_json", "digest"}, called


def test_canonical_is_the_documented_encoding() -> None:
    # ADR 0001: sorted keys, no spaces, UTF-8 (not \\u escapes), tuples as arrays.
    value = {"b": (1, True, None), "a": "é", "c": {"z": "", "y": -2}}
    assert reference.canonical(value) == '{"a":"é","b":[1,true,null],"c":{"y":-2,"z":""}}'.encode()
    assert reference.sha({}) == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def _writes_canonical_json(node: ast.AST) -> bool:
    """A ``json.dumps`` call with the ADR's settings: a hasher of its own."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "dumps"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "json"
    ):
        return False
    keywords = {k.arg: k.value for k in node.keywords}
    ascii_off = isinstance(keywords.get("ensure_ascii"), ast.Constant) and (
        getattr(keywords["ensure_ascii"], "value", True) is False
    )
    return ascii_off and "sort_keys" in keywords


def test_no_other_test_module_writes_canonical_json() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{getattr(node, 'lineno', 0)}"
        for path in sorted(TESTS.rglob("*.py"))
        if path != REFERENCE
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _writes_canonical_json(node)
    ]
    assert offenders == [], "use tests.support.reference.canonical/sha"


def test_the_copy_detector_sees_a_copy() -> None:
    copy = 'import json\njson.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))'
    assert any(_writes_canonical_json(node) for node in ast.walk(ast.parse(copy)))
    assert not any(
        _writes_canonical_json(node) for node in ast.walk(ast.parse("json.dumps(v, indent=1)"))
    )


# --- the process scanner -------------------------------------------------------------------


def _sleeper(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A process that names the test's directory, as every step a test starts does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])


def test_a_live_process_naming_the_test_is_found_every_way(tmp_path: Path) -> None:
    before_census, before_tree = census(), descendants()
    sleeper = _sleeper(tmp_path)
    try:
        assert processes_mentioning(str(tmp_path)) == [sleeper.pid]
        assert sleeper.pid in descendants() - before_tree
        assert new_processes(before_census, str(tmp_path)) == [sleeper.pid]
        with pytest.raises(AssertionError, match="processes left behind"):
            assert_no_leftover(tmp_path, within=0.2)
        with pytest.raises(AssertionError, match="processes left behind"):
            assert_no_new_descendants(before_tree, within=0.2)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert_process_gone(sleeper.pid)
    assert processes_mentioning(str(tmp_path)) == []
    assert new_processes(before_census, str(tmp_path)) == []
    assert_no_leftover(tmp_path, within=0.2)
    assert_no_new_descendants(before_tree, within=0.2)


def test_a_zombie_is_not_alive(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass", str(tmp_path)])
    try:
        deadline = time.monotonic() + 30
        while (info := stat(child.pid)) is not None and info.alive:
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.02)
        assert info is not None and info.state == "Z"  # exited, not yet reaped
        assert child.pid not in descendants()
        assert processes_mentioning(str(tmp_path)) == []
        assert_process_gone(child.pid, within=0.2)
    finally:
        child.wait()
    assert stat(child.pid) is None
