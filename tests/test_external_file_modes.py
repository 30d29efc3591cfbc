"""Run-store files take the user's umask (issue 11: files are written with the
user's umask unless they hold secrets; a run directory holds evidence only)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

WRITER = """
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from kernel.external._files import write_atomic, write_json_new, write_new
write_atomic(Path(sys.argv[1]) / "plain.bin", b"evidence")
write_atomic(Path(sys.argv[1]) / "durable.bin", b"metadata", durable=True)
write_json_new(Path(sys.argv[1]) / "record.json", {"k": 1})
write_new(Path(sys.argv[1]) / "log.txt", b"log")
"""


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_run_store_files_take_the_users_umask(tmp_path: Path, umask: int, mode: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), oct(umask)[2:]],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    written = sorted(tmp_path.iterdir())
    assert [p.name for p in written] == ["durable.bin", "log.txt", "plain.bin", "record.json"]
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {mode}
