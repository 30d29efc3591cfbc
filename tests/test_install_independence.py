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
from tests.support.cli import KERNEL_MAIN

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
