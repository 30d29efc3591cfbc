"""`kernel audit` and `kernel attest` re-derive a work directory by default (issue 20, finding 5).

A `kernel run` work directory keeps the bundle it ran (``bundle.json``, or
``bundle.jsonl`` for a stream, the bytes as read); `kernel audit WORKDIR`
re-derives every outcome from it, with no option, and checks the
directory's own ``outcomes.jsonl``, every entry of the directory and every
attempt directory the run made. `kernel attest` signs only what that audit
re-derived. Every case goes through the real command line
(``tests.support.cli.kernel``) over a real work directory (z3 -> cvc5), and
each tamper is made with the standard library alone, as someone with write
access to the store would make it (``tests.support.reference.sha`` is the
stdlib recipe of docs/integrating.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernel.bundles import bundle_stream_lines
from kernel.replay import ReplayBundle
from kernel.serde import loads
from tests.orchestrate_helpers import E2E_BUNDLE, stored_main_job
from tests.support.cli import kernel
from tests.support.reference import sha


@pytest.fixture(scope="module")
def stored_work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real `kernel run` work directory and its -o outcomes file (made once)."""
    return stored_main_job(tmp_path_factory.mktemp("e2e"))


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("keys")
    done = kernel("attest-keygen", base / "signer.pem", base / "signer.pub")
    assert done.returncode == 0, done.stderr
    return base / "signer.pem", base / "signer.pub"


@pytest.fixture
def work(stored_work_dir: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    source, outcomes = stored_work_dir
    target = tmp_path / "work"
    shutil.copytree(source, target, symlinks=True)
    copy = tmp_path / "outcomes.jsonl"
    shutil.copyfile(outcomes, copy)
    return target, copy


def _audit(*args: str | Path) -> tuple[int, dict[str, Any]]:
    done = kernel("audit", *args, "--format", "json")
    assert "Traceback" not in done.stderr
    if done.returncode == 2:
        return 2, {"stderr": done.stderr}
    return done.returncode, json.loads(done.stdout)


def _codes(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["code"], f["subject"]) for f in report["findings"]}


def _forge_closed(outcomes: Path) -> None:
    """Attempt 2's refused proof relabelled closed, its id recomputed by the stdlib recipe."""
    lines = outcomes.read_bytes().splitlines(keepends=True)
    envelope = json.loads(lines[2])
    outcome = envelope["outcome"]
    assert outcome["replay_disposition"] == "contract_closed_but_proof_refused"
    outcome["replay_disposition"] = "contract_and_proof_closed"
    outcome["reason_codes"] = []
    payload = {k: v for k, v in outcome.items() if k != "explanation"}
    outcome["replay_result_id"] = sha({**payload, "replay_result_id": ""})
    lines[2] = json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    outcomes.write_bytes(b"".join(lines))


def _certified_attempt(work_dir: Path) -> str:
    for line in (work_dir / "outcomes.jsonl").read_bytes().splitlines():
        envelope = json.loads(line)
        if envelope["outcome"].get("replay_disposition") == "contract_and_proof_closed":
            attempt_id = envelope["attempt_id"]
            assert isinstance(attempt_id, str)
            return attempt_id
    raise AssertionError("the e2e run certifies at least one attempt")


# --- the work directory binds its bundle ------------------------------------------------


def test_kernel_run_keeps_the_bundle_it_ran_and_the_audit_needs_nothing_else(
    work: tuple[Path, Path],
) -> None:
    work_dir, _ = work
    assert (work_dir / "bundle.json").read_bytes() == E2E_BUNDLE.read_bytes()
    code, report = _audit(work_dir)
    assert code == 0, report
    # Every outcome was re-derived, not only its id recomputed.
    done = kernel("audit", work_dir)
    assert done.returncode == 0 and "intact" in done.stdout


