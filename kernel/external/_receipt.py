"""Checker receipt validation, exactly the seed's table.

Rules (seed 003, "Checker receipt"; first failure wins, in this order):

1. at most ``max_bytes``; strict UTF-8; strict JSON (no duplicate keys, no
   floats); a JSON object;
2. exactly the ten fields: none missing, none extra;
3. ``schema_version`` is the integer 1; ``job_id``, ``run_id``,
   ``check_id``, ``check_digest``, ``specification_digest`` and
   ``evidence_digest`` equal the current values (exact JSON types);
4. ``identity`` equals the complete current identity(check), compared as
   canonical bytes;
5. ``verdict`` is one of accepted / rejected / unknown;
6. ``obligations`` lists every approved obligation exactly once, in manifest
   order, each an object with exactly name / result / evidence; ``evidence``
   is a non-empty list of distinct declared artifact paths;
7. the top-level verdict agrees with the obligations: accepted iff all are
   accepted, otherwise rejected if any is rejected, otherwise unknown.

A valid receipt yields a ``Verdict``; what PASS needs besides (exit status
zero) is the run's business, not this module's. ``reason_for`` is the one
mapping from a receipt check to the run's ending (accepted: PASS; rejected:
``checker_rejected``; unknown: ``checker_unknown``; refused: its reason),
used at run time and whenever a stored run is judged again.

``recorded_expectation`` rebuilds the values a stored run's receipt must be
bound to from that run's own records (its ``metadata.json`` and its
``identity.json``, which the check digest binds), so ``kernel audit`` and
``kernel run --resume`` apply exactly these rules to a stored receipt
(ADR-0010, issue 18).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from kernel.external._outcome import Reason, RunMetadata, Verdict
from kernel.identity import IdentityError, JsonValue, canonical_json, sha256_hex
from kernel.serde import SerdeError, parse_json

__all__ = [
    "RECEIPT_FIELDS",
    "RECEIPT_SCHEMA_VERSION",
    "ReceiptCheck",
    "ReceiptExpectation",
    "aggregate_verdict",
    "reason_for",
    "recorded_expectation",
    "validate_receipt",
]

RECEIPT_SCHEMA_VERSION: Final = 1
RECEIPT_FIELDS: Final = (
    "schema_version",
    "job_id",
    "run_id",
    "check_id",
    "check_digest",
    "specification_digest",
    "identity",
    "evidence_digest",
    "verdict",
    "obligations",
)
_OBLIGATION_FIELDS: Final = frozenset({"name", "result", "evidence"})


@final
@attrs.frozen
class ReceiptExpectation:
    """The current values a receipt must be bound to."""

    job_id: str
    run_id: str
    check_id: str
    check_digest: str
    specification_digest: str
    identity_canonical: bytes
    evidence_digest: str
    obligations: tuple[str, ...]
    artifacts: tuple[str, ...]


@final
@attrs.frozen
class ReceiptCheck:
    """A valid receipt's verdict, or the reason it is refused (exactly one is set)."""

    verdict: Verdict | None
    reason: Reason | None
    detail: str

    def __attrs_post_init__(self) -> None:
        if (self.verdict is None) == (self.reason is None):
            raise ValueError("exactly one of verdict and reason is set")


