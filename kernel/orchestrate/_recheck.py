"""The driver re-runs the pinned checker on a certification a worker returned (ADR 0022).

Deriving a landed record again (``rederive``) proves that the records agree
with each other and with the receipt rules. It cannot prove that the checker
they name ever ran. A compromised worker can write every record coherently
around evidence that no sound checker accepts. With ``recheck`` the driver
runs its own pinned checker on the returned evidence before the
certification counts. This is the external protocol's checker-only replay
(``replay_run``, seed 003 "Replay"), in the driver's own sandbox. The
producer never runs again, and only a PASS of that replay lets the
certification count.

What the replay reads is the driver's own or is checked first. The
manifest is the driver's approved entry. The attempt's manifest copy and
problem file, which came back with the record, must hold exactly the
bytes the driver would write itself: the entry, and the problem it plans
from the candidate. The retained evidence is read back under the digests the
run recorded. The replay is kept in the attempt directory,
``run/replays/driver-recheck/``, where ``kernel audit`` checks it like any
other replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from kernel.external import (
    CheckEntry,
    ExternalError,
    Manifest,
    RunLimits,
    Status,
    replay_run,
)
from kernel.orchestrate._tools import CERTIFY_SPECIFICATION
from kernel.serde import dumps

__all__ = ["RECHECK_ID", "rechecked_on_driver"]

RECHECK_ID: Final = "driver-recheck"


def rechecked_on_driver(
    attempt: Path, run_id: str, entry: CheckEntry, problem: str, limits: RunLimits,
    environment: Mapping[str, str],
) -> str | None:
    """Why ``attempt``'s run does not pass the driver's own checker; None when it does."""
    manifest = attempt / "manifest.json"
    specification = attempt / "repository" / CERTIFY_SPECIFICATION
    try:
        if manifest.read_bytes() != dumps(Manifest(1, (entry,))) + b"\n":
            return "its manifest copy is not the driver's approved entry"
        if specification.read_bytes() != problem.encode("utf-8"):
            return "its problem file is not the problem this attempt poses"
        outcome = replay_run(
            attempt / run_id, manifest_path=manifest, repository_root=attempt / "repository",
            replay_id=RECHECK_ID, limits=limits, environment=dict(environment),
        )
    except ExternalError as exc:
        return f"the driver's checker could not replay it: {exc}"
    except OSError as exc:
        return f"the driver's checker could not replay it: {exc.strerror or exc}"
    decision = outcome.metadata.decision
    if decision.status is not Status.PASS:
        return (f"the driver's own checker did not accept it: {decision.status.value} "
                f"{decision.reason.value if decision.reason else ''}".rstrip())
    return None
