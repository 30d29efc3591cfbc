"""The import graph keeps the documented layers (ARCHITECTURE.md "Layers").

``pyproject.toml`` states the layers as an import-linter contract (command
line, orchestrator, external protocol, organs, verification, replay,
upstream records, frames, values/serde, identity); ``lint-imports`` checks
every import of ``kernel``, direct or through other modules, against it. The
contract must be able to fail: a copy of the package with one upward import
planted in it breaks it, and so does a new top-level module given no layer.

What the other layering tests hold and this one does not repeat:
``tests/test_purity.py`` (no impure standard-library import or call in the
pure core), ``tests/test_orchestrate_driver.py`` (the orchestrator's own
narrower allowlist).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the ``kernel`` package found under ``project``."""
    environment = {**os.environ, "PYTHONPATH": str(project), "NO_COLOR": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(project / "pyproject.toml")],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The package and its contract, copied where a test may plant imports."""
    shutil.copytree(
        ROOT / "kernel", tmp_path / "kernel", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_keeps_the_documented_layers() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_an_unchanged_copy_keeps_the_layers(project_copy: Path) -> None:
    # The control for the planted imports below: only the plant differs.
    done = lint_imports(project_copy)
    assert done.returncode == 0, done.stdout + done.stderr


# (module that gets the import, the upward import planted at its end)
UPWARD_IMPORTS = [
    # pure imports impure: the replay core reaching the orchestrator
    ("replay/_records.py", "kernel.orchestrate"),
    # pure imports a pure layer above it: replay reaching the verification adapter
    ("replay/__init__.py", "kernel.verification"),
    # the bottom reaching up: canonical JSON importing frames
    ("identity.py", "kernel.frames"),
    # impure imports impure above it: the external protocol reaching the CLI
    ("external/_process.py", "kernel.commands"),
    # two siblings declared independent
    ("serde.py", "kernel._values"),
]


@pytest.mark.parametrize(("module", "target"), UPWARD_IMPORTS, ids=lambda v: str(v))
def test_a_planted_upward_import_breaks_the_contract(
    project_copy: Path, module: str, target: str
) -> None:
    path = project_copy / "kernel" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\nimport {target}  # planted\n")
    done = lint_imports(project_copy)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout and "0 kept, 1 broken" in done.stdout
    importer = "kernel." + module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert f"{importer} -> {target}" in done.stdout, done.stdout


def test_a_module_with_no_layer_breaks_the_contract(project_copy: Path) -> None:
    # exhaustive: a new top-level module must be given its place in the layers.
    (project_copy / "kernel" / "shortcuts.py").write_text('"""Nobody placed me."""\n')
    done = lint_imports(project_copy)
    assert done.returncode != 0, done.stdout
    assert "kernel.shortcuts" in done.stdout, done.stdout
