"""A repeat within a run reuses the earlier passed certification whole (ADR-0019).

Real ``kernel run`` invocations (bwrap, z3, cvc5) of a bundle whose
attempts pose problems 0, 0, 1, 0, 1: with an evidence store, the first
attempt of each problem certifies (its own ``run/``), and every later one
runs nothing: it gets its own request and receipt, sealed over the earlier
run, and a ``certified-by.json`` naming that attempt. The outcome bytes are
those of a run without a store, and the work directory audits intact,
``--bundle`` re-derivation included.

Then the pointer as an attacker would use it, on copies of that work
directory: aimed at an attempt of another problem, at itself, at another
repeat, at a path, replaced by a symlink or deleted, left beside a run of
the attempt's own, and the run it names edited. Each is a finding of
``kernel audit`` (exit 3) and a refusal of ``kernel run --resume``; none is
a PASS. The identities the tests compare are recomputed here with the
standard library (ADR-0229 §17), never with the kernel's helpers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from bench._store import repeating_run
from kernel.orchestrate import CERTIFIED_BY, EVIDENCE_SOURCE, EvidenceStore, FirstOfKey
from kernel.organs import CERTIFIED_MANIFEST
from kernel.replay import ContractClosed, ProofEvidence, begin_attempt
from tests.orchestrate_helpers import certifier, repeating_bundle_run
from tests.support.cli import kernel
from tests.support.reference import canonical, sha

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/bwrap").is_file(), reason="the certification runs in bwrap (ADR 0018)"
)

PROBLEMS = (0, 0, 1, 0, 1)


@attrs.frozen
class Stored:
    bundle: Path
    work: Path
    outcomes: Path
    plain: bytes  # the outcome bytes of the same bundle without a store
    said: str  # what the command printed (its summary)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    base = tmp_path_factory.mktemp("reuse")
    bundle, plain = repeating_bundle_run(base, PROBLEMS)
    work, out = base / "work", base / "outcomes.jsonl"
    done = kernel("run", bundle, "--work-dir", work, "--out", out,
                  "--evidence-store", base / "store")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return Stored(bundle, work, out, plain, done.stdout + done.stderr)


@pytest.fixture
def copy(stored: Stored, tmp_path: Path) -> Stored:
    work = tmp_path / "work"
    shutil.copytree(stored.work, work, symlinks=True)
    out = tmp_path / "outcomes.jsonl"
    shutil.copyfile(stored.outcomes, out)
    return attrs.evolve(stored, work=work, outcomes=out)


def _order(work: Path) -> list[str]:
    """The attempt ids in run order, from the work directory's own outcome lines."""
    return [json.loads(line)["attempt_id"] for line in (work / "outcomes.jsonl").read_bytes()
            .splitlines()]  # fmt: skip


def _pointers(work: Path) -> dict[str, str]:
    return {
        p.parent.name: json.loads(p.read_bytes())["attempt_id"]
        for p in work.glob(f"*/{CERTIFIED_BY}")
    }


def _settings(attempt: Path) -> dict[str, str]:
    request = json.loads((attempt / "certification.json").read_bytes())["request"]
    return {s["name"]: s["value"] for s in request["command_configuration"]["settings"]}


def _audit(stored: Stored) -> tuple[int, dict[str, Any]]:
    done = kernel("audit", stored.work, "--outcomes", stored.outcomes, "--bundle", stored.bundle,
                  "--format", "json")  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _findings(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(f["code"], f["subject"], f["path"]) for f in report["findings"]}


