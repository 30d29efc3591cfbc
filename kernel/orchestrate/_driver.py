"""replay_bundle: every attempt of a search run, in canonical order, with gathered evidence.

Theory of operation (ADR-0229 §5, §12; ADR-0002; ADR-0006; ADR-0008):

    for each request in GeometricSearchRun.candidate_attempts order:
        begin_attempt: validate -> replay_contract     (pure, here, in order)
        ContractClosed: provider.task_for(state)       (here: what gathering reads)
                        task.gather()                  (impure, on the executor)
        finish_attempt: replay_proofs -> dispose       (pure, here, in order,
                                                        over the state kept here)

The two half-steps are the replay machine's own driver (the one
``replay_attempt`` runs); this module only decides where evidence is gathered.
It is the library's driver and ``kernel run --executor inline``'s; ``kernel
run --executor process|dask`` runs the pure half-steps on shard workers
instead, with this module's evidence submission in between
(``_sharded_run``, ADR 0020), and a caller that decides a run a few attempts
at a time passes the run's ``facts`` on between calls.

- The pure transitions run in the caller: they are cheap (about 2.5 ms per
  attempt against about 0.6 s for one certification), the authority
  manifest holds callables behind read-only mappings that need not cross a
  process boundary, and the verdict is then always computed by this
  process's code, whatever ran the evidence (ADR-0008). Only evidence
  gathering (the slow, impure step) is submitted to the executor, one task
  per contract-closed attempt, each submitted as soon as its contract stage
  is done and all before any is awaited.
- What a task carries is the provider's ``task_for(state)`` (a
  ``TaskProvider``: the attempt's ids, obligation refs and candidate frame
  for the certifier, a few KB whatever the run's size), else the provider
  and the whole state, whose request holds the whole run (about 175 bytes
  per attempt of the run, per task). Either way the state stays here and
  the evidence that comes back is bound to it by ``finish_attempt``, whose
  authorities check it against that attempt's candidate and problem.
- Evidence is stored by attempt index as tasks finish, and outcomes are
  built by index, never by completion order, so the result is the run's
  canonical order and byte-identical whichever executor
  ran the work (inline, threads, processes, Dask's ``Client.get_executor()``).
- A gather that raises, a task that cannot be submitted or pickled, a worker
  that dies or is lost, or a task that returns anything but a gathered
  result is no evidence plus a note on the ``kernel.orchestrate`` logger:
  the obligation's authority reports ``unavailable`` and the attempt fails
  closed. It never becomes a verdict, and no attempt is ever dropped.
- A process pool whose worker died is broken: every task it held fails
  (``BrokenExecutor``) and the executor starts a fresh pool
  (``kernel.orchestrate._process_pool``). Each such task is submitted once more
  (``lost_to_a_broken_pool``), so a death costs only the certifications
  that were running in the pool at that moment, never the tasks queued
  behind them or the rest of the run. A re-run of a task that had begun
  finds its attempt directory written and fails closed, as above.
- Notes logged while gathering are captured where the task runs (a worker
  process has no handler of the caller's) and re-logged here, in canonical
  attempt order, after every task has finished.
- ``progress(done, total)`` is called in the caller's thread, with attempts
  counted as done when their evidence (if any) is in.
- Nothing compares, ranks or selects candidates (§12); each attempt is
  classified on its own.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import BrokenExecutor, Executor, Future
from typing import Final, assert_never, final

import attrs

from kernel.orchestrate._attempt_record import AttemptRecord
from kernel.orchestrate._inflight import FirstOfKey, InFlight, in_flight_key
from kernel.orchestrate._provider import (
    EvidenceProvider,
    EvidenceTask,
    RecordedTask,
    RecordKeeper,
    TaskProvider,
)
from kernel.replay import (
    AuthorityManifest,
    ContractClosed,
    ProofEvidence,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayRequest,
    RunFacts,
    begin_attempt,
    facts_for,
    finish_attempt,
    requests_from_bundle,
)

__all__ = ["gather_safely", "replay_bundle", "replay_requests"]

LOG: Final = logging.getLogger("kernel.orchestrate")


def _label(state: ContractClosed) -> str:
    return f"attempt {state.validated.request.replay_input.attempt_id[:16]}"


@final
@attrs.frozen
class _WholeState:
    """The task for a provider with only ``gather(state)``: the state, whole run and all."""

    provider: EvidenceProvider
    state: ContractClosed

    def gather(self) -> tuple[ProofEvidence, ...]:
        return self.provider.gather(self.state)


def _gather_safely(task: EvidenceTask, label: str) -> tuple[ProofEvidence, ...]:
    try:
        return task.gather()
    except Exception as exc:  # a provider failure is never a verdict
        LOG.warning("%s: evidence provider raised %s: %s", label, type(exc).__name__, exc)
        return ()


def gather_safely(provider: EvidenceProvider, state: ContractClosed) -> tuple[ProofEvidence, ...]:
    """``provider.gather(state)``; a raise is no evidence plus a note."""
    return _gather_safely(_WholeState(provider, state), _label(state))


@final
@attrs.frozen
class _Gathered:
    """What an evidence task sends back: the evidence and the notes logged meanwhile."""

    evidence: tuple[ProofEvidence, ...]
    notes: tuple[str, ...]
    # The attempt's record, taken where the task ran (ADR 0022); None inline.
    record: AttemptRecord | None = None


class _ThreadNotes(logging.Filter):
    """Keeps this thread's records on ``LOG`` (and drops them there); others pass."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.notes: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread != self.thread:
            return True
        self.notes.append(record.getMessage())
        return False


