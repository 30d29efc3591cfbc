"""``kernel run``'s pure steps in shards on workers, evidence gathered in between (ADR 0020).

Theory of operation (ADR 0020 "kernel run"; ADR 0008 "what crosses an executor"):

    per shard, on a worker   (contract_shard): validate -> replay_contract for
                             each attempt; a refusal or a contract_refused is
                             settled there (its outcome line encoded), a
                             contract that closes gives its provider's
                             ``task_for(state)`` (the state, which holds the
                             run, never leaves the worker)
    in the caller            every task of the shard submitted to the evidence
                             executor as the shard comes back (all before any
                             is awaited), results bound by attempt index
    per shard, on a worker   (finish_shard): the closed attempts again, each
                             with its evidence: validate -> replay_contract ->
                             replay_proofs -> dispose (``replay_attempt`` is
                             deterministic, so re-deciding the contract there
                             is sound, and cheap against a certification)
    in the caller            the shard's outcome lines, in attempt order, each
                             shard after every earlier one (``replay_shards``
                             yields them)

- The run reaches each worker once (``SharedRun``, as for ``kernel replay``);
  a job carries a shard's attempt lines (the first half) or the closed
  attempts' lines and evidence (the second), and the provider, whose tasks
  are built on the worker. Memory holds the shards in flight, never the run's
  outcomes.
- The provider must be a ``TaskProvider``: what comes back from the first
  half is its small task, never a state holding the run.
- Faults are the shard runner's (a dead pool worker's jobs not yet taken are
  run again: pure, so nothing is lost or written twice) and the evidence
  executor's (a lost certification is no evidence plus a note: the attempt
  fails closed, as in ``replay_requests``; a task its broken process pool
  failed is sent once more, as there). Notes (from ``task_for`` on the
  worker and from gathering) are logged here when the shard is written, in
  attempt order.
- Nothing here decides evidence: each task is the provider's own and is
  submitted through the driver's ``_submit``. A task naming an in-flight key
  (a run with an evidence store, ADR 0019) is ordered after the task of its
  key in flight, across shards, as ``replay_requests`` orders it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from concurrent.futures import Executor, Future
from typing import Final, assert_never, final

import attrs

from kernel.bundles import ReadyAttempt, RefusedAttempt, outcome_line
from kernel.orchestrate._driver import (
    LOG,
    _collect,
    _gather_here,
    _Gathered,
    _kept,
    _label,
    _prepare,
    _submit,
    lost_to_a_broken_pool,
)
from kernel.orchestrate._inflight import FirstOfKey, InFlight, in_flight_key
from kernel.orchestrate._provider import EvidenceProvider, EvidenceTask, TaskProvider
from kernel.orchestrate._shards import (
    Attempt,
    Job,
    Shard,
    ShardError,
    ShardRunner,
    SharedRun,
    prepared_run,
)
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ReplayAdapterOutcome,
    begin_attempt,
    facts_for,
    finish_attempt,
)

__all__ = ["Closed", "Hint", "Settled", "contract_shard", "finish_shard", "replay_shards"]

#: The command's likely cause for an outcome (``manifest_hint``), computed where the
#: attempt is; module level, so it crosses to a worker by reference.
Hint = Callable[[Attempt, ReplayAdapterOutcome], str | None]
_NO_EVIDENCE: Final = _Gathered((), ())


@final
@attrs.frozen(eq=False)
class Settled:
    """An attempt's final outcome and its outcome line, decided on a worker."""

    index: int
    attempt_id: str | None
    outcome: ReplayAdapterOutcome
    line: bytes
    hint: str | None


@final
@attrs.frozen(eq=False)
class Closed:
    """A contract that closed: the task gathering its evidence (``None``: ``task_for`` raised)."""

    index: int
    label: str
    task: EvidenceTask | None
    notes: tuple[str, ...]


def _settled(item: Attempt, outcome: ReplayAdapterOutcome, hint: Hint | None) -> Settled:
    line = outcome_line(item.attempt_index, item.attempt_id, outcome)
    return Settled(item.attempt_index, item.attempt_id, outcome, line,
                   None if hint is None else hint(item, outcome))


