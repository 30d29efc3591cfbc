"""`kernel audit RUN_DIR`: real stored runs, real edits, each reported (exit 3); intact exit 0.

Two real stores are made once per module and copied for each test: a
`kernel run` work directory (the main job: z3 -> cvc5, through the real
command line) with its outcomes file, and a `kernel check run` run directory
(a real producer/checker pair under the external protocol). Every edit below
is a byte-level change to a stored file, as someone with write access to the
store would make it; where an edit reseals an id, the id is recomputed here
with ``hashlib`` (``tests.support.reference.sha``), not with the package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.audit import AuditCode, AuditInputError, RunLayout, audit_run
from kernel.external import RunLimits, default_environment, replay_run
from tests.orchestrate_helpers import E2E_BUNDLE, ROOT, stored_main_job
from tests.support.cli import kernel
from tests.support.reference import sha, sha256_file
from tests.test_external_helpers import Scenario

DIGEST_LINE = "0" * 64


@pytest.fixture(scope="module")
def stored_work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real `kernel run` work directory and its outcomes file (made once).

    The shipped bundle holds one deliberately tampered attempt, so the run's
    verdict is integrity (exit 3); every attempt still has its outcome line,
    and the stored run is what the audit reads.
    """
    work, out = stored_main_job(tmp_path_factory.mktemp("e2e"))
    lines = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert [line["attempt_index"] for line in lines] == list(range(len(lines)))
    assert "candidate_identity_mismatch" in {
        line["outcome"]["replay_disposition"] for line in lines
    }
    return work, out