@contextlib.contextmanager
def _captured_notes() -> Iterator[list[str]]:
    capture = _ThreadNotes()
    LOG.addFilter(capture)
    try:
        yield capture.notes
    finally:
        LOG.removeFilter(capture)


def _gather_task(task: EvidenceTask, label: str, bring_home: bool = False) -> _Gathered:
    """The unit of work that crosses the executor (module level: picklable by reference).

    ``bring_home``: the task ran on an executor, whose machine may share no
    file system with the driver, so what it left (a ``RecordedTask``'s
    record) comes back with its evidence (ADR 0022).
    """
    record = None
    with _captured_notes() as notes:
        evidence = _gather_safely(task, label)
        if bring_home and isinstance(task, RecordedTask):
            record = task.take_record()
    return _Gathered(evidence, tuple(notes), record)


def _kept(provider: EvidenceProvider, task: EvidenceTask, result: _Gathered) -> _Gathered:
    """In the driver: a result that came back from an executor, its record landed and checked.

    A provider that keeps records (``RecordKeeper``) decides what evidence
    counts once the record is home; any other keeps what the task returned.
    """
    if not (isinstance(provider, RecordKeeper) and isinstance(task, RecordedTask)):
        return result
    try:
        evidence, notes = provider.keep(task, result.evidence, result.record)
    except Exception as exc:  # the driver's own failure to keep it: no evidence, never a verdict
        evidence, notes = (), (f"record not kept: {type(exc).__name__}: {exc}",)
    return _Gathered(evidence, result.notes + notes)


def _already_home(provider: EvidenceProvider, task: EvidenceTask) -> _Gathered | None:
    """In the driver, before ``task`` runs: a resumed run's record that is home and counts.

    A ``RecordKeeper`` may hold a certification the interrupted run landed
    (ADR 0022, ``kept_already``); then nothing is sent. None: run the task.
    """
    if not (isinstance(provider, RecordKeeper) and isinstance(task, RecordedTask)):
        return None
    try:
        evidence = provider.kept_already(task)
    except Exception as exc:  # the driver's own failure: run it; a leftover fails it closed
        LOG.warning("a record left by the interrupted run was not looked at: %s: %s",
                    type(exc).__name__, exc)
        return None
    return None if evidence is None else _Gathered(evidence, ())


def _gather_here(provider: EvidenceProvider, task: EvidenceTask, label: str) -> _Gathered:
    """Inline: ``task`` gathered in this process, unless its record is already home."""
    return _already_home(provider, task) or _gather_task(task, label)


