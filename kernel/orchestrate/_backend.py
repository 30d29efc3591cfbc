"""The verification backend output of one external certification run (seed 002 §8).

What ``seal_verification`` seals into the assurance receipt: the run's
decision and its retained digests. ``kernel audit`` rebuilds it from the
stored metadata to check the receipt's binding, so both call this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, assert_never

from kernel.external import RunOutcome, Status
from kernel.identity import JsonValue
from kernel.organs import CERTIFICATION_BACKEND, TARGET_CERTIFIED
from kernel.serde import unstructure

__all__ = ["WORK_DIR_MARK", "backend_output"]

#: The work directory's path in a detail: ids never depend on where it is.
WORK_DIR_MARK: Final = "<work-dir>"


def backend_output(
    outcome: RunOutcome, *, candidate_digest: str, check_digest: str, work_dir: Path
) -> JsonValue:
    """The verification backend output document for one external run.

    PASS -> ``verified``; BLOCKED -> ``unknown`` (sealed INCONCLUSIVE) with
    ``<reason>: <detail>``. ``evidence`` holds the retained digests only.
    """
    meta = outcome.metadata
    run, checked, decision = meta.run, meta.checked, meta.decision
    match decision.status:
        case Status.PASS:
            verdict, detail = "verified", ""
        case Status.BLOCKED:
            reason = decision.reason.value if decision.reason is not None else "blocked"
            detail = f"{reason}: {decision.detail}".replace(str(work_dir), WORK_DIR_MARK)
            verdict = "unknown"
        case _:
            assert_never(decision.status)
    evidence: JsonValue = {
        "artifacts": unstructure(checked.artifacts),
        "check_digest": checked.check_digest,
        "check_id": run.check_id,
        "evidence_digest": checked.evidence_digest,
        "input_digest": checked.input_digest,
        "job_digest": run.job_digest,
        "job_id": run.job_id,
        "reason": decision.reason.value if decision.reason is not None else None,
        "receipt_sha256": meta.execution.receipt_sha256,
        "run_id": run.run_id,
        "specification_digest": checked.specification_digest,
        "status": decision.status.value,
    }
    return {
        "backend": CERTIFICATION_BACKEND,
        "backend_version": check_digest,
        "candidate": candidate_digest,
        "claim_id": TARGET_CERTIFIED,
        "detail": detail,
        "evidence": evidence,
        "evidence_tier": "observed",
        "verdict": verdict,
    }
