"""Builders, reference payloads and Hypothesis strategies for the verification tests.

The payload shapes here are written from the documented records and hashed
with ``tests.support.reference`` (``json`` + ``hashlib``), never through
``kernel.identity``, so a change in what the package hashes is caught by the
tests instead of being mirrored by them.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from kernel.verification import (
    Activation,
    Authority,
    BackendVerdict,
    Candidate,
    Claim,
    ClaimLevel,
    CommandConfiguration,
    EvidenceTier,
    Producer,
    Rejection,
    Role,
    Setting,
    Stage,
    Status,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
    plan_verification,
    seal_verification,
)
from tests.support.reference import sha

AUTHOR = "session-author"
TESTER = "session-tester"
CANDIDATE_DIGEST = "c" * 64
PRIOR_DIGEST = "b" * 64


def candidate_json(c: Candidate) -> dict[str, Any]:
    return {"digest": c.digest, "author_session": c.author_session}


def claim_json(c: Claim) -> dict[str, Any]:
    return {"claim_id": c.claim_id, "level": c.level.value, "statement": c.statement}


def config_json(c: CommandConfiguration) -> dict[str, Any]:
    return {
        "operation": c.operation,
        "settings": [{"name": s.name, "value": s.value} for s in c.settings],
        "arguments": list(c.arguments),
    }


def request_json_without_id(r: VerificationRequest) -> dict[str, Any]:
    return {
        "candidate": candidate_json(r.candidate),
        "claim": claim_json(r.claim),
        "backend": r.backend,
        "stage": r.stage.value,
        "authority": r.authority.value,
        "expected_result": r.expected_result.value,
        "command_configuration": config_json(r.command_configuration),
        "activation": r.activation.value,
        "requested_by": r.requested_by.value,
    }


def receipt_json_without_id(r: VerificationReceipt) -> dict[str, Any]:
    return {
        "request_id": r.request_id,
        "candidate": candidate_json(r.candidate),
        "claim": claim_json(r.claim),
        "backend": r.backend,
        "backend_version": r.backend_version,
        "command_configuration": config_json(r.command_configuration),
        "evidence_digest": r.evidence_digest,
        "stage": r.stage.value,
        "authority": r.authority.value,
        "status": r.status.value,
        "evidence_tier": r.evidence_tier.value,
        "backend_verdict": r.backend_verdict.value,
        "produced_by": {"role": r.produced_by.role.value, "session": r.produced_by.session},
    }


def expected_status(verdict: BackendVerdict, tier: EvidenceTier) -> Status:
    """The seed's sealing rule, restated: derived evidence is never more than INCONCLUSIVE."""
    if tier is EvidenceTier.DERIVED:
        return Status.INCONCLUSIVE
    return {
        BackendVerdict.VERIFIED: Status.VERIFIED,
        BackendVerdict.REFUTED: Status.REFUTED,
        BackendVerdict.UNKNOWN: Status.INCONCLUSIVE,
        BackendVerdict.ERROR: Status.ERROR,
    }[verdict]


def resealed_request(r: VerificationRequest, **changes: Any) -> VerificationRequest:
    """``r`` with ``changes`` and a request_id recomputed by the test's own hasher."""
    changed = attrs.evolve(r, **changes)
    return attrs.evolve(changed, request_id=sha(request_json_without_id(changed)))


def resealed_receipt(r: VerificationReceipt, **changes: Any) -> VerificationReceipt:
    """``r`` with ``changes`` and a receipt_id recomputed by the test's own hasher."""
    changed = attrs.evolve(r, **changes)
    return attrs.evolve(changed, receipt_id=sha(receipt_json_without_id(changed)))


# --- builders ------------------------------------------------------------------


def candidate(digest: str = CANDIDATE_DIGEST, author: str = AUTHOR) -> Candidate:
    return Candidate(digest=digest, author_session=author)


def binary_claim(claim_id: str = "claim-exit-code") -> Claim:
    return Claim(claim_id=claim_id, level=ClaimLevel.BINARY, statement="main returns 0")


def configuration(operation: str = "verify-claim") -> CommandConfiguration:
    return CommandConfiguration(
        operation=operation,
        settings=(Setting("timeout", "30"), Setting("unwind", "8")),
        arguments=("build/app.bin",),
    )


_STAGE_ROLE = {
    Stage.IMPLEMENTATION: (Authority.DIAGNOSTIC, Role.IMPLEMENTER),
    Stage.INTEGRATION: (Authority.DIAGNOSTIC, Role.INTEGRATION_ENGINEER),
    Stage.ASSURANCE: (Authority.ASSURANCE, Role.TEST_ENGINEER),
    Stage.ADJUDICATION: (Authority.ASSURANCE, Role.REVIEWER),
    Stage.POST_REPAIR_CLOSURE: (Authority.ASSURANCE, Role.TEST_ENGINEER),
}


