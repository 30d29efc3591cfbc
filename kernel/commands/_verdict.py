"""Verdicts a pipeline can trust: failure classes, counts, and the exit code.

One scheme for every command that classifies attempts (``kernel replay``,
``kernel run``), documented in README.md ("Exit codes") and adr/0013:

- 0: the input was intact and no outcome falls in a selected failure class;
- 1: the requested policy does not hold (an outcome in a selected class);
- 2: usage error, or input refused at the boundary (nothing classified);
- 3: integrity: some outcome says the input is not what the run recorded.
  Integrity is always selected; it wins over 1.
- 130 / 143: interrupted by SIGINT / SIGTERM (``kernel run``).

Failure classes, defined on the outcome records alone (so the same outcome
lines always give the same verdict):

- ``integrity``: a refusal whose disposition is ``candidate_identity_mismatch``
  or ``invalid_replay_input`` (including a malformed attempt line of a bundle
  stream, or an attempt line that is missing);
- ``unavailable``: no judge could rule: a ``contract_replay_unavailable`` or
  ``proof_replay_unavailable`` refusal, or a result with a
  ``proof_unavailable:<ref>`` reason (an obligation with no usable evidence),
  or one whose certification receipt was inconclusive or an error
  (``<ref>:gate:status_inconclusive`` / ``<ref>:gate:status_error``: the
  checker did not conclude, e.g. a producer timeout);
- ``refused``: any refusal (every disposition that is not one of the three
  results);
- ``blocked``: a result that did not close: ``contract_refused`` or
  ``contract_closed_but_proof_refused``;
- ``unclassified``: an attempt its authorities did not classify: every
  refusal (``unsupported_proof_obligation`` included) and every
  ``unavailable`` outcome. The default of both commands (issue 20): a PASS
  says every attempt was ruled on by its contract and proof authorities,
  whatever they ruled (all ``contract_refused`` still passes), so a bundle
  whose obligations are another manifest's never goes green having
  verified nothing;
- ``any``: every outcome except ``contract_and_proof_closed``.

``--fail-on`` replaces the default (integrity stays): ``--fail-on integrity``
alone asks for less (only tampering fails, the behaviour before issue 20),
``--fail-on blocked`` asks for something else, ``--fail-on unclassified,blocked``
for more.
"""

from __future__ import annotations

from collections import Counter
from enum import Enum
from typing import Final, assert_never

import attrs

from kernel.commands._signals import EXIT_SIGINT as EXIT_SIGINT  # one table of exit codes
from kernel.commands._signals import EXIT_SIGPIPE as EXIT_SIGPIPE
from kernel.commands._signals import EXIT_SIGTERM as EXIT_SIGTERM
from kernel.replay import (
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
)
from kernel.verification import GateReason

EXIT_OK: Final = 0
EXIT_POLICY: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTEGRITY: Final = 3

D = ReplayDisposition
LIST_LIMIT: Final = 50  # attempts the summary names; the rest are counted (memory stays flat)


class FailOn(Enum):
    """The failure classes ``--fail-on`` selects (see the module docstring)."""

    INTEGRITY = "integrity"
    UNAVAILABLE = "unavailable"
    REFUSED = "refused"
    BLOCKED = "blocked"
    UNCLASSIFIED = "unclassified"
    ANY = "any"


# What ``kernel replay`` and ``kernel run`` fail on when ``--fail-on`` is not given.
DEFAULT_FAIL_ON: Final = (FailOn.UNCLASSIFIED,)


FAIL_ON_CHOICES: Final = ",".join(c.value for c in FailOn)
_INTEGRITY: Final = frozenset({D.CANDIDATE_IDENTITY_MISMATCH, D.INVALID_REPLAY_INPUT})
_UNAVAILABLE: Final = frozenset({D.CONTRACT_REPLAY_UNAVAILABLE, D.PROOF_REPLAY_UNAVAILABLE})
_INCONCLUSIVE_SUFFIXES: Final = tuple(
    f":gate:{reason.value}" for reason in (GateReason.STATUS_INCONCLUSIVE, GateReason.STATUS_ERROR)
)
# Each set of classes an outcome can be in, as its listed names in FailOn's order:
# iterating the enum per listed outcome was 7% of the command's CPU in a sharded run.
_CLASS_NAMES: dict[frozenset[FailOn], tuple[str, ...]] = {}


