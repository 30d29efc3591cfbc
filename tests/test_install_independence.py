"""Outcome ids do not depend on where the kernel is installed (ADR-0019).

Two installs of the same package tree in directories of different names
(as two clones of one commit are) certify the shipped e2e bundle with
``kernel run``: their pinned backend scripts have the same bytes at
different absolute paths. The seed 003 records keep those paths (the stored
manifests and check digests differ), yet the outcome files are byte for
byte the same, and each work directory passes ``kernel audit`` against its
own records. Nothing here imports the copies: each runs in a fresh
interpreter whose ``PYTHONPATH`` is its own tree, from a directory that is
neither tree.

A wheel installed in another venv (issue 21, deliverable 4) is the same
promise for an install a user makes: the wheel is built from a copy of the
source (``pip wheel --no-deps``), installed with ``--no-deps`` into a fresh
venv, and run through that venv's own ``kernel`` console script. The
third-party dependencies are made importable with a ``.pth`` line naming
this checkout's site-packages (nothing of the checkout's ``kernel`` is on
that path: it is installed editable, by a finder only a site directory
activates), and the certify tools are hard links (a copy across file
systems) at the new venv's paths: the z3 binary next to its interpreter and
the ``cvc5`` package with its bundled libraries in its site-packages. So the
pinned interpreter, both scripts, z3 and every cvc5 file are other absolute
paths with the same bytes; libpython and the loader closure (libc, libm,
libstdc++, the loader) are the machine's and do not move.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.external import RunMetadata, RunOutcome
from kernel.orchestrate import backend_output, producer_session
from kernel.organs import CertificationEvidence, certification_spec
from kernel.serde import dumps, loads
from kernel.verification import (
    Producer,
    Role,
    VerificationPlan,
    VerificationReceipt,
    plan_verification,
    seal_verification,
)
from tests.orchestrate_helpers import E2E_BUNDLE, ROOT, stored_main_job
from tests.support import reference
from tests.support.cli import KERNEL_MAIN, kernel
from tests.support.other_install import checked, plain_environment, wheel_venv

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/bwrap").is_file(), reason="the certification runs in bwrap (ADR 0018)"
)


def _install(base: Path) -> Path:
    """A copy of the package tree under ``base`` (what a second clone holds)."""
    shutil.copytree(
        ROOT / "kernel", base / "kernel", ignore=shutil.ignore_patterns("__pycache__")
    )
    return base


def _kernel(install: Path, cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(install), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=cwd,
    )  # fmt: skip


def _run(install: Path, tmp: Path, name: str) -> tuple[Path, bytes]:
    work, out = tmp / f"{name}-work", tmp / f"{name}-outcomes.jsonl"
    done = _kernel(install, tmp, "run", E2E_BUNDLE, "--work-dir", work, "--out", out, "--quiet")
    # The bundle holds one tampered attempt on purpose: integrity, exit 3.
    assert done.returncode == 3, done.stderr
    audit = _kernel(install, tmp, "audit", work, "--outcomes", out, "--format", "json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    return work, out.read_bytes()


def _entries(work: Path) -> list[dict[str, object]]:
    manifests = sorted(work.glob("*/manifest.json"))
    assert manifests
    return [json.loads(m.read_bytes())["checks"][0] for m in manifests]


def test_two_installs_at_different_paths_write_identical_outcome_files(tmp_path: Path) -> None:
    first = _install(tmp_path / "clone-a")
    second = _install(tmp_path / "another-checkout-of-the-same-commit")
    work_a, outcomes_a = _run(first, tmp_path, "a")
    work_b, outcomes_b = _run(second, tmp_path, "b")
    certified = [line for line in outcomes_a.splitlines() if b"contract_and_proof_closed" in line]
    assert certified, "the bundle certifies some attempt"
    assert outcomes_a == outcomes_b
    entries_a, entries_b = _entries(work_a), _entries(work_b)
    # Each run pinned its own tree's scripts, by absolute path (seed 003) ...
    for entries, install in ((entries_a, first), (entries_b, second)):
        for entry in entries:
            for side in ("producer", "checker"):
                command = entry[side]
                assert isinstance(command, dict)
                (script,) = command["dependencies"]
                assert script["path"].startswith(f"{install}/kernel/"), script
    # ... so the check digests differ, and the content digests do not.
    def identity(entry: dict[str, object]) -> str:
        return reference.sha({"identity_version": 1, **entry})

    assert {identity(e) for e in entries_a}.isdisjoint(identity(e) for e in entries_b)
    contents = {reference.check_content_digest(e) for e in entries_a + entries_b}
    assert len(contents) == 1
    # Every certification's request names that content digest; the receipts differ.
    for work in (work_a, work_b):
        for record in work.glob("*/certification.json"):
            request = json.loads(record.read_bytes())["request"]
            settings = {s["name"]: s["value"] for s in request["command_configuration"]["settings"]}
            assert settings["check-content-digest"] in contents


def test_the_audit_binds_the_content_digest_to_the_stored_manifest(tmp_path: Path) -> None:
    """A certification resealed with another content digest (every id valid) is found."""
    stored, _ = stored_main_job(tmp_path / "stored")
    work = tmp_path / "forged"
    shutil.copytree(stored, work, symlinks=True)
    attempt = next(p.parent for p in sorted(work.glob("*/certification.json")))
    record = attempt / "certification.json"
    request = loads(record.read_bytes(), CertificationEvidence).request
    settings = {s.name: s.value for s in request.command_configuration.settings}
    other = reference.sha({"a check": "installed nowhere"})
    assert other != settings["check-content-digest"]
    plan = plan_verification(certification_spec(
        candidate_digest=request.candidate.digest,
        author_session=request.candidate.author_session,
        problem=(attempt / "repository" / "certification.smt2").read_text(),
        check_digest=settings["check-digest"],
        check_content_digest=other,
    ))  # fmt: skip
    assert isinstance(plan, VerificationPlan)
    metadata = loads((attempt / "run" / "metadata.json").read_bytes(), RunMetadata)
    check = settings["check-digest"]
    output = backend_output(
        RunOutcome(str(attempt / "run"), metadata),
        candidate_digest=request.candidate.digest,
        check_digest=check,
        work_dir=Path(metadata.run.repository_root).parent.parent,
    )
    receipt = seal_verification(plan, output, Producer(Role.TEST_ENGINEER, producer_session(check)))
    assert isinstance(receipt, VerificationReceipt)
    record.write_bytes(dumps(CertificationEvidence(plan.request, receipt)) + b"\n")
    done = _kernel(ROOT, tmp_path, "audit", work, "--format", "json")
    assert done.returncode != 0, done.stdout
    findings = json.loads(done.stdout)["findings"]
    assert {(f["code"], f["subject"]) for f in findings} >= {
        ("binding_mismatch", "check-content-digest")
    }, findings
    # The untouched store audits clean.
    assert _kernel(ROOT, tmp_path, "audit", stored, "--format", "json").returncode == 0


# --- a wheel installed in another venv ------------------------------------------------


def _pins(entry: dict[str, object]) -> dict[str, tuple[str, str]]:
    """Each pin of an entry by role: (path, sha256)."""
    found: dict[str, tuple[str, str]] = {}
    for side in ("producer", "checker"):
        command = entry[side]
        assert isinstance(command, dict)
        executable = command["executable"]
        found[f"{side} executable"] = (executable["path"], executable["sha256"])
        for i, pin in enumerate(command["dependencies"]):
            found[f"{side} dependency {i}"] = (pin["path"], pin["sha256"])
        for pin in command["trusted_tool_dependencies"]:
            found[f"{side} tool {os.path.basename(pin['path'])}"] = (pin["path"], pin["sha256"])
    return found


def test_a_wheel_installed_in_another_venv_writes_the_checkout_outcome_files(
    tmp_path: Path,
) -> None:
    bin_dir = wheel_venv(tmp_path)
    where = checked(bin_dir / "python", "-c", "import kernel; print(kernel.__file__)",
                     cwd=tmp_path)  # fmt: skip
    assert where.startswith(str(tmp_path / "elsewhere" / "venv")), where
    runs = tmp_path / "runs"
    runs.mkdir()
    wheel_work, wheel_out = runs / "wheel-work", runs / "wheel.jsonl"
    done = subprocess.run(
        [str(bin_dir / "kernel"), "run", str(E2E_BUNDLE), "--work-dir", str(wheel_work),
         "--out", str(wheel_out), "--quiet"],
        capture_output=True, text=True, timeout=300, check=False, cwd=runs,
        env=plain_environment(),
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # one tampered attempt on purpose
    audit = subprocess.run(
        [str(bin_dir / "kernel"), "audit", str(wheel_work), "--outcomes", str(wheel_out),
         "--format", "json"],
        capture_output=True, text=True, timeout=300, check=False, cwd=runs,
        env=plain_environment(),
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    checkout_work, checkout_out = stored_main_job(tmp_path / "checkout")
    assert kernel("audit", checkout_work, "--outcomes", checkout_out).returncode == 0
    certified = [line for line in wheel_out.read_bytes().splitlines()
                 if b"contract_and_proof_closed" in line]  # fmt: skip
    assert certified, "the bundle certifies some attempt"
    assert wheel_out.read_bytes() == checkout_out.read_bytes()
    # What moved: the interpreter, both scripts, z3 and cvc5's files are pinned
    # at the new venv's paths with the same bytes; libpython and the loader
    # closure are the machine's.
    (wheel_entry, *_), (checkout_entry, *_) = _entries(wheel_work), _entries(checkout_work)
    wheel_pins, checkout_pins = _pins(wheel_entry), _pins(checkout_entry)
    assert wheel_pins.keys() == checkout_pins.keys()
    moved = {role for role in wheel_pins if wheel_pins[role][0] != checkout_pins[role][0]}
    for role in wheel_pins:
        assert wheel_pins[role][1] == checkout_pins[role][1], role  # same bytes
    venv = str(tmp_path / "elsewhere" / "venv")
    assert {r for r in wheel_pins if wheel_pins[r][0].startswith(venv)} == moved
    for side in ("producer", "checker"):
        assert {f"{side} executable", f"{side} dependency 0"} <= moved
    assert "producer tool z3" in moved
    assert {r for r in moved if r.startswith("checker tool")} >= {
        r for r in checkout_pins if r.startswith("checker tool") and "cvc5" in checkout_pins[r][0]
    }
    # ... so the check digests differ and the content digests do not.
    def identity(entry: dict[str, object]) -> str:
        return reference.sha({"identity_version": 1, **entry})

    assert identity(wheel_entry) != identity(checkout_entry)
    assert reference.check_content_digest(wheel_entry) == reference.check_content_digest(
        checkout_entry
    )
