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
manifest is the driver's approved entry. The attempt's manifest copy,
which came back with the record, must be that entry, or the same bytes
pinned under a worker's own prefix (ADR 0019's content digest): the
driver then replays from a copy of its own entry. The problem file must
be exactly the problem the driver plans from the candidate. The retained
evidence is read back under the digests the run recorded. The replay is
kept in the attempt directory, ``run/replays/driver-recheck/``, where
``kernel audit`` checks it like any other replay.
"""

from __future__ import annotations

import tempfile
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
from kernel.orchestrate._landed import landed_check_digest
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
    ours = dumps(Manifest(1, (entry,))) + b"\n"
    try:
        with tempfile.TemporaryDirectory(prefix="kernel-recheck-") as scratch:
            if manifest.read_bytes() != ours:
                if landed_check_digest(attempt, entry, "") == "":
                    return "its manifest copy is not the driver's approved entry"
                # A worker under another prefix (its own paths, the same bytes): the
                # driver replays with its own entry, read from a copy of its own.
                manifest = Path(scratch) / "manifest.json"
                manifest.write_bytes(ours)
            if specification.read_bytes() != problem.encode("utf-8"):
                return "its problem file is not the problem this attempt poses"
            outcome = replay_run(
                attempt / run_id, manifest_path=manifest,
                repository_root=attempt / "repository", replay_id=RECHECK_ID, limits=limits,
                environment=dict(environment),
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
