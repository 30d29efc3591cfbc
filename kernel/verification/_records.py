"""Frozen records of the verification adapter and their content addresses.

Rules:

- every record is ``@final``, frozen and slotted, with tuples for sequences and
  validators that refuse what no caller may build (empty identifiers, NUL
  bytes that could not reach an ``argv``, malformed digests, a receipt whose
  status contradicts its raw verdict);
- semantic rules (who may request what, which operations are denied) are not
  validators: they are typed ``Rejection`` values returned by the bridge;
- ``request_id`` is the SHA-256 of the canonical JSON of ``request_payload``:
  every request field except ``request_id`` itself;
- ``receipt_id`` is the SHA-256 of the canonical JSON of ``receipt_payload``:
  every receipt field except ``receipt_id`` itself (so it covers the
  ``request_id``, the backend version, the evidence digest, the raw verdict
  and the producer);
- each payload equals the record's JSON form (``kernel.serde.unstructure``)
  minus its own id field; the tests check both.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs

from kernel.identity import JsonValue, digest, is_digest
from kernel.verification._vocabulary import (
    Activation,
    Authority,
    BackendVerdict,
    ClaimLevel,
    EvidenceTier,
    RejectionCode,
    Role,
    Stage,
    Status,
)

__all__ = [
    "Candidate",
    "Claim",
    "CommandConfiguration",
    "Producer",
    "Rejection",
    "Setting",
    "VerificationPlan",
    "VerificationReceipt",
    "VerificationRequest",
    "VerificationSpec",
    "candidate_payload",
    "claim_payload",
    "configuration_payload",
    "producer_payload",
    "receipt_id_of",
    "receipt_payload",
    "request_id_of",
    "request_payload",
    "status_for",
]


# --- validators --------------------------------------------------------------


def _check_text(value: object, what: str, *, allow_empty: bool = False) -> None:
    if type(value) is not str:
        raise TypeError(f"{what} must be str, got {type(value).__name__}")
    if not allow_empty and value == "":
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        # Every text field can end up in an argv element; exec refuses NUL.
        raise ValueError(f"{what} must not contain NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} contains a lone surrogate") from exc


def _text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_text(value, attribute.name)


def _digest(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not is_digest(value):
        raise ValueError(f"{attribute.name} must be a lowercase hex SHA-256 digest")


def _texts(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple:
        raise TypeError(f"{attribute.name} must be a tuple")
    for i, item in enumerate(value):
        _check_text(item, f"{attribute.name}[{i}]", allow_empty=True)


def _exact(kind: type) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not kind:
            raise TypeError(f"{attribute.name} must be {kind.__name__}, got {type(value).__name__}")

    return check


def _setting_name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _check_text(value, attribute.name)
    assert isinstance(value, str)
    if not (value[0].isascii() and value[0].islower()) or not all(
        c.isascii() and (c.islower() or c.isdigit() or c == "-") for c in value
    ):
        raise ValueError(f"setting name {value!r} must match [a-z][a-z0-9-]*")


def _settings(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple:
        raise TypeError("settings must be a tuple")
    names: list[str] = []
    for item in value:
        if type(item) is not Setting:
            raise TypeError("settings must hold Setting records")
        names.append(item.name)
    if names != sorted(set(names)):
        # One canonical order, so deep equality is byte equality.
        raise ValueError("setting names must be unique and sorted")


# --- value records -----------------------------------------------------------


@final
@attrs.frozen
class Candidate:
    """The exact candidate under verification and the session that authored it."""

    digest: str = attrs.field(validator=_digest)
    author_session: str = attrs.field(validator=_text)


@final
@attrs.frozen
class Claim:
    """One claim a backend checks: identifier, level, and the statement passed to it."""

    claim_id: str = attrs.field(validator=_text)
    level: ClaimLevel = attrs.field(validator=_exact(ClaimLevel))
    statement: str = attrs.field(validator=_text)


@final
@attrs.frozen
class Setting:
    """One ``--name=value`` option of a backend command."""

    name: str = attrs.field(validator=_setting_name)
    value: str = attrs.field(validator=_text)


@final
@attrs.frozen
class CommandConfiguration:
    """The backend operation, its settings (sorted by name) and trailing arguments."""

    operation: str = attrs.field(validator=_text)
    settings: tuple[Setting, ...] = attrs.field(validator=_settings)
    arguments: tuple[str, ...] = attrs.field(validator=_texts)


@final
@attrs.frozen
class Producer:
    """Who executed a run: a role and the session it ran in."""

    role: Role = attrs.field(validator=_exact(Role))
    session: str = attrs.field(validator=_text)


@final
@attrs.frozen
class VerificationSpec:
    """The caller's intent for ``plan_verification``. Every field is required."""

    candidate: Candidate = attrs.field(validator=_exact(Candidate))
    claim: Claim = attrs.field(validator=_exact(Claim))
    backend: str = attrs.field(validator=_text)
    stage: Stage = attrs.field(validator=_exact(Stage))
    authority: Authority = attrs.field(validator=_exact(Authority))
    expected_result: Status = attrs.field(validator=_exact(Status))
    command_configuration: CommandConfiguration = attrs.field(
        validator=_exact(CommandConfiguration)
    )
    activation: Activation = attrs.field(validator=_exact(Activation))
    requested_by: Role = attrs.field(validator=_exact(Role))


