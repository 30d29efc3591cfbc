"""The audit of a run's outcome lines (ADR-0010, ADR-0013).

Each line's id is recomputed; an ADR-0013 envelope's position and attempt
id are compared with the record; each outcome is tied to its attempt
directory; with a bundle, each line is re-derived by the pure core from the
stored certifications and compared byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, final

import attrs

from kernel.audit._store import (
    AuditCode,
    AuditFinding,
    AuditInputError,
    Auditor,
    Unreadable,
    as_text,
    field_of,
    read_bounded,
    same_json,
)
from kernel.audit._work_dir import derive_certification
from kernel.bundles import ReadyAttempt, RefusedAttempt
from kernel.identity import canonical_json
from kernel.orchestrate import CERTIFICATION_RECORD, author_session, replay_requests
from kernel.organs import (
    CERTIFICATION_MEDIA_TYPE,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
    CertificationEvidence,
)
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    refusal_id_of,
    result_id_of,
)
from kernel.serde import SerdeError, dumps, loads, parse_json, unstructure

# --- outcomes ------------------------------------------------------------------------


def read_outcome_lines(path: Path) -> list[bytes]:
    """The lines of an outcomes file as stored, without newlines.

    ``AuditInputError`` when the file is unreadable.
    """
    try:
        data = read_bounded(path)
    except Unreadable as exc:
        raise AuditInputError("outcomes_unreadable", f"{path}: {exc.message}") from exc
    if data and not data.endswith(b"\n"):
        raise AuditInputError("outcomes_unreadable", f"{path}: the last line has no newline")
    return data.split(b"\n")[:-1] if data else []


# An outcome line of ``kernel run``/``kernel replay`` (ADR-0013): the record,
# unchanged, in an envelope naming the attempt it answers. A bare record (the
# library's ``outcome_lines``) is still read; a line's kind is its own shape.
_ENVELOPE: Final = frozenset({"attempt_id", "attempt_index", "outcome"})

Outcome = ReplayAdapterResult | ReplayAdapterRefusal


@final
@attrs.frozen
class StoredOutcome:
    """One audited outcome line: its record, and whether it came in an envelope."""

    outcome: Outcome
    enveloped: bool


def _line_finding(
    a: Auditor,
    name: str,
    subject: str,
    code: AuditCode,
    message: str,
    recorded: str | None = None,
    recomputed: str | None = None,
) -> None:
    # The outcomes file lives outside the audited root: named by its file name.
    a.checked += 1
    a.findings.append(AuditFinding(name, subject, code, recorded, recomputed, message))


def _expect(
    a: Auditor, name: str, subject: str, recorded: object, recomputed: object, message: str
) -> None:
    if same_json(recorded, recomputed):
        a.checked += 1
    else:
        _line_finding(
            a, name, subject, AuditCode.BINDING_MISMATCH, message,
            as_text(recorded), as_text(recomputed),
        )  # fmt: skip


def _unwrap(a: Auditor, name: str, index: int, line: bytes) -> tuple[bytes, bool, str | None]:
    """The record's bytes, whether it came enveloped, the envelope's attempt id.

    Raises ``SerdeError`` for a line that is no JSON or no envelope/record
    shape. The envelope is covered by no id, so its position is compared
    here, its attempt id with the record's (``_audit_addresses``) and, with a
    bundle, with the run's (``rederive``).
    """
    document = parse_json(line)
    if not (isinstance(document, dict) and "outcome" in document):
        return line, False, None
    if set(document) != _ENVELOPE:
        raise SerdeError("malformed_envelope", "$", "not {attempt_id, attempt_index, outcome}")
    attempt_id = document["attempt_id"]
    if attempt_id is not None and not isinstance(attempt_id, str):
        raise SerdeError("malformed_envelope", "$.attempt_id", "neither a string nor null")
    _expect(
        a, name, f"outcome[{index}] attempt_index", document["attempt_index"], index,
        "the envelope names another position than its line's",
    )  # fmt: skip
    return canonical_json(document["outcome"]), True, attempt_id


def audit_outcomes(a: Auditor, path: Path, lines: list[bytes]) -> list[StoredOutcome | None]:
    parsed: list[StoredOutcome | None] = []
    for index, line in enumerate(lines):
        subject = f"outcome[{index}]"
        outcome: Outcome
        try:
            record, enveloped, envelope_id = _unwrap(a, path.name, index, line)
            if "replay_refusal_id" in _field_names(record):
                outcome = loads(record, ReplayAdapterRefusal)
                recorded, recomputed = outcome.replay_refusal_id, refusal_id_of(outcome)
            else:
                outcome = loads(record, ReplayAdapterResult)
                recorded, recomputed = outcome.replay_result_id, result_id_of(outcome)
        except SerdeError as exc:
            _line_finding(a, path.name, subject, AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
            parsed.append(None)
            continue
        if recorded == recomputed:
            a.checked += 1
        else:
            _line_finding(
                a, path.name, f"{subject} id", AuditCode.ID_MISMATCH,
                "the outcome's id does not recompute from its fields", recorded, recomputed,
            )  # fmt: skip
        if isinstance(outcome, ReplayAdapterRefusal) and outcome.attempt_index is not None:
            _expect(
                a, path.name, f"{subject} attempt_index", outcome.attempt_index, index,
                "the refusal was addressed at another position than its line's",
            )  # fmt: skip
        # A refusal before identity names no attempt: only the bundle can tell.
        if enveloped and outcome.attempt_id is not None:
            _expect(
                a, path.name, f"{subject} attempt_id", envelope_id, outcome.attempt_id,
                "the envelope names another attempt than its outcome record",
            )  # fmt: skip
        parsed.append(StoredOutcome(outcome, enveloped))
    return parsed


def _field_names(record: bytes) -> set[str]:
    document = parse_json(record)
    return set(document) if isinstance(document, dict) else set()


def link_outcomes(
    a: Auditor,
    outcomes_name: str,
    stored: list[StoredOutcome | None],
    certifications: Mapping[str, CertificationEvidence | None],
) -> None:
    parsed = [s.outcome if s is not None else None for s in stored]
    named = {o.attempt_id for o in parsed if o is not None and o.attempt_id is not None}
    for attempt_id in sorted(set(certifications) - named):
        a.checked += 1
        a.finding(
            a.root / attempt_id,
            "attempt",
            AuditCode.UNDECLARED,
            "no outcome line names this attempt directory",
        )
    for index, outcome in enumerate(parsed):
        if not isinstance(outcome, ReplayAdapterResult):
            continue
        certified = (
            TARGET_CERTIFIED in outcome.proof_obligation_refs
            and outcome.replay_disposition.value == "contract_and_proof_closed"
        )
        evidence = certifications.get(outcome.attempt_id)
        if not certified and evidence is None:
            continue
        a.checked += 1
        if evidence is None:
            a.findings.append(
                AuditFinding(
                    outcomes_name,
                    f"outcome[{index}] certification",
                    AuditCode.MISSING,
                    None,
                    None,
                    f"a certified outcome without {outcome.attempt_id}/{CERTIFICATION_RECORD}",
                )
            )
            continue
        record = a.root / outcome.attempt_id / CERTIFICATION_RECORD
        a.compare(record, "candidate", evidence.request.candidate.digest, outcome.candidate_digest)
        a.compare(
            record,
            "author_session",
            evidence.request.candidate.author_session,
            author_session(outcome.run_id),
        )


@final
@attrs.frozen
class StoredCertifications:
    """An ``EvidenceProvider`` that hands back the certifications a work directory stored.

    It never runs anything, and it trusts nothing it has not derived again:
    a contract-closed attempt gets its stored ``certification.json`` only
    when the attempt directory audits intact (``derive_certification``: its
    run's metadata and receipt, under the receipt rules the kernel applies
    at run time, give that certification), and the pure proof authority then
    judges it again. Otherwise the attempt gets nothing (the obligation is
    unavailable, never closed). ``derived``, when given, holds the
    certifications a caller has already derived this way (the audit's own
    pass over every attempt), by attempt id; no other attempt gets one.
    """

    work_dir: Path
    derived: Mapping[str, CertificationEvidence] | None = None

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """The derived certification document of ``state``'s attempt, or ``()``."""
        replay_input = state.validated.request.replay_input
        if TARGET_CERTIFIED not in replay_input.proof_obligation_refs:
            return ()
        attempt_id = replay_input.attempt_id
        if self.derived is not None:
            evidence = self.derived.get(attempt_id)
        else:
            evidence, _ = derive_certification(self.work_dir / attempt_id)
        if evidence is None:
            return ()
        # The very value that was audited, never the file read a second time.
        return (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, dumps(evidence)),)

    def findings(self, attempt_id: str) -> tuple[AuditFinding, ...]:
        """Why the certification stored for ``attempt_id`` does not derive (``()``: it does)."""
        return derive_certification(self.work_dir / attempt_id)[1]


