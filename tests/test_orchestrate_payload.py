"""What crosses the executor per attempt does not grow with the run (ADR 0008).

A task is measured as a process pool ships it: the pickled bytes of the
callable and the arguments ``Executor.submit`` receives. The counting
executor below records that and runs nothing (each future fails, which the
driver turns into no evidence plus a note), so no solver runs here; byte
identity on real pools and clusters is in ``test_orchestrate_certifier.py``,
``test_orchestrate_scale.py`` and ``test_orchestrate_cluster.py``.

The runs are built here from the shipped e2e bundle's first candidate (its
contract closes under ``certified.v1``), repeated: every attempt of a run of
10 and one of 1000 is the same kind of work, so any difference in bytes per
task is the run's size leaking into the task.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import ParamSpec, TypeVar

import attrs

from kernel.orchestrate import NoEvidence, replay_requests
from kernel.organs import CERTIFIED_MANIFEST
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ReplayBundle,
    ReplayRequest,
    begin_attempt,
    build_replay_input,
    requests_from_bundle,
)
from kernel.upstream import CandidateDraft, build_chain
from tests.orchestrate_helpers import certifier, e2e_bundle

P = ParamSpec("P")
T = TypeVar("T")

SMALL, LARGE = 10, 1000
# What may differ between two tasks of different runs: nothing of the run but
# its numbers' encodings (an attempt index, a count) and pickle's framing.
SLACK = 64


class CountingExecutor(Executor):
    """Records the pickled size of every task it is handed; runs none of them."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        self.sizes.append(len(pickle.dumps((fn, args, kwargs), pickle.HIGHEST_PROTOCOL)))
        future: Future[T] = Future()
        future.set_exception(RuntimeError("measured, not run"))
        return future


@functools.cache
def _requests(attempts: int) -> tuple[ReplayRequest, ...]:
    """The first two requests of a run of ``attempts`` copies of the e2e first candidate."""
    chain = e2e_bundle().chain
    first = begin_attempt(requests_from_bundle(e2e_bundle())[0], CERTIFIED_MANIFEST)
    assert isinstance(first, ContractClosed)
    draft = CandidateDraft(first.validated.candidate_frame, "op.bind_missing_quantity", "v1")
    run = build_chain(
        chain.problem_frame,
        chain.assessment,
        [draft] * attempts,
        operator_set_id=chain.run.run_input.operator_set_id,
        operator_set_version=chain.run.run_input.operator_set_version,
    )
    assert len(run.run.candidate_attempts) == attempts
    inputs = tuple(build_replay_input(run, i, CERTIFIED_MANIFEST) for i in range(attempts))
    return requests_from_bundle(ReplayBundle(run, inputs))[:2]


@attrs.frozen
class _GatherOnly:
    """A provider with only ``gather(state)``, as a third party may have written one."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        return ()


def _task_sizes(attempts: int, provider: object) -> list[int]:
    executor = CountingExecutor()
    outcomes = replay_requests(
        _requests(attempts), CERTIFIED_MANIFEST, provider, executor=executor  # type: ignore[arg-type]
    )
    assert len(outcomes) == 2
    assert len(executor.sizes) == 2, "both attempts close their contract: one task each"
    return executor.sizes


def test_a_certification_task_does_not_grow_with_the_run(tmp_path: Path) -> None:
    provider = certifier(tmp_path / "work")
    small, large = _task_sizes(SMALL, provider), _task_sizes(LARGE, provider)
    assert max(large) <= min(small) + SLACK, (small, large)
    assert not (tmp_path / "work").exists()  # nothing ran


def test_no_evidence_ships_a_task_that_does_not_grow_with_the_run() -> None:
    small, large = _task_sizes(SMALL, NoEvidence()), _task_sizes(LARGE, NoEvidence())
    assert max(large) <= min(small) + SLACK, (small, large)


def test_a_provider_with_only_gather_still_gets_the_whole_state() -> None:
    # The documented fallback: the state (and with it the whole run) is shipped.
    # This is also what the two tests above would see if the slim path were lost.
    small, large = _task_sizes(SMALL, _GatherOnly()), _task_sizes(LARGE, _GatherOnly())
    per_attempt = (min(large) - max(small)) / (LARGE - SMALL)
    assert per_attempt > 100, (small, large)