def test_each_repeat_reuses_the_first_passed_certification_and_runs_nothing(
    stored: Stored,
) -> None:
    assert stored.outcomes.read_bytes() == stored.plain  # the store changes no outcome byte
    order = _order(stored.work)
    pointers = _pointers(stored.work)
    candidates = {
        json.loads(line)["attempt_id"]: json.loads(line)["outcome"]["candidate_digest"]
        for line in stored.outcomes.read_bytes().splitlines()
    }
    firsts = {PROBLEMS.index(p) for p in set(PROBLEMS)}
    assert {order.index(a) for a in pointers} == set(range(len(PROBLEMS))) - firsts
    for attempt, first in pointers.items():
        here, there = stored.work / attempt, stored.work / first
        # The first attempt of the same problem, earlier in the run, with a run of its own.
        assert PROBLEMS[order.index(first)] == PROBLEMS[order.index(attempt)]
        assert order.index(first) == PROBLEMS.index(PROBLEMS[order.index(attempt)])
        assert not (here / "run").exists() and (there / "run" / "metadata.json").is_file()
        metadata = json.loads((there / "run" / "metadata.json").read_bytes())
        assert metadata["status"] == "PASS"
        # Bound by content: this attempt's problem is the problem the first run checked,
        # under the same check; the request and receipt are this attempt's own.
        problem = hashlib.sha256((here / "repository" / "certification.smt2").read_bytes())
        settings = _settings(here)
        assert settings["problem-digest"] == problem.hexdigest()
        assert settings["problem-digest"] == metadata["specification_digest"]
        assert settings["check-digest"] == metadata["check_digest"]
        assert settings == _settings(there)
        mine = json.loads((here / "certification.json").read_bytes())
        assert mine["request"]["candidate"]["digest"] == candidates[attempt]
        assert mine["receipt"]["candidate"]["digest"] == candidates[attempt]
        assert mine["receipt"]["status"] == "VERIFIED"
        source = json.loads((here / EVIDENCE_SOURCE).read_bytes())
        assert source == {
            "certified_by": first, "evidence": "reused", "insert": None, "lookup": "run",
            "key": sha({"check_content_digest": settings["check-content-digest"],
                        "specification_digest": settings["problem-digest"],
                        "store_version": 1}),
        }  # fmt: skip
        assert (here / CERTIFIED_BY).read_bytes() == canonical(
            {"attempt_id": first, "certified_by_version": 1}
        ) + b"\n"
    assert len(list(stored.work.glob("*/run"))) == len(set(PROBLEMS))
    assert "3 more reused an earlier attempt's passed certification" in stored.said
    code, report = _audit(stored)
    assert code == 0 and report["findings"] == [], report["findings"]


def _point(copy: Stored, attempt: str, raw: bytes) -> Path:
    pointer = copy.work / attempt / CERTIFIED_BY
    pointer.write_bytes(raw)
    return pointer


def _one_repeat(copy: Stored) -> tuple[str, str]:
    """A repeat (the second attempt of problem 0) and the attempt it names."""
    order = _order(copy.work)
    attempt = order[1]
    return attempt, _pointers(copy.work)[attempt]


def _refused(copy: Stored, subject: str, code: str) -> None:
    rc, report = _audit(copy)
    assert rc == 3, report
    relative = f"{_one_repeat_path(copy)}"
    assert (code, subject, relative) in _findings(report), report["findings"]
    # --resume keeps nothing this attempt's record backs: the line is refused, exit 3.
    (copy.work / "INTERRUPTED").write_text('{"outcomes_recorded":5,"signal":"SIGINT"}')
    done = kernel("run", copy.bundle, "--work-dir", copy.work, "--resume", "-q")
    assert done.returncode == 3, done.stderr
    assert "resume_log_tampered" in done.stderr and "Traceback" not in done.stderr


def _one_repeat_path(copy: Stored) -> str:
    attempt, _ = _one_repeat(copy)
    return f"{attempt}/{CERTIFIED_BY}"


def test_a_pointer_to_an_attempt_of_another_problem_is_caught(copy: Stored) -> None:
    attempt, _ = _one_repeat(copy)
    other = _order(copy.work)[2]  # problem 1's first: a run that passed, of another problem
    _point(copy, attempt, canonical({"attempt_id": other, "certified_by_version": 1}) + b"\n")
    rc, report = _audit(copy)
    assert rc == 3
    subjects = {(f["code"], f["subject"]) for f in report["findings"]
                if f["path"].startswith(attempt)}  # fmt: skip
    assert ("binding_mismatch", "problem-digest (run)") in subjects, report["findings"]
    assert ("id_mismatch", "receipt evidence_digest") in subjects


