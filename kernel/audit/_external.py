"""The audit of one external run directory (``kernel check run``, seed 003; ADR-0010).

``audit_external`` recomputes the job and check digests, every recorded
file's SHA-256, the input and evidence digests, what the requests and the
checker's receipt bind, and that status, reason and verdict go together;
it applies the receipt rules again (``_audit_receipt_rules``); it reports
files no record lists, and audits each retained replay the same way.
"""

from __future__ import annotations

from pathlib import Path

from kernel.audit._store import (
    METADATA,
    AuditCode,
    Auditor,
    Unreadable,
    field_of,
    pairs_digest,
    read_bounded,
    tree_names,
)
from kernel.external import (
    PASS_DETAIL,
    ProcessStatus,
    Reason,
    RunMetadata,
    Status,
    Verdict,
    reason_for,
    recorded_expectation,
    validate_receipt,
)
from kernel.identity import JsonValue, digest
from kernel.serde import MAX_DOCUMENT_BYTES

# --- one external run directory (seed 003) -------------------------------------------


def audit_external(a: Auditor, run: Path) -> RunMetadata | None:
    meta_path = run / METADATA
    metadata = a.typed(meta_path, RunMetadata)
    if metadata is None:
        return None
    _symlinked_dirs(a, run)
    checked, execution = metadata.checked, metadata.execution
    job = a.document(run / "job.json")
    if isinstance(job, dict):
        a.compare(
            run / "job.json",
            "job_digest",
            job.get("job_digest"),
            digest({**job, "job_digest": ""}),
            AuditCode.ID_MISMATCH,
        )
        a.compare(meta_path, "job_digest", metadata.run.job_digest, job.get("job_digest"))
        a.compare(meta_path, "job_id", metadata.run.job_id, job.get("job_id"))
    identity = a.document(run / "identity.json") if checked.check_digest is not None else None
    if identity is not None:
        a.compare(
            meta_path,
            "check_digest",
            checked.check_digest,
            digest(identity),
            AuditCode.ID_MISMATCH,
        )
        a.compare(meta_path, "check_id", metadata.run.check_id, field_of(identity, "check_id"))
    _audit_tree(a, run / "snapshot", "input", [(d.path, d.sha256) for d in checked.inputs])
    if checked.input_digest is not None:
        a.compare(
            meta_path,
            "input_digest",
            checked.input_digest,
            pairs_digest([(d.path, d.sha256) for d in checked.inputs]),
            AuditCode.ID_MISMATCH,
        )
    if checked.specification_digest is not None:
        specification = field_of(field_of(identity, "claim"), "specification")
        by_path = {d.path: d.sha256 for d in checked.inputs}
        a.compare(
            meta_path,
            "specification_digest",
            checked.specification_digest,
            by_path.get(specification) if isinstance(specification, str) else None,
        )
    if checked.evidence_digest is not None:
        _audit_tree(
            a, run / "evidence", "artifact", [(d.path, d.sha256) for d in checked.artifacts]
        )
        a.compare(
            meta_path,
            "evidence_digest",
            checked.evidence_digest,
            pairs_digest([(d.path, d.sha256) for d in checked.artifacts]),
            AuditCode.ID_MISMATCH,
        )
    for role, summary, request_sha in (
        ("producer", execution.producer, execution.producer_request_sha256),
        ("checker", execution.checker, execution.checker_request_sha256),
    ):
        if request_sha is not None:
            a.file_digest(run / role / "request.json", f"{role}_request_sha256", request_sha)
            _audit_request(a, run / role / "request.json", metadata, identity, role)
        if summary is not None:
            a.file_digest(run / role / "stdout.log", f"{role}.stdout_sha256", summary.stdout_sha256)
            a.file_digest(run / role / "stderr.log", f"{role}.stderr_sha256", summary.stderr_sha256)
    if execution.receipt_sha256 is not None:
        a.file_digest(run / "checker" / "receipt.json", "receipt_sha256", execution.receipt_sha256)
    if metadata.decision.verdict is not None:
        _audit_checker_receipt(a, run / "checker" / "receipt.json", metadata, identity)
    _audit_status(a, meta_path, metadata)
    _audit_receipt_rules(a, run, metadata, identity)
    replays = run / "replays"
    if replays.is_dir() and not replays.is_symlink():
        for child in sorted(replays.iterdir()):
            if child.is_dir() and not child.is_symlink():
                audit_external(a, child)
    return metadata