@final
class _Asked:
    """``StoredCertifications``, noting which attempts the pure core asked to be certified."""

    def __init__(self, inner: StoredCertifications) -> None:
        self.inner = inner
        self.asked: list[str] = []

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        replay_input = state.validated.request.replay_input
        if TARGET_CERTIFIED in replay_input.proof_obligation_refs:
            self.asked.append(replay_input.attempt_id)
        return self.inner.gather(state)


def rederive(
    a: Auditor,
    outcomes_name: str,
    lines: list[bytes],
    stored: list[StoredOutcome | None],
    attempts: Sequence[ReadyAttempt | RefusedAttempt],
    certifications: Mapping[str, CertificationEvidence],
) -> None:
    """Each outcome again from the bundle's attempts and the derived ``certifications``.

    Compared byte for byte with the stored lines. Every attempt whose
    contract closes was certified by ``kernel run`` in a directory of its
    own: one that is gone is a finding (its outcome also differs, unless the
    certification had found nothing to hand over).
    """
    provider = _Asked(StoredCertifications(a.root, certifications))
    ready = [item.request for item in attempts if isinstance(item, ReadyAttempt)]
    decided = iter(replay_requests(ready, CERTIFIED_MANIFEST, provider))
    outcomes = [
        next(decided) if isinstance(item, ReadyAttempt) else item.refusal for item in attempts
    ]
    attempt_ids = [item.attempt_id for item in attempts]
    for attempt_id in provider.asked:
        a.checked += 1
        if not (a.root / attempt_id).is_dir():
            a.finding(
                a.root / attempt_id, "attempt", AuditCode.MISSING,
                "the attempt's contract closes, so kernel run certified it here; "
                "its directory is gone",
            )  # fmt: skip
    # Each line as the command would write it again, in the stored line's own
    # form: an envelope (its attempt id the run's) or a bare record.
    derived = [
        _envelope_line(index, attempt_ids[index], outcome)
        if index < len(stored) and (s := stored[index]) is not None and s.enveloped
        else dumps(outcome)
        for index, outcome in enumerate(outcomes)
    ]
    a.checked += 1
    if len(derived) != len(lines):
        a.findings.append(
            AuditFinding(
                outcomes_name,
                "outcome count",
                AuditCode.OUTCOME_MISMATCH,
                str(len(lines)),
                str(len(derived)),
                "the bundle's attempts and the stored lines differ in number",
            )
        )
    for index, (line, again) in enumerate(zip(lines, derived, strict=False)):
        a.checked += 1
        if line != again:
            a.findings.append(
                AuditFinding(
                    outcomes_name,
                    f"outcome[{index}]",
                    AuditCode.OUTCOME_MISMATCH,
                    _line_id(line),
                    _line_id(again),
                    "re-derived from the bundle and the stored certifications, the outcome differs",
                )
            )


def _envelope_line(index: int, attempt_id: str | None, outcome: Outcome) -> bytes:
    # ADR-0013's line, as kernel.bundles.outcome_line writes it (without its
    # newline); built here because the orchestrator imports only downwards.
    return canonical_json(
        {"attempt_id": attempt_id, "attempt_index": index, "outcome": unstructure(outcome)}
    )


def _line_id(line: bytes) -> str | None:
    try:
        document = parse_json(line)
    except SerdeError:
        return None
    if isinstance(document, dict) and "outcome" in document:
        document = document["outcome"]
    for name in ("replay_result_id", "replay_refusal_id"):
        value = field_of(document, name)
        if isinstance(value, str):
            return value
    return None
