"""The sandbox's guarantees with the kernel as an ordinary user (issue 34, deliverable 7).

The suite runs as root here, as CI does. This module runs the attacks of
``tests/test_sandbox_round_two.py``, ``tests/test_sandbox.py``,
``tests/test_sandbox_output.py``, ``tests/test_containment_parts.py`` and
``tests/test_containment_probe.py`` again in a fresh pytest whose every
process, the kernel included, is an ordinary uid
(``tests.support.ordinary_user``): the same real producers, the same
assertions, under the other kind of user. A test there that needs root
(one that plants a secret under ``/root``) adapts itself; the cgroup totals
are skipped there, since these machines delegate no cgroup to an ordinary
user (ADR 0021 says what holds instead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ordinary_user import ORDINARY_UID, as_ordinary_user, ordinary_home

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "module", ["test_sandbox_round_two.py", "test_sandbox.py", "test_sandbox_output.py",
               "test_containment_parts.py", "test_containment_probe.py"])
def test_the_sandbox_attacks_fail_with_the_kernel_as_an_ordinary_user(module: str) -> None:
    home = ordinary_home()
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
               "HYPOTHESIS_STORAGE_DIRECTORY": str(home / "hypothesis")}
        probe = subprocess.run(
            as_ordinary_user([sys.executable, "-c", "import os; print(os.getuid())"]),
            capture_output=True, text=True, env=env, timeout=60, check=False)
        assert probe.stdout.strip() == str(ORDINARY_UID), probe.stderr
        done = subprocess.run(
            as_ordinary_user([
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--basetemp", str(home / "pytest"), "-o", "addopts=", f"tests/{module}",
            ]),
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False)
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
        assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]
        if module == "test_sandbox_output.py":
            # The bounded output needs no delegation: an ordinary user has it too.
            assert " skipped" not in done.stdout, done.stdout[-2000:]
    finally:
        shutil.rmtree(home, ignore_errors=True)
        assert not os.path.exists(home)