def spec(stage: Stage = Stage.ASSURANCE, **changes: Any) -> VerificationSpec:
    authority, requester = _STAGE_ROLE[stage]
    fields: dict[str, Any] = {
        "candidate": candidate(),
        "claim": binary_claim(),
        "backend": "reverify",
        "stage": stage,
        "authority": authority,
        "expected_result": Status.VERIFIED,
        "command_configuration": configuration(),
        "activation": Activation.REQUIRED,
        "requested_by": requester,
    }
    fields.update(changes)
    return VerificationSpec(**fields)


def plan(stage: Stage = Stage.ASSURANCE, **changes: Any) -> VerificationPlan:
    outcome = plan_verification(spec(stage, **changes))
    assert isinstance(outcome, VerificationPlan), outcome
    return outcome


def output(p: VerificationPlan, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "backend": p.request.backend,
        "backend_version": "reverify 2.4.1",
        "candidate": p.request.candidate.digest,
        "claim_id": p.request.claim.claim_id,
        "detail": "",
        "evidence": {"trace": ["entry", "exit 0"], "steps": 2},
        "evidence_tier": "observed",
        "verdict": "verified",
    }
    doc.update(changes)
    return doc


def tester(session: str = TESTER) -> Producer:
    return Producer(role=Role.TEST_ENGINEER, session=session)


def seal(
    p: VerificationPlan, producer: Producer | None = None, **output_changes: Any
) -> VerificationReceipt:
    outcome = seal_verification(p, output(p, **output_changes), producer or tester())
    assert isinstance(outcome, VerificationReceipt), outcome
    return outcome


def rejection(outcome: object) -> Rejection:
    assert isinstance(outcome, Rejection), outcome
    return outcome


# --- strategies ------------------------------------------------------------------

_texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=12,
)

digests = st.sampled_from(["a" * 64, "b" * 64, "c" * 64, "d" * 64])
sessions = st.sampled_from([AUTHOR, TESTER, "session-other"])
candidates = st.builds(Candidate, digest=digests, author_session=sessions)
claims = st.builds(
    Claim,
    claim_id=st.sampled_from(["claim-1", "claim-2"]),
    level=st.sampled_from(ClaimLevel),
    statement=st.sampled_from(["x > 0", "main returns 0"]),
)
setting_names = st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True)


@st.composite
def settings_tuples(draw: st.DrawFn) -> tuple[Setting, ...]:
    names = draw(st.lists(setting_names, unique=True, max_size=3))
    return tuple(Setting(name, draw(_texts)) for name in sorted(names))


def configurations(operations: st.SearchStrategy[str]) -> st.SearchStrategy[CommandConfiguration]:
    return st.builds(
        CommandConfiguration,
        operation=operations,
        settings=settings_tuples(),
        arguments=st.lists(
            st.text(
                alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
                max_size=8,
            ),
            max_size=3,
        ).map(tuple),
    )


_CHECKS = {"reverify": ["verify-claim", "replay-evidence"], "cbmc": ["check-property"]}


@st.composite
def plannable_specs(draw: st.DrawFn, stages: tuple[Stage, ...] = tuple(Stage)) -> VerificationSpec:
    """Specs every planning rule accepts, across ``stages`` and both backends."""
    stage = draw(st.sampled_from(stages))
    authority, requester = _STAGE_ROLE[stage]
    if stage is Stage.IMPLEMENTATION:
        requester = draw(st.sampled_from([Role.IMPLEMENTER, Role.LIGHT_IMPLEMENTER]))
    backend = draw(st.sampled_from(sorted(_CHECKS)))
    claim = draw(claims)
    if backend == "reverify":
        claim = attrs.evolve(claim, level=ClaimLevel.BINARY)
    return VerificationSpec(
        candidate=draw(candidates),
        claim=claim,
        backend=backend,
        stage=stage,
        authority=authority,
        expected_result=draw(st.sampled_from([Status.VERIFIED, Status.REFUTED])),
        command_configuration=draw(configurations(st.sampled_from(_CHECKS[backend]))),
        activation=draw(st.sampled_from([Activation.SELECTED, Activation.REQUIRED])),
        requested_by=requester,
    )


def executor_for(authority: Authority) -> st.SearchStrategy[Role]:
    if authority is Authority.ASSURANCE:
        return st.just(Role.TEST_ENGINEER)
    return st.sampled_from([Role.IMPLEMENTER, Role.LIGHT_IMPLEMENTER, Role.INTEGRATION_ENGINEER])


json_leaves = st.none() | st.booleans() | st.integers() | _texts
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def outputs_for(draw: st.DrawFn, p: VerificationPlan) -> dict[str, Any]:
    """Well-formed backend outputs for ``p`` (never ``claim_malformed``)."""
    return output(
        p,
        backend_version=draw(_texts),
        detail=draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=8)),
        evidence=draw(json_values),
        evidence_tier=draw(st.sampled_from([t.value for t in EvidenceTier])),
        verdict=draw(
            st.sampled_from(
                [v.value for v in BackendVerdict if v is not BackendVerdict.CLAIM_MALFORMED]
            )
        ),
    )