def _activated(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in (Activation.SELECTED, Activation.REQUIRED):
        raise ValueError("a request's backend is selected or required, never inactive")


def _expectable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in (Status.VERIFIED, Status.REFUTED):
        raise ValueError("expected_result is VERIFIED or REFUTED")


@final
@attrs.frozen
class VerificationRequest:
    """A planned verification: what runs, on what, at which stage and authority.

    ``request_id`` is self-sealing: the digest of every other field
    (``request_payload``). Build requests with ``plan_verification``.
    """

    request_id: str = attrs.field(validator=_digest)
    candidate: Candidate = attrs.field(validator=_exact(Candidate))
    claim: Claim = attrs.field(validator=_exact(Claim))
    backend: str = attrs.field(validator=_text)
    stage: Stage = attrs.field(validator=_exact(Stage))
    authority: Authority = attrs.field(validator=_exact(Authority))
    expected_result: Status = attrs.field(validator=[_exact(Status), _expectable])
    command_configuration: CommandConfiguration = attrs.field(
        validator=_exact(CommandConfiguration)
    )
    activation: Activation = attrs.field(validator=[_exact(Activation), _activated])
    requested_by: Role = attrs.field(validator=_exact(Role))


def _argv(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _texts(_, attribute, value)
    assert isinstance(value, tuple)
    if not value or value[0] == "":
        raise ValueError("argv needs a program")


@final
@attrs.frozen
class VerificationPlan:
    """A request plus the argv the caller runs (no shell). Input to sealing."""

    request: VerificationRequest = attrs.field(validator=_exact(VerificationRequest))
    argv: tuple[str, ...] = attrs.field(validator=_argv)


_VERDICT_STATUS: Final = {
    BackendVerdict.VERIFIED: Status.VERIFIED,
    BackendVerdict.REFUTED: Status.REFUTED,
    BackendVerdict.UNKNOWN: Status.INCONCLUSIVE,
    BackendVerdict.ERROR: Status.ERROR,
}


def status_for(verdict: BackendVerdict, tier: EvidenceTier) -> Status:
    """The status a sealed receipt carries; derived evidence is always INCONCLUSIVE."""
    if verdict is BackendVerdict.CLAIM_MALFORMED:
        raise ValueError("a malformed claim is rejected, never sealed")
    if tier is EvidenceTier.DERIVED:
        return Status.INCONCLUSIVE
    return _VERDICT_STATUS[verdict]


def _receipt_consistent(receipt: VerificationReceipt) -> None:
    if status_for(receipt.backend_verdict, receipt.evidence_tier) is not receipt.status:
        raise ValueError(
            f"status {receipt.status.value} contradicts verdict "
            f"{receipt.backend_verdict.value} at tier {receipt.evidence_tier.value}"
        )


@final
@attrs.frozen
class VerificationReceipt:
    """A sealed run: the request's bindings plus what the run itself reported.

    ``receipt_id`` is self-sealing: the digest of every other field
    (``receipt_payload``). Build receipts with ``seal_verification``.
    """

    receipt_id: str = attrs.field(validator=_digest)
    request_id: str = attrs.field(validator=_digest)
    candidate: Candidate = attrs.field(validator=_exact(Candidate))
    claim: Claim = attrs.field(validator=_exact(Claim))
    backend: str = attrs.field(validator=_text)
    backend_version: str = attrs.field(validator=_text)
    command_configuration: CommandConfiguration = attrs.field(
        validator=_exact(CommandConfiguration)
    )
    evidence_digest: str = attrs.field(validator=_digest)
    stage: Stage = attrs.field(validator=_exact(Stage))
    authority: Authority = attrs.field(validator=_exact(Authority))
    status: Status = attrs.field(validator=_exact(Status))
    evidence_tier: EvidenceTier = attrs.field(validator=_exact(EvidenceTier))
    backend_verdict: BackendVerdict = attrs.field(validator=_exact(BackendVerdict))
    produced_by: Producer = attrs.field(validator=_exact(Producer))

    def __attrs_post_init__(self) -> None:
        _receipt_consistent(self)


@final
@attrs.frozen
class Rejection:
    """A typed refusal: a stable code, a readable message, and backend detail if any."""

    code: RejectionCode = attrs.field(validator=_exact(RejectionCode))
    message: str = attrs.field(validator=_text)
    backend_detail: str | None = attrs.field(validator=attrs.validators.optional(_exact(str)))


# --- payloads and ids --------------------------------------------------------


def candidate_payload(candidate: Candidate) -> dict[str, JsonValue]:
    """JSON form of a candidate: ``author_session``, ``digest``."""
    return {"author_session": candidate.author_session, "digest": candidate.digest}


def claim_payload(claim: Claim) -> dict[str, JsonValue]:
    """JSON form of a claim: ``claim_id``, ``level``, ``statement``."""
    return {"claim_id": claim.claim_id, "level": claim.level.value, "statement": claim.statement}


def configuration_payload(configuration: CommandConfiguration) -> dict[str, JsonValue]:
    """JSON form of a command configuration: ``arguments``, ``operation``, ``settings``."""
    return {
        "arguments": list(configuration.arguments),
        "operation": configuration.operation,
        "settings": [{"name": s.name, "value": s.value} for s in configuration.settings],
    }


def producer_payload(producer: Producer) -> dict[str, JsonValue]:
    """JSON form of a producer: ``role``, ``session``."""
    return {"role": producer.role.value, "session": producer.session}


def request_payload(request: VerificationRequest) -> dict[str, JsonValue]:
    """Every request field except ``request_id``: what ``request_id`` hashes."""
    return {
        "activation": request.activation.value,
        "authority": request.authority.value,
        "backend": request.backend,
        "candidate": candidate_payload(request.candidate),
        "claim": claim_payload(request.claim),
        "command_configuration": configuration_payload(request.command_configuration),
        "expected_result": request.expected_result.value,
        "requested_by": request.requested_by.value,
        "stage": request.stage.value,
    }


def request_id_of(request: VerificationRequest) -> str:
    """The ``request_id`` a request must carry."""
    return digest(request_payload(request))


def receipt_payload(receipt: VerificationReceipt) -> dict[str, JsonValue]:
    """Every receipt field except ``receipt_id``: what ``receipt_id`` hashes."""
    return {
        "authority": receipt.authority.value,
        "backend": receipt.backend,
        "backend_verdict": receipt.backend_verdict.value,
        "backend_version": receipt.backend_version,
        "candidate": candidate_payload(receipt.candidate),
        "claim": claim_payload(receipt.claim),
        "command_configuration": configuration_payload(receipt.command_configuration),
        "evidence_digest": receipt.evidence_digest,
        "evidence_tier": receipt.evidence_tier.value,
        "produced_by": producer_payload(receipt.produced_by),
        "request_id": receipt.request_id,
        "stage": receipt.stage.value,
        "status": receipt.status.value,
    }


def receipt_id_of(receipt: VerificationReceipt) -> str:
    """The ``receipt_id`` a receipt must carry."""
    return digest(receipt_payload(receipt))
