"""Replay: retained evidence, currently pinned checker only, never the stored status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernel.external import (
    Reason,
    RunKind,
    RunRecordError,
    Status,
)
from tests.support.reference import canonical, sha256_file
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, Scenario, replay_stored

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _counting_scenario(tmp_path: Path, **kwargs: Any) -> Scenario:
    counter = tmp_path / "producer-runs.txt"
    producer = HONEST_PRODUCER + f"open({str(counter)!r}, 'a').write('x')\n"
    return Scenario(tmp_path, producer=producer, **kwargs)


def test_replay_reruns_only_the_checker_in_a_fresh_attempt(tmp_path: Path) -> None:
    # The producer counts its runs in a file outside evidence/: below the sandbox.
    scenario = _counting_scenario(tmp_path, max_containment=BELOW_SANDBOX)
    run = scenario.run()
    assert run.status is Status.PASS
    replay = replay_stored(run.attempt_dir)
    assert replay.status is Status.PASS
    assert (tmp_path / "producer-runs.txt").read_text() == "x", "the producer never reruns"
    attempt = Path(replay.attempt_dir)
    assert attempt == Path(run.attempt_dir) / "replays" / "replay-1"
    meta = replay.metadata
    assert meta.run.kind is RunKind.REPLAY
    assert meta.run.replay_of == "run-1" and meta.run.run_id == "replay-1"
    assert meta.execution.producer is None and meta.execution.checker is not None
    assert meta.checked.artifacts == run.metadata.checked.artifacts
    assert meta.checked.evidence_digest == run.metadata.checked.evidence_digest
    assert meta.execution.receipt_sha256 == sha256_file(attempt / "checker" / "receipt.json")
    receipt = json.loads((attempt / "checker" / "receipt.json").read_bytes())
    assert receipt["run_id"] == "replay-1"
    for item in meta.checked.artifacts:
        assert sha256_file(attempt / "evidence" / item.path) == item.sha256
    stored = json.loads((attempt / "metadata.json").read_bytes())
    assert (attempt / "metadata.json").read_bytes() == canonical(stored) + b"\n"
    # the original run's own metadata is untouched
    assert json.loads(Path(run.attempt_dir, "metadata.json").read_bytes())["kind"] == "run"


def test_replay_after_evidence_changed_on_disk_is_blocked(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    proof = Path(run.attempt_dir, "evidence", "proof.txt")
    proof.write_text("evidence for proof.txt, edited later\n")
    replay = replay_stored(run.attempt_dir)
    assert replay.status is Status.BLOCKED and replay.reason is Reason.EVIDENCE_CHANGED
    assert replay.metadata.execution.checker is None


@pytest.mark.parametrize("change", ["deleted", "extra", "symlink"])
def test_replay_after_evidence_removed_added_or_linked_is_blocked(
    tmp_path: Path, change: str
) -> None:
    run = Scenario(tmp_path).run()
    evidence = Path(run.attempt_dir, "evidence")
    if change == "deleted":
        (evidence / "proof.txt").unlink()
    elif change == "extra":
        (evidence / "extra.txt").write_text("x")
    else:
        content = (evidence / "proof.txt").read_bytes()
        (tmp_path / "copy.txt").write_bytes(content)
        (evidence / "proof.txt").unlink()
        (evidence / "proof.txt").symlink_to(tmp_path / "copy.txt")
    assert replay_stored(run.attempt_dir).reason is Reason.EVIDENCE_CHANGED


def test_replay_after_the_checker_pin_changed_is_blocked(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    scenario.checker_script.write_text(scenario.checker_script.read_text() + "# v2\n")
    replay = replay_stored(run.attempt_dir)
    assert replay.reason is Reason.PIN_MISMATCH
    assert str(scenario.checker_script) in replay.metadata.decision.detail


def test_replay_uses_the_currently_pinned_checker(tmp_path: Path) -> None:
    # Re-approving a new checker (manifest re-pinned) makes replay run *it*.
    scenario = Scenario(tmp_path)
    run = scenario.run()
    assert run.status is Status.PASS
    text = scenario.checker_script.read_text().replace("WRITE = True", "WRITE = False")
    scenario.checker_script.write_text(text)
    scenario.write_manifest()
    replay = replay_stored(run.attempt_dir)
    assert replay.reason is Reason.RECEIPT_MISSING
    assert replay.metadata.checked.check_digest != run.metadata.checked.check_digest


def test_replay_never_trusts_the_stored_status(tmp_path: Path) -> None:
    scenario = Scenario(
        tmp_path,
        checker_custom=(
            "def mutate(r):\n"
            "    r['verdict'] = 'rejected'\n"
            "    r['obligations'][0]['result'] = 'rejected'\n"
            "    return r\n"
        ),
    )
    run = scenario.run()
    assert run.reason is Reason.CHECKER_REJECTED
    # Forge the stored record into a PASS with a verdict: replay still asks the checker.
    meta_path = Path(run.attempt_dir, "metadata.json")
    meta = json.loads(meta_path.read_bytes())
    meta.update(status="PASS", reason=None, verdict="accepted", detail="forged")
    meta_path.write_bytes(canonical(meta))
    replay = replay_stored(run.attempt_dir)
    assert replay.status is Status.BLOCKED and replay.reason is Reason.CHECKER_REJECTED


def test_replay_of_a_run_without_complete_evidence_is_blocked(tmp_path: Path) -> None:
    run = Scenario(tmp_path, producer="import sys\nsys.exit(2)\n").run()
    assert run.reason is Reason.PRODUCER_FAILED
    assert replay_stored(run.attempt_dir).reason is Reason.EVIDENCE_CHANGED


def test_replay_checks_the_current_specification(tmp_path: Path) -> None:
    # The checker records the specification digest it was asked about.
    scenario = Scenario(tmp_path)
    run = scenario.run()
    (scenario.repo / "spec" / "claim.txt").write_text("claim: 2 + 2 = 4\n")
    replay = replay_stored(run.attempt_dir)
    assert replay.status is Status.PASS
    specification_digest = replay.metadata.checked.specification_digest
    assert specification_digest == sha256_file(scenario.repo / "spec" / "claim.txt")
    assert specification_digest != run.metadata.checked.specification_digest


def test_unreadable_or_forged_run_records_are_refused(tmp_path: Path) -> None:
    run = Scenario(tmp_path).run()
    meta_path = Path(run.attempt_dir, "metadata.json")
    original = meta_path.read_bytes()
    meta_path.write_bytes(original[:-10])
    with pytest.raises(RunRecordError):
        replay_stored(run.attempt_dir, "a")
    meta = json.loads(original)
    meta["surprise"] = 1
    meta_path.write_bytes(canonical(meta))
    with pytest.raises(RunRecordError):
        replay_stored(run.attempt_dir, "b")
    meta_path.write_bytes(original)
    replay = replay_stored(run.attempt_dir, "c")
    with pytest.raises(RunRecordError) as caught:
        replay_stored(replay.attempt_dir, "d")
    assert caught.value.code == "not_a_run"
