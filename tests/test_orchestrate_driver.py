"""replay_bundle without external tools: order, executors, fail-closed gathering, layering."""

from __future__ import annotations

import ast
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

from kernel.commands.replay import outcome_lines
from kernel.orchestrate import (
    EvidenceProvider,
    EvidenceTask,
    ExecutorKind,
    ExecutorSpec,
    NoEvidence,
    open_executor,
    replay_bundle,
    replay_requests,
)
from kernel.organs import (
    BUILTIN_MANIFEST,
    CERTIFICATION_MEDIA_TYPE,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
)
from kernel.replay import (
    AuthorityManifest,
    ContractClosed,
    ProofEvidence,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayDisposition,
    Validated,
    replay_attempt,
    replay_contract,
    requests_from_bundle,
    validate,
)
from kernel.serde import loads
from tests.orchestrate_helpers import ROOT, certifier, e2e_bundle

EXAMPLE_BUNDLE = ROOT / "examples" / "replay" / "bundle.json"
CLOSED = (0, 2, 3)  # e2e attempts whose contract closes under certified.v1


def _example_bundle() -> ReplayBundle:
    return loads(EXAMPLE_BUNDLE.read_bytes(), ReplayBundle)


def _reference(
    bundle: ReplayBundle, manifest: AuthorityManifest, provider: EvidenceProvider
) -> bytes:
    """What the pure driver gives, attempt by attempt, with the same evidence."""
    outcomes = []
    for request in requests_from_bundle(bundle):
        validated = validate(request, manifest)
        state = replay_contract(validated) if isinstance(validated, Validated) else validated
        evidence = provider.gather(state) if isinstance(state, ContractClosed) else ()
        outcomes.append(replay_attempt(request, manifest, evidence))
    return outcome_lines(tuple(outcomes))


def _plain(bundle: ReplayBundle, manifest: AuthorityManifest) -> bytes:
    return outcome_lines(
        tuple(replay_attempt(request, manifest) for request in requests_from_bundle(bundle))
    )


@pytest.mark.parametrize(
    ("bundle", "manifest"),
    [(e2e_bundle, CERTIFIED_MANIFEST), (_example_bundle, BUILTIN_MANIFEST)],
    ids=["e2e-certified", "example-builtin"],
)
def test_with_no_evidence_the_outcomes_are_replay_attempts_bytes(
    bundle: object, manifest: AuthorityManifest
) -> None:
    value = bundle()  # type: ignore[operator]
    assert outcome_lines(replay_bundle(value, manifest, NoEvidence())) == _plain(value, manifest)


def test_no_evidence_leaves_target_certified_unavailable() -> None:
    outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, NoEvidence())
    first = outcomes[0]
    assert isinstance(first, ReplayAdapterResult)
    assert first.replay_disposition is ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert first.reason_codes == (
        f"proof_unavailable:{TARGET_CERTIFIED}",
        f"{TARGET_CERTIFIED}:no_certification_evidence",
    )


@attrs.frozen
class _Recording:
    """Records which states it was asked about; evidence only for the first closed attempt."""

    calls: list[str] = attrs.field(factory=list, eq=False)

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        attempt_id = state.validated.request.replay_input.attempt_id
        self.calls.append(attempt_id)
        first = requests_from_bundle(e2e_bundle())[0].replay_input.attempt_id
        if attempt_id != first:
            return ()
        return (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, b"{}"),)


def test_the_provider_is_asked_only_about_contract_closed_attempts_in_order() -> None:
    provider = _Recording()
    outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, provider)
    attempts = [r.replay_input.attempt_id for r in requests_from_bundle(e2e_bundle())]
    assert provider.calls == [attempts[i] for i in CLOSED]
    assert outcome_lines(outcomes) == _reference(e2e_bundle(), CERTIFIED_MANIFEST, _Recording())
    first = outcomes[0]
    assert isinstance(first, ReplayAdapterResult)
    assert f"{TARGET_CERTIFIED}:certification_evidence_malformed" in first.reason_codes


@attrs.frozen
class _LateFirst:
    """Earlier attempts finish later; records the completion order."""

    finished: list[int] = attrs.field(factory=list, eq=False)
    lock: threading.Lock = attrs.field(factory=threading.Lock, eq=False)

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        index = state.validated.request.replay_input.attempt_index
        time.sleep(0.3 - 0.1 * CLOSED.index(index))
        with self.lock:
            self.finished.append(index)
        return _Recording().gather(state)


def test_outcomes_keep_canonical_order_whatever_order_workers_finish_in() -> None:
    provider = _LateFirst()
    with ThreadPoolExecutor(max_workers=len(CLOSED)) as pool:
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, provider, executor=pool)
    assert provider.finished == list(reversed(CLOSED))
    assert outcome_lines(outcomes) == _reference(e2e_bundle(), CERTIFIED_MANIFEST, _Recording())


@attrs.frozen
class _Raises:
    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        raise OSError("disk on fire")


def test_a_provider_that_raises_is_no_evidence_and_a_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, _Raises())
    assert outcome_lines(outcomes) == _plain(e2e_bundle(), CERTIFIED_MANIFEST)
    assert caplog.text.count("evidence provider raised OSError: disk on fire") == len(CLOSED)


@attrs.frozen
class _DiesInWorker:
    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        os._exit(3)


def _spawn_pool() -> Executor:
    return ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))


def test_a_real_process_pool_with_no_evidence_gives_replay_attempts_bytes() -> None:
    with _spawn_pool() as pool:
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, NoEvidence(), executor=pool)
    assert outcome_lines(outcomes) == _plain(e2e_bundle(), CERTIFIED_MANIFEST)


