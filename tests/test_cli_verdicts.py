"""Verdicts a pipeline can trust: one test per row of README's exit-code table.

Bundles are sealed by ``kernel bundle`` from the shipped draft (four
attempts: two close, one contract refused, one proof refused), then altered
as an attacker or a bug would; altered inputs are resealed with the
independent reference payloads (tests/support/reference.py), never the package's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from typer.testing import CliRunner

from kernel.cli import app
from kernel.commands._verdict import FailOn, classes_of
from kernel.replay import ReplayAdapterInput, ReplayBundle
from kernel.serde import dumps, loads
from tests.orchestrate_helpers import ROOT
from tests.support import reference as ref

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
runner = CliRunner()


def _kernel(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """The installed console script's code path (``kernel.cli:main``) in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from kernel.cli import main; sys.argv[0] = 'kernel'; "
         "main()", *map(str, args)],
        input=stdin, capture_output=True, timeout=300, check=False,
    )


def _sealed(tmp_path: Path, manifest: str = "builtin.v1") -> Path:
    out = tmp_path / f"bundle-{manifest}.json"
    result = runner.invoke(app, ["bundle", str(DRAFT), "--manifest", manifest, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _altered(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    doc = json.loads(_sealed(tmp_path).read_text())
    change(doc)
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(doc))
    return path


def _resealed_input(tmp_path: Path, index: int, fields: dict[str, Any]) -> Path:
    """Attempt ``index``'s input with ``fields`` changed and its digest recomputed honestly."""
    bundle = loads(_sealed(tmp_path).read_bytes(), ReplayBundle)
    changed = attrs.evolve(bundle.inputs[index], **fields)
    changed = attrs.evolve(changed, input_digest=ref.replay_input_digest(changed))
    inputs: list[ReplayAdapterInput] = list(bundle.inputs)
    inputs[index] = changed
    path = tmp_path / "resealed.json"
    path.write_bytes(dumps(ReplayBundle(bundle.chain, tuple(inputs))))
    return path


def _flip_digit(value: str) -> str:
    return ("1" if value[0] == "0" else "0") + value[1:]


def _verdict(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("verdict: ")]
    assert len(lines) == 1, stderr
    return lines[0]


# --- row 0: intact, policy holds ------------------------------------------------------


def test_exit_0_an_intact_bundle_under_the_default_policy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(_sealed(tmp_path))])
    assert result.exit_code == 0, result.output
    verdict = _verdict(result.stderr)
    assert verdict.startswith("verdict: PASS (exit 0): 4 attempts: ")
    for count in ("contract_refused=1", "contract_closed_but_proof_refused=1",
                  "contract_and_proof_closed=2"):
        assert count in verdict
    assert verdict.endswith("fail-on=integrity,unclassified")


