"""The receipt bridge: ``plan_verification`` and ``seal_verification``.

Theory of operation (the deterministic verification adapter seed, "Receipt
bridge"): the bridge never runs a backend. ``plan_verification`` turns a fully
bound spec into a content-addressed request plus the argv to run; the caller
runs it and hands the backend's output document back to
``seal_verification``, which builds the receipt from the same request, so the
request's and the receipt's ``command_configuration`` are one value.

Planning checks, in order (first failure wins):

1. ``requester_not_permitted``: the requesting role may not ask for a run at
   this stage (the Orchestrator routes and records, it never requests);
2. ``authority_stage_mismatch``: the named authority is not the stage's;
3. ``backend_not_activated``: activation is ``inactive`` (a request binds a
   backend that is ``selected`` or ``required``);
4. ``expected_result_invalid``: only VERIFIED or REFUTED can be expected;
5. ``backend_is_a_role``: the backend identifier spells a role;
6. ``backend_unknown``: not in the static catalog (no generic stand-in);
7. ``backend_operation_unsupported``: the operation is not catalogued;
8. ``generative_backend_operation_denied``: the operation proposes claims;
9. ``reverify_claim_not_applicable``: Reverify on a non-binary claim.

Sealing checks, in order:

1. ``plan_tampered``: the request id or the argv do not recompute, or the
   request no longer passes planning (that planning code is returned);
2. ``producer_role_cannot_execute``: the role never executes a backend;
3. ``authority_producer_mismatch``: the role's execution authority is not the
   plan's (authority is carried, never defaulted or downgraded);
4. ``assurance_not_independent``: an assurance run in the candidate author's
   session;
5. ``backend_output_malformed``: the output is not the documented document;
6. ``backend_output_mismatch``: the output names another backend, candidate
   or claim;
7. ``claim_malformed``: the backend could not parse the claim; the backend's
   detail is carried and no receipt exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, assert_never

import attrs

from kernel._values import UNSEALED_ID
from kernel.identity import IdentityError, JsonValue, check_domain, digest
from kernel.verification._catalog import (
    BACKEND_CATALOG,
    REVERIFY_BACKEND,
    argv_for,
    is_role_name,
)
from kernel.verification._records import (
    Producer,
    Rejection,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
    receipt_id_of,
    request_id_of,
    status_for,
)
from kernel.verification._vocabulary import (
    EXECUTOR_AUTHORITY,
    STAGE_AUTHORITY,
    STAGE_REQUESTERS,
    Activation,
    Authority,
    BackendVerdict,
    ClaimLevel,
    EvidenceTier,
    OperationKind,
    RejectionCode,
    Status,
)

__all__ = ["OUTPUT_FIELDS", "plan_verification", "seal_verification"]

# The backend output document: exactly these keys. ``evidence`` is any JSON.
OUTPUT_FIELDS: Final = (
    "backend",
    "backend_version",
    "candidate",
    "claim_id",
    "detail",
    "evidence",
    "evidence_tier",
    "verdict",
)

_BLANK: Final = UNSEALED_ID


def _reject(code: RejectionCode, message: str, detail: str | None = None) -> Rejection:
    return Rejection(code=code, message=message, backend_detail=detail)


def _check_spec(spec: VerificationSpec) -> Rejection | None:
    """Planning rules 1-9 over a spec; ``None`` when the spec may be planned."""
    if spec.requested_by not in STAGE_REQUESTERS[spec.stage]:
        return _reject(
            RejectionCode.REQUESTER_NOT_PERMITTED,
            f"{spec.requested_by.value} may not request a run at stage {spec.stage.value}",
        )
    if spec.authority is not STAGE_AUTHORITY[spec.stage]:
        return _reject(
            RejectionCode.AUTHORITY_STAGE_MISMATCH,
            f"stage {spec.stage.value} carries {STAGE_AUTHORITY[spec.stage].value} authority, "
            f"not {spec.authority.value}",
        )
    if spec.activation is Activation.INACTIVE:
        return _reject(
            RejectionCode.BACKEND_NOT_ACTIVATED,
            f"backend {spec.backend} is inactive for claim {spec.claim.claim_id}; "
            "a request binds a selected or required backend",
        )
    if spec.expected_result not in (Status.VERIFIED, Status.REFUTED):
        return _reject(
            RejectionCode.EXPECTED_RESULT_INVALID,
            f"expected result {spec.expected_result.value} is not VERIFIED or REFUTED",
        )
    if is_role_name(spec.backend):
        return _reject(
            RejectionCode.BACKEND_IS_A_ROLE,
            f"{spec.backend!r} names a role; a backend is never a role",
        )
    entry = BACKEND_CATALOG.entry(spec.backend)
    if entry is None:
        return _reject(
            RejectionCode.BACKEND_UNKNOWN, f"backend {spec.backend!r} is not in the catalog"
        )
    operation = entry.operation(spec.command_configuration.operation)
    if operation is None:
        return _reject(
            RejectionCode.BACKEND_OPERATION_UNSUPPORTED,
            f"backend {entry.backend} lists no operation {spec.command_configuration.operation!r}",
        )
    match operation.kind:
        case OperationKind.GENERATIVE:
            return _reject(
                RejectionCode.GENERATIVE_BACKEND_OPERATION_DENIED,
                f"{entry.backend} {operation.name} proposes claims; verifying its own "
                "proposals is circular",
            )
        case OperationKind.CHECK:
            pass
        case _:
            assert_never(operation.kind)
    if spec.backend == REVERIFY_BACKEND and spec.claim.level is not ClaimLevel.BINARY:
        return _reject(
            RejectionCode.REVERIFY_CLAIM_NOT_APPLICABLE,
            f"reverify applies to binary-level claims, not {spec.claim.level.value}",
        )
    return None


def _program(backend: str) -> str:
    entry = BACKEND_CATALOG.entry(backend)
    assert entry is not None, "only called after _check_spec accepted the backend"
    return entry.program


def plan_verification(spec: VerificationSpec) -> VerificationPlan | Rejection:
    """Validate ``spec`` and return the request plus its argv, or a typed rejection.

    Nothing is defaulted: every spec field is required by the record itself,
    and the planning rules in this module's docstring refuse the rest.
    """
    refused = _check_spec(spec)
    if refused is not None:
        return refused
    request = VerificationRequest(
        request_id=_BLANK,
        candidate=spec.candidate,
        claim=spec.claim,
        backend=spec.backend,
        stage=spec.stage,
        authority=spec.authority,
        expected_result=spec.expected_result,
        command_configuration=spec.command_configuration,
        activation=spec.activation,
        requested_by=spec.requested_by,
    )
    request = attrs.evolve(request, request_id=request_id_of(request))
    argv = argv_for(_program(spec.backend), spec.candidate, spec.claim, spec.command_configuration)
    return VerificationPlan(request=request, argv=argv)


def _spec_of(request: VerificationRequest) -> VerificationSpec:
    return VerificationSpec(
        candidate=request.candidate,
        claim=request.claim,
        backend=request.backend,
        stage=request.stage,
        authority=request.authority,
        expected_result=request.expected_result,
        command_configuration=request.command_configuration,
        activation=request.activation,
        requested_by=request.requested_by,
    )


def _check_plan(plan: VerificationPlan) -> Rejection | None:
    request = plan.request
    if request.request_id != request_id_of(request):
        return _reject(RejectionCode.PLAN_TAMPERED, "request_id does not recompute")
    refused = _check_spec(_spec_of(request))
    if refused is not None:
        return refused
    expected = argv_for(
        _program(request.backend),
        request.candidate,
        request.claim,
        request.command_configuration,
    )
    if plan.argv != expected:
        return _reject(RejectionCode.PLAN_TAMPERED, "argv is not the one planned for the request")
    return None


def _check_producer(request: VerificationRequest, producer: Producer) -> Rejection | None:
    produced = EXECUTOR_AUTHORITY.get(producer.role)
    if produced is None:
        return _reject(
            RejectionCode.PRODUCER_ROLE_CANNOT_EXECUTE,
            f"{producer.role.value} never executes a backend",
        )
    if produced is not request.authority:
        return _reject(
            RejectionCode.AUTHORITY_PRODUCER_MISMATCH,
            f"the plan carries {request.authority.value} authority but a run by "
            f"{producer.role.value} is {produced.value}",
        )
    match request.authority:
        case Authority.ASSURANCE:
            if producer.session == request.candidate.author_session:
                return _reject(
                    RejectionCode.ASSURANCE_NOT_INDEPENDENT,
                    f"session {producer.session!r} authored the candidate; assurance needs "
                    "an independent session",
                )
        case Authority.DIAGNOSTIC:
            pass
        case _:
            assert_never(request.authority)
    return None


def _malformed(message: str) -> Rejection:
    return _reject(RejectionCode.BACKEND_OUTPUT_MALFORMED, message)


def _read_output(
    output: JsonValue,
) -> tuple[Mapping[str, JsonValue], BackendVerdict, EvidenceTier] | Rejection:
    try:
        check_domain(output)
    except IdentityError as exc:
        return _malformed(f"output is outside canonical JSON: {exc}")
    if not isinstance(output, Mapping):
        return _malformed("output is not a JSON object")
    keys = sorted(output)
    if keys != sorted(OUTPUT_FIELDS):
        missing = sorted(set(OUTPUT_FIELDS) - set(keys))
        extra = sorted(set(keys) - set(OUTPUT_FIELDS))
        return _malformed(f"output keys differ: missing {missing}, unexpected {extra}")
    for key in OUTPUT_FIELDS:
        if key != "evidence" and type(output[key]) is not str:
            return _malformed(f"output field {key} is not a string")
    version = output["backend_version"]
    assert isinstance(version, str)
    if version == "" or "\x00" in version:
        return _malformed("output field backend_version is empty or contains NUL")
    try:
        verdict = BackendVerdict(output["verdict"])
        tier = EvidenceTier(output["evidence_tier"])
    except ValueError as exc:
        return _malformed(str(exc))
    return output, verdict, tier


def seal_verification(
    plan: VerificationPlan, output: JsonValue, produced_by: Producer
) -> VerificationReceipt | Rejection:
    """Seal the backend ``output`` of running ``plan`` into a receipt, or reject it.

    ``backend_version`` is read from the output; ``evidence_digest`` is the
    SHA-256 of the canonical JSON of the whole output; ``authority``, the
    bindings and ``command_configuration`` are the plan's own values. Derived
    evidence seals INCONCLUSIVE with the raw verdict kept. A malformed claim
    is a ``claim_malformed`` rejection with the backend's detail, never a
    receipt.
    """
    refused = _check_plan(plan) or _check_producer(plan.request, produced_by)
    if refused is not None:
        return refused
    read = _read_output(output)
    if isinstance(read, Rejection):
        return read
    document, verdict, tier = read
    request = plan.request
    for key, want in (
        ("backend", request.backend),
        ("candidate", request.candidate.digest),
        ("claim_id", request.claim.claim_id),
    ):
        if document[key] != want:
            return _reject(
                RejectionCode.BACKEND_OUTPUT_MISMATCH,
                f"output {key} {document[key]!r} is not the plan's {want!r}",
            )
    detail = document["detail"]
    assert isinstance(detail, str)
    if verdict is BackendVerdict.CLAIM_MALFORMED:
        return _reject(
            RejectionCode.CLAIM_MALFORMED,
            f"{request.backend} could not parse claim {request.claim.claim_id}",
            detail,
        )
    version = document["backend_version"]
    assert isinstance(version, str)
    receipt = VerificationReceipt(
        receipt_id=_BLANK,
        request_id=request.request_id,
        candidate=request.candidate,
        claim=request.claim,
        backend=request.backend,
        backend_version=version,
        command_configuration=request.command_configuration,
        evidence_digest=digest(output),
        stage=request.stage,
        authority=request.authority,
        status=status_for(verdict, tier),
        evidence_tier=tier,
        backend_verdict=verdict,
        produced_by=produced_by,
    )
    return attrs.evolve(receipt, receipt_id=receipt_id_of(receipt))
