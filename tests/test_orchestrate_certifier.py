"""The main job with the real z3 -> cvc5 pair (no mock of the process layer).

Each certification runs ``kernel/programs/*.py`` through
``kernel.external.run_check`` with pins computed on this machine.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import multiprocessing
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from kernel.commands.replay import outcome_lines
from kernel.external import Pin
from kernel.orchestrate import (
    CERTIFICATION_RECORD,
    RUN_ID,
    CertificationTask,
    ExternalCertifier,
    author_session,
    certification_entry,
    discover_tools,
    producer_session,
    replay_bundle,
    replay_requests,
)
from kernel.organs import (
    CERTIFICATION_MEDIA_TYPE,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
    CertificationEvidence,
    certification_problem,
)
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ProofsReplayed,
    ProofStatus,
    ReplayAdapterOutcome,
    ReplayAdapterResult,
    ReplayDisposition,
    Validated,
    dispose,
    finish_attempt,
    replay_contract,
    replay_proofs,
    requests_from_bundle,
    validate,
)
from kernel.serde import dumps, loads
from kernel.verification import Role, Status
from tests.orchestrate_helpers import certifier, e2e_bundle, shipped_entry
from tests.support import reference
from tests.support.reference import sha

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leftovers")]

D = ReplayDisposition
EXPECTED = (
    D.CONTRACT_AND_PROOF_CLOSED,
    D.CONTRACT_REFUSED,
    D.CONTRACT_CLOSED_BUT_PROOF_REFUSED,
    D.CONTRACT_AND_PROOF_CLOSED,
    D.UNSUPPORTED_REPLAY_POLICY,
    D.CANDIDATE_IDENTITY_MISMATCH,
)
CERTIFIED = (0, 2, 3)  # the attempts whose contract closes


@functools.cache
def _inline_bytes(work_dir: Path) -> bytes:
    return outcome_lines(replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, certifier(work_dir)))


@pytest.fixture(scope="module")
def inline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    work = tmp_path_factory.mktemp("inline") / "work"
    return work, _inline_bytes(work)


def _outcomes(data: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in data.splitlines()]


def _contract_closed(index: int) -> ContractClosed:
    validated = validate(requests_from_bundle(e2e_bundle())[index], CERTIFIED_MANIFEST)
    assert isinstance(validated, Validated)
    state = replay_contract(validated)
    assert isinstance(state, ContractClosed)
    return state


def _one(work: Path, provider: ExternalCertifier, index: int = 0) -> ReplayAdapterOutcome:
    (outcome,) = replay_requests(
        (requests_from_bundle(e2e_bundle())[index],), CERTIFIED_MANIFEST, provider
    )
    return outcome


# --- the shipped scenario ------------------------------------------------------------


def test_the_shipped_bundle_gives_one_outcome_per_disposition_family(
    inline: tuple[Path, bytes],
) -> None:
    work, data = inline
    rows = _outcomes(data)
    assert [row["replay_disposition"] for row in rows] == [d.value for d in EXPECTED]
    assert rows[2]["reason_codes"] == [
        "proof_refused:arithmetic.evidence_grounded",
        "arithmetic.evidence_grounded:ungrounded:boxes",
    ]
    for index in (0, 3):
        assert rows[index]["proof_obligation_refs"] == [
            "arithmetic.evidence_grounded", "arithmetic.target_determined", TARGET_CERTIFIED,
        ]  # fmt: skip
        assert len(rows[index]["proof_replay_refs"]) == 3  # type: ignore[arg-type]
    # Certification ran exactly for the contract-closed attempts, each in its own directory.
    attempts = requests_from_bundle(e2e_bundle())
    assert sorted(p.name for p in work.iterdir()) == sorted(
        attempts[i].replay_input.attempt_id for i in CERTIFIED
    )


def test_each_certification_was_a_real_z3_then_cvc5_run(inline: tuple[Path, bytes]) -> None:
    work, _ = inline
    for index in CERTIFIED:
        attempt = work / requests_from_bundle(e2e_bundle())[index].replay_input.attempt_id
        run = attempt / RUN_ID
        problem = certification_problem(_contract_closed(index).validated.candidate_frame)
        assert problem is not None
        assert (attempt / "repository" / "certification.smt2").read_text() == problem
        assert (run / "evidence" / "target_certified.smt2").read_text() == problem
        assert (run / "evidence" / "z3-answer.txt").read_text() == "target_certified unsat\n"
        assert "cvc5: target_certified: unsat (z3 said unsat)" in (
            run / "checker" / "stdout.log"
        ).read_text()
        metadata = json.loads((run / "metadata.json").read_text())
        assert metadata["status"] == "PASS" and metadata["reason"] is None
        receipt_bytes = (run / "checker" / "receipt.json").read_bytes()
        assert metadata["receipt_sha256"] == hashlib.sha256(receipt_bytes).hexdigest()
        assert json.loads(receipt_bytes)["verdict"] == "accepted"


def test_the_certified_result_binds_the_sealed_receipt(
    inline: tuple[Path, bytes], tmp_path: Path
) -> None:
    state = _contract_closed(0)
    replay_input = state.validated.request.replay_input
    (item,) = certifier(tmp_path / "work").gather(state)
    assert (item.obligation_ref, item.media_type) == (
        TARGET_CERTIFIED,
        "application/vnd.replay-kernel.certification+json",
    )
    evidence = loads(item.document, CertificationEvidence)
    receipt = evidence.receipt
    # The receipt is an independent, observed assurance VERIFIED for this candidate.
    assert receipt.status is Status.VERIFIED
    assert receipt.candidate.digest == replay_input.candidate_digest
    assert receipt.candidate.author_session == author_session(replay_input.run_id)
    assert receipt.produced_by.role is Role.TEST_ENGINEER
    assert receipt.produced_by.session == producer_session(receipt.backend_version)
    assert receipt.produced_by.session != receipt.candidate.author_session
    receipt_doc = json.loads(dumps(receipt))
    receipt_id = receipt_doc.pop("receipt_id")
    assert receipt_id == sha(receipt_doc)
    # The run's own record is what the backend output (and so the receipt) sealed.
    metadata = json.loads(
        (tmp_path / "work" / replay_input.attempt_id / RUN_ID / "metadata.json").read_text()
    )
    assert receipt.backend_version == metadata["check_digest"]
    assert (tmp_path / "work" / replay_input.attempt_id / CERTIFICATION_RECORD).read_bytes() == (
        item.document + b"\n"
    )
    proofs = replay_proofs(state, (item,))
    assert isinstance(proofs, ProofsReplayed)
    certified = proofs.outcomes[2]
    assert certified.status is ProofStatus.CLOSED
    # It names what was certified by content (ADR-0019), not the receipt: the
    # content digest is recomputed from the stored manifest entry's JSON.
    attempt_dir = tmp_path / "work" / replay_input.attempt_id
    manifest = json.loads((attempt_dir / "manifest.json").read_text())
    (entry,) = manifest["checks"]
    settings = {s.name: s.value for s in evidence.request.command_configuration.settings}
    assert settings["check-content-digest"] == reference.check_content_digest(entry)
    assert settings["check-digest"] == receipt.backend_version
    problem_sha = reference.sha256_file(
        tmp_path / "work" / replay_input.attempt_id / "repository" / "certification.smt2"
    )
    assert certified.reason_codes == (
        "certified:"
        + reference.certification_digest(
            replay_input.candidate_digest, problem_sha, reference.check_content_digest(entry)
        ),
    )
    assert receipt_id not in certified.reason_codes[0]
    outcome_doc = json.loads(dumps(certified))
    del outcome_doc["explanation"]
    outcome_doc["proof_outcome_id"] = ""
    assert sha(outcome_doc) == certified.proof_outcome_id
    result = dispose(proofs)
    assert result.proof_replay_refs[2] == certified.proof_outcome_id
    result_doc = json.loads(dumps(result))
    del result_doc["explanation"]
    result_doc["replay_result_id"] = ""
    assert sha(result_doc) == result.replay_result_id
    # Another work directory, the same bytes as the whole-bundle run.
    assert dumps(result) == inline[1].splitlines()[0]


# --- executors --------------------------------------------------------------------------


def test_a_thread_pool_gives_the_inline_bytes(inline: tuple[Path, bytes], tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = replay_bundle(
            e2e_bundle(), CERTIFIED_MANIFEST, certifier(tmp_path / "work"), executor=pool
        )
    assert outcome_lines(outcomes) == inline[1]


def test_a_process_pool_gives_the_inline_bytes(inline: tuple[Path, bytes], tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        outcomes = replay_bundle(
            e2e_bundle(), CERTIFIED_MANIFEST, certifier(tmp_path / "work"), executor=pool
        )
    assert outcome_lines(outcomes) == inline[1]
    assert len(list((tmp_path / "work").iterdir())) == len(CERTIFIED)


# --- fail closed -----------------------------------------------------------------------------


def _assert_certification_refused(outcome: ReplayAdapterOutcome, *codes: str) -> None:
    assert isinstance(outcome, ReplayAdapterResult)
    assert outcome.replay_disposition is D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert outcome.reason_codes == codes


def _run_reason(work: Path, index: int = 0) -> str:
    attempt = requests_from_bundle(e2e_bundle())[index].replay_input.attempt_id
    metadata = json.loads((work / attempt / RUN_ID / "metadata.json").read_text())
    assert metadata["status"] == "BLOCKED"
    return str(metadata["reason"])


FORGER = """\
import json, sys
request = json.load(open(sys.argv[1]))
names = request["claim"]["obligations"]
keys = ("job_id", "run_id", "check_id", "check_digest", "specification_digest",
        "identity", "evidence_digest")
