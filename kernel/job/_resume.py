"""Resuming a work directory: a recorded line counts only when the pure core gives it again.

The work directory is a run store, not an authority (THREAT_MODEL: the run
store is an attacker). A recorded outcome line is kept only if the pure
core, given the bundle's attempt and the certification stored for it
(nothing is run), writes exactly that line again. A stored certification
counts only once it is derived again from its own run's records
(``kernel.audit.StoredCertifications``: the attempt directory audits intact,
its metadata and its checker's receipt under the receipt rules the kernel
applies at run time, and an accepting certification only of a run whose
metadata says PASS). Otherwise a forged ``contract_and_proof_closed`` line,
or a certification resealed over a run that was BLOCKED, would be carried
into the outcomes and the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel.audit import StoredCertifications
from kernel.bundles import ReadyAttempt, outcome_line
from kernel.job._bundle_input import Attempt
from kernel.job.errors import JobRefused, RefusalKind
from kernel.orchestrate import ATTEMPT_DIR, OUTCOMES_FILE, replay_requests
from kernel.organs import certified_manifest
from kernel.replay import ReplayAdapterOutcome, ReplayAdapterRefusal, ReplayAdapterResult
from kernel.serde import SerdeError, structure

__all__ = ["check_recorded", "recorded_outcome"]


def check_recorded(work_dir: Path, prefix: list[Attempt], recorded: list[bytes]) -> None:
    """Each recorded line is what the bundle and the stored certification give; else
    ``resume_log_tampered`` (integrity), raised before anything in the directory is touched."""
    stored = StoredCertifications(work_dir.absolute())
    ready = [item.request for item in prefix if isinstance(item, ReadyAttempt)]
    decided = iter(replay_requests(ready, certified_manifest(), stored))
    for number, (item, line) in enumerate(zip(prefix, recorded, strict=True), start=1):
        outcome = next(decided) if isinstance(item, ReadyAttempt) else item.refusal
        if outcome_line(item.attempt_index, item.attempt_id, outcome) != line + b"\n":
            raise JobRefused(
                "resume_log_tampered",
                f"{work_dir / OUTCOMES_FILE}: line {number} is not the outcome the bundle "
                f"and the stored certification give for attempt {item.attempt_index}"
                f"{_underived(stored, item)}; nothing was changed "
                "(kernel audit --outcomes --bundle lists what differs)",
                RefusalKind.INTEGRITY)


def _underived(stored: StoredCertifications, item: Attempt) -> str:
    """Why the attempt's stored certification does not count, for the message ('' if it does)."""
    if item.attempt_id is None or not ATTEMPT_DIR.fullmatch(item.attempt_id):
        return ""  # no directory of its own to look at
    findings = stored.findings(item.attempt_id)
    if not findings:
        return ""
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    return (f" (its certification does not derive from its run's records: {first.code.value} "
            f"{first.path} {first.subject}{more})")


def recorded_outcome(line: bytes) -> ReplayAdapterOutcome:
    """The outcome a checked recorded line holds."""
    try:
        record = json.loads(line)["outcome"]
        kind: type[ReplayAdapterOutcome] = (
            ReplayAdapterResult if "replay_result_id" in record else ReplayAdapterRefusal
        )
        return structure(record, kind)
    except (ValueError, KeyError, TypeError, SerdeError) as exc:
        raise JobRefused("resume_log_corrupt",
                         f"a recorded outcome does not read back: {exc}") from None
