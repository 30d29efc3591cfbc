"""``kernel run --evidence-store``: outcomes do not depend on the store (ADR-0019).

Real runs of the shipped e2e bundle through the command line (bwrap, z3,
cvc5): a cold store, a warm store and no store write byte-identical outcome
files and each work directory passes ``kernel audit``; a warm hit skips the
producer and still runs the checker with a fresh request; a corrupt entry is
a reported miss; a forged but self-consistent entry can stop a
certification, never make one; a producer whose evidence differs from the
stored evidence for the same problem is recorded as a conflict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from pathlib import Path

import attrs
import pytest

from kernel.orchestrate import (
    EVIDENCE_SOURCE,
    EvidenceStore,
    ExternalCertifier,
    InsertResult,
    Miss,
    MissReason,
    certification_entry,
    discover_tools,
    store_key,
)
from kernel.organs import CERTIFIED_MANIFEST, certification_problem, problem_digest
from kernel.replay import (
    ContractClosed,
    Validated,
    replay_contract,
    requests_from_bundle,
    validate,
)
from tests.orchestrate_helpers import E2E_BUNDLE, certifier, e2e_bundle
from tests.support.cli import kernel
from tests.support.reference import canonical, sha

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/bwrap").is_file(), reason="the certification runs in bwrap (ADR 0018)"
)


def _run(tmp: Path, name: str, *store: str | Path) -> tuple[Path, bytes, str]:
    work, out = tmp / f"{name}-work", tmp / f"{name}.jsonl"
    args = ("--evidence-store", *store) if store else ()
    done = kernel("run", E2E_BUNDLE, "--work-dir", work, "--out", out, *args)
    assert done.returncode == 3, done.stderr  # one tampered attempt on purpose
    assert "Traceback" not in done.stderr
    audit = kernel("audit", work, "--outcomes", out, "--format", "json")
    assert audit.returncode == 0, audit.stdout
    return work, out.read_bytes(), done.stderr


def _sources(work: Path) -> dict[str, dict[str, object]]:
    return {p.parent.name: json.loads(p.read_bytes()) for p in work.glob(f"*/{EVIDENCE_SOURCE}")}


def test_cold_warm_and_no_store_write_identical_outcomes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    off, outcomes_off, _ = _run(tmp_path, "off")
    cold, outcomes_cold, _ = _run(tmp_path, "cold", store)
    warm, outcomes_warm, _ = _run(tmp_path, "warm", store)
    assert outcomes_off == outcomes_cold == outcomes_warm
    assert {s["lookup"] for s in _sources(off).values()} == {"off"}
    # Within one run, a problem posed twice is produced once (the bundle's
    # attempts hold two candidates with the same certification problem).
    cold_sources = list(_sources(cold).values())
    keys = {s["key"] for s in cold_sources}
    assert len(keys) < len(cold_sources)
    for key in keys:
        of_key = [(s["evidence"], s["lookup"], s["insert"]) for s in cold_sources
                  if s["key"] == key]  # fmt: skip
        assert of_key.count(("produced", "absent", "stored")) == 1, of_key
        # A repeat after the first passed reuses that certification whole (ADR-0019).
        assert set(of_key) <= {("produced", "absent", "stored"), ("reused", "run", None)}
    warm_sources = _sources(warm)
    assert {(s["evidence"], s["lookup"], s["insert"]) for s in warm_sources.values()} == {
        ("reused", "hit", None), ("reused", "run", None)
    }
    hits = {a: s for a, s in warm_sources.items() if s["lookup"] == "hit"}
    assert len(hits) == len({s["key"] for s in warm_sources.values()})  # one per problem
    for attempt, source in hits.items():
        run = warm / attempt / "run"
        metadata = json.loads((run / "metadata.json").read_bytes())
        # The producer never ran; the checker did, on a fresh request, and passed.
        assert metadata["producer"] is None and not (run / "producer").exists()
        assert (run / "checker" / "receipt.json").is_file()
        assert metadata["status"] == "PASS"
        request = json.loads((run / "checker" / "request.json").read_bytes())
        cold_request = cold / attempt / "run" / "checker" / "request.json"
        assert request != json.loads(cold_request.read_bytes())
        # The key is the content: the check's content digest and the problem digest.
        settings = {
            s["name"]: s["value"]
            for s in json.loads((warm / attempt / "certification.json").read_bytes())["request"][
                "command_configuration"
            ]["settings"]
        }
        assert source["key"] == sha({
            "check_content_digest": settings["check-content-digest"],
            "specification_digest": settings["problem-digest"],
            "store_version": 1,
        })  # fmt: skip
        # The evidence the checker saw is byte for byte what the cold run's producer left.
        for name in ("target_certified.smt2", "z3-answer.txt"):
            assert (run / "evidence" / name).read_bytes() == (
                cold / attempt / "run" / "evidence" / name
            ).read_bytes()


def _entries(store: Path) -> list[Path]:
    return sorted((store / "entries").iterdir())


def _stored_every_key(cold: Path, store: Path) -> None:
    """Precondition: the cold run certified every attempt it tried and so stored one entry
    per key. A certification that ended otherwise (a deadline on a loaded machine) stores
    nothing, and the comparisons after it would fail for a reason that is not theirs."""
    sources = _sources(cold)
    # One certification per distinct problem: the other attempts name it (certified-by.json).
    statuses = {
        path.parent.parent.name: json.loads(path.read_bytes())
        for path in cold.glob("*/run/metadata.json")
    }
    assert statuses, "the cold run certified nothing"
    unpassed = {a: (m["status"], m.get("reason"), m.get("note")) for a, m in statuses.items()
                if m["status"] != "PASS"}  # fmt: skip
    assert not unpassed, f"the cold run did not certify: {unpassed}"
    assert {e.name for e in _entries(store)} == {s["key"] for s in sources.values()}


def test_a_corrupt_entry_is_a_reported_miss_and_the_outcome_is_unchanged(tmp_path: Path) -> None:
    store = tmp_path / "store"
    cold, outcomes_cold, _ = _run(tmp_path, "cold", store)
    _stored_every_key(cold, store)
    for entry in _entries(store):
        answer = entry / "artifacts" / "z3-answer.txt"
        answer.write_bytes(answer.read_bytes()[:-1])  # truncated
    work, outcomes, stderr = _run(tmp_path, "after", store)
    assert outcomes == outcomes_cold
    assert "is corrupt (artifact_size_mismatch" in stderr
    after = list(_sources(work).values())
    for key in {s["key"] for s in after}:
        of_key = [(s["evidence"], s["lookup"], s["insert"]) for s in after if s["key"] == key]
        assert of_key.count(("produced", "artifact_size_mismatch", "stored")) == 1, of_key
        assert set(of_key) <= {
            ("produced", "artifact_size_mismatch", "stored"), ("reused", "run", None)
        }
    # Repaired: the next run reuses.
    again, outcomes_again, _ = _run(tmp_path, "again", store)
    assert outcomes_again == outcomes_cold
    assert {s["evidence"] for s in _sources(again).values()} == {"reused"}


def test_a_forged_self_consistent_entry_never_certifies(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _, outcomes_cold, _ = _run(tmp_path, "cold", store)
    # Only the keys the cold run stored are forged: one whose certification ended
    # otherwise there (BLOCKED under load) is produced afresh here and may rightly PASS.
    forged = {entry.name for entry in _entries(store)}
    assert forged, "the cold run stored no entry: nothing to forge"
    for entry in _entries(store):
        answer = entry / "artifacts" / "z3-answer.txt"
        answer.write_bytes(b"target_certified sat\n")
        document = json.loads((entry / "entry.json").read_bytes())
        for item in document["artifacts"]:
            data = (entry / "artifacts" / item["name"]).read_bytes()
            item["sha256"], item["size"] = hashlib.sha256(data).hexdigest(), len(data)
        (entry / "entry.json").write_bytes(canonical(document) + b"\n")
    work = tmp_path / "forged-work"
    out = tmp_path / "forged.jsonl"
    done = kernel("run", E2E_BUNDLE, "--work-dir", work, "--out", out,
                  "--evidence-store", store)  # fmt: skip
    assert "Traceback" not in done.stderr
    assert done.returncode in (1, 3), done.stderr
    sources = {a: s for a, s in _sources(work).items() if s["key"] in forged}
    assert sources and {s["evidence"] for s in sources.values()} == {"reused"}
    for attempt in sources:
        metadata = json.loads((work / attempt / "run" / "metadata.json").read_bytes())
        assert metadata["status"] == "BLOCKED", metadata  # the checker ran and refused
    closed = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert not any(
        c["attempt_id"] in sources and c["outcome"]["replay_disposition"]
        == "contract_and_proof_closed" for c in closed
    )
    assert out.read_bytes() != outcomes_cold
    audited = kernel("audit", work, "--outcomes", out, "--format", "json")
    assert audited.returncode == 0, audited.stdout


def _contract_closed(index: int) -> ContractClosed:
    validated = validate(requests_from_bundle(e2e_bundle())[index], CERTIFIED_MANIFEST)
    assert isinstance(validated, Validated)
    state = replay_contract(validated)
    assert isinstance(state, ContractClosed)
    return state


def test_a_nondeterministic_producer_is_recorded_as_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The store holds other evidence for the key than this producer leaves: kept, reported."""
    store = EvidenceStore(tmp_path / "store")
    provider = certifier(tmp_path / "work")
    provider = type(provider)(provider.work_dir, provider.entry, provider.limits,
                              dict(provider.environment), store=store)  # fmt: skip
    state = _contract_closed(0)
    problem = certification_problem(state.validated.candidate_frame)
    assert problem is not None
    key = store_key(provider.check_content_digest, problem_digest(problem))
    earlier = {"target_certified.smt2": problem.encode(), "z3-answer.txt": b"an earlier run\n"}
    # The lookup races an insert by another run whose producer left other bytes.
    real_load = EvidenceStore.load
    calls = []

    def racing_load(self: EvidenceStore, k: str, declared: tuple[str, ...]) -> object:
        calls.append(k)
        if len(calls) == 1:
            assert self.insert(k, check_content_digest=provider.check_content_digest,
                               specification_digest=problem_digest(problem),
                               artifacts=earlier) is InsertResult.STORED  # fmt: skip
            return Miss(k, MissReason.ABSENT)
        return real_load(self, k, declared)

    monkeypatch.setattr(EvidenceStore, "load", racing_load)
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        (item,) = provider.gather(state)
    attempt = state.validated.request.replay_input.attempt_id
    source = json.loads((tmp_path / "work" / attempt / EVIDENCE_SOURCE).read_bytes())
    assert source == {"certified_by": None, "evidence": "produced", "insert": "conflict",
                      "key": key, "lookup": "absent"}  # fmt: skip
    assert "nondeterministic producer" in caplog.text
    monkeypatch.setattr(EvidenceStore, "load", real_load)
    kept = store.load(key, ("target_certified.smt2", "z3-answer.txt"))
    assert not isinstance(kept, Miss) and kept.evidence == earlier  # never mixed
    assert item.document  # this attempt's own certification stands on its own evidence
    shutil.rmtree(tmp_path / "work")