def test_a_worker_that_dies_is_no_evidence_never_a_verdict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A plain pool stays broken: each task it failed is sent once more
    # (lost_to_a_broken_pool) and refused at the submit.
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), _spawn_pool() as pool:
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, _DiesInWorker(), executor=pool)
    assert outcome_lines(outcomes) == _plain(e2e_bundle(), CERTIFIED_MANIFEST)
    assert caplog.text.count("evidence task not submitted BrokenProcessPool") == len(CLOSED)


def test_a_worker_that_always_dies_is_no_evidence_in_the_kernel_s_own_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The kernel's pool is started afresh after each death, at most
    # MAX_POOL_RESTARTS times; every task dies with its worker each time it runs.
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), open_executor(
        ExecutorSpec(ExecutorKind.PROCESS, workers=2)
    ) as pool:
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, _DiesInWorker(), executor=pool)
    assert outcome_lines(outcomes) == _plain(e2e_bundle(), CERTIFIED_MANIFEST)
    assert caplog.text.count("BrokenProcessPool") == len(CLOSED)
    assert "a certification worker died; a fresh pool" in caplog.text


def test_the_certifier_does_nothing_for_attempts_without_target_certified(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    outcomes = replay_bundle(_example_bundle(), BUILTIN_MANIFEST, certifier(work))
    assert outcome_lines(outcomes) == _plain(_example_bundle(), BUILTIN_MANIFEST)
    assert not work.exists()


@attrs.frozen
class _CannotMakeTasks:
    """A task provider whose ``task_for`` (run in the driver) notes, then raises."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        return self.task_for(state).gather()

    def task_for(self, state: ContractClosed) -> EvidenceTask:
        index = state.validated.request.replay_input.attempt_index
        logging.getLogger("kernel.orchestrate").warning("preparing %d", index)
        raise OSError(f"no task for {index}")


@pytest.mark.parametrize("where", ["inline", "threads"])
def test_a_task_provider_that_raises_is_no_evidence_and_notes_in_run_order(
    caplog: pytest.LogCaptureFixture, where: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        if where == "inline":
            outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, _CannotMakeTasks())
        else:
            with ThreadPoolExecutor(max_workers=2) as pool:
                outcomes = replay_bundle(
                    e2e_bundle(), CERTIFIED_MANIFEST, _CannotMakeTasks(), executor=pool
                )
    assert outcome_lines(outcomes) == _plain(e2e_bundle(), CERTIFIED_MANIFEST)
    notes = [r.getMessage() for r in caplog.records if r.name == "kernel.orchestrate"]
    expected = []
    for index in CLOSED:
        expected += [
            f"preparing {index}",
            f"evidence provider raised OSError: no task for {index}",
        ]
    assert [note.split(": ", 1)[-1] if "raised" in note else note for note in notes] == expected


def test_a_misshapen_bundle_raises_value_error() -> None:
    bundle = e2e_bundle()
    short = attrs.evolve(bundle, inputs=bundle.inputs[:-1])
    with pytest.raises(ValueError, match="must be equal"):
        replay_bundle(short, CERTIFIED_MANIFEST, NoEvidence())


def test_replay_requests_keeps_the_given_order() -> None:
    requests = tuple(reversed(requests_from_bundle(e2e_bundle())))
    outcomes = replay_requests(requests, CERTIFIED_MANIFEST, NoEvidence())
    assert outcomes == tuple(replay_attempt(r, CERTIFIED_MANIFEST) for r in requests)


# --- layering -----------------------------------------------------------------------------

ORCHESTRATE = ROOT / "kernel" / "orchestrate"
# kernel.frames (below kernel.replay) for the candidate frame a certification task carries;
# kernel.bundles (beside the organs, pyproject's layers) for the shards of a stream.
ALLOWED_KERNEL = (
    "kernel.replay", "kernel.organs", "kernel.verification", "kernel.external",
    "kernel.frames", "kernel.serde", "kernel.identity", "kernel.orchestrate", "kernel.bundles",
)  # fmt: skip


@pytest.mark.parametrize(
    "path", sorted(ORCHESTRATE.rglob("*.py")), ids=lambda p: str(p.relative_to(ORCHESTRATE))
)
def test_the_orchestrator_imports_point_down_only(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [a.name for a in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        )  # fmt: skip
        for name in names:
            if name.startswith("kernel"):
                assert name.startswith(ALLOWED_KERNEL), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", sorted((ROOT / "kernel" / "programs").glob("*.py")),
                         ids=lambda p: p.name)
def test_the_certifier_programs_import_no_kernel_module(path: Path) -> None:
    # Run by absolute path as programs (kernel/programs, issue 20): they must
    # not depend on the package being importable where they run.
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [a.name for a in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        )  # fmt: skip
        assert not any(name.startswith("kernel") for name in names), f"{path.name}: {names}"


def test_nothing_outside_the_shell_imports_the_orchestrator() -> None:
    kernel = ROOT / "kernel"
    for path in sorted(kernel.rglob("*.py")):
        relative = path.relative_to(kernel)
        # kernel.audit is the layer above the orchestrator (issue 20), kernel.job
        # the main job above the audit (ADR 0023).
        shell = ("orchestrate", "audit", "job", "commands")
        if relative.parts[0] in shell or relative.name == "cli.py":
            continue
        assert "kernel.orchestrate" not in path.read_text(encoding="utf-8"), relative