def _prepare(
    provider: EvidenceProvider, tasks: TaskProvider | None, state: ContractClosed
) -> tuple[EvidenceTask | None, tuple[str, ...]]:
    """The task for ``state`` (``None`` if ``task_for`` raised) and the notes logged making it.

    Runs in the driver. ``tasks`` is the provider when it is a
    ``TaskProvider``: then only its task crosses the executor. Otherwise the
    provider and the whole state do (ADR-0008).
    """
    if tasks is None:
        return _WholeState(provider, state), ()
    task: EvidenceTask | None = None
    with _captured_notes() as notes:
        try:
            task = tasks.task_for(state)
        except Exception as exc:  # as a raise in gather: no evidence, never a verdict
            LOG.warning(
                "%s: evidence provider raised %s: %s", _label(state), type(exc).__name__, exc
            )
    return task, tuple(notes)


def _is_gathered(value: object) -> bool:
    return (
        isinstance(value, _Gathered)
        and type(value.evidence) is tuple
        and all(isinstance(item, ProofEvidence) for item in value.evidence)
        and type(value.notes) is tuple
        and all(type(note) is str for note in value.notes)
        and (value.record is None or isinstance(value.record, AttemptRecord))
    )


def _collect(future: Future[_Gathered], label: str) -> _Gathered:
    try:
        value: object = future.result()
    except Exception as exc:  # the worker died, was lost, or the task was not shipped
        return _Gathered((), (f"{label}: evidence task failed {type(exc).__name__}: {exc}",))
    if not _is_gathered(value):
        note = f"{label}: evidence task returned {type(value).__name__}, not evidence"
        return _Gathered((), (note,))
    assert isinstance(value, _Gathered)
    return value


def lost_to_a_broken_pool(future: Future[_Gathered]) -> bool:
    """Whether ``future`` failed because its pool broke (a worker died), not by its own task."""
    return (future.done() and not future.cancelled()
            and isinstance(future.exception(), BrokenExecutor))


def _submit(
    executor: Executor, provider: EvidenceProvider, task: EvidenceTask, label: str
) -> Future[_Gathered] | _Gathered:
    home = _already_home(provider, task)
    if home is not None:
        return home
    try:
        return executor.submit(_gather_task, task, label, True)
    except Exception as exc:  # a broken pool, a task that cannot be pickled, a lost client
        return _Gathered((), (f"{label}: evidence task not submitted {type(exc).__name__}: {exc}",))