class _Refused(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def aggregate_verdict(results: Sequence[Verdict]) -> Verdict:
    """accepted iff all accepted; else rejected if any rejected; else unknown."""
    if all(r is Verdict.ACCEPTED for r in results):
        return Verdict.ACCEPTED
    if any(r is Verdict.REJECTED for r in results):
        return Verdict.REJECTED
    return Verdict.UNKNOWN


def _parse(data: bytes, max_bytes: int) -> Mapping[str, JsonValue]:
    try:
        value = parse_json(data, max_bytes=max_bytes)
    except SerdeError as exc:
        reason = {
            "document_too_large": Reason.RECEIPT_TOO_LARGE,
            "invalid_utf8": Reason.RECEIPT_NOT_UTF8,
        }.get(exc.code, Reason.RECEIPT_MALFORMED)
        raise _Refused(reason, f"{exc.code}: {exc.message}") from exc
    if type(value) is not dict:
        raise _Refused(Reason.RECEIPT_NOT_OBJECT, "the receipt is not a JSON object")
    return value


def _check_fields(receipt: Mapping[str, JsonValue]) -> None:
    missing = [name for name in RECEIPT_FIELDS if name not in receipt]
    if missing:
        raise _Refused(Reason.RECEIPT_MISSING_FIELD, f"missing field(s): {', '.join(missing)}")
    extra = sorted(set(receipt) - set(RECEIPT_FIELDS))
    if extra:
        raise _Refused(Reason.RECEIPT_EXTRA_FIELD, f"extra field(s): {', '.join(extra)}")


def _check_equal(value: JsonValue, expected: str | int, field: str, reason: Reason) -> None:
    # Exact JSON type first: 1 == True in Python, but not in the protocol.
    if type(value) is not type(expected) or value != expected:
        raise _Refused(reason, f"{field} {value!r} is not the current {expected!r}")


def _check_identity(value: JsonValue, expected: bytes) -> None:
    try:
        actual = canonical_json(value)
    except IdentityError as exc:  # pragma: no cover - parse_json already enforces the domain
        raise _Refused(Reason.RECEIPT_IDENTITY_MISMATCH, str(exc)) from exc
    if type(value) is not dict or actual != expected:
        raise _Refused(
            Reason.RECEIPT_IDENTITY_MISMATCH,
            "identity is not the complete current identity(check)",
        )


def _verdict(value: JsonValue, where: str, reason: Reason) -> Verdict:
    if type(value) is str:
        for member in Verdict:
            if member.value == value:
                return member
    raise _Refused(reason, f"{where} {value!r} is not accepted, rejected or unknown")


def _check_obligations(value: JsonValue, expected: ReceiptExpectation) -> tuple[Verdict, ...]:
    if type(value) is not list:
        raise _Refused(Reason.RECEIPT_OBLIGATION_INVALID, "obligations is not a list")
    declared = set(expected.artifacts)
    names: list[str] = []
    results: list[Verdict] = []
    for index, item in enumerate(value):
        where = f"obligations[{index}]"
        if type(item) is not dict or set(item) != _OBLIGATION_FIELDS:
            raise _Refused(
                Reason.RECEIPT_OBLIGATION_INVALID,
                f"{where} is not an object with exactly name, result, evidence",
            )
        name = item["name"]
        if type(name) is not str:
            raise _Refused(Reason.RECEIPT_OBLIGATION_INVALID, f"{where}.name is not a string")
        names.append(name)
        results.append(
            _verdict(item["result"], f"{where}.result", Reason.RECEIPT_OBLIGATION_INVALID)
        )
        evidence = item["evidence"]
        if type(evidence) is not list or not evidence:
            raise _Refused(
                Reason.RECEIPT_OBLIGATION_EVIDENCE, f"{where}.evidence is not a non-empty list"
            )
        for cited in evidence:
            if type(cited) is not str or cited not in declared:
                raise _Refused(
                    Reason.RECEIPT_OBLIGATION_EVIDENCE,
                    f"{where}.evidence cites {cited!r}, not a declared artifact",
                )
        if len(set(evidence)) != len(evidence):
            raise _Refused(
                Reason.RECEIPT_OBLIGATION_EVIDENCE, f"{where}.evidence cites an artifact twice"
            )
    if tuple(names) != expected.obligations:
        raise _Refused(
            Reason.RECEIPT_OBLIGATIONS_MISMATCH,
            f"obligations {names!r} are not exactly {list(expected.obligations)!r} in order",
        )
    return tuple(results)


def _validate(data: bytes, expected: ReceiptExpectation, max_bytes: int) -> Verdict:
    receipt = _parse(data, max_bytes)
    _check_fields(receipt)
    _check_equal(
        receipt["schema_version"],
        RECEIPT_SCHEMA_VERSION,
        "schema_version",
        Reason.RECEIPT_SCHEMA_VERSION,
    )
    _check_equal(receipt["job_id"], expected.job_id, "job_id", Reason.RECEIPT_JOB_MISMATCH)
    _check_equal(receipt["run_id"], expected.run_id, "run_id", Reason.RECEIPT_RUN_MISMATCH)
    _check_equal(
        receipt["check_id"], expected.check_id, "check_id", Reason.RECEIPT_CHECK_ID_MISMATCH
    )
    _check_equal(
        receipt["check_digest"],
        expected.check_digest,
        "check_digest",
        Reason.RECEIPT_CHECK_DIGEST_MISMATCH,
    )
    _check_equal(
        receipt["specification_digest"],
        expected.specification_digest,
        "specification_digest",
        Reason.RECEIPT_SPECIFICATION_MISMATCH,
    )
    _check_identity(receipt["identity"], expected.identity_canonical)
    _check_equal(
        receipt["evidence_digest"],
        expected.evidence_digest,
        "evidence_digest",
        Reason.RECEIPT_EVIDENCE_DIGEST_MISMATCH,
    )
    verdict = _verdict(receipt["verdict"], "verdict", Reason.RECEIPT_VERDICT_INVALID)
    results = _check_obligations(receipt["obligations"], expected)
    if aggregate_verdict(results) is not verdict:
        raise _Refused(
            Reason.RECEIPT_VERDICT_DISAGREES,
            f"verdict {verdict.value!r} disagrees with the obligation results",
        )
    return verdict


def validate_receipt(data: bytes, expected: ReceiptExpectation, *, max_bytes: int) -> ReceiptCheck:
    """Validate receipt bytes against the current run; never raises on bad input."""
    try:
        verdict = _validate(data, expected, max_bytes)
    except _Refused as refused:
        return ReceiptCheck(None, refused.reason, refused.detail)
    return ReceiptCheck(verdict, None, f"valid receipt, verdict {verdict.value}")


def reason_for(check: ReceiptCheck) -> Reason | None:
    """The run's ending for a receipt check: None (PASS) only for a valid accepting receipt.

    A refused receipt ends with its own reason; a valid one that rejects or
    answers unknown ends ``checker_rejected`` / ``checker_unknown``
    (inconclusive, seed 003 "Verdict semantics").
    """
    if check.reason is not None:
        return check.reason
    if check.verdict is Verdict.REJECTED:
        return Reason.CHECKER_REJECTED
    if check.verdict is Verdict.UNKNOWN:
        return Reason.CHECKER_UNKNOWN
    return None


def _names(value: JsonValue) -> tuple[str, ...] | None:
    if type(value) is not list or not all(type(item) is str for item in value):
        return None
    return tuple(str(item) for item in value)


def recorded_expectation(
    metadata: RunMetadata, identity: JsonValue
) -> ReceiptExpectation | None:
    """What the receipt of a stored run must be bound to, from that run's own records.

    ``identity`` is the run's stored ``identity.json`` document; it counts
    only when its digest is the check digest the metadata records (the run
    validated its receipt against exactly that identity). The obligations
    and the artifacts a receipt may cite are the identity's own (the entry's
    claim and evidence list). None when the records cannot say: a digest the
    run never reached, or an identity that is not the recorded one or not
    an entry.
    """
    run, checked = metadata.run, metadata.checked
    if (
        checked.check_digest is None
        or checked.specification_digest is None
        or checked.evidence_digest is None
        or type(identity) is not dict
    ):
        return None
    try:
        canonical = canonical_json(identity)
    except IdentityError:
        return None
    claim = identity.get("claim")
    obligations = _names(claim.get("obligations")) if type(claim) is dict else None
    artifacts = _names(identity.get("evidence_artifacts"))
    if sha256_hex(canonical) != checked.check_digest or obligations is None or artifacts is None:
        return None
    return ReceiptExpectation(
        job_id=run.job_id,
        run_id=run.run_id,
        check_id=run.check_id,
        check_digest=checked.check_digest,
        specification_digest=checked.specification_digest,
        identity_canonical=canonical,
        evidence_digest=checked.evidence_digest,
        obligations=obligations,
        artifacts=artifacts,
    )