receipt = {key: request[key] for key in keys}
receipt.update(schema_version=1, verdict="accepted", obligations=[
    {"name": n, "result": "accepted", "evidence": [n + ".smt2"]} for n in names])
json.dump(receipt, open(sys.argv[2], "w"))
"""


def test_a_checker_swapped_for_a_forger_after_pinning_never_closes(tmp_path: Path) -> None:
    tools = discover_tools(Path(sys.executable))
    checker = tmp_path / "smt_certify_checker.py"
    shutil.copyfile(tools.checker_script, checker)
    entry = certification_entry(attrs.evolve(tools, checker_script=str(checker)))
    checker.write_text(FORGER)  # after pinning: a checker that accepts anything
    outcome = _one(tmp_path / "work", certifier(tmp_path / "work", entry))
    _assert_certification_refused(
        outcome,
        f"proof_refused:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:gate:status_inconclusive",
    )
    assert _run_reason(tmp_path / "work") == "pin_mismatch"


def test_a_changed_checker_pin_never_closes(tmp_path: Path) -> None:
    entry = shipped_entry()
    script = entry.checker.dependencies[0]
    wrong = Pin(script.path, hashlib.sha256(b"another checker").hexdigest())
    entry = attrs.evolve(entry, checker=attrs.evolve(entry.checker, dependencies=(wrong,)))
    outcome = _one(tmp_path / "work", certifier(tmp_path / "work", entry))
    _assert_certification_refused(
        outcome,
        f"proof_refused:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:gate:status_inconclusive",
    )
    assert _run_reason(tmp_path / "work") == "pin_mismatch"


def test_a_producer_past_its_deadline_is_killed_and_never_closes(tmp_path: Path) -> None:
    outcome = _one(tmp_path / "work", certifier(tmp_path / "work", producer_seconds=0.001))
    _assert_certification_refused(
        outcome,
        f"proof_refused:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:gate:status_inconclusive",
    )
    assert _run_reason(tmp_path / "work") == "producer_timeout"
    attempt = requests_from_bundle(e2e_bundle())[0].replay_input.attempt_id
    record = (tmp_path / "work" / attempt / CERTIFICATION_RECORD).read_bytes()
    receipt = loads(record, CertificationEvidence).receipt
    assert (receipt.status, receipt.backend_verdict.value) == (Status.INCONCLUSIVE, "unknown")


def test_a_used_attempt_directory_is_never_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    work = tmp_path / "work"
    attempt = work / requests_from_bundle(e2e_bundle())[0].replay_input.attempt_id
    attempt.mkdir(parents=True)
    (attempt / "stale").write_text("from an earlier run")
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        outcome = _one(work, certifier(work))
    _assert_certification_refused(
        outcome,
        f"proof_unavailable:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:no_certification_evidence",
    )
    assert "not empty (never reused)" in caplog.text
    assert sorted(p.name for p in attempt.iterdir()) == ["stale"]


def test_an_unwritable_work_directory_is_no_evidence_not_an_exception(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "work"
    blocker.write_text("a file where the work directory should be")
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        outcome = _one(blocker, certifier(blocker))
    _assert_certification_refused(
        outcome,
        f"proof_unavailable:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:no_certification_evidence",
    )
    assert "no arithmetic.target_certified evidence" in caplog.text


def test_evidence_from_another_candidates_run_never_closes(tmp_path: Path) -> None:
    (item,) = certifier(tmp_path / "a").gather(_contract_closed(2))
    proofs = replay_proofs(_contract_closed(0), (item,))
    assert isinstance(proofs, ProofsReplayed)
    outcome = dispose(proofs)
    assert outcome.replay_disposition is D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert f"proof_refused:{TARGET_CERTIFIED}" in outcome.reason_codes


@attrs.frozen
class _Misattributing:
    """Hands the executor, for any attempt, the real certification task of attempt ``other``."""

    inner: ExternalCertifier
    other: int

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        return self.task_for(state).gather()

    def task_for(self, state: ContractClosed) -> CertificationTask:
        return self.inner.task_for(_contract_closed(self.other))


def test_a_task_that_certifies_another_attempt_never_closes_this_one(tmp_path: Path) -> None:
    # Only the task crosses the pool; the driver keeps attempt 0's state and
    # binds what comes back to it, so a real certification of attempt 2 is
    # judged as evidence for attempt 0, and refused.
    work = tmp_path / "work"
    requests = requests_from_bundle(e2e_bundle())
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        (outcome,) = replay_requests(
            (requests[0],), CERTIFIED_MANIFEST, _Misattributing(certifier(work), 2), executor=pool
        )
    other = requests[2].replay_input.attempt_id
    assert [p.name for p in work.iterdir()] == [other]  # the worker certified attempt 2
    stored = (work / other / CERTIFICATION_RECORD).read_bytes().rstrip(b"\n")
    assert loads(stored, CertificationEvidence).receipt.status is Status.VERIFIED
    assert isinstance(outcome, ReplayAdapterResult)
    assert outcome.attempt_id == requests[0].replay_input.attempt_id
    assert outcome.replay_disposition is D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert outcome.reason_codes == (
        f"proof_refused:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:certification_not_for_this_problem",
    )
    # Exactly what the pure machine makes of attempt 0 with that evidence.
    item = ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, stored)
    assert outcome == finish_attempt(_contract_closed(0), (item,))
