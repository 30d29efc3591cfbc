"""Within one run a certification problem is produced once, under every executor (ADR-0019).

Real certifications (z3 produces, cvc5 checks, in bwrap) on a real spawn
pool of 2 workers and the real local Dask cluster of 2 worker processes
that ``--executor dask --workers 2`` starts. The run poses each problem
several times back to back, so two workers would take the same problem at
once: with a store, the repeats wait for the first and, once it passed,
reuse its certification whole (their own request and receipt over its run,
nothing run), and the outcome bytes are those of an inline run with no
store. A first certification that stores nothing (the store cannot be
written) still passes, and is reused all the same. The ordering itself is shown with
keyed tasks that record when they ran, including a first that raises.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

import attrs
import pytest

from bench._store import repeating_run
from kernel.commands.replay import outcome_lines
from kernel.orchestrate import (
    EVIDENCE_SOURCE,
    EvidenceStore,
    ExecutorKind,
    ExecutorSpec,
    ExternalCertifier,
    open_executor,
    replay_requests,
)
from kernel.orchestrate._inflight import InFlight
from kernel.organs import CERTIFIED_MANIFEST
from kernel.replay import ContractClosed, ProofEvidence, ReplayRequest
from tests.orchestrate_helpers import certifier, repeating_bundle_run
from tests.support.cli import kernel
from tests.support.processes import assert_no_new_descendants, descendants

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("no_leftovers"),
    pytest.mark.skipif(
        not Path("/usr/bin/bwrap").is_file(), reason="the certification runs in bwrap (ADR 0018)"
    ),
]

# Problems 0 and 1, each three times back to back: the first two attempts of
# each reach the two workers together unless the driver orders them.
PROBLEMS = (0, 0, 0, 1, 1, 1)


@pytest.fixture(scope="module")
def requests() -> tuple[ReplayRequest, ...]:
    return repeating_run(PROBLEMS)


@pytest.fixture(scope="module")
def inline_bytes(
    requests: tuple[ReplayRequest, ...], tmp_path_factory: pytest.TempPathFactory
) -> bytes:
    work = tmp_path_factory.mktemp("inline") / "work"
    return outcome_lines(replay_requests(requests, CERTIFIED_MANIFEST, certifier(work)))


@pytest.fixture(scope="module")
def dask_pool() -> Iterator[Executor]:
    """The local Dask cluster ``kernel run --executor dask --workers 2`` starts."""
    before = descendants()
    with open_executor(ExecutorSpec(ExecutorKind.DASK, workers=2)) as executor:
        assert executor is not None
        yield executor
    assert_no_new_descendants(before)


@pytest.fixture(params=["process", "dask"])
def pool(request: pytest.FixtureRequest) -> Iterator[Executor]:
    if request.param == "dask":
        yield request.getfixturevalue("dask_pool")
        return
    with open_executor(ExecutorSpec(ExecutorKind.PROCESS, workers=2)) as executor:
        assert executor is not None
        # Both workers started (a spawn pool starts them on demand), so that
        # what runs side by side below is decided by the driver, not by start-up.
        list(executor.map(time.sleep, (0.5, 0.5)))
        yield executor


def _with_store(work: Path, store: Path | None) -> ExternalCertifier:
    plain = certifier(work)
    return attrs.evolve(plain, store=None if store is None else EvidenceStore(store))


def _sources(work: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_bytes()) for p in sorted(work.glob(f"*/{EVIDENCE_SOURCE}"))]


def _kinds(work: Path) -> Counter[tuple[object, ...]]:
    return Counter((s["evidence"], s["lookup"], s["insert"]) for s in _sources(work))


def test_a_problem_posed_three_times_is_produced_once_on_every_executor(
    tmp_path: Path, requests: tuple[ReplayRequest, ...], inline_bytes: bytes, pool: Executor
) -> None:
    work = tmp_path / "work"
    provider = _with_store(work, tmp_path / "store")
    data = outcome_lines(replay_requests(requests, CERTIFIED_MANIFEST, provider, executor=pool))
    assert data == inline_bytes
    # (the bench scenario's frames leave trays ungrounded; the certification still closes)
    assert data.count(b"arithmetic.target_certified=closed") == len(PROBLEMS)
    # One certification per distinct problem; every other attempt reused it whole
    # (its own request and receipt over the first run; no step ran for it).
    assert _kinds(work) == Counter({
        ("produced", "absent", "stored"): 2,
        ("reused", "run", None): 4,
    })  # fmt: skip
    assert len({s["key"] for s in _sources(work)}) == 2
    assert len(list(work.glob("*/run/checker/receipt.json"))) == 2
    assert len(list(work.glob("*/run/producer"))) == 2
    _earlier_pointers(work, requests)


def test_without_a_store_nothing_is_ordered_and_every_attempt_produces(
    tmp_path: Path, requests: tuple[ReplayRequest, ...], inline_bytes: bytes
) -> None:
    work = tmp_path / "work"
    with open_executor(ExecutorSpec(ExecutorKind.PROCESS, workers=2)) as pool:
        data = outcome_lines(
            replay_requests(requests, CERTIFIED_MANIFEST, _with_store(work, None), executor=pool)
        )
    assert data == inline_bytes
    assert _kinds(work) == Counter({("produced", "off", None): len(PROBLEMS)})


def test_a_first_certification_that_stores_nothing_does_not_poison_the_repeats(
    tmp_path: Path, requests: tuple[ReplayRequest, ...], inline_bytes: bytes
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "tmp").write_bytes(b"not a directory: every insert fails\n")
    work = tmp_path / "work"
    with open_executor(ExecutorSpec(ExecutorKind.PROCESS, workers=2)) as pool:
        data = outcome_lines(
            replay_requests(requests, CERTIFIED_MANIFEST, _with_store(work, store), executor=pool)
        )
    assert data == inline_bytes  # every attempt certified
    # The store took nothing; the run's own first passed certifications are reused all the same.
    assert _kinds(work) == Counter({
        ("produced", "absent", "failed"): 2,
        ("reused", "run", None): 4,
    })  # fmt: skip


# --- the ordering, shown with keyed tasks that record when they ran ---------------------


@attrs.frozen
class _Marked:
    """A task keyed by ``in_flight_key`` that records its start and end under ``marks``."""

    marks: str
    index: int
    in_flight_key: str | None
    fail: bool

    def gather(self) -> tuple[ProofEvidence, ...]:
        started = time.monotonic()
        time.sleep(1.0)
        Path(self.marks, f"{self.index}").write_text(f"{started} {time.monotonic()} {os.getpid()}")
        if self.fail:
            raise RuntimeError("the first certification of this key failed")
        return ()


@attrs.frozen
class _KeyedProvider:
    marks: str
    keys: tuple[str | None, ...]
    failing: frozenset[int] = frozenset()

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        return self.task_for(state).gather()

    def task_for(self, state: ContractClosed) -> _Marked:
        index = state.validated.request.replay_input.attempt_index
        return _Marked(self.marks, index, self.keys[index], index in self.failing)


def _spans(marks: Path) -> dict[int, tuple[float, float]]:
    spans = {}
    for path in marks.iterdir():
        start, end, _ = path.read_text().split()
        spans[int(path.name)] = (float(start), float(end))
    return spans


def test_tasks_with_one_key_run_one_after_another_and_a_raise_releases_the_next(
    tmp_path: Path, requests: tuple[ReplayRequest, ...], pool: Executor
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    keys = ("a", "a", "a", None, None, "b")
    provider = _KeyedProvider(str(marks), keys, failing=frozenset({0}))
    replay_requests(requests, CERTIFIED_MANIFEST, provider, executor=pool)
    spans = _spans(marks)
    assert sorted(spans) == list(range(len(PROBLEMS)))  # every task ran, the failed one too
    # 1 and 2 waited for 0 (which raised), and were then released together.
    assert spans[1][0] >= spans[0][1] and spans[2][0] >= spans[0][1]
    # Unkeyed and other-keyed tasks were not held back behind "a".
    assert min(spans[3][0], spans[4][0], spans[5][0]) < spans[0][1]


def test_in_flight_releases_every_parked_item_when_the_running_one_finishes() -> None:
    flight: InFlight[int] = InFlight()
    assert flight.admit(None, 0) and flight.admit(None, 1)
    assert flight.admit("k", 2)
    assert not flight.admit("k", 3) and not flight.admit("k", 4)
    assert flight.admit("j", 5)
    assert flight.finished("k") == [3, 4]
    assert not flight.admit("k", 6)  # 3 and 4 are in flight now
    assert flight.finished("k") == [6]
    assert flight.finished("k") == [] and flight.finished("k") == []
    assert flight.admit("k", 7)  # nothing of k in flight any more
    assert flight.finished("j") == [] and flight.finished(None) == []


@pytest.mark.parametrize("executor", ["process", "dask"])
def test_kernel_run_sharded_produces_each_problem_once_across_shards(
    tmp_path: Path, executor: str
) -> None:
    # kernel run --executor process|dask runs its pure steps in shards (ADR 0020) and
    # submits the shards' certifications itself: the in-flight order must hold across
    # shards there too (shards of 2 put each problem's repeats in two shards).
    bundle, serial = repeating_bundle_run(tmp_path, PROBLEMS)
    work, out = tmp_path / "work", tmp_path / "outcomes.jsonl"
    done = kernel("run", bundle, "--work-dir", work, "--out", out, "-q",
                  "--evidence-store", tmp_path / "store", "--executor", executor,
                  "--workers", "2", "--shard-size", "2")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == serial
    # Shards may come back out of order: a repeat reuses a first only if it is earlier
    # in the run (else it hits the store, the checker running for it).
    kinds = _kinds(work)
    assert kinds[("produced", "absent", "stored")] == 2
    assert kinds[("reused", "run", None)] + kinds[("reused", "hit", None)] == 4, kinds
    assert len(list(work.glob("*/run/producer"))) == 2
    _earlier_pointers(work, repeating_run(PROBLEMS))
    audit = kernel("audit", work, "--bundle", bundle)
    assert audit.returncode == 0, audit.stdout


def _earlier_pointers(work: Path, requests: tuple[ReplayRequest, ...]) -> None:
    """Every certified-by pointer names an earlier attempt of the same problem."""
    order = [r.replay_input.attempt_id for r in requests]
    for pointer in work.glob("*/certified-by.json"):
        first = json.loads(pointer.read_bytes())["attempt_id"]
        here = order.index(pointer.parent.name)
        assert order.index(first) < here
        assert PROBLEMS[order.index(first)] == PROBLEMS[here]