def test_exit_0_naming_integrity_explicitly_changes_nothing(tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", str(_sealed(tmp_path)), "--fail-on", "integrity"])
    assert result.exit_code == 0


# --- row 1: the requested policy does not hold -----------------------------------------


@pytest.mark.parametrize("fail_on", [["blocked"], ["any"], ["unavailable,blocked"],
                                     ["unavailable", "blocked"]])
def test_exit_1_an_outcome_in_a_selected_class(tmp_path: Path, fail_on: list[str]) -> None:
    args = ["replay", str(_sealed(tmp_path))]
    for value in fail_on:
        args += ["--fail-on", value]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert _verdict(result.stderr).startswith("verdict: FAIL policy (exit 1): ")


@pytest.mark.parametrize(
    ("fields", "disposition", "selects"),
    [
        ({"replay_policy_version": "contract_proof_replay.v2"}, "unsupported_replay_policy",
         "refused"),
        ({"contract_replay_target": "arithmetic.contract@v0"}, "contract_replay_unavailable",
         "unavailable"),
    ],
)
def test_exit_1_refusals_that_are_not_integrity_fail_by_default_and_when_selected(
    tmp_path: Path, fields: dict[str, str], disposition: str, selects: str
) -> None:
    bundle = _resealed_input(tmp_path, 0, fields)
    default = _kernel("replay", bundle)  # the default policy: every attempt classified
    assert default.returncode == 1, default.stderr
    assert _verdict(default.stderr.decode()).startswith("verdict: FAIL policy (exit 1): ")
    assert f"#0 {disposition} [" in default.stdout.decode()
    assert "--fail-on integrity" in default.stderr.decode()  # how to ask for less
    chosen = runner.invoke(app, ["replay", str(bundle), "--fail-on", selects])
    assert chosen.exit_code == 1
    assert f"#0 {disposition}" in chosen.stdout
    # Asking for less: integrity alone (the behaviour before issue 20) passes the refusal.
    less = runner.invoke(app, ["replay", str(bundle), "--fail-on", "integrity", "-f", "jsonl"])
    assert less.exit_code == 0, less.output
    assert json.loads(less.stdout.splitlines()[0])["outcome"]["replay_disposition"] == disposition


# Issue 20, finding 3: a run that certified nothing passed.


def test_exit_1_kernel_replay_of_a_certified_bundle_names_kernel_run(tmp_path: Path) -> None:
    done = _kernel("replay", _sealed(tmp_path, "certified.v1"))
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr  # every attempt unsupported_proof_obligation
    assert _verdict(stderr).startswith(
        "verdict: FAIL policy (exit 1): 4 attempts: unsupported_proof_obligation=4; ")
    hint = [line for line in stderr.splitlines() if "the obligations of certified.v1" in line]
    assert len(hint) == 1 and hint[0].startswith("hint: 4 attempts: "), stderr
    assert "`kernel run`" in hint[0] and "--manifest builtin.v1" in hint[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize("executor", [("--workers", "2"), ("--executor", "dask", "--workers", "2")],
                         ids=["process", "dask"])
def test_sharded_kernel_replay_gives_the_serial_summary_and_hints(
    tmp_path: Path, executor: tuple[str, ...]
) -> None:
    # The hint is computed where the attempt is classified (ADR 0020): on a worker it
    # used to be lost, and the summary said less than the serial run's.
    bundle = _sealed(tmp_path, "certified.v1")
    serial = _kernel("replay", bundle)
    sharded = _kernel("replay", bundle, *executor, "--shard-size", "1")
    assert sharded.returncode == serial.returncode == 1, sharded.stderr
    assert sharded.stdout == serial.stdout
    assert sharded.stderr.decode().splitlines()[-2:] == serial.stderr.decode().splitlines()[-2:]
    hints = [line for line in sharded.stderr.decode().splitlines() if line.startswith("hint:")]
    assert any("the obligations of certified.v1" in line for line in hints), sharded.stderr


def test_exit_1_kernel_run_of_a_builtin_bundle_names_manifest_certified(tmp_path: Path) -> None:
    done = _kernel("run", _sealed(tmp_path, "builtin.v1"), "--work-dir", tmp_path / "work")
    stderr, stdout = done.stderr.decode(), done.stdout.decode()
    assert done.returncode == 1, stderr
    assert _verdict(stderr).startswith(
        "verdict: FAIL policy (exit 1): 4 attempts: unsupported_proof_obligation=4; ")
    hint = [line for line in stderr.splitlines() if "the obligations of builtin.v1" in line]
    assert len(hint) == 1 and "`kernel bundle --manifest certified.v1`" in hint[0], stderr
    assert "certifications: none run" in stdout  # and the summary says nothing was certified


def test_exit_0_a_run_whose_attempts_were_all_contract_refused(tmp_path: Path) -> None:
    """Classified is not closed: every attempt ruled on by its authority passes."""
    draft = json.loads(DRAFT.read_text())
    draft["candidates"] = [draft["candidates"][1]] * 2  # the unit-mismatch reading, twice
    path = tmp_path / "refused-draft.json"
    path.write_text(json.dumps(draft))
    bundle = tmp_path / "refused.json"
    assert _kernel("bundle", path, "-o", bundle).returncode == 0
    done = _kernel("replay", bundle)
    assert done.returncode == 0, done.stderr
    assert _verdict(done.stderr.decode()).startswith(
        "verdict: PASS (exit 0): 2 attempts: contract_refused=2; ")
    assert not [line for line in done.stderr.decode().splitlines() if line.startswith("hint:")]


@pytest.mark.slow
def test_kernel_run_summary_says_which_checkers_ran_and_how_long(tmp_path: Path) -> None:
    done = _kernel("run", _sealed(tmp_path, "certified.v1"), "--work-dir", tmp_path / "work")
    assert done.returncode == 0, done.stderr  # classified: two closed, two not
    stdout = done.stdout.decode()
    lines = stdout.splitlines()
    certified = [line for line in lines if line.startswith("certifications: ")]
    assert len(certified) == 1, stdout
    assert certified[0].startswith("certifications: 3 run (3 PASS), ")
    assert " s wall (" in certified[0] and "s each on average; inline)" in certified[0]
    # The parts are the ones every run's metadata records (they depend on the machine).
    recorded = [json.loads(m.read_bytes())["containment_parts"]
                for m in (tmp_path / "work").glob("*/run/metadata.json")]
    held = sorted(set.intersection(*(set(r) for r in recorded)))
    assert len(recorded) == 3 and held, recorded
    assert (f"  z3 produced 3, cvc5 checked 3 (each step contained: sandbox; parts: "
            f"{', '.join(held)})") in lines, stdout


@pytest.mark.slow
def test_exit_1_kernel_run_where_every_certification_timed_out(tmp_path: Path) -> None:
    bundle = _sealed(tmp_path, "certified.v1")
    done = _kernel("run", bundle, "--work-dir", tmp_path / "work", "--deadline", "0.001")
    # Nothing proven because no checker concluded: unavailable, selected by default here.
    assert done.returncode == 1, done.stderr
    stdout = done.stdout.decode()
    assert "certification BLOCKED: producer_timeout: producer still running" in stdout
    assert _verdict(done.stderr.decode()).startswith("verdict: FAIL policy (exit 1): ")


# --- row 2: usage error or input refused at the boundary ----------------------------------


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["replay", "--no-such-option"], "unknown_option"),
        (["replay"], "missing_parameter"),
        (["replay", "x.json", "--fail-on", "sometimes"], "invalid_fail_on"),
        (["replay", "x.json", "--format", "yaml"], "invalid_value"),
        (["replay", "x.json", "--out", "-", "--format", "table"], "conflicting_options"),
        (["frobnicate"], "usage_error"),
        (["schema"], "usage_error"),
    ],
)
def test_exit_2_usage_errors_are_one_line_with_a_stable_code(
    args: list[str], code: str
) -> None:
    done = _kernel(*args)
    assert done.returncode == 2
    stderr = done.stderr.decode()
    assert stderr.startswith(f"error: {code}: ") and stderr.count("\n") == 1, stderr
    assert done.stdout == b""
    assert "╭" not in stderr and "Traceback" not in stderr