@pytest.fixture(scope="module")
def stored_external_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `kernel check run` run directory of an honest pair (made once)."""
    scenario = Scenario(tmp_path_factory.mktemp("external"))
    outcome = scenario.run()
    assert outcome.metadata.decision.status.value == "PASS"
    return Path(outcome.attempt_dir)


@pytest.fixture
def work(stored_work_dir: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    source, outcomes = stored_work_dir
    target = tmp_path / "work"
    shutil.copytree(source, target, symlinks=True)
    copy = tmp_path / "outcomes.jsonl"
    shutil.copyfile(outcomes, copy)
    return target, copy


@pytest.fixture
def run_dir(stored_external_run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(stored_external_run, target, symlinks=True)
    return target


def _attempts(work_dir: Path) -> list[Path]:
    return sorted(p for p in work_dir.iterdir() if p.is_dir())


def _audit(*args: str | Path) -> tuple[int, dict[str, Any]]:
    done = kernel("audit", *args, "--format", "json")
    assert "Traceback" not in done.stderr
    if done.returncode == 2:
        return 2, {"stderr": done.stderr}
    return done.returncode, json.loads(done.stdout)


def _codes(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["code"], f["subject"]) for f in report["findings"]}


def _edit_json(path: Path, **changes: Any) -> None:
    document = json.loads(path.read_bytes())
    document.update(changes)
    path.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n")


# --- intact runs ---------------------------------------------------------------------


def test_an_intact_kernel_run_work_directory_exits_0(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    code, report = _audit(work_dir, "--outcomes", outcomes, "--bundle", E2E_BUNDLE)
    assert code == 0, report
    assert report["intact"] is True and report["findings"] == []
    assert report["layout"] == "work_dir"
    # Three certified attempts, each with dozens of ids, plus six outcome lines.
    assert report["checked"] > 100
    text = kernel("audit", work_dir, "--outcomes", outcomes)
    assert text.returncode == 0 and text.stdout.startswith("intact: work_dir")


def test_an_intact_external_run_directory_exits_0(run_dir: Path) -> None:
    code, report = _audit(run_dir)
    assert code == 0, report
    assert report["layout"] == "external_run" and report["findings"] == []
    assert report["checked"] > 15


def test_the_audit_runs_no_process_and_needs_no_tool(
    work: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Offline: with PATH emptied and process creation forbidden, the API audit
    # still recomputes every id.
    work_dir, outcomes = work
    monkeypatch.setenv("PATH", "")

    def forbidden(*_: object, **__: object) -> None:
        raise AssertionError("the audit started a process")

    monkeypatch.setattr(os, "fork", forbidden)
    monkeypatch.setattr(os, "posix_spawn", forbidden)
    monkeypatch.setattr("subprocess.Popen.__init__", forbidden)
    report = audit_run(work_dir, outcomes=outcomes)
    assert report.intact and report.layout is RunLayout.WORK_DIR


# --- the four edits of the issue, each reported as integrity (exit 3) -----------------


def test_an_edited_receipt_byte_is_reported(run_dir: Path) -> None:
    receipt = run_dir / "checker" / "receipt.json"
    data = bytearray(receipt.read_bytes())
    index = data.index(b'"accepted"') + 1
    data[index : index + 8] = b"rejected"  # same length: only content changes
    receipt.write_bytes(bytes(data))
    code, report = _audit(run_dir)
    assert code == 3
    assert ("digest_mismatch", "receipt_sha256") in _codes(report)


def test_an_edited_certification_receipt_byte_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    record = _attempts(work_dir)[0] / "certification.json"
    data = bytearray(record.read_bytes())
    index = data.index(b'"evidence_digest":"') + len(b'"evidence_digest":"')
    data[index] = ord("0") if data[index] != ord("0") else ord("1")  # one hex digit
    record.write_bytes(bytes(data))
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("id_mismatch", "receipt_id") in _codes(report)


def test_a_resealed_certification_receipt_is_caught_by_its_evidence_digest(
    work: tuple[Path, Path],
) -> None:
    # The receipt_id is recomputed (by hand) after changing what the receipt
    # says it saw: it recomputes, but it no longer binds the run's metadata.
    work_dir, outcomes = work
    record = _attempts(work_dir)[0] / "certification.json"
    document = json.loads(record.read_bytes())
    receipt = document["receipt"]
    receipt["evidence_digest"] = sha({"forged": True})
    payload = {k: v for k, v in receipt.items() if k != "receipt_id"}
    receipt["receipt_id"] = sha(payload)
    record.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n")
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    codes = _codes(report)
    assert ("id_mismatch", "receipt_id") not in codes  # the forger resealed it correctly
    assert ("id_mismatch", "receipt evidence_digest") in codes


def test_a_swapped_evidence_file_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    first, second = _attempts(work_dir)[:2]
    a = first / "run" / "evidence" / "target_certified.smt2"
    b = second / "run" / "evidence" / "target_certified.smt2"
    assert a.read_bytes() != b.read_bytes()
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    flagged = {(f["path"], f["code"]) for f in report["findings"]}
    for attempt in (first, second):
        path = f"{attempt.name}/run/evidence/target_certified.smt2"
        assert (path, "digest_mismatch") in flagged


def test_an_edited_outcome_line_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    lines = outcomes.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"contract_refused"', b'"contract_and_proof_closed"')
    outcomes.write_bytes(b"".join(lines))
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("id_mismatch", "outcome[1] id") in _codes(report)


def test_a_resealed_outcome_edit_is_caught_by_rederivation(work: tuple[Path, Path]) -> None:
    # Attempt 2 (its proof refused: a quantity its span does not state)
    # relabelled closed and its id recomputed by hand: the id reproduces and a
    # certification of that candidate exists, but the pure core re-derives
    # the refusal.
    work_dir, outcomes = work
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
    # Consistent on its face: only re-derivation can tell, and the audit
    # re-derives by default (from the bundle the work directory keeps).
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert _codes(report) == {("outcome_mismatch", "outcome[2]")}
    code, report = _audit(work_dir, "--outcomes", outcomes, "--bundle", E2E_BUNDLE)
    assert code == 3
    assert _codes(report) == {("outcome_mismatch", "outcome[2]")}


def _envelopes(outcomes: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in outcomes.read_bytes().splitlines()]


def _write_envelopes(outcomes: Path, lines: list[dict[str, Any]]) -> None:
    outcomes.write_bytes(
        b"".join(
            json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n"
            for line in lines
        )
    )


def test_an_envelope_naming_another_position_is_reported(work: tuple[Path, Path]) -> None:
    # The envelope is covered by no id: two lines swapped keep every record's
    # id, so only their positions give them away.
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    lines[0], lines[3] = lines[3], lines[0]
    _write_envelopes(outcomes, lines)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    codes = _codes(report)
    assert ("binding_mismatch", "outcome[0] attempt_index") in codes
    assert ("binding_mismatch", "outcome[3] attempt_index") in codes
    assert not any(subject.endswith(" id") for _, subject in codes)


def test_an_envelope_naming_another_attempt_than_its_record_is_reported(
    work: tuple[Path, Path],
) -> None:
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    assert lines[1]["attempt_id"] == lines[1]["outcome"]["attempt_id"]
    lines[1]["attempt_id"] = lines[0]["attempt_id"]
    _write_envelopes(outcomes, lines)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    finding = next(f for f in report["findings"] if f["subject"] == "outcome[1] attempt_id")
    assert finding["code"] == "binding_mismatch"
    assert finding["recorded"] == lines[0]["attempt_id"]
    assert finding["recomputed"] == lines[1]["outcome"]["attempt_id"]


def test_a_refusals_envelope_is_checked_against_the_bundle(work: tuple[Path, Path]) -> None:
    # The tampered attempt's refusal names no attempt in its record (its
    # identity never validated); only the bundle says which attempt it was.
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    index = next(
        i for i, line in enumerate(lines)
        if line["outcome"]["replay_disposition"] == "candidate_identity_mismatch"
    )  # fmt: skip
    assert lines[index]["outcome"]["attempt_id"] is None
    assert lines[index]["outcome"]["attempt_index"] == index
    lines[index]["attempt_id"] = "e" * 64
    _write_envelopes(outcomes, lines)
    # Nothing in the file itself contradicts it; the bundle the work
    # directory keeps does, and the operator's --bundle too.
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert _codes(report) == {("outcome_mismatch", f"outcome[{index}]")}
    code, report = _audit(work_dir, "--outcomes", outcomes, "--bundle", E2E_BUNDLE)
    assert code == 3
    assert _codes(report) == {("outcome_mismatch", f"outcome[{index}]")}


def test_a_refusal_addressed_at_another_position_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    index = next(i for i, line in enumerate(lines) if "replay_refusal_id" in line["outcome"])
    outcome = lines[index]["outcome"]
    outcome["attempt_index"] = index + 1
    payload = {k: v for k, v in outcome.items() if k != "explanation"}
    outcome["replay_refusal_id"] = sha({**payload, "replay_refusal_id": ""})
    _write_envelopes(outcomes, lines)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    codes = _codes(report)
    assert ("binding_mismatch", f"outcome[{index}] attempt_index") in codes


def test_an_envelope_with_another_shape_is_malformed(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    lines[0]["verified"] = True
    _write_envelopes(outcomes, lines)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("malformed", "outcome[0]") in _codes(report)


def test_bare_outcome_records_are_still_audited(work: tuple[Path, Path]) -> None:
    # The library's own view (bare records, ADR-0013) audits like the envelopes.
    work_dir, outcomes = work
    lines = _envelopes(outcomes)
    _write_envelopes(outcomes, [line["outcome"] for line in lines])
    code, report = _audit(work_dir, "--outcomes", outcomes, "--bundle", E2E_BUNDLE)
    assert code == 0, report
    records = [line["outcome"] for line in lines]
    records[1]["replay_disposition"] = "contract_and_proof_closed"
    _write_envelopes(outcomes, records)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("id_mismatch", "outcome[1] id") in _codes(report)


def test_a_rewritten_metadata_field_is_reported(run_dir: Path) -> None:
    metadata = run_dir / "metadata.json"
    _edit_json(metadata, evidence_digest=DIGEST_LINE)
    code, report = _audit(run_dir)
    assert code == 3
    codes = _codes(report)
    assert ("id_mismatch", "evidence_digest") in codes
    assert ("binding_mismatch", "receipt evidence_digest") in codes


def test_a_rewritten_pass_detail_is_reported(run_dir: Path) -> None:
    # Nothing else binds a PASS's detail (the receipt's backend output holds it only
    # for BLOCKED), and summaries show it: it is the kernel's fixed text or a finding.
    _edit_json(run_dir / "metadata.json", detail="accepted after a manual review")
    code, report = _audit(run_dir)
    assert code == 3
    assert ("inconsistent", "detail") in _codes(report)


def test_a_rewritten_verdict_is_reported(run_dir: Path) -> None:
    _edit_json(run_dir / "metadata.json", verdict="rejected")
    code, report = _audit(run_dir)
    assert code == 3
    codes = _codes(report)
    assert ("inconsistent", "status") in codes
    assert ("binding_mismatch", "receipt verdict") in codes


def test_a_rewritten_work_dir_metadata_field_breaks_the_receipts_binding(
    work: tuple[Path, Path],
) -> None:
    work_dir, outcomes = work
    metadata = _attempts(work_dir)[2] / "run" / "metadata.json"
    _edit_json(metadata, job_digest=DIGEST_LINE)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    codes = _codes(report)
    assert ("binding_mismatch", "job_digest") in codes
    assert ("id_mismatch", "receipt evidence_digest") in codes


def test_an_edited_pin_in_the_stored_manifest_is_reported(work: tuple[Path, Path]) -> None:
    work_dir, outcomes = work
    manifest = _attempts(work_dir)[0] / "manifest.json"
    document = json.loads(manifest.read_bytes())
    document["checks"][0]["checker"]["executable"]["sha256"] = DIGEST_LINE
    manifest.write_text(json.dumps(document))
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("binding_mismatch", "entry checker") in _codes(report)


def test_an_undeclared_evidence_file_and_a_symlink_are_reported(run_dir: Path) -> None:
    (run_dir / "evidence" / "extra.txt").write_text("planted\n")
    log = run_dir / "checker" / "stdout.log"
    log.unlink()
    log.symlink_to("/dev/zero")
    code, report = _audit(run_dir)
    assert code == 3
    codes = _codes(report)
    assert ("undeclared", "artifact:extra.txt") in codes
    assert ("not_regular", "checker.stdout_sha256") in codes


def test_a_certification_directory_no_outcome_names_is_reported(
    work: tuple[Path, Path],
) -> None:
    work_dir, outcomes = work
    shutil.copytree(_attempts(work_dir)[0], work_dir / ("e" * 64), symlinks=True)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("undeclared", "attempt") in _codes(report)


# --- input refused: exit 2, one line ---------------------------------------------------


def test_a_directory_that_is_no_stored_run_is_refused(tmp_path: Path) -> None:
    done = kernel("audit", tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: not_a_run_directory: ")
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    with pytest.raises(AuditInputError) as caught:
        audit_run(tmp_path / "absent")
    assert caught.value.code == "not_a_directory"


def test_an_unreadable_outcomes_file_is_refused(work: tuple[Path, Path]) -> None:
    work_dir, _ = work
    done = kernel("audit", work_dir, "--outcomes", work_dir / "absent.jsonl")
    assert done.returncode == 2
    assert done.stderr.startswith("error: outcomes_unreadable: ")


def test_findings_name_stable_codes() -> None:
    assert {c.value for c in AuditCode} == {
        "missing",
        "not_regular",
        "malformed",
        "digest_mismatch",
        "id_mismatch",
        "binding_mismatch",
        "inconsistent",
        "undeclared",
        "outcome_mismatch",
        "receipt_invalid",
    }


# --- retained replays, paths that climb out, symlinked directories ------------------------


def test_a_retained_replay_is_audited_too(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    outcome = scenario.run()
    run_dir = Path(outcome.attempt_dir)
    replayed = replay_run(
        run_dir,
        replay_id="audit-1",
        limits=RunLimits(30.0, 30.0),
        environment=default_environment(),
        manifest_path=scenario.manifest_path,
        repository_root=scenario.repo,
    )
    assert replayed.metadata.decision.status.value == "PASS"
    code, report = _audit(run_dir)
    assert code == 0, report
    receipt = run_dir / "replays" / "audit-1" / "checker" / "receipt.json"
    receipt.write_bytes(receipt.read_bytes().replace(b'"run_id"', b'"run_id" ', 1))
    code, report = _audit(run_dir)
    assert code == 3
    assert any(
        f["path"] == "replays/audit-1/checker/receipt.json" and f["code"] == "digest_mismatch"
        for f in report["findings"]
    )


def test_a_recorded_path_climbing_out_of_the_run_is_reported_not_followed(run_dir: Path) -> None:
    metadata = run_dir / "metadata.json"
    document = json.loads(metadata.read_bytes())
    secret = run_dir.parent / "outside.txt"
    secret.write_text("not part of the run\n")
    document["artifacts"][0]["path"] = "../../outside.txt"
    metadata.write_text(json.dumps(document))
    code, report = _audit(run_dir)
    assert code == 3
    assert ("malformed", "artifact:../../outside.txt") in _codes(report)


def test_a_symlinked_run_directory_inside_a_work_directory_is_reported(
    work: tuple[Path, Path], tmp_path: Path
) -> None:
    # An honest copy of the run kept elsewhere and linked in: consistent
    # bytes, but not stored where the run keeps them.
    work_dir, outcomes = work
    attempt = _attempts(work_dir)[0]
    shutil.move(attempt / "run", tmp_path / "elsewhere")
    (attempt / "run").symlink_to(tmp_path / "elsewhere")
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3
    assert ("not_regular", "run") in _codes(report)


# --- the receipt rules, applied again to stored receipts (issue 18, finding 7) -----------

EXTERNAL = ROOT / "examples" / "external"


def _relabel_metadata(run: Path, **changes: Any) -> None:
    """metadata.json edited, its receipt digest fixed up to the receipt as it now is."""
    receipt = run / "checker" / "receipt.json"
    _edit_json(run / "metadata.json", receipt_sha256=sha256_file(receipt), **changes)


@pytest.fixture(scope="module")
def rejected_false_claim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`kernel check run` of the shipped false claim |x| < 100: BLOCKED checker_rejected."""
    base = tmp_path_factory.mktemp("false")
    made = subprocess.run(
        [sys.executable, str(EXTERNAL / "make_manifest.py"), str(base)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = kernel(
        "check", "run", base / "manifest.json", "smt-abs-false",
        "--job", EXTERNAL / "jobs" / "smt-abs-false.json", "--repo", EXTERNAL,
        "--run-root", base / "runs", "--run-id", "false-1",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    metadata = json.loads(done.stdout)["metadata"]
    assert (metadata["status"], metadata["reason"]) == ("BLOCKED", "checker_rejected")
    return Path(json.loads(done.stdout)["attempt_dir"])


def test_a_receipt_relabelled_accepted_over_rejected_obligations_is_reported(
    rejected_false_claim: Path, tmp_path: Path
) -> None:
    # Finding 7: the checker rejected every obligation; its receipt is edited
    # to say accepted (the obligations stay rejected) and the metadata
    # relabelled PASS, its receipt digest fixed up. Every digest reproduces;
    # the kernel would refuse that receipt at run time
    # (receipt_verdict_disagrees), and so must the audit.
    run = tmp_path / "run"
    shutil.copytree(rejected_false_claim, run, symlinks=True)
    code, report = _audit(run)
    assert code == 0, report  # the honest BLOCKED run audits intact
    receipt = run / "checker" / "receipt.json"
    document = json.loads(receipt.read_bytes())
    assert document["verdict"] == "rejected"
    assert {o["result"] for o in document["obligations"]} == {"rejected"}
    receipt.write_text(json.dumps({**document, "verdict": "accepted"}))
    _relabel_metadata(
        run, status="PASS", reason=None, verdict="accepted", detail="accepted by a valid receipt"
    )
    code, report = _audit(run)
    assert code == 3, report
    (finding,) = report["findings"]  # nothing else: every digest was fixed up
    assert (finding["code"], finding["subject"], finding["path"]) == (
        "receipt_invalid", "receipt", "checker/receipt.json"
    )
    assert finding["recorded"] == "PASS - accepted"
    assert finding["recomputed"] == "BLOCKED receipt_verdict_disagrees -"
    assert "receipt_verdict_disagrees" in finding["message"]
    text = kernel("audit", run)
    assert text.returncode == 3 and "MISMATCH receipt_invalid checker/receipt.json" in text.stdout


def _reverse_obligations(receipt: dict[str, Any]) -> None:
    receipt["obligations"].reverse()


def _cite_an_unlisted_artifact(receipt: dict[str, Any]) -> None:
    receipt["obligations"][0]["evidence"] = ["metadata.json"]


def _drop_an_obligation(receipt: dict[str, Any]) -> None:
    receipt["obligations"].pop()


def _add_a_field(receipt: dict[str, Any]) -> None:
    receipt["note"] = "trust me"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_reverse_obligations, "receipt_obligations_mismatch"),
        (_cite_an_unlisted_artifact, "receipt_obligation_evidence"),
        (_drop_an_obligation, "receipt_obligations_mismatch"),
        (_add_a_field, "receipt_extra_field"),
    ],
)
def test_a_stored_receipt_that_breaks_a_receipt_rule_is_reported(
    run_dir: Path, edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    # An accepting receipt of a PASS run edited against one rule of seed 003
    # ("Checker receipt": manifest order, evidence only from listed artifacts,
    # every obligation once, exactly ten fields), its digest fixed up in the
    # metadata: the verdict and every bound field still match the metadata.
    receipt = run_dir / "checker" / "receipt.json"
    document = json.loads(receipt.read_bytes())
    edit(document)
    receipt.write_text(json.dumps(document))
    _relabel_metadata(run_dir)
    code, report = _audit(run_dir)
    assert code == 3, report
    assert _codes(report) == {("receipt_invalid", "receipt")}
    assert report["findings"][0]["recomputed"] == f"BLOCKED {reason} -"


def test_a_recorded_ending_the_valid_receipt_does_not_give_is_reported(run_dir: Path) -> None:
    # A valid accepting receipt, the metadata relabelled BLOCKED checker_rejected
    # (verdict kept): each field is possible alone, not together with that receipt.
    _relabel_metadata(run_dir, status="BLOCKED", reason="checker_rejected")
    code, report = _audit(run_dir)
    assert code == 3, report
    assert ("inconsistent", "decision") in _codes(report)


@pytest.fixture(scope="module")
def timed_out_work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`kernel run` of the shipped bundle whose every certification ended producer_timeout."""
    base = tmp_path_factory.mktemp("timeout")
    work, out = base / "work", base / "outcomes.jsonl"
    done = kernel("run", E2E_BUNDLE, "--work-dir", work, "--out", out, "-q", "--deadline", "0.001")
    assert done.returncode == 3, done.stderr  # the shipped tampered attempt, as always
    return work, out


def test_an_accepting_certification_of_a_blocked_run_is_reported(
    timed_out_work_dir: tuple[Path, Path], tmp_path: Path
) -> None:
    # The certification of a run that timed out relabelled VERIFIED, its
    # receipt_id resealed by hand; its evidence_digest still binds the run's
    # metadata (BLOCKED producer_timeout), so only the status says it.
    source, outcomes = timed_out_work_dir
    work_dir = tmp_path / "work"
    shutil.copytree(source, work_dir, symlinks=True)
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 0, report
    record = _attempts(work_dir)[0] / "certification.json"
    metadata = json.loads((record.parent / "run" / "metadata.json").read_bytes())
    assert (metadata["status"], metadata["reason"]) == ("BLOCKED", "producer_timeout")
    document = json.loads(record.read_bytes())
    receipt = document["receipt"]
    assert receipt["status"] == "INCONCLUSIVE"
    receipt.update(status="VERIFIED", backend_verdict="verified")
    receipt["receipt_id"] = sha({k: v for k, v in receipt.items() if k != "receipt_id"})
    record.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n")
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3, report
    # The certification no longer derives, so the re-derived outcome (the
    # obligation unavailable) is not the stored one either.
    assert _codes(report) == {
        ("inconsistent", "certification status"), ("outcome_mismatch", "outcome[2]"),
    }


def test_a_certification_without_its_run_is_reported(work: tuple[Path, Path]) -> None:
    # Removing run/ removed everything the certification has to agree with;
    # the certifier writes certification.json only after the run's metadata.
    work_dir, outcomes = work
    attempt = next(p for p in _attempts(work_dir) if (p / "certification.json").exists())
    shutil.rmtree(attempt / "run")
    code, report = _audit(work_dir, "--outcomes", outcomes)
    assert code == 3, report
    assert ("missing", "file") in _codes(report)
    assert any(f["path"] == f"{attempt.name}/run/metadata.json" for f in report["findings"])