@pytest.mark.parametrize(
    ("pointer", "code"),
    [
        ("self", "binding_mismatch"),
        ("repeat", "binding_mismatch"),
        ("missing", "binding_mismatch"),
        ("path", "malformed"),
        ("extra", "malformed"),
        ("version", "malformed"),
    ],
)
def test_a_pointer_that_names_no_run_of_another_attempt_is_caught(
    copy: Stored, pointer: str, code: str
) -> None:
    attempt, first = _one_repeat(copy)
    another_repeat = next(a for a in _pointers(copy.work) if a != attempt)
    document: dict[str, object] = {"attempt_id": first, "certified_by_version": 1}
    match pointer:
        case "self":
            document["attempt_id"] = attempt
        case "repeat":
            document["attempt_id"] = another_repeat
        case "missing":
            document["attempt_id"] = "0" * 64
        case "path":
            document["attempt_id"] = f"../{copy.work.name}/{first}"
        case "extra":
            document["run"] = "run"
        case "version":
            document["certified_by_version"] = 2
        case _:
            raise AssertionError(pointer)
    _point(copy, attempt, canonical(document) + b"\n")
    _refused(copy, "certified_by", code)


def test_a_symlinked_pointer_is_caught(copy: Stored) -> None:
    attempt, _ = _one_repeat(copy)
    honest = copy.work.parent / "honest.json"
    shutil.copyfile(copy.work / attempt / CERTIFIED_BY, honest)
    (copy.work / attempt / CERTIFIED_BY).unlink()
    os.symlink(honest, copy.work / attempt / CERTIFIED_BY)
    _refused(copy, "file", "not_regular")


def test_a_deleted_pointer_leaves_a_certification_that_binds_nothing(copy: Stored) -> None:
    attempt, _ = _one_repeat(copy)
    (copy.work / attempt / CERTIFIED_BY).unlink()
    rc, report = _audit(copy)
    assert rc == 3
    assert ("missing", "file", f"{attempt}/run/metadata.json") in _findings(report)


def test_a_repeat_with_a_run_of_its_own_beside_its_pointer_is_caught(copy: Stored) -> None:
    attempt, first = _one_repeat(copy)
    shutil.copytree(copy.work / first / "run", copy.work / attempt / "run", symlinks=True)
    _refused(copy, "certified_by", "inconsistent")


@pytest.mark.parametrize("edit", ["evidence", "metadata"])
def test_an_edited_run_fails_every_attempt_that_names_it(copy: Stored, edit: str) -> None:
    attempt, first = _one_repeat(copy)
    run = copy.work / first / "run"
    if edit == "evidence":
        answer = run / "evidence" / "z3-answer.txt"
        answer.write_bytes(answer.read_bytes().replace(b"unsat", b"sat"))
    else:
        metadata = json.loads((run / "metadata.json").read_bytes())
        metadata["evidence_digest"] = sha({"not": "the evidence"})
        (run / "metadata.json").write_bytes(canonical(metadata))
    rc, report = _audit(copy)
    assert rc == 3
    repeats = {a for a, f in _pointers(copy.work).items() if f == first}
    assert repeats and attempt in repeats
    for repeat in repeats:
        assert ("binding_mismatch", "certified_by", f"{repeat}/{CERTIFIED_BY}") in _findings(
            report
        ), report["findings"]


# --- the worker side: a pointer the certifier cannot follow is certified anew -----------


def _closed(index: int) -> ContractClosed:
    request = repeating_run(PROBLEMS)[index]
    stage = begin_attempt(request, CERTIFIED_MANIFEST)
    assert isinstance(stage, ContractClosed)
    return stage