def test_exit_2_a_malformed_bundle_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"chain": 1, "chain": 2}')
    out = tmp_path / "o.jsonl"
    done = _kernel("replay", bad, "--out", out)
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: duplicate_key: ")
    assert not out.exists()


# --- row 3: integrity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        lambda d: d["inputs"][1].update(attempt_id=_flip_digit(d["inputs"][1]["attempt_id"])),
        lambda d: d["chain"]["run"]["candidate_attempts"][1].update(
            attempt_id=_flip_digit(d["chain"]["run"]["candidate_attempts"][1]["attempt_id"])),
        lambda d: d["chain"]["reconstructions"][1].update(
            attempt_id=_flip_digit(d["chain"]["reconstructions"][1]["attempt_id"])),
    ],
    ids=["input", "run", "reconstruction"],
)
def test_exit_3_one_digit_of_an_attempt_id_changed(
    tmp_path: Path, where: Callable[[dict[str, Any]], None]
) -> None:
    bundle = _altered(tmp_path, where)
    for fail_on in ([], ["--fail-on", "blocked"]):  # integrity wins over any policy
        done = _kernel("replay", bundle, "-f", "jsonl", *fail_on)
        assert done.returncode == 3, done.stderr
        dispositions = {json.loads(line)["outcome"]["replay_disposition"]
                        for line in done.stdout.splitlines()}
        assert "candidate_identity_mismatch" in dispositions
        assert _verdict(done.stderr.decode()).startswith("verdict: FAIL integrity (exit 3): ")


def test_exit_3_digest_reports_an_id_that_does_not_reproduce(tmp_path: Path) -> None:
    bundle = _altered(tmp_path, lambda d: d["chain"]["gate"].update(
        gate_decision_id=_flip_digit(d["chain"]["gate"]["gate_decision_id"])))
    done = _kernel("digest", bundle)
    assert done.returncode == 3
    assert b"MISMATCH" in done.stdout


# --- the classes themselves -------------------------------------------------------------


def test_every_example_outcome_falls_in_the_documented_classes() -> None:
    result = runner.invoke(app, ["replay", str(ROOT / "examples" / "replay" / "bundle.json"),
                                 "-q", "-f", "jsonl"])
    from kernel.replay import ReplayAdapterRefusal, ReplayAdapterResult

    seen: dict[str, frozenset[FailOn]] = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)["outcome"]
        outcome: ReplayAdapterResult | ReplayAdapterRefusal = (
            loads(json.dumps(record).encode(), ReplayAdapterResult)
            if "replay_result_id" in record
            else loads(json.dumps(record).encode(), ReplayAdapterRefusal)
        )
        seen[record["replay_disposition"]] = classes_of(outcome)
    f = FailOn
    assert seen == {
        "contract_and_proof_closed": frozenset(),
        "contract_refused": {f.BLOCKED, f.ANY},
        "contract_closed_but_proof_refused": {f.BLOCKED, f.ANY},
        "unsupported_replay_policy": {f.REFUSED, f.UNCLASSIFIED, f.ANY},
        "unsupported_proof_obligation": {f.REFUSED, f.UNCLASSIFIED, f.ANY},
        "contract_replay_unavailable": {f.UNAVAILABLE, f.REFUSED, f.UNCLASSIFIED, f.ANY},
        "candidate_identity_mismatch": {f.INTEGRITY, f.REFUSED, f.UNCLASSIFIED, f.ANY},
    }
