"""The audit of one attempt directory of a ``kernel run`` work directory (ADR-0006, ADR-0010).

Per attempt: its external run (``audit_external``, the receipt rules
included), the certification's request and receipt ids, the receipt's
evidence digest against the run's metadata, that an accepting certification
comes from a run whose metadata says PASS (and only from one), the digests
the request names (the check's content digest recomputed from the stored
manifest entry, ADR-0019), and the stored manifest entry against the run's
identity.

``derive_certification`` is that audit for one attempt on its own: the
certification counts only if its attempt audits intact. ``kernel run
--resume`` and the audit's re-derivation hand the pure core nothing else
(``StoredCertifications``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from kernel.audit._bundle import BUNDLE_COPY, BUNDLE_STREAM_COPY
from kernel.audit._external import audit_external
from kernel.audit._store import (
    ATTESTATION_FILE,
    METADATA,
    SUMMARY_FILE,
    AuditCode,
    AuditFinding,
    Auditor,
    Unreadable,
    field_of,
    read_bounded,
    sha256_file,
)
from kernel.external import (
    Manifest,
    RunMetadata,
    RunOutcome,
    RunRecordError,
    Status,
    content_digest,
    read_run_metadata,
)
from kernel.identity import digest
from kernel.orchestrate import (
    CERTIFICATION_RECORD,
    CERTIFIED_BY,
    EVIDENCE_SOURCE,
    INTERRUPTED_FILE,
    OUTCOMES_FILE,
    RECHECK_ID,
    RUN_ID,
    STATE_FILE,
    backend_output,
)
from kernel.organs import (
    CHECK_CONTENT_SETTING,
    CertificationEvidence,
)
from kernel.serde import SerdeError, loads
from kernel.verification import Status as ReceiptStatus
from kernel.verification import receipt_id_of, request_id_of

# --- a kernel run work directory (ADR-0006) -------------------------------------------


def attempt_dirs(root: Path) -> list[Path]:
    return [
        child
        for child in sorted(root.iterdir())
        if child.is_dir()
        and not child.is_symlink()
        and ((child / "run").is_dir() or (child / CERTIFICATION_RECORD).exists())
    ]


def audit_attempt(a: Auditor, attempt: Path) -> CertificationEvidence | None:
    """Every check of one attempt directory; the certification it derives, if any.

    A certification that the driver's own checker rejected
    (``_driver_accepted``) is none, though its records are intact.
    """
    evidence = _audit_attempt_records(a, attempt)
    return evidence if evidence is None or _driver_accepted(attempt) else None


def _audit_attempt_records(a: Auditor, attempt: Path) -> CertificationEvidence | None:
    run = attempt / "run"
    for name in ("run", "repository"):
        if (attempt / name).is_symlink():
            a.checked += 1
            a.finding(
                attempt / name,
                name,
                AuditCode.NOT_REGULAR,
                "a symlink where the run keeps a directory",
            )
            return None
    record = attempt / CERTIFICATION_RECORD
    certified = record.exists() or record.is_symlink()
    pointer = attempt / CERTIFIED_BY
    if pointer.exists() or pointer.is_symlink():
        return _audit_reused(a, attempt, pointer, certified)
    metadata = audit_external(a, run) if (run / METADATA).exists() else None
    if metadata is None and (run.exists() or certified) and not (run / METADATA).exists():
        # The certifier writes certification.json only once its run has ended,
        # which writes metadata.json: a certification without it binds nothing.
        a.checked += 1
        a.finding(run / METADATA, "file", AuditCode.MISSING, "absent")
    if metadata is not None:
        a.compare(run / METADATA, "job_id", metadata.run.job_id, f"certify-{attempt.name}")
    _audit_manifest_copy(a, attempt, run)
    if not certified:
        return None
    return _audit_certification(a, attempt, run, metadata)


def _audit_reused(
    a: Auditor, attempt: Path, pointer: Path, certified: bool
) -> CertificationEvidence | None:
    """An attempt certified over an earlier attempt's run (ADR-0019 "A repeat within a run").

    It has no run of its own; the attempt its ``certified-by.json`` names
    must be another attempt directory of this work directory with a run of
    its own that audits intact on its own (a separate auditor: its findings
    are its own attempt's, reported here once as a binding that fails). Its
    metadata then stands for this attempt's in every comparison: the job is
    ``certify-<that attempt>``, the problem this attempt's stored problem,
    the check this attempt's stored manifest entry.
    """
    a.checked += 1
    if (attempt / "run").exists() or (attempt / "run").is_symlink():
        a.finding(
            pointer, "certified_by", AuditCode.INCONSISTENT,
            "an attempt with both a run of its own and a pointer to another's",
        )  # fmt: skip
        return None
    document = a.document(pointer)
    if document is None:
        return None
    first = field_of(document, "attempt_id")
    if (
        not isinstance(document, dict)
        or set(document) != {"attempt_id", "certified_by_version"}
        or field_of(document, "certified_by_version") != 1
        or not isinstance(first, str)
        or not _ATTEMPT_NAME.fullmatch(first)
    ):
        a.finding(pointer, "certified_by", AuditCode.MALFORMED, "not a certified-by record")
        return None
    source = attempt.parent / first
    run = source / "run"
    if (
        first == attempt.name
        or source.is_symlink()
        or not source.is_dir()
        or run.is_symlink()
        or not (run / METADATA).is_file()
        or (source / CERTIFIED_BY).exists()
        or (source / CERTIFIED_BY).is_symlink()
    ):
        a.finding(
            pointer, "certified_by", AuditCode.BINDING_MISMATCH,
            "names no other attempt of this work directory with a run of its own", first,
        )  # fmt: skip
        return None
    alone = Auditor(attempt.parent)
    metadata = audit_external(alone, run)
    if metadata is not None:
        alone.compare(run / METADATA, "job_id", metadata.run.job_id, f"certify-{first}")
    _audit_manifest_copy(alone, source, run)
    if metadata is None or alone.findings:
        a.finding(
            pointer, "certified_by", AuditCode.BINDING_MISMATCH,
            f"the run of attempt {first} does not audit intact "
            f"({len(alone.findings)} findings there)", first,
        )  # fmt: skip
        return None
    _audit_manifest_copy(a, attempt, run)
    if not certified:
        a.finding(
            attempt / CERTIFICATION_RECORD, "file", AuditCode.MISSING,
            "a pointer to another attempt's run without a certification of its own",
        )  # fmt: skip
        return None
    return _audit_certification(a, attempt, run, metadata)


def _audit_certification(
    a: Auditor, attempt: Path, run: Path, metadata: RunMetadata | None
) -> CertificationEvidence | None:
    """The attempt's ``certification.json`` against ``run``'s metadata (its own or the pointed)."""
    record = attempt / CERTIFICATION_RECORD
    evidence = a.typed(record, CertificationEvidence)
    if evidence is None:
        return None
    request, receipt = evidence.request, evidence.receipt
    a.compare(
        record, "request_id", request.request_id, request_id_of(request), AuditCode.ID_MISMATCH
    )
    a.compare(
        record, "receipt_id", receipt.receipt_id, receipt_id_of(receipt), AuditCode.ID_MISMATCH
    )
    a.compare(record, "receipt request_id", receipt.request_id, request.request_id)
    settings = {s.name: s.value for s in request.command_configuration.settings}
    check = settings.get("check-digest")
    a.compare(record, "receipt backend_version", receipt.backend_version, check)
    try:
        problem_sha: str | None = sha256_file(attempt / "repository" / "certification.smt2")
    except Unreadable as exc:
        a.finding(attempt / "repository" / "certification.smt2", "file", exc.code, exc.message)
        problem_sha = None
    a.compare(record, "problem-digest", settings.get("problem-digest"), problem_sha)
    if metadata is None:
        return evidence
    a.compare(record, "check-digest", check, metadata.checked.check_digest)
    a.compare(
        record,
        CHECK_CONTENT_SETTING,
        settings.get(CHECK_CONTENT_SETTING),
        _stored_content_digest(attempt, metadata.run.check_id),
    )
    a.compare(
        record,
        "problem-digest (run)",
        settings.get("problem-digest"),
        metadata.checked.specification_digest,
    )
    # The receipt binds the run's metadata through the backend output document.
    work_dir = Path(metadata.run.repository_root).parent.parent
    output = backend_output(
        RunOutcome(str(run), metadata),
        candidate_digest=receipt.candidate.digest,
        check_digest=receipt.backend_version,
        work_dir=work_dir,
    )
    a.compare(
        record,
        "receipt evidence_digest",
        receipt.evidence_digest,
        digest(output),
        AuditCode.ID_MISMATCH,
    )
    # An accepting certification exists only for a run that passed (seed 003:
    # PASS only for an accepting, valid receipt; ``backend_output``: PASS ->
    # verified), and a run that passed is sealed accepting.
    a.checked += 1
    accepting = receipt.status is ReceiptStatus.VERIFIED
    if accepting != (metadata.decision.status is Status.PASS):
        a.finding(
            record, "certification status", AuditCode.INCONSISTENT,
            "the certification and its run's metadata disagree on whether the run passed",
            receipt.status.value, metadata.decision.status.value,
        )  # fmt: skip
    return evidence


def _stored_content_digest(attempt: Path, check_id: str) -> str | None:
    """The content digest of the stored manifest's entry for the run's check, if readable.

    An unreadable or malformed manifest copy is ``_audit_manifest_copy``'s
    finding; here it recomputes nothing, so the comparison fails too.
    """
    try:
        manifest = loads(read_bounded(attempt / "manifest.json"), Manifest)
    except (Unreadable, SerdeError):
        return None
    entries = [e for e in manifest.checks if e.check_id == check_id]
    return content_digest(entries[0]) if len(entries) == 1 else None


def derive_certification(
    attempt: Path,
) -> tuple[CertificationEvidence | None, tuple[AuditFinding, ...]]:
    """The certification of one attempt directory, derived again from its run's records.

    Every check of ``audit_attempt`` (the external run, the receipt rules,
    the certification's ids and its binding to the run's metadata) over this
    attempt alone, offline. Returns the certification only when nothing was
    found, else None, with the findings (paths relative to the work
    directory). No certification stored: ``(None, ())``.
    """
    a = Auditor(attempt.parent)
    try:
        evidence = audit_attempt(a, attempt)
    except OSError as exc:
        a.finding(attempt, "attempt", AuditCode.NOT_REGULAR, f"unreadable: {exc.strerror or exc}")
        evidence = None
    findings = tuple(a.findings)
    return (None if findings else evidence), findings


def _driver_accepted(attempt: Path) -> bool:
    """False when the driver re-ran its checker on a worker's evidence and it did not pass.

    ``kernel run --recheck-returned`` keeps that replay in the attempt
    (``run/replays/driver-recheck``, audited with the run's other replays):
    a certification the driver's own checker did not accept is none, for
    the audit and for --resume as for the run that recorded the outcome.
    """
    replay = attempt / RUN_ID / "replays" / RECHECK_ID / "metadata.json"
    if not replay.exists() and not replay.is_symlink():
        return True
    try:
        return read_run_metadata(replay).decision.status is Status.PASS
    except RunRecordError:
        return False


def rederive_certification(attempt: Path) -> tuple[CertificationEvidence | None, tuple[str, ...]]:
    """``derive_certification``, its findings as sentences: how a driver checks a landed record.

    The ``rederive`` of ``ExternalCertifier`` (ADR 0022): a certification
    that came back from a worker counts only as this derives it, under the
    receipt rules audit and resume apply. Module level, so it pickles by
    reference with the certifier.
    """
    evidence, findings = derive_certification(attempt)
    return evidence, tuple(f"{f.code.value} {f.path} {f.subject}: {f.message}" for f in findings)


def _audit_manifest_copy(a: Auditor, attempt: Path, run: Path) -> None:
    manifest_path = attempt / "manifest.json"
    if not (run / "identity.json").exists():
        return
    if not manifest_path.exists() and not manifest_path.is_symlink():
        # The certifier writes the manifest copy before the run exists, so a run
        # without it lost a record: its pins would otherwise go unchecked.
        a.checked += 1
        a.finding(manifest_path, "file", AuditCode.MISSING, "absent")
        return
    manifest = a.document(manifest_path)
    identity = a.document(run / "identity.json")
    if not isinstance(identity, dict):
        return
    checks = field_of(manifest, "checks")
    entries = (
        [e for e in checks if isinstance(e, dict) and e.get("check_id") == identity.get("check_id")]
        if isinstance(checks, list)
        else []
    )
    if len(entries) != 1:
        a.finding(
            manifest_path,
            "entry",
            AuditCode.BINDING_MISMATCH,
            "the stored manifest does not hold exactly one entry for the run's check",
        )
        return
    # Every field of the approved entry, pins included, is bound into identity(check).
    for name, value in sorted(entries[0].items()):
        a.compare(manifest_path, f"entry {name}", value, identity.get(name))


# What kernel run writes at the top of a work directory besides attempt
# directories (kernel.orchestrate's work-directory protocol), and the default attestation.
RUN_STATE: Final = STATE_FILE
WORK_OUTCOMES: Final = OUTCOMES_FILE
INTERRUPTED: Final = INTERRUPTED_FILE
_TOP_LEVEL: Final = frozenset({RUN_STATE, WORK_OUTCOMES, BUNDLE_COPY, BUNDLE_STREAM_COPY,
                               ATTESTATION_FILE, SUMMARY_FILE, INTERRUPTED})
_ATTEMPT_ENTRIES: Final = frozenset(
    {"run", "repository", "manifest.json", CERTIFICATION_RECORD, EVIDENCE_SOURCE, CERTIFIED_BY}
)
_ATTEMPT_NAME: Final = re.compile(r"[0-9a-f]{64}")


def audit_entries(a: Auditor, root: Path) -> None:
    """Every entry of the work directory is one kernel run writes; no attempt directory is empty.

    Without this an extra file beside the records, or an attempt directory
    emptied of its run, audited intact: the audit only read what it knew.
    """
    for child in sorted(root.iterdir()):
        a.checked += 1
        name = child.name
        if name in _TOP_LEVEL:
            if name == INTERRUPTED:
                a.finding(
                    child, "run", AuditCode.INCONSISTENT,
                    "the run was interrupted and not finished (kernel run --resume)",
                )  # fmt: skip
            elif child.is_symlink() or not child.is_file():
                a.finding(child, "file", AuditCode.NOT_REGULAR, "not a regular file")
            continue
        if not _ATTEMPT_NAME.fullmatch(name):
            a.finding(child, "entry", AuditCode.UNDECLARED, "kernel run writes no such entry")
            continue
        if child.is_symlink() or not child.is_dir():
            a.finding(child, "attempt", AuditCode.NOT_REGULAR, "not a plain directory")
            continue
        entries = {entry.name for entry in child.iterdir()}
        for extra in sorted(entries - _ATTEMPT_ENTRIES):
            a.checked += 1
            a.finding(
                child / extra, "entry", AuditCode.UNDECLARED,
                "kernel run writes no such entry in an attempt directory",
            )  # fmt: skip
        if "run" not in entries and CERTIFIED_BY not in entries:
            a.checked += 1
            a.finding(
                child / "run", "attempt", AuditCode.MISSING,
                "an attempt directory without its run (kernel run writes one for every "
                "attempt it certifies)",
            )  # fmt: skip