def test_a_stream_run_keeps_its_stream_and_audits_intact(tmp_path: Path) -> None:
    bundle = loads(E2E_BUNDLE.read_bytes(), ReplayBundle)
    stream = tmp_path / "bundle.jsonl"
    stream.write_bytes(b"".join(bundle_stream_lines(bundle)))
    work_dir = tmp_path / "work"
    done = kernel("run", stream, "--work-dir", work_dir, "--quiet", "--format", "jsonl")
    assert done.returncode == 3, done.stderr  # the e2e bundle's one tampered attempt
    assert (work_dir / "bundle.jsonl").read_bytes() == stream.read_bytes()
    assert not (work_dir / "bundle.json").exists()
    code, report = _audit(work_dir)
    assert code == 0, report


def test_a_missing_bundle_copy_is_reported_and_bundle_still_re_derives(
    work: tuple[Path, Path],
) -> None:
    work_dir, _ = work
    (work_dir / "bundle.json").unlink()
    code, report = _audit(work_dir)
    assert code == 3
    assert ("missing", "bundle copy") in _codes(report)
    code, report = _audit(work_dir, "--bundle", E2E_BUNDLE)
    assert code == 0, report


# --- finding 5: outcomes nobody re-derived ---------------------------------------------


def test_a_forged_outcomes_file_is_caught_without_being_asked(work: tuple[Path, Path]) -> None:
    # Seen: `kernel audit WORKDIR --outcomes forged.jsonl` said intact.
    work_dir, outcomes = work
    _forge_closed(outcomes)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("outcome_mismatch", "outcome[2]") in _codes(report)


def test_the_work_directorys_own_outcomes_are_checked_by_default(
    work: tuple[Path, Path],
) -> None:
    work_dir, _ = work
    _forge_closed(work_dir / "outcomes.jsonl")
    code, report = _audit(work_dir)
    assert code == 3
    assert ("outcome_mismatch", "outcome[2]") in _codes(report)
    assert {f["path"] for f in report["findings"]} >= {"outcomes.jsonl"}


def test_attest_never_signs_a_forged_outcome(
    work: tuple[Path, Path], signer: tuple[Path, Path]
) -> None:
    # Seen: `kernel attest` signed the forged line and --verify-key said verified.
    work_dir, outcomes = work
    private, _ = signer
    _forge_closed(outcomes)
    done = kernel("attest", work_dir, "--key", private, "--outcomes", outcomes)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "run_not_intact" in done.stderr and "Traceback" not in done.stderr
    assert not (work_dir / "attestation.dsse.json").exists()


def test_attest_signs_an_intact_work_directory_without_options(
    work: tuple[Path, Path], signer: tuple[Path, Path]
) -> None:
    work_dir, _ = work
    private, public = signer
    done = kernel("attest", work_dir, "--key", private)
    assert done.returncode == 0, done.stderr
    code, report = _audit(work_dir, "--verify-key", public)
    assert code == 0, report
    assert report["attestation"]["verified"] is True


def test_a_deleted_certified_attempt_directory_is_caught(work: tuple[Path, Path]) -> None:
    # Seen: deleting one certified attempt's directory, `kernel audit WORKDIR` said intact.
    work_dir, _ = work
    attempt = _certified_attempt(work_dir)
    shutil.rmtree(work_dir / attempt)
    code, report = _audit(work_dir)
    assert code == 3
    missing = [f for f in report["findings"] if f["code"] == "missing"]
    assert any(f["path"] == attempt for f in missing), report
    assert ("outcome_mismatch", "outcome[0]") in _codes(report) or any(
        f["code"] == "outcome_mismatch" for f in report["findings"]
    )


def test_an_extra_file_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, _ = work
    (work_dir / "notes.txt").write_text("not written by kernel run\n")
    attempt = _certified_attempt(work_dir)
    (work_dir / attempt / "extra.json").write_text("{}\n")
    code, report = _audit(work_dir)
    assert code == 3
    paths = {(f["code"], f["path"]) for f in report["findings"]}
    assert ("undeclared", "notes.txt") in paths
    assert ("undeclared", f"{attempt}/extra.json") in paths


def test_an_empty_attempt_directory_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, _ = work
    attempt = _certified_attempt(work_dir)
    shutil.rmtree(work_dir / attempt)
    (work_dir / attempt).mkdir()
    code, report = _audit(work_dir)
    assert code == 3
    assert ("missing", f"{attempt}/run") in {(f["code"], f["path"]) for f in report["findings"]}