def test_a_task_naming_a_run_that_is_not_a_pass_certifies_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = certifier(tmp_path / "work")
    provider = attrs.evolve(plain, store=EvidenceStore(tmp_path / "store"))
    first = provider.task_for(_closed(0))
    assert first.gather()  # a real certification, passed
    (tmp_path / "work" / first.attempt_id / "run" / "metadata.json").write_bytes(b"{}")
    repeat = provider.task_for(_closed(1)).reusing(first)
    assert repeat.certified_by == first.attempt_id
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        (evidence,) = repeat.gather()
    assert "not reusing attempt" in caplog.text and "metadata_" in caplog.text
    attempt = tmp_path / "work" / repeat.attempt_id
    assert (attempt / "run" / "metadata.json").is_file()  # it ran the checker itself
    assert not (attempt / CERTIFIED_BY).exists()
    assert json.loads((attempt / EVIDENCE_SOURCE).read_bytes())["lookup"] == "hit"
    assert repeat.reusable((evidence,))


# --- the driver's memory, with tasks that only say whether they are reusable -----------


@attrs.frozen
class _Task:
    name: str
    in_flight_key: str | None
    ok: bool = True
    reused_from: str | None = None

    def gather(self) -> tuple[ProofEvidence, ...]:
        return ()

    def reusable(self, evidence: tuple[ProofEvidence, ...]) -> bool:
        return self.ok

    def reusing(self, first: _Task) -> _Task:
        return attrs.evolve(self, reused_from=first.name)


def test_only_an_earlier_reusable_first_of_the_same_key_is_reused() -> None:
    memory: FirstOfKey[_Task] = FirstOfKey()
    failed = _Task("failed", "k", ok=False)
    memory.note("k", 0, failed, ())
    assert memory.reuse("k", 5, _Task("late", "k")) == (_Task("late", "k"), False)
    memory.note("k", 3, _Task("first", "k"), ())
    memory.note("k", 1, _Task("second", "k"), ())  # the key's first stays the first
    assert memory.reuse("k", 4, _Task("r", "k")) == (_Task("r", "k", reused_from="first"), True)
    # Never a first placed at or after the one asking (a shard that came back late).
    assert memory.reuse("k", 3, _Task("r", "k"))[1] is False
    assert memory.reuse("k", 2, _Task("r", "k"))[1] is False
    assert memory.reuse("j", 9, _Task("r", "j"))[1] is False
    assert memory.reuse(None, 9, _Task("r", None))[1] is False
    memory.note(None, 0, _Task("unkeyed", None), ())
    assert memory.reuse(None, 9, _Task("r", None))[1] is False


def test_a_task_without_the_reuse_methods_is_never_rewritten() -> None:
    @attrs.frozen
    class Plain:
        in_flight_key: str | None

        def gather(self) -> tuple[ProofEvidence, ...]:
            return ()

    memory: FirstOfKey[object] = FirstOfKey()
    memory.note("k", 0, Plain("k"), ())
    assert memory.reuse("k", 1, Plain("k")) == (Plain("k"), False)


def test_a_resumed_run_keeps_recorded_repeats_and_reuses_anew_after_them(copy: Stored) -> None:
    # The run stopped after attempt 1 (a repeat pointing at attempt 0): --resume derives
    # both again through the pointer, clears the rest and certifies it, to the same bytes.
    lines = (copy.work / "outcomes.jsonl").read_bytes().splitlines(keepends=True)
    (copy.work / "outcomes.jsonl").write_bytes(b"".join(lines[:2]))
    (copy.work / "INTERRUPTED").write_text('{"outcomes_recorded":2,"signal":"SIGINT"}')
    kept = _order(copy.work)
    assert _pointers(copy.work)[kept[1]] == kept[0]
    out = copy.work.parent / "resumed.jsonl"
    done = kernel("run", copy.bundle, "--work-dir", copy.work, "--resume", "--out", out, "-q",
                  "--evidence-store", copy.work.parent / "store")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == copy.plain
    pointers = _pointers(copy.work)
    order = _order(copy.work)
    assert pointers[order[1]] == order[0]
    for attempt, first in pointers.items():
        assert order.index(first) < order.index(attempt)
    code, report = _audit(attrs.evolve(copy, outcomes=out))
    assert code == 0 and report["findings"] == [], report["findings"]
