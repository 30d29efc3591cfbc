"""The main job's refusals: a stable code, a readable message, and what kind of stop it is."""

from __future__ import annotations

import enum
from typing import final

__all__ = ["JobRefused", "JobStopped", "RefusalKind", "Terminated", "signal_name"]


@final
class RefusalKind(enum.Enum):
    """Why the job stopped before (or instead of) deciding; a command maps each to its exit code.

    ``INPUT``: the bundle, the options or the work directory the caller gave
    (exit 2). ``INTEGRITY``: a record the run keeps is not what the bundle
    and the stored certifications give (exit 3). ``ENVIRONMENT``: the machine
    cannot run the job as asked (a missing sandbox tool; exit 4, ADR 0013).
    """

    INPUT = "input"
    INTEGRITY = "integrity"
    ENVIRONMENT = "environment"


class JobRefused(Exception):
    """The job refused: ``code`` is stable, ``message`` says what and where, nothing was decided."""

    def __init__(self, code: str, message: str, kind: RefusalKind = RefusalKind.INPUT) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.kind = kind


class JobStopped(Exception):
    """The job stopped mid-run (its shard workers were lost): the outcomes recorded so far
    are kept, and a resumed run continues after them."""

    def __init__(self, code: str, message: str, recorded: int, total: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.recorded = recorded
        self.total = total


class Terminated(KeyboardInterrupt):
    """SIGTERM, unwound like Ctrl-C (so every cleanup runs) but told apart at the top.

    ``kernel run`` raises it from its SIGTERM handler; a job it stops records
    ``SIGTERM`` in its ``INTERRUPTED`` marker, any other ``KeyboardInterrupt``
    ``SIGINT``.
    """


def signal_name(exc: KeyboardInterrupt) -> str:
    """The signal an interrupt stands for."""
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
