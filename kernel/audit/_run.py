"""Audit of a stored run: recompute every id from the stored bytes, offline.

Theory of operation (ADR-0010; ADR-0004 "Run directory layout"; ADR-0006
"Where the files go"; ADR-0229 §13): a stored run is a set of records that
name each other by content address. The audit reads the stored bytes,
recomputes each address the records carry, and reports every one that does
not reproduce. It never runs a producer, a checker or a solver, never opens
the network, and never takes configuration from what it reads: every path,
digest and field in a stored file is *evidence* to compare, never an
instruction (a manifest path recorded in metadata is not opened; the
manifest audited is the copy stored beside the run).

Two layouts are recognised, by shape only:

- an external run directory (``kernel check run``, seed 003): a directory
  holding ``metadata.json``;
- a ``kernel run`` work directory (ADR-0006): one directory per attempt,
  each holding ``run/`` (an external run), ``certification.json``,
  ``manifest.json`` and ``repository/``; the outcome lines are passed
  separately (``outcomes``), since ``kernel run`` writes them elsewhere.

What is recomputed (each is one comparison; each failure one ``AuditFinding``):

- external run: ``job_digest`` of ``job.json``; the check digest of
  ``identity.json``; the SHA-256 of every snapshot input, evidence artifact,
  request, receipt and log against the metadata; ``input_digest`` and
  ``evidence_digest`` over the path/hash lists; the values a request or the
  checker's receipt binds (job, run, check digest, identity, specification,
  evidence digest, verdict); that the status, reason and verdict can go
  together; files in ``snapshot/`` or ``evidence/`` that no record lists;
  each retained replay under ``replays/`` the same way;
- work directory, per attempt: ``request_id`` and ``receipt_id`` of the
  certification; the receipt's ``request_id``; its ``evidence_digest``
  against the backend output document rebuilt from the run's metadata
  (``backend_output``: the receipt binds the metadata through it); the
  check digest and problem digest the request names against the run; the
  job id against the attempt's directory name; every field of the stored
  manifest entry (all pins included) against the run's identity;
- outcome lines: ``replay_result_id`` / ``replay_refusal_id`` of each line;
  each attempt directory named by an outcome, and each closed certified
  outcome backed by a certification of its candidate and run;
- with a bundle: every outcome re-derived by the pure core from the bundle
  and the stored certifications (the proof authority re-judges each stored
  receipt through the gate), byte for byte against the stored line; only a
  certification whose attempt audited intact is handed to the pure core
  (``StoredCertifications``, which ``kernel run --resume`` uses too).

Metadata is structured with the external protocol's own ``RunMetadata`` so a
field the protocol adds (for example a containment level) is read the way
the protocol writes it; everything else is compared as parsed JSON, field by
field where both records name the field, so a record that gains a field does
not break the audit.

The entry point is here; the parts are ``_audit_store`` (findings, bounded
reads, the auditor), ``_audit_external`` (one external run directory),
``_audit_work_dir`` (one attempt of a work directory) and
``_audit_outcomes`` (outcome lines, their links, re-derivation).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import assert_never

from kernel.audit._bundle import (
    BUNDLE_COPY,
    BUNDLE_STREAM_COPY,
    bundle_attempts,
    copied_attempts,
    same_attempts,
)
from kernel.audit._external import audit_external
from kernel.audit._outcomes import (
    StoredCertifications,
    audit_outcomes,
    link_outcomes,
    read_outcome_lines,
    rederive,
)
from kernel.audit._store import (
    METADATA,
    AuditCode,
    AuditFinding,
    AuditInputError,
    Auditor,
    AuditReport,
    RunLayout,
    as_text,
    field_of,
    stored_files,
)
from kernel.audit._work_dir import (
    RUN_STATE,
    WORK_OUTCOMES,
    attempt_dirs,
    audit_attempt,
    audit_entries,
)
from kernel.identity import JsonValue
from kernel.organs import CertificationEvidence
from kernel.replay import (
    ReplayBundle,
)

__all__ = [
    "AuditCode",
    "AuditFinding",
    "AuditInputError",
    "AuditReport",
    "RunLayout",
    "StoredCertifications",
    "audit_run",
    "detect_layout",
    "read_outcome_lines",
    "report_document",
    "stored_files",
]


# --- the entry point -------------------------------------------------------------------


def detect_layout(root: Path) -> RunLayout:
    """The layout of ``root``; ``AuditInputError`` when it is neither."""
    if not root.exists() and not root.is_symlink():
        raise AuditInputError("not_a_directory", f"{root}: no such directory")
    if root.is_symlink() or not root.is_dir():
        raise AuditInputError("not_a_directory", f"{root}: not a directory")
    if (root / METADATA).exists() or (root / METADATA).is_symlink():
        return RunLayout.EXTERNAL_RUN
    try:
        if (root / RUN_STATE).exists() or (root / RUN_STATE).is_symlink() or attempt_dirs(root):
            return RunLayout.WORK_DIR
    except OSError as exc:
        raise AuditInputError("unreadable_run", f"{root}: {exc.strerror or exc}") from exc
    raise AuditInputError(
        "not_a_run_directory",
        f"{root}: neither an external run (metadata.json) nor a kernel run work directory",
    )


def audit_run(
    root: Path,
    *,
    outcomes: Path | None = None,
    bundle: ReplayBundle | None = None,
) -> AuditReport:
    """Recompute every id of the stored run at ``root``; report what does not reproduce.

    For a ``kernel run`` work directory everything is checked by default:
    every entry of the directory, its own ``outcomes.jsonl`` and, when
    given, another copy of the outcome lines (``outcomes``, e.g. the file of
    ``kernel run -o``), each re-derived by the pure core from the bundle the
    directory keeps (``bundle.json``, or ``bundle.jsonl`` for a stream) and
    the stored certifications that audit intact. ``bundle``, the operator's
    own copy, is re-derived from instead, and the kept copy must hold the
    same attempts. Raises ``AuditInputError`` when ``root`` is not a stored
    run or an operator input (outcomes, bundle) is unusable; everything found
    wrong inside the run is a finding, never an exception.
    """
    root = Path(os.path.abspath(root))
    layout = detect_layout(root)
    a = Auditor(root)
    lines = read_outcome_lines(outcomes) if outcomes is not None else None
    if bundle is not None and layout is RunLayout.EXTERNAL_RUN:
        raise AuditInputError(
            "bundle_without_work_dir", "--bundle re-derives the outcomes of a kernel run "
            "work directory; this is an external run",
        )  # fmt: skip
    try:
        match layout:
            case RunLayout.EXTERNAL_RUN:
                audit_external(a, root)
            case RunLayout.WORK_DIR:
                _audit_work_dir(a, root, outcomes, lines, bundle)
            case _:
                assert_never(layout)
    except OSError as exc:
        raise AuditInputError("unreadable_run", f"{root}: {exc.strerror or exc}") from exc
    if layout is RunLayout.EXTERNAL_RUN and lines is not None and outcomes is not None:
        audit_outcomes(a, outcomes, lines)
    return AuditReport(str(root), layout, a.checked, tuple(a.findings))


def _audit_work_dir(
    a: Auditor,
    root: Path,
    outcomes: Path | None,
    lines: list[bytes] | None,
    bundle: ReplayBundle | None,
) -> None:
    audit_entries(a, root)
    certifications: dict[str, CertificationEvidence | None] = {}
    derived: dict[str, CertificationEvidence] = {}
    for d in attempt_dirs(root):
        before = len(a.findings)
        evidence = certifications[d.name] = audit_attempt(a, d)
        if evidence is not None and len(a.findings) == before:
            derived[d.name] = evidence  # what the re-derivation may hand the pure core
    kept = copied_attempts(a, root, required=bundle is None)
    attempts = kept
    if bundle is not None:
        try:
            attempts = bundle_attempts(bundle)
        except ValueError as exc:
            raise AuditInputError("bundle_refused", str(exc)) from exc
        a.checked += 1
        if kept is not None and not same_attempts(kept, attempts):
            a.finding(
                root / (BUNDLE_STREAM_COPY if (root / BUNDLE_STREAM_COPY).exists()
                        else BUNDLE_COPY),
                "bundle copy", AuditCode.BINDING_MISMATCH,
                "the work directory's bundle holds other attempts than --bundle",
            )  # fmt: skip
    own = root / WORK_OUTCOMES
    sources: list[tuple[str, list[bytes]]] = []
    try:
        sources.append((WORK_OUTCOMES, read_outcome_lines(own)))
    except AuditInputError as exc:
        a.checked += 1
        code = AuditCode.MISSING if not (own.exists() or own.is_symlink()) else AuditCode.MALFORMED
        a.finding(own, "outcomes", code, exc.message)
    if lines is not None and outcomes is not None and not _same_file(outcomes, own):
        sources.append((outcomes.name, lines))
    for name, source in sources:
        _audit_outcome_count(a, name, len(source))
        stored = audit_outcomes(a, Path(name), source)
        link_outcomes(a, name, stored, certifications)
        if attempts is not None:
            rederive(a, name, source, stored, attempts, derived)
    if not sources and attempts is not None:
        rederive(a, WORK_OUTCOMES, [], [], attempts, derived)  # still: no certified attempt lost


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _audit_outcome_count(a: Auditor, outcomes_name: str, count: int) -> None:
    """The outcomes file holds one line per attempt of the run the directory records.

    Without it (and without --bundle) an outcomes file cut short, e.g. the
    log of an interrupted run, audited intact: each line that remains is
    sound. ``kernel run`` writes ``run-state.json`` before anything else.
    """
    state = a.document(a.root / RUN_STATE)
    if state is None:
        return  # unreadable or absent: already a finding
    recorded = field_of(state, "attempt_count")
    a.checked += 1
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded != count:
        a.findings.append(AuditFinding(
            outcomes_name, "outcome count", AuditCode.OUTCOME_MISMATCH,
            str(count), as_text(recorded),
            f"the run has {as_text(recorded)} attempts ({RUN_STATE}); the outcomes file "
            f"holds {count} lines (an interrupted run is finished with kernel run --resume)",
        ))


def report_document(report: AuditReport) -> JsonValue:
    """The JSON form of a report (``--format json``)."""
    return {
        "checked": report.checked,
        "findings": [
            {
                "code": f.code.value,
                "message": f.message,
                "path": f.path,
                "recomputed": f.recomputed,
                "recorded": f.recorded,
                "subject": f.subject,
            }
            for f in report.findings
        ],
        "intact": report.intact,
        "layout": report.layout.value,
        "root": report.root,
    }
