"""The main job's public entry point (issue 36, deliverable 6; ADR 0023).

``kernel.job.MainJob`` is what ``kernel run`` runs: the guide's resume block
runs here as a user would run it (its own process, its own directory), and
what it leaves is checked with the command line's own tools, independently
of the job: ``kernel audit`` on the directory, and the outcome bytes against
an uninterrupted ``kernel run`` of the same bundle. The static tests keep
the protocol in one home: no module imports another package's private
module, and ``kernel/commands/run.py`` holds none of the work directory's
protocol.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kernel.job import JobRefused, JobSettings, MainJob, RefusalKind
from kernel.orchestrate import ExecutorKind, ExecutorSpec

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GUIDE = ROOT / "docs" / "integrating.md"
E2E = ROOT / "examples" / "e2e" / "bundle.json"


def _resume_block() -> str:
    blocks = re.findall(r"^```python resume\n(.*?)^```$", GUIDE.read_text(encoding="utf-8"),
                        re.M | re.S)
    assert len(blocks) == 1, "docs/integrating.md shows resume from Python once"
    return str(blocks[0])


def test_the_guides_resume_block_runs_and_leaves_what_kernel_run_leaves(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    script = tmp_path / "resume.py"
    script.write_text(_resume_block(), encoding="utf-8")
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, check=False)
    assert ran.returncode == 0, ran.stderr
    printed = ran.stdout.splitlines()
    assert [line.split()[0] for line in printed[:3]] == ["0", "1", "2"]
    marker = json.loads(printed[3])
    assert marker == {"signal": "SIGINT", "outcomes_recorded": 3}
    assert printed[-1] == "work_dir_not_empty"
    work = tmp_path / "runs" / "1"
    assert not (work / "INTERRUPTED").exists()  # the resumed job completed
    audit = subprocess.run([str(BIN / "kernel"), "audit", str(work)], capture_output=True,
                           text=True, timeout=600, check=False)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    whole = subprocess.run(
        [str(BIN / "kernel"), "run", str(E2E), "--work-dir", str(tmp_path / "whole"),
         "-q", "-o", str(tmp_path / "whole.jsonl")],
        capture_output=True, text=True, timeout=600, check=False)
    assert whole.returncode == 3, whole.stderr  # the example holds a tampered attempt
    assert (work / "outcomes.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()


@pytest.mark.parametrize(("settings", "code"), [
    (lambda w: JobSettings(work_dir=w, deadline=float("inf")), "invalid_deadline"),
    (lambda w: JobSettings(work_dir=w, deadline=0.0), "invalid_deadline"),
    (lambda w: JobSettings(work_dir=w, shard_size=0), "invalid_shard_size"),
    (lambda w: JobSettings(work_dir=w, recheck_returned=True), "option_conflict"),
    (lambda w: JobSettings(work_dir=w, executor=ExecutorSpec(ExecutorKind.PROCESS)),
     "invalid_worker_count"),
])
def test_bad_settings_are_refused_before_anything_is_read_or_written(
    tmp_path: Path, settings: Callable[[Path], JobSettings], code: str
) -> None:
    work = tmp_path / "w"
    job = MainJob(tmp_path / "absent.json", settings(work))
    with pytest.raises(JobRefused) as refused, job:
        pass
    assert (refused.value.code, refused.value.kind) == (code, RefusalKind.INPUT)
    assert not work.exists()


def test_a_tampered_recorded_line_is_an_integrity_refusal_and_nothing_is_touched(
    tmp_path: Path
) -> None:
    work = tmp_path / "w"
    ran = subprocess.run([str(BIN / "kernel"), "run", str(E2E), "--work-dir", str(work), "-q"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert ran.returncode == 3, ran.stderr  # the example holds a tampered attempt
    log = work / "outcomes.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["outcome"]["explanation"] = "forged"
    log.write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*")}
    with pytest.raises(JobRefused) as refused, MainJob(
            E2E, JobSettings(work_dir=work, resume=True)):
        pass
    assert (refused.value.code, refused.value.kind) == ("resume_log_tampered",
                                                        RefusalKind.INTEGRITY)
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*")} == before


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


# The command-line app (kernel/cli.py) is the shell of kernel.commands: one component.
_SAME_COMPONENT = {"cli": "commands"}


def test_no_kernel_module_imports_a_private_module_of_another_package() -> None:
    offenders = []
    for path in sorted((ROOT / "kernel").rglob("*.py")):
        package = path.relative_to(ROOT).parts[1].removesuffix(".py")
        package = _SAME_COMPONENT.get(package, package)
        for module in _imports(path):
            parts = module.split(".")
            if (parts[0] == "kernel" and len(parts) > 2 and parts[1] != package
                    and any(part.startswith("_") for part in parts[2:])):
                offenders.append(f"{path.relative_to(ROOT)}: {module}")
    assert offenders == []


def test_the_run_command_holds_none_of_the_work_directorys_protocol() -> None:
    protocol = {"check_fresh_work_dir", "clear_unrecorded", "create_work_dir", "holds_nothing",
                "keep_bundle", "mark_interrupted", "recorded_count", "recorded_outcomes",
                "run_state", "still_as_left", "ExternalCertifier", "open_executor",
                "replay_shards", "replay_requests", "StoredCertifications"}
    tree = ast.parse((ROOT / "kernel" / "commands" / "run.py").read_text(encoding="utf-8"))
    named = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert named & protocol == set()
    assert "MainJob" in named


def test_kernel_job_needs_no_command_line() -> None:
    code = ("import sys, kernel.job; kernel.job.MainJob; "
            "print(sorted(m for m in sys.modules if m.startswith(('kernel.commands', 'typer'))))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert ran.stdout.strip() == "[]"
