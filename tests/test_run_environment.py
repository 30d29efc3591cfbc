"""``kernel run`` on a machine that cannot give the sandbox (issue 35, finding 5).

Without bubblewrap every certification used to end BLOCKED
``containment_unavailable`` one by one, then exit 1, with no hint. Now the
command refuses before the first attempt, names what to install, and leaves
no work directory. The machine without bubblewrap is this one, seen from a
private mount namespace in which ``/usr/bin/bwrap`` is ``/dev/null`` (not
executable): the real command line, nothing mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import KERNEL_MAIN

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"


def _without_bubblewrap(argv: list[str]) -> list[str]:
    hidden = [p for p in ("/usr/bin/bwrap", "/bin/bwrap") if os.path.exists(p)]
    mounts = [arg for path in hidden for arg in ("--ro-bind", "/dev/null", path)]
    return ["/usr/bin/bwrap", "--dev-bind", "/", "/", *mounts, "--", *argv]


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of root's hides the tool")
def test_run_without_bubblewrap_is_refused_before_anything_runs_with_the_install_hint(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        _without_bubblewrap([sys.executable, "-c", KERNEL_MAIN, "run", str(BUNDLE),
                             "--work-dir", str(work), "-o", str(out)]),
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 4, done.stderr  # the environment's failure (adr/0013)
    assert done.stderr.startswith("error: sandbox_unavailable: "), done.stderr
    assert "apt-get install bubblewrap" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not work.exists() and not out.exists()