def _clean_relative(path: str) -> bool:
    # A recorded path is evidence: one that climbs out of its directory is
    # reported, never followed.
    parts = path.split("/")
    return (
        bool(path)
        and not path.startswith("/")
        and "\\" not in path
        and "\x00" not in path
        and all(part not in ("", ".", "..") for part in parts)
    )


def _audit_tree(a: Auditor, root: Path, what: str, recorded: list[tuple[str, str]]) -> None:
    if root.is_symlink():
        a.checked += 1
        a.finding(root, what, AuditCode.NOT_REGULAR, "a symlink where the run keeps a directory")
        return
    for path, sha in recorded:
        if not _clean_relative(path):
            a.checked += 1
            a.finding(root, f"{what}:{path}", AuditCode.MALFORMED, "a path outside its directory")
            continue
        a.file_digest(root / path, f"{what}:{path}", sha)
    listed = {path for path, _ in recorded}
    for extra in sorted(tree_names(root) - listed):
        if (root / extra).is_dir() and not (root / extra).is_symlink():
            continue
        a.finding(
            root / extra, f"{what}:{extra}", AuditCode.UNDECLARED, "no record lists this file"
        )


def _symlinked_dirs(a: Auditor, run: Path) -> None:
    for name in ("producer", "checker", "replays"):
        if (run / name).is_symlink():
            a.checked += 1
            a.finding(
                run / name, name, AuditCode.NOT_REGULAR, "a symlink where the run keeps a directory"
            )


def _audit_request(
    a: Auditor, path: Path, metadata: RunMetadata, identity: JsonValue | None, role: str
) -> None:
    request = a.document(path)
    if not isinstance(request, dict):
        return
    run, checked = metadata.run, metadata.checked
    bound: dict[str, object] = {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "job_digest": run.job_digest,
        "check_id": run.check_id,
        "check_digest": checked.check_digest,
        "specification_digest": checked.specification_digest,
        "input_digest": checked.input_digest,
    }
    if identity is not None:
        bound["identity"] = identity
    if role == "checker":
        bound["evidence_digest"] = checked.evidence_digest
    for name, value in bound.items():
        if name in request:
            a.compare(path, f"{role} request {name}", request[name], value)


def _audit_checker_receipt(
    a: Auditor, path: Path, metadata: RunMetadata, identity: JsonValue | None
) -> None:
    receipt = a.document(path)
    if receipt is None:
        return
    if not isinstance(receipt, dict):
        a.finding(path, "receipt", AuditCode.MALFORMED, "the receipt is not a JSON object")
        return
    run, checked, verdict = metadata.run, metadata.checked, metadata.decision.verdict
    bound: dict[str, object] = {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "check_id": run.check_id,
        "check_digest": checked.check_digest,
        "specification_digest": checked.specification_digest,
        "evidence_digest": checked.evidence_digest,
        "verdict": verdict.value if verdict is not None else None,
    }
    if identity is not None:
        bound["identity"] = identity
    for name, value in bound.items():
        a.compare(path, f"receipt {name}", receipt.get(name), value)


def _audit_status(a: Auditor, path: Path, metadata: RunMetadata) -> None:
    # PASS exists only as an accepting, retained, valid receipt (seed 003).
    a.checked += 1
    decision = metadata.decision
    if decision.status is Status.PASS and (
        decision.verdict is not Verdict.ACCEPTED
        or metadata.execution.receipt_sha256 is None
        or metadata.checked.evidence_digest is None
        or metadata.checked.check_digest is None
    ):
        a.finding(
            path,
            "status",
            AuditCode.INCONSISTENT,
            "PASS without an accepting, retained receipt",
            decision.status.value,
            decision.verdict.value if decision.verdict is not None else None,
        )
    # A PASS's detail is the kernel's fixed text; nothing else (no receipt, no
    # digest) covers it, and summaries show it.
    a.checked += 1
    if decision.status is Status.PASS and decision.detail != PASS_DETAIL:
        a.finding(
            path, "detail", AuditCode.INCONSISTENT,
            "a PASS records the kernel's own detail, not this one", decision.detail, PASS_DETAIL,
        )  # fmt: skip


