"""The evidence-provider seam between contract replay and proof replay.

Rules (ADR-0002 "Evidence gathered outside the pure core", ADR-0006, ADR-0008):

- a provider is called only for a ``ContractClosed`` state, never after
  ``contract_refused`` or a refusal;
- it returns the evidence it could gather, as a tuple of ``ProofEvidence``,
  and nothing for obligations it could not serve: the obligation's authority
  then reports ``unavailable`` and the attempt fails closed;
- what crosses a process boundary must be picklable.

Two shapes, one meaning:

- ``EvidenceProvider``: ``gather(state)``. On an executor, the driver ships
  the provider and the whole ``ContractClosed`` state with each task. The
  state holds the request, and the request the whole search run, so each
  task grows with the run (about 175 bytes per attempt of the run).
- ``TaskProvider``: also ``task_for(state)``, called in the driver's process,
  which returns an ``EvidenceTask``: a small picklable value holding only
  what gathering reads, whose ``gather()`` runs on the executor. Its size
  does not depend on the run's. ``provider.gather(state)`` must equal
  ``provider.task_for(state).gather()`` (the kernel's providers implement
  the first as the second), so choosing the executor never changes evidence.

In both shapes the driver keeps the state and binds whatever comes back to
that state's attempt (``finish_attempt``); the replay machine's authorities
then check each item against the attempt's candidate and problem, so a task
cannot hand evidence to any attempt but the one it was submitted for.
"""

from __future__ import annotations

from typing import Protocol, final, runtime_checkable

import attrs

from kernel.orchestrate._attempt_record import AttemptRecord
from kernel.replay import ContractClosed, ProofEvidence

__all__ = [
    "EvidenceProvider", "EvidenceTask", "NoEvidence", "RecordKeeper", "RecordedTask",
    "TaskProvider",
]


class EvidenceProvider(Protocol):
    """Gathers evidence for a contract-closed attempt's declared obligations."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """The evidence for ``state``'s obligations; ``()`` when there is none."""
        ...


class EvidenceTask(Protocol):
    """One attempt's evidence gathering, cut down to what it reads; runs on the executor."""

    def gather(self) -> tuple[ProofEvidence, ...]:
        """The evidence this task was made for; ``()`` when there is none."""
        ...


@runtime_checkable
class TaskProvider(EvidenceProvider, Protocol):
    """A provider that can hand the executor a task instead of the whole state.

    ``task_for`` runs in the driver, once per contract-closed attempt, before
    the task is submitted: it should be cheap and pure (it only selects what
    the gathering reads), and a raise is no evidence plus a note, as a raise
    in ``gather`` is.
    """

    def task_for(self, state: ContractClosed) -> EvidenceTask:
        """The picklable task that gathers ``state``'s evidence."""
        ...


@runtime_checkable
class RecordedTask(Protocol):
    """A task whose gathering leaves a record on the machine that ran it (ADR 0022)."""

    def gather(self) -> tuple[ProofEvidence, ...]:
        """The evidence this task was made for; ``()`` when there is none."""
        ...

    def take_record(self) -> AttemptRecord | None:
        """After ``gather``, where it ran: that record as a value (None: it left none)."""
        ...


@runtime_checkable
class RecordKeeper(Protocol):
    """A provider that takes a record home: lands it, and says what evidence then counts."""

    def keep(
        self, task: RecordedTask, evidence: tuple[ProofEvidence, ...],
        record: AttemptRecord | None,
    ) -> tuple[tuple[ProofEvidence, ...], tuple[str, ...]]:
        """In the driver: the evidence that counts for ``task``, and notes."""
        ...

    def kept_already(self, task: RecordedTask) -> tuple[ProofEvidence, ...] | None:
        """In the driver, before ``task`` runs: the evidence its record, already home, gives.

        A resumed run's (ADR 0022): None means run the task.
        """
        ...


@final
@attrs.frozen
class _NothingToGather:
    """The task of ``NoEvidence``: gathers nothing."""

    def gather(self) -> tuple[ProofEvidence, ...]:
        """Always ``()``."""
        return ()


@final
@attrs.frozen
class NoEvidence:
    """The provider that gathers nothing (the pure ``replay_attempt`` behaviour)."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """Always ``()``."""
        return self.task_for(state).gather()

    def task_for(self, state: ContractClosed) -> EvidenceTask:
        """A task that gathers nothing (a few bytes, whatever the run)."""
        return _NothingToGather()
