"""One task per key in flight: later tasks with the key wait for the first (ADR-0019).

Theory of operation (issue 21, "within one run, identical certification
problems are certified once", under every executor):

- a task may name an ``in_flight_key`` (a ``str``; the certifier's task
  names its evidence-store key when the run has a store, else ``None``).
  The driver submits a keyed task only when no task with its key is in
  flight; otherwise the task is parked, in submission order;
- when the task in flight for a key finishes (whatever it returned, raised
  or lost), every task parked on that key is released and submitted. By then
  the first has inserted its evidence if it produced any, so each of them
  hits the store: the producer is skipped, the checker runs on a fresh
  request for each. If the first certification failed (or could not insert),
  they miss and each produces its own: a failure never poisons the next;
- with no key (no store, or a provider whose tasks name none) nothing is
  ordered: the task is submitted at once, as before;
- only the order of submission changes, never what a task computes, and
  outcomes are built by attempt index: the bytes are those of any order.

Released tasks all go at once rather than one by one: a hit is a checker run,
independent of the others' hits, so holding them back would only idle
workers. The cost is the failure case, where several may produce the same
problem again side by side; the store then keeps the first insert (the
others are ``present`` or ``conflict``, as between concurrent runs).

Whole certifications reused within a run (``FirstOfKey``, ADR-0019 "A repeat
within a run"): once a keyed task's evidence comes back and the task says it
is reusable (``reusable(evidence)``; the certifier's: a verified receipt), a
later task of the run with the same key is handed over as
``task.reusing(first)`` instead of itself: the certifier's repeat then seals
its own request and receipt over the first attempt's run and runs nothing.
Only a first that comes *earlier in the run's order* is reused, so that
whatever ``kernel run --resume`` keeps of a run (a prefix of its outcome
lines) holds every attempt a kept one points to. Tasks without these
methods are never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, final

from kernel.replay import ProofEvidence

__all__ = ["FirstOfKey", "InFlight", "in_flight_key"]

_T = TypeVar("_T")


def in_flight_key(task: object) -> str | None:
    """The key ``task`` is ordered by, or ``None`` (no attribute, or not a ``str``)."""
    key = getattr(task, "in_flight_key", None)
    return key if type(key) is str else None


@final
class InFlight(Generic[_T]):
    """How many tasks of each key are in flight, and the items parked behind them."""

    def __init__(self) -> None:
        self._running: dict[str, int] = {}
        self._parked: dict[str, list[_T]] = {}

    def admit(self, key: str | None, item: _T) -> bool:
        """True if ``item`` may be submitted now (it is then in flight); else it is parked."""
        if key is None:
            return True
        if key not in self._running:
            self._running[key] = 1
            return True
        self._parked.setdefault(key, []).append(item)
        return False

    def finished(self, key: str | None) -> list[_T]:
        """A task of ``key`` finished: the items to submit now (in flight from now on)."""
        if key is None or key not in self._running:
            return []
        released = self._parked.pop(key, [])
        running = self._running[key] - 1 + len(released)
        if running:
            self._running[key] = running
        else:
            del self._running[key]
        return released


class FirstOfKey(Generic[_T]):  # not final: bench/_store.py measures without it
    """The first task of each key whose evidence is reusable, by its position in the run.

    ``position`` is the attempt's place in the run's canonical order (an
    attempt index, or a caller's running count across calls): ``first``
    hands out only a task placed earlier than the one asking. One instance
    lives as long as the run (``kernel run`` passes one to every batch).
    """

    def __init__(self) -> None:
        self._first: dict[str, tuple[int, _T]] = {}
        self.offset = 0  # positions used by earlier calls of a caller deciding in batches

    def note(
        self, key: str | None, position: int, task: _T, evidence: tuple[ProofEvidence, ...]
    ) -> None:
        """``task`` (``key``, ``position``) finished with ``evidence``: the first, if reusable."""
        if key is None or key in self._first:
            return
        judge: Callable[[tuple[ProofEvidence, ...]], object] | None = getattr(
            task, "reusable", None
        )
        if callable(judge) and judge(evidence) is True:
            self._first[key] = (position, task)

    def reuse(self, key: str | None, position: int, task: _T) -> tuple[_T, bool]:
        """``task`` handed over to an earlier first of its key, if any; and whether it was."""
        if key is None:
            return task, False
        found = self._first.get(key)
        rewrite: Callable[[_T], _T] | None = getattr(task, "reusing", None)
        if found is None or found[0] >= position or not callable(rewrite):
            return task, False
        return rewrite(found[1]), True
