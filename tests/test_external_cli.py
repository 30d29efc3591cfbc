"""`kernel check run|replay|identity` as a real subprocess: JSON out, exit codes, no tracebacks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kernel.serde import dumps
from tests.support.cli import kernel
from tests.support.reference import canonical
from tests.test_external_helpers import Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _job_file(scenario: Scenario) -> Path:
    path = scenario.tmp / "job.json"
    path.write_bytes(dumps(scenario.job))
    return path


def test_run_pass_prints_canonical_metadata_and_exits_0(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    done = kernel(
        "check", "run", scenario.manifest_path, "demo", "--job", _job_file(scenario),
        "--run-root", scenario.run_root, "--run-id", "cli-1", "--repo", scenario.repo,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    printed = json.loads(done.stdout)
    assert done.stdout == canonical(printed).decode() + "\n"
    assert printed["metadata"]["status"] == "PASS"
    assert printed["attempt_dir"] == str((scenario.run_root / "cli-1").resolve())
    stored = (scenario.run_root / "cli-1" / "metadata.json").read_bytes()
    assert json.loads(stored) == printed["metadata"]


def test_run_blocked_exits_1_and_replay_reports_its_own_outcome(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, checker_custom="WRITE = False")
    done = kernel(
        "check", "run", scenario.manifest_path, "demo", "--job", _job_file(scenario),
        "--run-root", scenario.run_root, "--run-id", "cli-2", "--repo", scenario.repo,
    )  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)["metadata"]["reason"] == "receipt_missing"
    replay = kernel(
        "check", "replay", scenario.run_root / "cli-2", "--manifest", scenario.manifest_path,
        "--repo", scenario.repo, "--replay-id", "again",
    )  # fmt: skip
    assert replay.returncode == 1
    metadata = json.loads(replay.stdout)["metadata"]
    assert metadata["kind"] == "replay" and metadata["reason"] == "receipt_missing"


def test_identity_prints_the_identity_and_its_digest(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    done = kernel("check", "identity", scenario.manifest_path, "demo", "--repo", scenario.repo)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["check_digest"] == hashlib.sha256(canonical(printed["identity"])).hexdigest()
    scenario.producer_script.write_text("# swapped\n")
    blocked = kernel("check", "identity", scenario.manifest_path, "demo")
    assert blocked.returncode == 1
    assert json.loads(blocked.stdout)["reason"] == "pin_mismatch"


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("missing-manifest", "manifest_unreadable"),
        ("traversal", "path_traversal"),
        ("unknown-check", "unknown_check"),
        ("bad-job", "job_malformed_json"),
        ("existing-run", "run_dir_exists"),
        ("bad-replay", "metadata_unreadable"),
    ],
)
def test_refused_input_is_one_line_on_stderr_with_exit_2(
    tmp_path: Path, setup: str, code: str
) -> None:
    scenario = Scenario(tmp_path)
    job = _job_file(scenario)
    manifest = scenario.manifest_path
    check = "demo"
    if setup == "missing-manifest":
        manifest = tmp_path / "absent.json"
    elif setup == "traversal":
        document = scenario.document()
        document["checks"][0]["claim"]["specification"] = "../etc/passwd"
        scenario.write_manifest(document)
    elif setup == "unknown-check":
        check = "nope"
    elif setup == "bad-job":
        job.write_text("{")
    elif setup == "existing-run":
        (scenario.run_root / "taken").mkdir(parents=True)
    if setup == "bad-replay":
        done = kernel("check", "replay", tmp_path, "--manifest", manifest, "--repo", scenario.repo)
    else:
        done = kernel(
            "check", "run", manifest, check, "--job", job, "--run-root", scenario.run_root,
            "--run-id", "taken", "--repo", scenario.repo,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {code}: "), done.stderr
    assert "Traceback" not in done.stderr


def test_help_documents_the_exit_codes() -> None:
    for command in (("check",), ("check", "run"), ("check", "replay"), ("check", "identity")):
        done = kernel(*command, "--help")
        assert done.returncode == 0
        text = " ".join(done.stdout.split())
        assert "BLOCKED" in text and "2 usage error" in text, command
