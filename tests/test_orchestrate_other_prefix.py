"""Workers under another install prefix certify with the driver's ids (issue 36, deliverable 3).

Two real ``dask worker`` processes run from another venv (``wheel_venv``:
the same bytes at other paths, ADR 0019). Each runs in a mount namespace
of its own, where the work directory's parent and the driver's own ``bin/``
(its interpreter and z3) are empty tmpfs mounts, so the driver's pinned
paths do not exist there. Before, every certification then failed its pins
on the worker, and no attempt closed. Now a worker certifies with its own
install when that holds the driver's bytes (the same content digest). The
outcome bytes are the inline run's, the records that came home pin the
worker's paths, and the driver's work directory audits intact. With
``--recheck-returned`` the driver replays each from its own entry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN
from tests.support.other_install import plain_environment, wheel_venv
from tests.support.separate_workers import can_make_networks, can_unshare, separate_workers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_unshare(), reason="needs root and unshare -m (a mount namespace)"),
]

BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"


def _kernel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, text=True, timeout=600, check=False)


def test_workers_under_another_prefix_certify_with_the_same_ids_and_their_own_pins(
    tmp_path: Path,
) -> None:
    bin_dir = wheel_venv(tmp_path)
    other = str(tmp_path / "elsewhere" / "venv")
    shared = tmp_path / "shared"
    shared.mkdir()
    inline = tmp_path / "inline.jsonl"
    done = _kernel("run", BUNDLE, "--work-dir", tmp_path / "inline-W", "-q", "-o", inline)
    assert done.returncode == 3, done.stderr  # the e2e bundle holds a tampered attempt
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    work, out = shared / "W", tmp_path / "dask.jsonl"
    driver_bin = Path(sys.executable).parent
    with separate_workers(cluster, shared, python=bin_dir / "python",
                          also_hidden=(driver_bin,), env=plain_environment(),
                          network=can_make_networks()) as address:
        done = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                       "--work-dir", work, "-o", out)
        # And re-checked on the driver: its own pinned checker, its own paths.
        rechecked = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                            "--recheck-returned", "--work-dir", shared / "R", "-q",
                            "-o", tmp_path / "rechecked.jsonl")
    assert done.returncode == 3, done.stderr
    assert rechecked.returncode == 3, rechecked.stderr
    assert (tmp_path / "rechecked.jsonl").read_bytes() == inline.read_bytes()
    replays = sorted((shared / "R").glob("*/run/replays/driver-recheck/metadata.json"))
    assert len(replays) == 3
    assert {json.loads(p.read_bytes())["status"] for p in replays} == {"PASS"}
    assert _kernel("audit", shared / "R").returncode == 0
    assert out.read_bytes() == inline.read_bytes(), done.stderr
    manifests = sorted(work.glob("*/manifest.json"))
    assert len(manifests) == 3
    for manifest in manifests:
        (entry,) = json.loads(manifest.read_bytes())["checks"]
        # Pinned where the worker holds the bytes, never at the driver's paths.
        assert entry["producer"]["executable"]["path"].startswith(other), entry["producer"]
        assert entry["checker"]["executable"]["path"].startswith(other), entry["checker"]
    audited = _kernel("audit", work, "--outcomes", out, "--bundle", BUNDLE)
    assert audited.returncode == 0, audited.stdout + audited.stderr
