"""ADR-0229 §13, §15, §17: ids ignore the world; nothing beyond replay is reachable."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import kernel.replay as api

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "kernel" / "replay"
BUNDLE = ROOT / "examples" / "replay" / "bundle.json"


def _replay_in_subprocess(tmp: Path, env: dict[str, str]) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "kernel.cli", "replay", str(BUNDLE), "--quiet",
         "--format", "jsonl"],
        cwd=tmp, env=env, capture_output=True, check=False,
    )
    assert done.returncode == 3, done.stderr  # the example's tampered attempt (integrity)
    return done.stdout


def test_outcome_bytes_do_not_depend_on_time_environment_path_host_or_process(
    tmp_path: Path,
) -> None:
    base = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    base["PYTHONPATH"] = str(ROOT)
    a_dir, b_dir = tmp_path / "a", tmp_path / "elsewhere" / "b"
    a_dir.mkdir()
    b_dir.mkdir(parents=True)
    first = _replay_in_subprocess(a_dir, {**base, "TZ": "UTC", "PYTHONHASHSEED": "1",
                                          "HOSTNAME": "alpha"})
    second = _replay_in_subprocess(b_dir, {**base, "TZ": "Asia/Kolkata",
                                           "PYTHONHASHSEED": "987", "HOSTNAME": "beta",
                                           "REPLAY_NOISE": "x" * 100})
    assert first == second
    assert len(first.splitlines()) == 8
    for noise in (str(a_dir).encode(), str(b_dir).encode(), b"alpha", b"beta"):
        assert noise not in first


FORBIDDEN_WORDS = ("generate", "search_exec", "execute_operator", "repair", "serve", "promote",
                   "select", "rank", "answer", "mutate", "teach", "workbench", "seal_trace")


def test_no_generation_search_repair_serving_or_mutation_is_reachable() -> None:
    public = [name.lower() for name in api.__all__]
    assert not [n for n in public for w in FORBIDDEN_WORDS if w in n]
    for path in sorted(REPLAY.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [node.name.lower() for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef | ast.ClassDef)]
        assert not [n for n in defined for w in FORBIDDEN_WORDS if w in n], path


def test_the_replay_package_imports_only_the_pure_core() -> None:
    # Transitively: every kernel module kernel.replay imports is pure, and
    # kernel.replay never imports the organs, verification or the shell.
    seen: set[str] = set()
    stack = ["kernel.replay"]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                    "kernel"):
                stack.append(node.module)
            elif isinstance(node, ast.Import):
                stack += [a.name for a in node.names if a.name.startswith("kernel")]
    assert seen <= {
        "kernel.replay", "kernel.replay._authority", "kernel.replay._machine",
        "kernel.replay._records", "kernel.replay._inputs", "kernel.replay._guards",
        "kernel.replay._facts", "kernel.replay._reasons", "kernel.replay._outputs",
        "kernel.frames", "kernel.upstream",
        "kernel.identity", "kernel._values",
        # pure too: replay_bundle_document parses the records it then trusts (ADR 0011)
        "kernel.serde",
    }, seen
