"""Another install of this kernel with the same bytes: a fresh venv, its own paths (ADR 0019).

``wheel_venv`` builds the wheel from a copy of the source, installs it
``--no-deps`` in a fresh venv, hard-links z3 next to the new interpreter and
cvc5 with its bundled libraries into the new site-packages, and makes the
third-party dependencies importable through a ``.pth`` line naming this
checkout's site-packages. Its interpreter, both scripts, z3 and every cvc5
file are pinned at other paths with the same bytes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.orchestrate_helpers import ROOT

__all__ = ["checked", "plain_environment", "wheel_venv"]


def checked(*argv: str | Path, cwd: Path) -> str:
    """Run from ``cwd``, never the checkout (``python -c`` puts the working directory first)."""
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=300, check=False,
        cwd=cwd, env=plain_environment(),
    )  # fmt: skip
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def plain_environment() -> dict[str, str]:
    """This environment without what would point an interpreter at the checkout."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}  # fmt: skip


def link_tree(source: Path, target: Path) -> None:
    """``target`` holds ``source``'s files under new names (hard links; copies across devices)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if source.is_dir():
        shutil.copytree(source, target, copy_function=link,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    else:
        link(str(source), str(target))


def wheel_venv(tmp: Path) -> Path:
    """A fresh venv with the wheel of this source installed (``--no-deps``); its bin/."""
    source = tmp / "source"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name if source.is_dir() else mkdir(source) / name)
    shutil.copytree(
        ROOT / "kernel", source / "kernel", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "bin", source / "bin")  # the `kernel` launcher (script-files)
    checked(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", source,
             cwd=tmp)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("failclosed_replay-*.whl")
    venv = tmp / "elsewhere" / "venv"
    checked(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    checked(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
             "--no-index", "-q", wheel, cwd=tmp)  # fmt: skip
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(checked(python, "-c", purelib, cwd=tmp).strip())
    ours = Path(sysconfig.get_path("purelib"))
    # The certify tools at this venv's paths, same bytes (discover_tools looks for
    # z3 next to the interpreter and imports cvc5 from the interpreter's path).
    link_tree(Path(sys.executable).parent / "z3", venv / "bin" / "z3")
    for name in ("cvc5", "cvc5.libs"):
        if (ours / name).exists():
            link_tree(ours / name, site / name)
    # Everything else the kernel imports, from the checkout's site-packages, after its own.
    (site / "zz-checkout-dependencies.pth").write_text(f"{ours}\n")
    return venv / "bin"


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
