"""`kernel run`: the main job from the command line (real z3 -> cvc5 for full runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernel.cli import app
from kernel.commands.replay import attempt_lines
from kernel.orchestrate import replay_bundle
from kernel.organs import CERTIFIED_MANIFEST
from tests.orchestrate_helpers import E2E_BUNDLE, ROOT, certifier, e2e_bundle
from tests.support.cli import kernel

runner = CliRunner()
DISPOSITIONS = [
    "contract_and_proof_closed",
    "contract_refused",
    "contract_closed_but_proof_refused",
    "contract_and_proof_closed",
    "unsupported_replay_policy",
    "candidate_identity_mismatch",
]


pytestmark = pytest.mark.usefixtures("no_leftovers")


def _attempt_ids() -> tuple[str, ...]:
    return tuple(a.attempt_id for a in e2e_bundle().chain.run.candidate_attempts)


@pytest.mark.slow
def test_run_writes_the_api_outcomes_and_exits_3_on_the_tampered_attempt(
    tmp_path: Path,
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = kernel("run", E2E_BUNDLE, "--work-dir", tmp_path / "work", "--out", out)
    assert done.returncode == 3, done.stderr  # the e2e bundle's tampered attempt: integrity
    assert done.stdout.startswith("6 attempts (run order)\n")
    assert done.stderr.startswith("verdict: FAIL integrity (exit 3): 6 attempts")
    assert "Traceback" not in done.stderr
    data = out.read_bytes()
    lines = data.splitlines()
    assert [json.loads(line)["outcome"]["replay_disposition"] for line in lines] == DISPOSITIONS
    assert [json.loads(line)["attempt_index"] for line in lines] == list(range(6))
    api = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, certifier(tmp_path / "api"))
    # another work directory, another process: same bytes
    assert data == attempt_lines(api, _attempt_ids())
    work = tmp_path / "work"
    assert (work / "outcomes.jsonl").read_bytes() == data
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == sorted(
        json.loads(line)["attempt_id"] for line in lines
        if json.loads(line)["outcome"]["replay_disposition"] != "contract_refused"
        and "replay_result_id" in json.loads(line)["outcome"]
    )


@pytest.mark.slow
def test_fail_on_any_still_exits_3_with_the_outcomes_on_stdout(tmp_path: Path) -> None:
    done = kernel(
        "run", E2E_BUNDLE, "--work-dir", tmp_path / "work", "--fail-on", "any", "--quiet",
        "--format", "jsonl",
    )
    assert done.returncode == 3, done.stderr  # integrity wins over the policy (exit 1)
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert [json.loads(line)["outcome"]["replay_disposition"] for line in lines] == DISPOSITIONS


def _refused(result_stderr: str, code: str) -> None:
    assert result_stderr.startswith(f"error: {code}: ")
    assert result_stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"chain": 1, "chain": 2}', "duplicate_key"),
        (b"[1.5]", "float_forbidden"),
        (b"\xff", "invalid_utf8"),
        (b'{"chain": {}}', "schema_mismatch"),
    ],
)
def test_a_bad_bundle_is_refused_in_one_line_with_exit_2(
    tmp_path: Path, content: bytes, code: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = tmp_path / "o.jsonl"
    result = runner.invoke(
        app, ["run", str(path), "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    )
    assert result.exit_code == 2
    _refused(result.stderr, code)
    assert result.stdout == ""
    assert not out.exists() and not (tmp_path / "work").exists()


def test_a_misshapen_bundle_is_refused_before_anything_runs(tmp_path: Path) -> None:
    doc = json.loads(E2E_BUNDLE.read_text())
    doc["inputs"] = doc["inputs"][:-1]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["run", str(path), "--work-dir", str(tmp_path / "work")])
    assert result.exit_code == 2
    _refused(result.stderr, "bundle_shape_invalid")
    assert not (tmp_path / "work").exists()


def test_a_non_empty_work_directory_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "earlier-run").mkdir()
    result = runner.invoke(app, ["run", str(E2E_BUNDLE), "--work-dir", str(work)])
    assert result.exit_code == 2
    _refused(result.stderr, "work_dir_not_empty")
    assert [p.name for p in work.iterdir()] == ["earlier-run"]


def test_a_work_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.write_text("")
    result = runner.invoke(app, ["run", str(E2E_BUNDLE), "--work-dir", str(work)])
    assert result.exit_code == 2
    _refused(result.stderr, "work_dir_not_directory")


# inf and 1e9 were taken, then every certification failed with an OverflowError
# note (issue 35, finding 4); each is refused before anything is written.
@pytest.mark.parametrize("deadline", ["0", "-1", "nan", "inf", "1e9", "604800.5"])
def test_a_deadline_that_is_not_positive_or_past_seven_days_is_refused(
    tmp_path: Path, deadline: str
) -> None:
    result = runner.invoke(
        app,
        ["run", str(E2E_BUNDLE), "--work-dir", str(tmp_path / "w"), "--deadline", deadline],
    )
    assert result.exit_code == 2
    _refused(result.stderr, "invalid_deadline")
    assert "at most 604800 seconds" in result.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("seconds", [float("inf"), 1e9, float("nan"), 0.0])
def test_run_limits_refuse_a_deadline_the_wait_cannot_hold(seconds: float) -> None:
    from kernel.external import MAX_DEADLINE_SECONDS, RunLimits

    with pytest.raises(ValueError, match="at most 604800 seconds"):
        RunLimits(seconds, 1.0)
    assert RunLimits(MAX_DEADLINE_SECONDS, 1.0).producer_timeout_seconds == 604800


def test_a_work_directory_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # the work directory cannot be created under a file
    result = runner.invoke(app, ["run", str(E2E_BUNDLE), "--work-dir", str(blocker / "work")])
    assert result.exit_code == 2
    _refused(result.stderr, "work_dir_unreadable")
    assert result.stdout == ""


def test_the_work_directory_is_required(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(E2E_BUNDLE)])
    assert result.exit_code == 2
    assert "--work-dir" in result.output


def test_help_says_what_runs_where_files_go_and_the_exit_codes() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for phrase in (
        "z3 -> cvc5",
        "DIR/<attempt_id>/",
        "certification.json",
        "must be absent or empty",
        "Exit codes: 0 intact and no outcome in a --fail-on class",
        "2 refused at the boundary",
        "3 integrity",
        "130 SIGINT; 143 SIGTERM",
        "--resume",
    ):
        assert phrase in text, phrase
    assert "run" in runner.invoke(app, ["--help"]).stdout


def test_the_shipped_e2e_bundle_is_generated_not_hand_typed() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "build_e2e_bundle.py"), "--check"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