def replay_requests(
    requests: Sequence[ReplayRequest],
    manifest: AuthorityManifest,
    provider: EvidenceProvider,
    *,
    executor: Executor | None = None,
    progress: Callable[[int, int], None] | None = None,
    facts: RunFacts | None = None,
    reuse: FirstOfKey[EvidenceTask] | None = None,
) -> tuple[ReplayAdapterOutcome, ...]:
    """One outcome per request, in the order given (see the module docstring).

    ``executor`` gathers evidence per contract-closed attempt; ``None`` runs
    it inline, in order. What it is handed is ``provider.task_for(state)``
    for a ``TaskProvider`` (the size of one attempt's work), else the
    provider and the whole state (which grows with the run). That must be
    picklable for a process-based executor; when it is not, those attempts
    get no evidence. ``progress(done, total)``, if given, is called in this
    thread. ``facts``, from ``facts_for``, are the run's when the caller has
    examined it already (a caller that decides a run a few attempts per call
    passes them on, so the run is examined once, not once per call: ADR 0011).
    ``reuse`` is the run's memory of the first reusable certification per
    key (``FirstOfKey``), for such a caller to pass on likewise; without it
    the memory lasts this call.
    """
    total = len(requests)
    done = 0

    def advance(count: int = 1) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    # Checked once per call: a TaskProvider's tasks are what cross the executor.
    tasks = provider if isinstance(provider, TaskProvider) else None
    staged: list[ContractClosed | ReplayAdapterOutcome] = []
    prepared_notes: dict[int, tuple[str, ...]] = {}
    gathered: dict[int, _Gathered] = {}
    pending: dict[Future[_Gathered], int] = {}
    # Tasks naming the same in-flight key (the certifier's store key) go one
    # after the other, so a repeat hits what the first stored (ADR-0019).
    held: dict[int, tuple[EvidenceTask, str | None]] = {}
    in_flight: InFlight[int] = InFlight()
    finished: queue.SimpleQueue[Future[_Gathered]] = queue.SimpleQueue()
    # A repeat of a key whose first certification passed reuses it (ADR-0019).
    memory: FirstOfKey[EvidenceTask] = FirstOfKey() if reuse is None else reuse
    base = memory.offset
    memory.offset += total

    def settle(index: int, result: _Gathered) -> list[int]:
        """``index``'s evidence is in: note it, and release what waited for its key."""
        gathered[index] = result
        advance()
        task, key = held.pop(index)
        memory.note(key, base + index, task, result.evidence)
        return in_flight.finished(key)

    sent: dict[int, EvidenceTask] = {}  # the task submitted for each index, until settled
    resent: set[int] = set()  # submitted again once, after its pool broke

    def send(index: int, task: EvidenceTask) -> list[int]:
        assert executor is not None
        stage = staged[index]
        assert isinstance(stage, ContractClosed)
        submitted = _submit(executor, provider, task, _label(stage))
        if isinstance(submitted, _Gathered):
            return settle(index, submitted)
        sent[index] = task
        pending[submitted] = index
        submitted.add_done_callback(finished.put)
        return []

    def dispatch(first: int) -> None:
        ready = [first]
        while ready:
            index = ready.pop(0)
            task, key = held[index]
            task, _ = memory.reuse(key, base + index, task)
            ready.extend(send(index, task))

    # The run's facts are computed once per run object and passed to each of
    # its attempts (linear in the run's size; ADR 0011), never memoised by value.
    for index, request in enumerate(requests):
        facts = facts_for(request, facts)
        stage = begin_attempt(request, manifest, facts=facts)
        staged.append(stage)
        if not isinstance(stage, ContractClosed):
            advance()
            continue
        task, prepared_notes[index] = _prepare(provider, tasks, stage)
        if task is None:
            gathered[index] = _Gathered((), ())
            advance()
        elif executor is None:
            key = in_flight_key(task)
            ran, _ = memory.reuse(key, base + index, task)
            gathered[index] = _gather_here(provider, ran, _label(stage))
            memory.note(key, base + index, task, gathered[index].evidence)
            advance()
        else:
            key = in_flight_key(task)
            # A repeat whose first already passed needs no order: it runs nothing.
            task, reused = memory.reuse(key, base + index, task)
            held[index] = (task, None if reused else key)
            if in_flight.admit(held[index][1], index):
                dispatch(index)
    # Results are taken as tasks finish and stored by attempt index; each
    # future is then dropped, so a Dask key is released as soon as it is read
    # and a later lost worker cannot make the cluster run that attempt again.
    while pending:
        future = finished.get()
        index = pending.pop(future)
        stage = staged[index]
        assert isinstance(stage, ContractClosed)
        task = sent.pop(index)
        if lost_to_a_broken_pool(future) and index not in resent:
            resent.add(index)
            for waiting in send(index, task):
                dispatch(waiting)
            continue
        for waiting in settle(index, _kept(provider, task, _collect(future, _label(stage)))):
            dispatch(waiting)
    outcomes: list[ReplayAdapterOutcome] = []
    for index, stage in enumerate(staged):
        match stage:
            case ContractClosed():
                result = gathered[index]
                # canonical order, whichever process logged it
                for note in prepared_notes[index] + result.notes:
                    LOG.warning("%s", note)
                outcomes.append(finish_attempt(stage, result.evidence))
            case ReplayAdapterResult() | ReplayAdapterRefusal():
                outcomes.append(stage)
            case _:
                assert_never(stage)
    return tuple(outcomes)


def replay_bundle(
    bundle: ReplayBundle,
    manifest: AuthorityManifest,
    provider: EvidenceProvider,
    *,
    executor: Executor | None = None,
) -> tuple[ReplayAdapterOutcome, ...]:
    """Classify every attempt of ``bundle`` in the run's canonical order.

    With ``NoEvidence`` the outcomes are byte-identical to ``replay_attempt``
    over ``requests_from_bundle(bundle)``. Raises ``ValueError`` unless the
    bundle holds one input and one reconstruction per attempt.
    """
    return replay_requests(requests_from_bundle(bundle), manifest, provider, executor=executor)
