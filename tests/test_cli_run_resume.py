"""`kernel run` interrupted for real (SIGINT, SIGTERM) and continued with --resume.

A real run of real certifications (z3 -> cvc5) is signalled once it has
recorded some outcomes; it must leave a marker and exit 130 / 143; --resume
must keep what was recorded (the certification files are not touched
again), redo the rest, and give exactly the bytes of an uninterrupted run.

A resumed work directory is a run store, an attacker (THREAT_MODEL.md): the
forgeries below are made with the kernel's own library, as an attacker with
the package installed would make them, so every id in them recomputes (each
is checked with the reference hasher); only deriving each stored
certification again from its run's own records tells them apart (issue 18,
finding 6).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
from typer.testing import CliRunner

from kernel.bundles import outcome_line
from kernel.cli import app
from kernel.external import Decision, Reason, RunMetadata, RunOutcome, Status, Verdict
from kernel.orchestrate import backend_output, producer_session, replay_bundle
from kernel.organs import (
    CERTIFICATION_MEDIA_TYPE,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
    CertificationEvidence,
    certification_spec,
)
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ReplayAdapterOutcome,
    ReplayAdapterResult,
    ReplayBundle,
    requests_from_bundle,
)
from kernel.serde import dumps, loads
from kernel.verification import (
    Producer,
    Role,
    VerificationPlan,
    VerificationReceipt,
    plan_verification,
    seal_verification,
)
from kernel.verification import Status as ReceiptStatus
from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN
from tests.support.processes import assert_no_leftover
from tests.support.reference import sha, sha256_file

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
runner = CliRunner()
ATTEMPTS = 6


def _closing_bundle(tmp_path: Path, attempts: int = ATTEMPTS) -> Path:
    """``attempts`` attempts (six by default) whose contracts all close: one certification each."""
    doc = json.loads(DRAFT.read_text())
    closing = [doc["candidates"][0], doc["candidates"][3]]
    doc["candidates"] = [closing[i % 2] for i in range(attempts)]
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(doc))
    out = tmp_path / "bundle.json"
    result = runner.invoke(app, ["bundle", str(draft), "--manifest", "certified.v1",
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _run(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, "run", *map(str, args)],
                          capture_output=True, timeout=300, check=False)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


def _interrupt(bundle: Path, work: Path, signum: int) -> subprocess.CompletedProcess[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", KERNEL_MAIN, "run", str(bundle), "--work-dir", str(work), "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(_lines(work / "outcomes.jsonl")) < 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "name"),
                         [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_run_leaves_a_marker_and_resumes_to_the_uninterrupted_bytes(
    tmp_path: Path, signum: int, code: int, name: str
) -> None:
    bundle = _closing_bundle(tmp_path)
    reference = _run(bundle, "--work-dir", tmp_path / "whole", "-q", "-f", "jsonl")
    assert reference.returncode == 0, reference.stderr
    assert len(reference.stdout.splitlines()) == ATTEMPTS

    work = tmp_path / "work"
    stopped = _interrupt(bundle, work, signum)
    assert stopped.returncode == code, stopped.stderr
    assert stopped.stderr.decode().startswith(f"error: interrupted: {name} after ")
    assert "Traceback" not in stopped.stderr.decode()
    marker = json.loads((work / "INTERRUPTED").read_text())
    recorded = _lines(work / "outcomes.jsonl")
    assert marker == {"signal": name, "outcomes_recorded": len(recorded)}
    assert 2 <= len(recorded) < ATTEMPTS
    kept = {json.loads(line)["attempt_id"] for line in recorded}
    before = {a: os.stat(work / a / "certification.json") for a in kept}

    again = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work)])
    assert again.exit_code == 2 and again.stderr.startswith("error: work_dir_not_empty: ")

    out = tmp_path / "outcomes.jsonl"
    resumed = _run(bundle, "--work-dir", work, "--resume", "--out", out, "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == reference.stdout  # every attempt once, in order, same bytes
    assert (work / "outcomes.jsonl").read_bytes() == reference.stdout
    assert not (work / "INTERRUPTED").exists()
    for attempt, stat in before.items():  # recorded attempts were not certified again
        now = os.stat(work / attempt / "certification.json")
        assert (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert_no_leftover(tmp_path)


def test_resume_refuses_a_work_directory_of_another_run(tmp_path: Path) -> None:
    bundle = _closing_bundle(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "run-state.json").write_text('{"format": "something else"}\n')
    result = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work), "--resume"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: resume_other_run: ")


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    bundle = _closing_bundle(tmp_path)
    work = tmp_path / "other"
    work.mkdir()
    (work / "notes.txt").write_text("not a run\n")
    result = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work), "--resume"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: resume_not_a_run: ")


@pytest.mark.parametrize("state", ["absent", "empty"])
def test_resume_of_a_work_directory_that_holds_nothing_starts_fresh_and_says_so(
    tmp_path: Path, state: str
) -> None:
    # Issue 35, finding 7: a SIGINT at 0.4 s gave 130 before the work directory
    # existed, and the --resume a wrapper then tried failed as resume_not_a_run.
    bundle = _closing_bundle(tmp_path)
    work = tmp_path / "work"
    if state == "empty":
        work.mkdir()
    fresh = runner.invoke(app, ["run", str(bundle), "--work-dir", str(tmp_path / "fresh"),
                                "-o", str(tmp_path / "fresh.jsonl")])
    result = runner.invoke(app, ["run", str(bundle), "--work-dir", str(work), "--resume",
                                 "-o", str(tmp_path / "resumed.jsonl")])
    assert result.exit_code == fresh.exit_code, result.stderr
    assert f"note: --resume: {work} holds no run yet (absent or empty); starting fresh" in (
        result.stderr)
    assert (tmp_path / "resumed.jsonl").read_bytes() == (tmp_path / "fresh.jsonl").read_bytes()
    assert (work / "run-state.json").is_file()


# --- a work directory forged with the kernel's own library (issue 18, finding 6) ------


def _tree(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under ``root``: (mode, mtime_ns, bytes or link target), i.e. "untouched"."""
    entries: dict[str, tuple[int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            content = os.readlink(path).encode()
        elif path.is_file():
            content = path.read_bytes()
        else:
            content = b""
        entries[path.relative_to(root).as_posix()] = (info.st_mode, info.st_mtime_ns, content)
    return entries


class _AsStored:
    """The forger's provider: whatever ``certification.json`` holds now, unexamined."""

    def __init__(self, work: Path) -> None:
        self.work = work

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        attempt = state.validated.request.replay_input.attempt_id
        path = self.work / attempt / "certification.json"
        if not path.is_file():
            return ()
        document = path.read_bytes().rstrip(b"\n")
        return (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, document),)


def _reseal_certification(attempt: Path, metadata: RunMetadata) -> VerificationReceipt:
    """certification.json sealed again, as the certifier seals it, over ``metadata``."""
    stored = loads((attempt / "certification.json").read_bytes(), CertificationEvidence)
    request = stored.request
    settings = {s.name: s.value for s in request.command_configuration.settings}
    check = settings["check-digest"]
    plan = plan_verification(certification_spec(
        candidate_digest=request.candidate.digest,
        author_session=request.candidate.author_session,
        problem=(attempt / "repository" / "certification.smt2").read_text(),
        check_digest=check,
        check_content_digest=settings["check-content-digest"],
    ))
    assert isinstance(plan, VerificationPlan)
    output = backend_output(
        RunOutcome(str(attempt / "run"), metadata),
        candidate_digest=request.candidate.digest,
        check_digest=check,
        work_dir=Path(metadata.run.repository_root).parent.parent,
    )
    receipt = seal_verification(plan, output, Producer(Role.TEST_ENGINEER, producer_session(check)))
    assert isinstance(receipt, VerificationReceipt)
    (attempt / "certification.json").write_bytes(
        dumps(CertificationEvidence(plan.request, receipt)) + b"\n"
    )
    # The forgery is sealed correctly: its id recomputes independently.
    document = json.loads((attempt / "certification.json").read_bytes())["receipt"]
    assert document["receipt_id"] == sha({k: v for k, v in document.items() if k != "receipt_id"})
    return receipt


def _reseal_log(bundle: Path, work: Path) -> tuple[ReplayAdapterOutcome, ...]:
    """outcomes.jsonl written again by the pure core from what the directory now holds."""
    run = loads(bundle.read_bytes(), ReplayBundle)
    ids = [request.attempt.attempt_id for request in requests_from_bundle(run)]
    outcomes = replay_bundle(run, CERTIFIED_MANIFEST, _AsStored(work))
    (work / "outcomes.jsonl").write_bytes(
        b"".join(outcome_line(i, ids[i], outcome) for i, outcome in enumerate(outcomes))
    )
    for line in (work / "outcomes.jsonl").read_bytes().splitlines():  # ids recompute, too
        record = json.loads(line)["outcome"]
        payload = {k: v for k, v in record.items() if k != "explanation"}
        assert record["replay_result_id"] == sha({**payload, "replay_result_id": ""})
    return outcomes


def _attempt_dirs(work: Path) -> list[Path]:
    return sorted(p for p in work.iterdir() if (p / "certification.json").is_file())


def _refused_untouched(bundle: Path, work: Path, tmp_path: Path) -> str:
    """--resume over ``work``: exit 3 resume_log_tampered, nothing written anywhere."""
    before = _tree(work)
    out = tmp_path / "resumed.jsonl"
    done = _run(bundle, "--work-dir", work, "--resume", "-q", "-o", out)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 3, (done.returncode, err)
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("error: resume_log_tampered: "), err
    assert done.stdout == b"" and not out.exists()
    assert _tree(work) == before  # byte for byte, modes and times included
    assert_no_leftover(tmp_path)
    return err


def _timed_out_work(tmp_path: Path) -> tuple[Path, Path]:
    """Two attempts whose certification ended BLOCKED producer_timeout (z3 never answered)."""
    bundle = _closing_bundle(tmp_path, 2)
    work = tmp_path / "work"
    done = _run(bundle, "--work-dir", work, "--deadline", "0.001", "-q")
    assert done.returncode == 1, done.stderr  # unavailable: nothing certified
    assert len(_attempt_dirs(work)) == 2
    for attempt in _attempt_dirs(work):
        metadata = json.loads((attempt / "run" / "metadata.json").read_bytes())
        assert (metadata["status"], metadata["reason"]) == ("BLOCKED", "producer_timeout")
    return bundle, work


def test_resume_refuses_certifications_resealed_over_a_blocked_run(tmp_path: Path) -> None:
    # Finding 6: certification.json and the outcome lines resealed with the
    # kernel's library as if the run had passed, its metadata.json left
    # BLOCKED producer_timeout. Every id recomputes and each line is exactly
    # what the pure core gives for the forged certification; only the run's
    # own records say it never passed.
    bundle, work = _timed_out_work(tmp_path)
    for attempt in _attempt_dirs(work):
        blocked = loads((attempt / "run" / "metadata.json").read_bytes(), RunMetadata)
        passed = attrs.evolve(blocked, decision=Decision(
            Verdict.ACCEPTED, Status.PASS, None, "accepted by a valid receipt"))
        assert _reseal_certification(attempt, passed).status is ReceiptStatus.VERIFIED
        assert blocked.decision.reason is Reason.PRODUCER_TIMEOUT  # metadata.json untouched
    outcomes = _reseal_log(bundle, work)
    assert all(isinstance(o, ReplayAdapterResult)
               and o.replay_disposition.value == "contract_and_proof_closed" for o in outcomes)
    err = _refused_untouched(bundle, work, tmp_path)
    assert "does not derive from its run's records" in err, err


def test_resume_applies_the_receipt_rules_to_each_stored_checker_receipt(tmp_path: Path) -> None:
    # The checker's receipt edited so that its verdict (accepted) disagrees
    # with every obligation (rejected); the metadata's receipt digest, the
    # certification and the outcome lines all resealed to match. The kernel
    # refuses that receipt at run time (receipt_verdict_disagrees), so
    # --resume must not keep the closed line it backs, and kernel audit
    # reports it.
    bundle = _closing_bundle(tmp_path, 2)
    work = tmp_path / "work"
    honest = _run(bundle, "--work-dir", work, "-q")
    assert honest.returncode == 0, honest.stderr
    attempt = _attempt_dirs(work)[0]
    receipt_path = attempt / "run" / "checker" / "receipt.json"
    receipt = json.loads(receipt_path.read_bytes())
    assert receipt["verdict"] == "accepted"
    receipt["obligations"] = [{**o, "result": "rejected"} for o in receipt["obligations"]]
    receipt_path.write_text(json.dumps(receipt))
    metadata_path = attempt / "run" / "metadata.json"
    document = json.loads(metadata_path.read_bytes())
    document["receipt_sha256"] = sha256_file(receipt_path)
    metadata_path.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n")
    _reseal_certification(attempt, loads(metadata_path.read_bytes(), RunMetadata))
    outcomes = _reseal_log(bundle, work)
    assert all(isinstance(o, ReplayAdapterResult)
               and o.replay_disposition.value == "contract_and_proof_closed" for o in outcomes)
    _refused_untouched(bundle, work, tmp_path)
    audit = subprocess.run(
        [sys.executable, "-c", KERNEL_MAIN, "audit", str(work), "--outcomes",
         str(work / "outcomes.jsonl"), "--format", "json"],
        capture_output=True, timeout=120, check=False,
    )
    assert audit.returncode == 3, audit.stdout
    findings = json.loads(audit.stdout)["findings"]
    # The audit re-derives by default: the closed line that receipt backed
    # is not what the pure core gives once the certification does not count.
    assert {(f["code"], f["subject"]) for f in findings} == {
        ("receipt_invalid", "receipt"), ("outcome_mismatch", "outcome[1]"),
    }


def test_resume_keeps_honest_blocked_certifications(tmp_path: Path) -> None:
    # The check above must not refuse what the kernel itself recorded: a
    # work directory of BLOCKED certifications resumes to its own bytes.
    bundle, work = _timed_out_work(tmp_path)
    recorded = (work / "outcomes.jsonl").read_bytes()
    out = tmp_path / "resumed.jsonl"
    done = _run(bundle, "--work-dir", work, "--resume", "-q", "-o", out)
    assert done.returncode == 1, done.stderr  # unavailable, as the run itself ended
    assert out.read_bytes() == recorded == (work / "outcomes.jsonl").read_bytes()