def _class_names(classes: frozenset[FailOn]) -> tuple[str, ...]:
    names = _CLASS_NAMES.get(classes)
    if names is None:
        names = _CLASS_NAMES[classes] = tuple(c.value for c in FailOn if c in classes)
    return names


def parse_fail_on(values: list[str] | None) -> frozenset[FailOn]:
    """The selected classes from repeated and/or comma-separated values; integrity always.

    Raises ``ValueError`` naming the first unknown class.
    """
    selected = {FailOn.INTEGRITY}
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            try:
                selected.add(FailOn(name))
            except ValueError:
                raise ValueError(
                    f"--fail-on takes {FAIL_ON_CHOICES} (repeatable or comma-separated), "
                    f"got {name!r}"
                ) from None
    return frozenset(selected)


def classes_of(outcome: ReplayAdapterOutcome) -> frozenset[FailOn]:
    """Every failure class ``outcome`` falls in (empty for ``contract_and_proof_closed``)."""
    disposition = outcome.replay_disposition
    found: set[FailOn] = set()
    match outcome:
        case ReplayAdapterRefusal():
            found |= {FailOn.REFUSED, FailOn.ANY}
            if disposition in _INTEGRITY:
                found.add(FailOn.INTEGRITY)
            if disposition in _UNAVAILABLE:
                found.add(FailOn.UNAVAILABLE)
        case ReplayAdapterResult():
            if disposition is not D.CONTRACT_AND_PROOF_CLOSED:
                found |= {FailOn.BLOCKED, FailOn.ANY}
            if any(
                code.startswith("proof_unavailable:") or code.endswith(_INCONCLUSIVE_SUFFIXES)
                for code in outcome.reason_codes
            ):
                found.add(FailOn.UNAVAILABLE)
        case _:
            assert_never(outcome)
    if FailOn.REFUSED in found or FailOn.UNAVAILABLE in found:
        found.add(FailOn.UNCLASSIFIED)
    return frozenset(found)


def _attempts(count: int) -> str:
    return f"{count} attempt{'' if count == 1 else 's'}"


def outcome_id(outcome: ReplayAdapterOutcome) -> str:
    match outcome:
        case ReplayAdapterResult():
            return outcome.replay_result_id
        case ReplayAdapterRefusal():
            return outcome.replay_refusal_id
        case _:
            assert_never(outcome)


@attrs.frozen
class Counted:
    """What the tally and the summary read of one outcome, and nothing else of it.

    A shard worker sends this beside the outcome line instead of the outcome
    (ADR 0020): a fraction of the pickled outcome's size and cost, and the
    command that writes the lines never rebuilds the records.
    """

    disposition: str
    classes: frozenset[FailOn]
    outcome_id: str
    reason_codes: tuple[str, ...]

    @classmethod
    def of(cls, outcome: ReplayAdapterOutcome) -> Counted:
        """What the tally, the summary and a verbose row read of ``outcome``."""
        return cls(outcome.replay_disposition.value, classes_of(outcome), outcome_id(outcome),
                   outcome.reason_codes)


@attrs.frozen
class Listed:
    """One attempt that did not close, for the summary: its classes and root cause."""

    attempt_index: int
    attempt_id: str | None
    disposition: str
    outcome_id: str
    reason_codes: tuple[str, ...]
    classes: tuple[str, ...]
    cause: str | None = None