def test_a_hit_reads_no_producer_pin_and_keeps_the_identity_exact(tmp_path: Path) -> None:
    """On a hit no producer launches: its files are not read (the checker's all are).

    The producer's z3 is a copy pinned at the start; once the store holds the
    problem's evidence the copy is changed. Without a store the run checks
    the pin before launching the producer and blocks; on a hit the producer
    does not launch, the checker's pins hold, and the certification closes.
    identity.json is the entry's, every pin included, either way.
    """
    tools = discover_tools(Path(sys.executable))
    z3 = tmp_path / "tools" / "z3"
    z3.parent.mkdir()
    shutil.copy2(tools.z3, z3)
    entry = certification_entry(attrs.evolve(tools, z3=str(z3)))
    store = EvidenceStore(tmp_path / "store")
    plain = certifier(tmp_path / "unused", entry)

    def provider(name: str, with_store: bool) -> ExternalCertifier:
        return attrs.evolve(plain, work_dir=tmp_path / name,
                            store=store if with_store else None)  # fmt: skip

    state = _contract_closed(0)
    attempt = state.validated.request.replay_input.attempt_id
    assert provider("cold", True).gather(state)  # fills the store
    with z3.open("ab") as handle:
        handle.write(b"\0")  # the producer's pinned z3 no longer holds
    provider("off", False).gather(state)  # an inconclusive receipt: BLOCKED, below
    off = json.loads((tmp_path / "off" / attempt / "run" / "metadata.json").read_bytes())
    assert (off["status"], off["reason"]) == ("BLOCKED", "pin_mismatch"), off
    (item,) = provider("hit", True).gather(state)
    run = tmp_path / "hit" / attempt / "run"
    metadata = json.loads((run / "metadata.json").read_bytes())
    assert metadata["status"] == "PASS" and metadata["producer"] is None, metadata
    source = json.loads((tmp_path / "hit" / attempt / EVIDENCE_SOURCE).read_bytes())
    assert source["lookup"] == "hit" and item.document
    cold_identity = (tmp_path / "cold" / attempt / "run" / "identity.json").read_bytes()
    assert (run / "identity.json").read_bytes() == cold_identity
    assert sha(json.loads(cold_identity)) == metadata["check_digest"] == plain.check_digest