def _judged(metadata: RunMetadata) -> bool:
    """Whether the run validated its receipt, by what it records.

    At run time the receipt's SHA-256 is recorded just before the receipt
    rules run, and a verdict just after a receipt passed them; a PASS exists
    only after both. The two exceptions record a digest without judging: a
    checker that failed (its receipt is kept, never read) and a receipt over
    the run's size limit, which the audit cannot apply (the limit is the
    run's setting, not recorded).
    """
    decision = metadata.decision
    return (
        decision.status is Status.PASS
        or decision.verdict is not None
        or (
            metadata.execution.receipt_sha256 is not None
            and decision.reason not in (Reason.CHECKER_FAILED, Reason.RECEIPT_TOO_LARGE)
        )
    )


def _ending(status: Status, reason: Reason | None, verdict: Verdict | None) -> str:
    named = reason.value if reason is not None else "-"
    return f"{status.value} {named} {verdict.value if verdict is not None else '-'}"


def _audit_receipt_rules(
    a: Auditor, run: Path, metadata: RunMetadata, identity: JsonValue | None
) -> None:
    """The receipt rules the kernel applies at run time, applied again to the stored receipt.

    Seed 003 "Checker receipt" with ``validate_receipt`` itself, against what
    the run's own records say the receipt must be bound to
    (``recorded_expectation``): exactly the ten fields, the bound values,
    every obligation once in manifest order, evidence citing only listed
    artifacts, and a top-level verdict that agrees with every obligation.
    The ending it gives (``reason_for``) must be the one the metadata
    records, and a judged receipt needs a checker that exited 0. So a
    receipt relabelled ``accepted`` over rejected obligations, with its
    metadata relabelled PASS and every digest fixed up, is reported
    (``receipt_invalid``), where the digests alone reproduce.
    """
    if not _judged(metadata):
        return
    path = run / "checker" / "receipt.json"
    decision = metadata.decision
    recorded = _ending(decision.status, decision.reason, decision.verdict)
    a.checked += 1
    checker = metadata.execution.checker
    if checker is None or checker.status is not ProcessStatus.EXITED or checker.returncode != 0:
        a.finding(
            run / METADATA, "checker exit", AuditCode.INCONSISTENT,
            "a judged receipt from a checker that did not exit 0",
        )  # fmt: skip
    expected = recorded_expectation(metadata, identity)
    a.checked += 1
    if expected is None:
        a.finding(
            run / METADATA, "receipt rules", AuditCode.INCONSISTENT,
            "the run judged a receipt, but its records (digests, identity.json) do not say "
            "what the receipt must be bound to", recorded, None,
        )  # fmt: skip
        return
    try:
        data = read_bounded(path)
    except Unreadable as exc:
        a.finding(path, "receipt rules", exc.code, exc.message, recorded, None)
        return
    check = validate_receipt(data, expected, max_bytes=MAX_DOCUMENT_BYTES)
    reason = reason_for(check)
    again = _ending(Status.PASS if reason is None else Status.BLOCKED, reason, check.verdict)
    if again == recorded:
        return
    if check.reason is not None:
        a.finding(
            path, "receipt", AuditCode.RECEIPT_INVALID,
            f"the receipt breaks the receipt rules ({check.reason.value}: {check.detail}); "
            "the kernel refuses it at run time", recorded, again,
        )  # fmt: skip
    else:
        a.finding(
            run / METADATA, "decision", AuditCode.INCONSISTENT,
            "the stored receipt is valid, and the ending it gives is not the one recorded",
            recorded, again,
        )  # fmt: skip