def contract_shard(
    shared: SharedRun | None, shard: Shard, version: str, provider: EvidenceProvider,
    hint: Hint | None,
) -> tuple[Settled | Closed, ...]:
    """The first half, on a worker: each attempt settled, or its evidence task."""
    if not isinstance(provider, TaskProvider):
        raise TypeError("a sharded run needs a TaskProvider: its tasks, not states, come back")
    prepared = prepared_run(shared)
    manifest = prepared.manifest_of(version)
    found: list[Settled | Closed] = []
    for expected, item in enumerate(prepared.items(shard), start=shard.start):
        if item.attempt_index != expected:
            raise ValueError(f"shard attempt {item.attempt_index}, expected {expected}")
        match item:
            case ReadyAttempt():
                prepared.facts = facts_for(item.request, prepared.facts)
                stage = begin_attempt(item.request, manifest, facts=prepared.facts)
                if isinstance(stage, ContractClosed):
                    task, notes = _prepare(provider, provider, stage)
                    found.append(Closed(expected, _label(stage), task, notes))
                else:
                    found.append(_settled(item, stage, hint))
            case RefusedAttempt():
                found.append(_settled(item, item.refusal, hint))
            case _:
                assert_never(item)
    if len(found) != shard.count:
        raise ValueError(f"shard of {shard.count} attempts gave {len(found)}")
    return tuple(found)


def finish_shard(
    shared: SharedRun | None,
    picks: tuple[tuple[int, bytes | None, tuple[ProofEvidence, ...]], ...],
    version: str, hint: Hint | None,
) -> tuple[Settled, ...]:
    """The second half, on a worker: each closed attempt (index, line, evidence) decided."""
    prepared = prepared_run(shared)
    manifest = prepared.manifest_of(version)
    found: list[Settled] = []
    for index, line, evidence in picks:
        item = prepared.item_at(index, line)
        if not isinstance(item, ReadyAttempt):
            raise ValueError(f"attempt {index} is not ready again")
        prepared.facts = facts_for(item.request, prepared.facts)
        stage = begin_attempt(item.request, manifest, facts=prepared.facts)
        if not isinstance(stage, ContractClosed):  # deterministic: never, unless the bytes moved
            raise ValueError(f"attempt {index}'s contract did not close again")
        found.append(_settled(item, finish_attempt(stage, evidence), hint))
    return tuple(found)


@final
class _Slot:
    """One shard in flight: its settled attempts, and its closed ones' evidence as it comes."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.contracted = False
        self.settled: dict[int, Settled] = {}
        self.closed: list[Closed] = []
        self.gathered: dict[int, _Gathered] = {}
        self.finishing = False
        self.finished = False

    def line_of(self, index: int) -> bytes | None:
        return self.shard.lines[index - self.shard.start] if self.shard.lines else None

    def complete(self) -> bool:
        """Whether every closed attempt's evidence is in."""
        return all(c.index in self.gathered for c in self.closed)

    def picks(self) -> tuple[tuple[int, bytes | None, tuple[ProofEvidence, ...]], ...]:
        return tuple((c.index, self.line_of(c.index), self.gathered[c.index].evidence)
                     for c in self.closed)

    def written(self) -> list[Settled]:
        """The shard's outcomes in attempt order; the notes logged here, in that order too."""
        notes = {c.index: c.notes + self.gathered[c.index].notes for c in self.closed}
        out: list[Settled] = []
        for index in range(self.shard.start, self.shard.start + self.shard.count):
            for note in notes.get(index, ()):
                LOG.warning("%s", note)
            out.append(self.settled[index])
        return out


@final
class _Gathering:
    """The run's certification tasks on the evidence executor, across every shard in flight.

    As in ``replay_requests``: every task is submitted as its shard's first
    half comes back, before any result is awaited, and results are bound by
    attempt index. A task naming an in-flight key (the certifier's store key,
    ADR 0019) waits while another task of its key is in flight, whichever
    shard it is in, and is submitted when that one finishes (a repeat of an
    earlier attempt whose certification passed then reuses it; otherwise it
    looks the store up; a failure releases it all the same).
    """

    def __init__(self, executor: Executor | None, provider: TaskProvider) -> None:
        self._executor = executor
        self._provider = provider
        self.pending: dict[Future[_Gathered], tuple[_Slot, Closed, EvidenceTask]] = {}
        self._in_flight: InFlight[tuple[_Slot, Closed]] = InFlight()
        # The first passed certification per key, by attempt index (ADR-0019): a
        # later attempt of the key reuses it; an earlier one (a shard that came
        # back late) does not, so a --resume prefix never points past itself.
        self._first: FirstOfKey[EvidenceTask] = FirstOfKey()
        self._counted: dict[int, str | None] = {}  # the key each task counts against
        self._resent: set[int] = set()

    def gather(self, slot: _Slot) -> None:
        """Every closed attempt of ``slot`` submitted now (or parked behind its key)."""
        for closed in slot.closed:
            if closed.task is None:
                slot.gathered[closed.index] = _NO_EVIDENCE
                continue
            key = in_flight_key(closed.task)
            task, reused = self._first.reuse(key, closed.index, closed.task)
            if self._executor is None:
                result = _gather_here(self._provider, task, closed.label)
                slot.gathered[closed.index] = result
                self._first.note(key, closed.index, closed.task, result.evidence)
                continue
            # A repeat whose first already passed runs nothing: it needs no order.
            self._counted[closed.index] = None if reused else key
            if self._in_flight.admit(self._counted[closed.index], (slot, closed)):
                self._dispatch(slot, closed)

    def _dispatch(self, slot: _Slot, closed: Closed) -> None:
        assert self._executor is not None and closed.task is not None
        task, _ = self._first.reuse(in_flight_key(closed.task), closed.index, closed.task)
        self._send(slot, closed, task)

    def _send(self, slot: _Slot, closed: Closed, task: EvidenceTask) -> None:
        assert self._executor is not None
        submitted = _submit(self._executor, self._provider, task, closed.label)
        if isinstance(submitted, _Gathered):
            self._settle(slot, closed, submitted)
        else:
            self.pending[submitted] = (slot, closed, task)

    def _settle(self, slot: _Slot, closed: Closed, result: _Gathered) -> None:
        slot.gathered[closed.index] = result
        assert closed.task is not None
        self._first.note(in_flight_key(closed.task), closed.index, closed.task, result.evidence)
        for waiting_slot, waiting in self._in_flight.finished(self._counted.pop(closed.index)):
            self._dispatch(waiting_slot, waiting)

    def collect(self, *, wait: bool) -> None:
        """Take the results that are in; with ``wait``, first wait for at least one."""
        if wait and self.pending:
            futures.wait(tuple(self.pending), return_when=futures.FIRST_COMPLETED)
        for future in [f for f in self.pending if f.done()]:
            slot, closed, task = self.pending.pop(future)  # a Dask key is released once read
            if lost_to_a_broken_pool(future) and closed.index not in self._resent:
                self._resent.add(closed.index)  # once: its pool broke under it (a worker died)
                self._send(slot, closed, task)
                continue
            self._settle(slot, closed,
                         _kept(self._provider, task, _collect(future, closed.label)))