@attrs.define
class Tally:
    """Counts per disposition and the attempts that did not close, built as outcomes stream by.

    At most ``LIST_LIMIT`` attempts are kept for the summary (the rest are
    counted), so memory does not grow with the number of attempts.
    """

    fail_on: frozenset[FailOn]
    counts: Counter[str] = attrs.field(factory=Counter)
    listed: list[Listed] = attrs.field(factory=list)
    unlisted: int = 0
    integrity: bool = False
    policy: bool = False
    total: int = 0
    # The likely cause of attempts that were not classified, with how many (insertion order).
    hints: Counter[str] = attrs.field(factory=Counter)
    tampered: int = 0  # outcomes in the integrity class
    tampered_at: list[str] = attrs.field(factory=list)  # the first few, for the hint
    unclassified: int = 0  # outcomes in the unclassified class (tampered ones included)

    def add(
        self, index: int, attempt_id: str | None, outcome: ReplayAdapterOutcome,
        cause: str | None = None, hint: str | None = None,
    ) -> Listed | None:
        """Count ``outcome``; the ``Listed`` entry when it did not close (else ``None``).

        ``hint`` (the likely cause, e.g. the bundle was sealed for another
        manifest) is counted and printed once after the verdict.
        """
        return self.count(index, attempt_id, Counted.of(outcome), cause, hint)

    def count(
        self, index: int, attempt_id: str | None, counted: Counted,
        cause: str | None = None, hint: str | None = None,
    ) -> Listed | None:
        """``add`` for an outcome already reduced to what is counted (a shard worker's)."""
        self.total += 1
        if hint is not None:
            self.hints[hint] += 1
        disposition, classes = counted.disposition, counted.classes
        self.counts[disposition] += 1
        hit = classes & self.fail_on
        if FailOn.INTEGRITY in classes:
            self.integrity = True
            self.tampered += 1
            if len(self.tampered_at) < 3:
                self.tampered_at.append(f"#{index} {disposition}")
        if FailOn.UNCLASSIFIED in classes:
            self.unclassified += 1
        if hit:
            self.policy = True
        if not classes:
            return None
        entry = Listed(
            index, attempt_id, disposition, counted.outcome_id, counted.reason_codes,
            _class_names(classes), cause,
        )
        if len(self.listed) < LIST_LIMIT:
            self.listed.append(entry)
        else:
            self.unlisted += 1
        return entry

    @property
    def exit_code(self) -> int:
        if self.integrity:
            return EXIT_INTEGRITY
        return EXIT_POLICY if self.policy else EXIT_OK

    @property
    def word(self) -> str:
        match self.exit_code:
            case 0:
                return "PASS"
            case 3:
                return "FAIL integrity"
            case _:
                return "FAIL policy"

    def selected(self) -> str:
        return ",".join(c.value for c in FailOn if c in self.fail_on)

    def verdict_line(self) -> str:
        """The one-line verdict: word, exit code, counts per disposition, the policy."""
        counts = " ".join(f"{d.value}={self.counts[d.value]}" for d in D if self.counts[d.value])
        return (f"verdict: {self.word} (exit {self.exit_code}): {self.total} attempts"
                f"{': ' + counts if counts else ''}; fail-on={self.selected()}")

    def hint_lines(self) -> list[str]:
        """What to print after the verdict: the likely cause of what was not classified."""
        lines = [f"hint: {_attempts(n)}: {text}" for text, n in self.hints.items()]
        if self.tampered:
            more = ", ..." if self.tampered > len(self.tampered_at) else ""
            lines.append(f"hint: tampering caught: {_attempts(self.tampered)} "
                         f"({', '.join(self.tampered_at)}{more}) not what the run recorded "
                         "(altered or corrupted), so not classified")
        if FailOn.UNCLASSIFIED in self.fail_on and self.unclassified > self.tampered:
            lines.append("hint: PASS needs every attempt classified by its authorities "
                         "(--fail-on integrity: fail on tampering only)")
        return lines

    def summary_json(self) -> dict[str, object]:
        return {
            "verdict": self.word,
            "exit_code": self.exit_code,
            "attempts": self.total,
            "counts": {d.value: self.counts[d.value] for d in D},
            "fail_on": [c.value for c in FailOn if c in self.fail_on],
            "listed": [attrs.asdict(f) for f in self.listed],
            "unlisted": self.unlisted,
            "hints": [{"attempts": n, "hint": text} for text, n in self.hints.items()],
        }
