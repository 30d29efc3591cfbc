"""Authority-output guards: what an authority returned is judged before it is trusted.

Rules (ADR-0229 §9, §10, §16; ADR 0011 for the guard style):

- Each guard calls at most one authority, once, and returns its output only
  when it is exactly the expected record, valid, in the identity domain,
  bound to this candidate and obligation, signed by the authority that was
  asked, and self-consistent; otherwise a ``Rejection``.
- An exception from an authority is caught here and becomes a rejection
  (adapter failure), never a verdict and never a traceback.
"""

from __future__ import annotations

from kernel.frames import ProblemFrame, frame_digest
from kernel.identity import (
    IdentityError,
    canonical_json,
    check_domain,
    sha256_hex,
    validated_payloads,
)
from kernel.replay._authority import (
    ContractAuthority,
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofOutcome,
)
from kernel.replay._facts import validate_deep
from kernel.replay._reasons import ReasonCode, Rejection
from kernel.upstream import ContractAssessment

__all__ = ["contract_outcome_of", "evidence_admissible", "proof_outcome_of"]

R = ReasonCode


def _judged_id(outcome: ContractAssessment | ProofOutcome) -> str:
    """The recomputed id of an authority's output whose validators just held.

    Raises ``IdentityError`` exactly as ``check_domain([payload,
    explanation])`` would: the explanation is outside the identity but may be
    quoted in the sealed outcome, so it too must lie in the domain (no lone
    surrogate). One encoding serves as the domain check of the payload and as
    its id (the id functions are ``digest(payload)``): the validators just
    held, so the payload path applies (ADR-0007). On any refusal the
    two-part check runs again, so the error (code, path, message) is the one
    it always was.
    """
    with validated_payloads():
        payload = outcome.payload()
        try:
            encoded = canonical_json(payload)
            check_domain(outcome.explanation)
        except IdentityError:
            check_domain([payload, outcome.explanation])
            raise  # not reached: the check refuses whatever the encoding refused
    return sha256_hex(encoded)


def contract_outcome_of(
    authority: ContractAuthority,
    frame: ProblemFrame,
    organ: str,
    frame_digest_before: str | None = None,
) -> ContractAssessment | Rejection:
    """§9: run the contract authority once over ``frame`` and judge what it returned.

    ``frame_digest_before`` is the frame's digest recomputed by validation
    before the authority held it (``None``: digest the frame now, with the
    domain scan). The assessment must bind to the frame as validated.
    """
    try:
        outcome: object = authority.assess(frame)
    except Exception as exc:  # any failure of the authority is adapter failure (§8)
        return Rejection(
            R.CONTRACT_AUTHORITY_RAISED, f"{authority.target} raised {type(exc).__name__}: {exc}"
        )
    if type(outcome) is not ContractAssessment:
        return Rejection(
            R.CONTRACT_OUTCOME_MALFORMED,
            f"{authority.target} returned {type(outcome).__name__}, not a ContractAssessment",
        )
    try:
        validate_deep(outcome)
        outcome_id = _judged_id(outcome)
    except (TypeError, ValueError) as exc:  # IdentityError is a ValueError
        return Rejection(R.CONTRACT_OUTCOME_MALFORMED, str(exc))
    if outcome.candidate_organ != organ:
        return Rejection(
            R.CONTRACT_OUTCOME_WRONG_ORGAN,
            f"{authority.target} assessed organ {outcome.candidate_organ!r}, not {organ!r}",
        )
    # The frame is not on the payload path: the authority held it, so unless
    # validation recomputed its digest before the authority ran, it is
    # digested with the domain scan, as before.
    bound = frame_digest_before if frame_digest_before is not None else frame_digest(frame)
    if outcome.problem_frame_digest != bound:
        return Rejection(
            R.CONTRACT_OUTCOME_NOT_BOUND,
            f"{authority.target} assessed another frame than the candidate",
        )
    if outcome_id != outcome.assessment_id:
        return Rejection(
            R.CONTRACT_OUTCOME_ID_INVALID,
            f"{authority.target} returned an assessment whose id does not reproduce",
        )
    # A runnable verdict that still lists blockers contradicts itself; it is
    # the authority failing, not a closure (and not a refusal to trust either).
    if outcome.runnable and (outcome.missing_bindings or outcome.unresolved_hazards):
        return Rejection(
            R.CONTRACT_OUTCOME_INCONSISTENT,
            f"{authority.target} called the candidate runnable while listing blockers",
        )
    return outcome


def evidence_admissible(
    evidence: object, refs: tuple[str, ...]
) -> tuple[ProofEvidence, ...] | Rejection:
    """§10: gathered evidence is well typed and names only declared obligations."""
    if type(evidence) is tuple and not evidence:  # the common case: nothing gathered
        return ()
    if not (
        isinstance(evidence, tuple | list) and all(type(item) is ProofEvidence for item in evidence)
    ):
        return Rejection(R.PROOF_EVIDENCE_MALFORMED, "evidence must be a sequence of ProofEvidence")
    items: tuple[ProofEvidence, ...] = tuple(evidence)
    try:
        for item in items:
            validate_deep(item)
    except (TypeError, ValueError) as exc:
        return Rejection(R.PROOF_EVIDENCE_MALFORMED, str(exc))
    # Evidence for an obligation the policy does not declare is a wiring
    # error upstream; it is refused rather than silently dropped.
    stray = sorted({item.obligation_ref for item in items} - set(refs))
    if stray:
        return Rejection(
            R.PROOF_EVIDENCE_UNEXPECTED, f"evidence names undeclared obligations {stray}"
        )
    return items


def proof_outcome_of(
    authority: ProofAuthority, context: ProofContext, ref: str, candidate_digest: str
) -> ProofOutcome | Rejection:
    """§10: run one proof authority over ``context`` and judge what it returned.

    ``ref`` and ``candidate_digest`` are passed apart from the context, so an
    authority that alters its context cannot move what it is judged against.
    """
    label = f"{authority.authority_id}@{authority.authority_version} for {ref!r}"
    try:
        outcome: object = authority.prove(context)
    except Exception as exc:  # any failure of the authority is adapter failure (§10)
        return Rejection(R.PROOF_AUTHORITY_RAISED, f"{label} raised {type(exc).__name__}: {exc}")
    if type(outcome) is not ProofOutcome:
        return Rejection(
            R.PROOF_OUTCOME_MALFORMED,
            f"{label} returned {type(outcome).__name__}, not a ProofOutcome",
        )
    try:
        validate_deep(outcome)
        outcome_id = _judged_id(outcome)
    except (TypeError, ValueError) as exc:  # IdentityError is a ValueError
        return Rejection(R.PROOF_OUTCOME_MALFORMED, str(exc))
    if not (outcome.obligation_ref == ref and outcome.candidate_digest == candidate_digest):
        return Rejection(
            R.PROOF_OUTCOME_NOT_BOUND,
            f"{label} returned an outcome for another obligation or candidate",
        )
    if (outcome.authority_id, outcome.authority_version) != (
        authority.authority_id,
        authority.authority_version,
    ):
        return Rejection(
            R.PROOF_OUTCOME_WRONG_AUTHORITY,
            f"{label} returned an outcome signed by another authority",
        )
    if outcome_id != outcome.proof_outcome_id:
        return Rejection(
            R.PROOF_OUTCOME_ID_INVALID, f"{label} returned an outcome whose id does not reproduce"
        )
    return outcome