def replay_shards(
    runner: ShardRunner, shards: Iterable[Shard], executor: Executor | None,
    provider: TaskProvider, version: str, hint: Hint | None = None,
) -> Iterator[list[Settled]]:
    """Each shard's outcomes, in run order, a shard at a time (see the module docstring).

    Raises ``ShardError`` as ``ShardRunner.run`` does when a shard is lost.
    """
    window: deque[_Slot] = deque()
    by_start: dict[int, _Slot] = {}
    gathering = _Gathering(executor, provider)
    source = iter(shards)
    exhausted = False
    while True:
        while not exhausted and len(window) < runner.in_flight:
            shard = next(source, None)
            if shard is None:
                exhausted = True
                break
            slot = _Slot(shard)
            window.append(slot)
            by_start[shard.start] = slot
            runner.submit(Job(contract_shard, (shard, version, provider, hint)))
        if not window:
            return
        head = window[0]
        if head.finished:
            window.popleft()
            del by_start[head.shard.start]
            yield head.written()
            continue
        if runner.pending:
            job, result = runner.take()
            _taken(job, result, by_start, gathering)
        else:  # nothing on the shard workers: wait for evidence (the head's, or what it waits on)
            if not gathering.pending:
                raise ShardError("shard_failed", "a shard waits for evidence nothing gathers")
            gathering.collect(wait=True)
        gathering.collect(wait=False)
        for slot in window:
            if slot.contracted and not slot.finishing and slot.complete():
                slot.finishing = True
                if slot.closed:
                    runner.submit(Job(finish_shard, (slot.picks(), version, hint)))
                else:
                    slot.finished = True


def _taken(job: Job, result: object, by_start: dict[int, _Slot], gathering: _Gathering) -> None:
    if job.fn is contract_shard:
        shard = job.args[0]
        assert isinstance(shard, Shard) and isinstance(result, tuple)
        slot = by_start[shard.start]
        # What a worker returns is not trusted to be of the shard's types: an
        # ordinary default refuses it (a match would have to be total).
        for found in result:
            if isinstance(found, Settled):
                slot.settled[found.index] = found
            elif isinstance(found, Closed):
                slot.closed.append(found)
            else:
                raise ShardError("shard_failed", f"a shard gave {type(found).__name__}")
        slot.contracted = True
        gathering.gather(slot)
    else:
        picks = job.args[0]
        assert isinstance(picks, tuple) and isinstance(result, tuple) and picks
        slot = by_start[_start_of(by_start, picks[0][0])]
        if [getattr(found, "index", None) for found in result] != [p[0] for p in picks]:
            raise ShardError("shard_failed", "a shard's second half gave other attempts")
        for found in result:
            if not isinstance(found, Settled):
                raise ShardError("shard_failed", f"a shard gave {type(found).__name__}")
            slot.settled[found.index] = found
        slot.finished = True


def _start_of(by_start: dict[int, _Slot], index: int) -> int:
    for start, slot in by_start.items():
        if start <= index < start + slot.shard.count:
            return start
    raise KeyError(index)

