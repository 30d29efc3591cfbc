"""The arithmetic organ's external obligation ``arithmetic.target_certified`` (pure).

Theory of operation (ADR-0005; ADR-0002 "Evidence gathered outside the pure
core"; ADR-0003): an independent SMT checker confirms that the candidate's
bindings and relations give each answer target exactly one value. This module
never runs anything. It

1. writes the SMT-LIB 2 problem (``certification_problem``) whose answer is
   ``unsat`` iff every answer target has exactly one value;
2. names the assurance run the orchestrator must plan for it
   (``certification_spec``: backend ``vkit-smt``, operation ``check-smt``,
   settings ``check-content-digest``, ``check-digest`` and ``problem-digest``);
3. judges, in ``prove_target_certified``, the request and the sealed
   verification receipt the orchestrator hands back as ``ProofEvidence``
   (``CERTIFICATION_MEDIA_TYPE``, document ``kernel.serde.dumps`` of a
   ``CertificationEvidence``), through the verification adapter's own
   assurance gate.

Rules:

- The problem is deterministic ASCII text with LF line endings ending in
  ``(check-sat)\\n``. Quantities are numbered by first appearance (binding
  names in frame order, then each relation's result and operands, then
  targets) and declared twice, as ``q<i>_1`` and ``q<i>_2``; frame names
  never reach the text, so no name can break the syntax. Exact division
  ``r = n / d`` is ``(= (* r d) n)`` with ``d`` non-zero.
- A frame that is not runnable under ``assess`` (or has no canonical
  identity) has no problem (``None``).
- Evidence items of another media type (or, when called directly, for another
  obligation ref) are not this authority's to judge and are ignored. Without
  any certification item the obligation is UNAVAILABLE
  (``no_certification_evidence``). Otherwise every certification item is
  judged, in order, and all of them must be eligible (fail closed): any
  refusal refuses the obligation with every item's reasons, each once, in
  order. If all are eligible the obligation closes with
  ``certified:<certification digest>`` per item, each once (ADR-0019): the
  digest of what was certified by content (the candidate, the claim, the
  problem digest and the check's content digest), so the replay result's id
  binds each certification through the proof outcome id, and is the same
  wherever the pinned tools are installed. The receipt, which binds the
  check digest and so the tools' absolute paths (seed 003), is checked
  here and kept for the audit, but its id is not an outcome's.
- Checks per item, in order (first failure wins): the document structures
  strictly; the request and receipt ids recompute; the request is for
  ``TARGET_CERTIFIED`` with this module's claim; it runs ``check-smt`` on
  ``vkit-smt`` with exactly the settings ``check-content-digest`` and
  ``check-digest`` (digests) and ``problem-digest`` and no arguments, and the
  receipt's backend version is that check digest; its ``problem-digest`` is
  the digest of this candidate's problem; its terms are the certification
  spec's (assurance stage and authority, VERIFIED expected, required,
  requested by a Test Engineer); then ``evaluate_gate`` against the current
  candidate (author session from the request, empty repair history) must be
  eligible.
- The authority never raises and never reports a computed value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from enum import Enum
from typing import Final, assert_never, final

import attrs

from kernel.frames import ProblemFrame, Relation
from kernel.identity import IdentityError, check_domain, digest, int_text, is_digest
from kernel.organs.arithmetic import Operator, assess
from kernel.replay import (
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofOutcome,
    ProofStatus,
    seal_proof_outcome,
)
from kernel.serde import SerdeError, loads
from kernel.verification import (
    Activation,
    Authority,
    Candidate,
    Claim,
    ClaimLevel,
    CommandConfiguration,
    RepairHistory,
    Role,
    Setting,
    Stage,
    Status,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
    evaluate_gate,
    receipt_id_of,
    request_id_of,
)

__all__ = [
    "CERTIFICATION_AUTHORITY_VERSION",
    "CERTIFICATION_BACKEND",
    "CERTIFICATION_CLAIM",
    "CERTIFICATION_MEDIA_TYPE",
    "CERTIFICATION_OPERATION",
    "CERTIFICATION_STATEMENT",
    "CERTIFIED_PREFIX",
    "CHECK_CONTENT_SETTING",
    "CHECK_DIGEST_SETTING",
    "PROBLEM_DIGEST_SETTING",
    "TARGET_CERTIFIED",
    "TARGET_CERTIFIED_AUTHORITY",
    "CertificationEvidence",
    "CertificationReason",
    "certification_digest",
    "certification_problem",
    "certification_spec",
    "problem_digest",
    "prove_target_certified",
]

TARGET_CERTIFIED: Final = "arithmetic.target_certified"
CERTIFICATION_AUTHORITY_VERSION: Final = "v1"
CERTIFICATION_MEDIA_TYPE: Final = "application/vnd.replay-kernel.certification+json"
CERTIFICATION_BACKEND: Final = "vkit-smt"
CERTIFICATION_OPERATION: Final = "check-smt"
CERTIFICATION_STATEMENT: Final = (
    "an independent SMT checker confirms that the candidate's bindings and relations "
    "give each answer target exactly one value"
)
CERTIFICATION_CLAIM: Final = Claim(
    claim_id=TARGET_CERTIFIED, level=ClaimLevel.SOURCE, statement=CERTIFICATION_STATEMENT
)
# Setting names follow the verification records' ``[a-z][a-z0-9-]*`` rule.
CHECK_DIGEST_SETTING: Final = "check-digest"
CHECK_CONTENT_SETTING: Final = "check-content-digest"
CERTIFIED_PREFIX: Final = "certified:"
_CERTIFICATION_DIGEST_VERSION: Final = 1
PROBLEM_DIGEST_SETTING: Final = "problem-digest"
_HEADER: Final = "; replay-kernel arithmetic.target_certified v1"


class CertificationReason(Enum):
    """Stable reason codes of ``prove_target_certified`` (besides ``gate:``/``certified:``)."""

    NO_EVIDENCE = "no_certification_evidence"
    MALFORMED = "certification_evidence_malformed"
    FRAME_NOT_RUNNABLE = "certification_frame_not_runnable"
    ID_MISMATCH = "certification_id_mismatch"
    NOT_FOR_THIS_CLAIM = "certification_not_for_this_claim"
    NOT_FOR_THIS_CHECK = "certification_not_for_this_check"
    NOT_FOR_THIS_PROBLEM = "certification_not_for_this_problem"
    TERMS_MISMATCH = "certification_terms_mismatch"


@final
@attrs.frozen
class CertificationEvidence:
    """The planned request and the receipt sealed from the external check's output."""

    request: VerificationRequest = attrs.field(
        validator=attrs.validators.instance_of(VerificationRequest)
    )
    receipt: VerificationReceipt = attrs.field(
        validator=attrs.validators.instance_of(VerificationReceipt)
    )


# --- the SMT problem --------------------------------------------------------------


def problem_digest(text: str) -> str:
    """Lowercase SHA-256 hex of the UTF-8 bytes of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _runnable(frame: ProblemFrame) -> bool:
    try:
        check_domain(frame.payload())
    except IdentityError:
        return False
    return assess(frame).runnable


def _numbering(frame: ProblemFrame) -> dict[str, int]:
    names = [b.name for b in frame.bindings]
    for relation in frame.relations:
        names.append(relation.result)
        names.extend(relation.operands)
    names.extend(t.name for t in frame.targets)
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def _int(value: int) -> str:
    # int_text: the same text whatever the interpreter's int/str limit.
    return int_text(value) if value >= 0 else f"(- {int_text(-value)})"


def _relation(relation: Relation, sym: dict[str, str]) -> tuple[str, ...]:
    result = sym[relation.result]
    args = [sym[o] for o in relation.operands]
    operator = Operator(relation.operator)
    match operator:
        case Operator.ADD:
            return (f"(= {result} (+ {' '.join(args)}))",)
        case Operator.SUB:
            return (f"(= {result} (- {args[0]} {args[1]}))",)
        case Operator.MUL:
            return (f"(= {result} (* {' '.join(args)}))",)
        case Operator.DIV:
            dividend, divisor = args
            return (f"(distinct {divisor} 0)", f"(= (* {result} {divisor}) {dividend})")
        case _:
            assert_never(operator)


def certification_problem(frame: ProblemFrame) -> str | None:
    """The SMT-LIB 2 problem that is ``unsat`` iff every answer target has one value.

    Two copies of every quantity satisfy every binding and relation; the last
    assertion asks for a target on which they differ. Returns ``None`` for a
    frame that is not runnable under ``assess`` (or has no canonical identity).
    """
    if not _runnable(frame):
        return None
    numbering = _numbering(frame)
    lines = [_HEADER, "(set-logic QF_NIA)"]
    for copy in (1, 2):
        sym = {name: f"q{i}_{copy}" for name, i in numbering.items()}
        lines += [f"(declare-const {s} Int)" for s in sym.values()]
        lines += [f"(assert (= {sym[b.name]} {_int(b.value)}))" for b in frame.bindings]
        lines += [f"(assert {a})" for r in frame.relations for a in _relation(r, sym)]
    targets = [numbering[name] for name in dict.fromkeys(t.name for t in frame.targets)]
    differ = [f"(distinct q{i}_1 q{i}_2)" for i in targets]
    lines.append(
        f"(assert {differ[0]})" if len(differ) == 1 else f"(assert (or {' '.join(differ)}))"
    )
    lines.append("(check-sat)")
    return "\n".join(lines) + "\n"


# --- the assurance spec -------------------------------------------------------------


def certification_digest(
    *, candidate_digest: str, problem_sha: str, check_content_digest: str
) -> str:
    """The digest a closed certification is named by: what was certified, by content.

    Canonical digest of ``{"candidate", "certification_version", "check_content_digest",
    "claim_id", "problem_digest", "status": "verified"}`` (ADR-0019); no path,
    no session, no run record enters it.
    """
    return digest(
        {
            "candidate": candidate_digest,
            "certification_version": _CERTIFICATION_DIGEST_VERSION,
            "check_content_digest": check_content_digest,
            "claim_id": TARGET_CERTIFIED,
            "problem_digest": problem_sha,
            "status": "verified",
        }
    )


def certification_spec(
    *,
    candidate_digest: str,
    author_session: str,
    problem: str,
    check_digest: str,
    check_content_digest: str,
) -> VerificationSpec:
    """The assurance run the orchestrator plans for ``problem`` on this candidate.

    ``check_digest`` is the pinned entry's seed 003 check digest (absolute
    paths included), ``check_content_digest`` its content digest (ADR-0019).
    Raises ``ValueError`` when either is not a SHA-256 hex digest (or,
    through the records, when the candidate fields are invalid).
    """
    if not is_digest(check_digest):
        raise ValueError("check_digest must be a lowercase hex SHA-256 digest")
    if not is_digest(check_content_digest):
        raise ValueError("check_content_digest must be a lowercase hex SHA-256 digest")
    if type(problem) is not str:
        raise TypeError("problem must be str")
    return VerificationSpec(
        candidate=Candidate(digest=candidate_digest, author_session=author_session),
        claim=CERTIFICATION_CLAIM,
        backend=CERTIFICATION_BACKEND,
        stage=Stage.ASSURANCE,
        authority=Authority.ASSURANCE,
        expected_result=Status.VERIFIED,
        command_configuration=_configuration(
            problem_digest(problem), check_digest, check_content_digest
        ),
        activation=Activation.REQUIRED,
        requested_by=Role.TEST_ENGINEER,
    )


def _configuration(
    problem_sha: str, check_digest: str, check_content_digest: str
) -> CommandConfiguration:
    return CommandConfiguration(
        operation=CERTIFICATION_OPERATION,
        settings=(
            Setting(CHECK_CONTENT_SETTING, check_content_digest),
            Setting(CHECK_DIGEST_SETTING, check_digest),
            Setting(PROBLEM_DIGEST_SETTING, problem_sha),
        ),
        arguments=(),
    )


# --- the proof authority --------------------------------------------------------------


def _judge(item: ProofEvidence, problem: str, context: ProofContext) -> str:
    """One certification item's single reason code (``certified:<digest>`` when eligible)."""
    try:
        evidence = loads(item.document, CertificationEvidence)
    except SerdeError:
        return CertificationReason.MALFORMED.value
    request, receipt = evidence.request, evidence.receipt
    if request.request_id != request_id_of(request) or receipt.receipt_id != receipt_id_of(receipt):
        return CertificationReason.ID_MISMATCH.value
    if request.claim != CERTIFICATION_CLAIM:
        return CertificationReason.NOT_FOR_THIS_CLAIM.value
    configuration = request.command_configuration
    settings = {s.name: s.value for s in configuration.settings}
    check = settings.get(CHECK_DIGEST_SETTING, "")
    content = settings.get(CHECK_CONTENT_SETTING, "")
    if (
        request.backend != CERTIFICATION_BACKEND
        or configuration.operation != CERTIFICATION_OPERATION
        or sorted(settings)
        != [CHECK_CONTENT_SETTING, CHECK_DIGEST_SETTING, PROBLEM_DIGEST_SETTING]
        or configuration.arguments
        or not is_digest(check)
        or not is_digest(content)
        or receipt.backend_version != check
    ):
        return CertificationReason.NOT_FOR_THIS_CHECK.value
    if settings[PROBLEM_DIGEST_SETTING] != problem_digest(problem):
        return CertificationReason.NOT_FOR_THIS_PROBLEM.value
    expected = certification_spec(
        candidate_digest=context.candidate_digest,
        author_session=request.candidate.author_session,
        problem=problem,
        check_digest=check,
        check_content_digest=content,
    )
    if (
        request.stage,
        request.authority,
        request.expected_result,
        request.activation,
        request.requested_by,
    ) != (
        expected.stage,
        expected.authority,
        expected.expected_result,
        expected.activation,
        expected.requested_by,
    ):
        return CertificationReason.TERMS_MISMATCH.value
    decision = evaluate_gate(receipt, request, expected.candidate, RepairHistory((), ()))
    if decision.reason is not None:
        return f"gate:{decision.reason.value}"
    return CERTIFIED_PREFIX + certification_digest(
        candidate_digest=context.candidate_digest,
        problem_sha=problem_digest(problem),
        check_content_digest=content,
    )


def _unique(codes: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(codes))


def prove_target_certified(context: ProofContext) -> ProofOutcome:
    """``arithmetic.target_certified``: a sealed SMT certification receipt closes it.

    UNAVAILABLE (``no_certification_evidence``) without a certification item;
    REFUSED when any item fails a check of the module docstring (its code, or
    ``gate:<GateReason>``), or when the frame has no problem
    (``certification_frame_not_runnable``); CLOSED with ``certified:<digest>``
    per distinct certification otherwise. Evidence spans are always the
    frame's binding spans, in order.
    """
    frame = context.candidate_frame
    items = [
        e
        for e in context.evidence
        if e.media_type == CERTIFICATION_MEDIA_TYPE and e.obligation_ref == context.obligation_ref
    ]
    if not items:
        return _seal(context, ProofStatus.UNAVAILABLE, (CertificationReason.NO_EVIDENCE.value,))
    problem = certification_problem(frame)
    if problem is None:
        return _seal(context, ProofStatus.REFUSED, (CertificationReason.FRAME_NOT_RUNNABLE.value,))
    codes = [_judge(item, problem, context) for item in items]
    refused = [c for c in codes if not c.startswith(CERTIFIED_PREFIX)]
    if refused:
        return _seal(context, ProofStatus.REFUSED, _unique(refused))
    return _seal(context, ProofStatus.CLOSED, _unique(codes))


def _seal(
    context: ProofContext,
    status: ProofStatus,
    codes: tuple[str, ...],
) -> ProofOutcome:
    match status:
        case ProofStatus.CLOSED:
            prose = "closed: an independent SMT check certified every target"
        case ProofStatus.REFUSED:
            prose = f"refused: {len(codes)} reason(s)"
        case ProofStatus.UNAVAILABLE:
            prose = "unavailable: no certification evidence was gathered"
        case _:
            assert_never(status)
    return seal_proof_outcome(
        context=context,
        authority_id=TARGET_CERTIFIED,
        authority_version=CERTIFICATION_AUTHORITY_VERSION,
        status=status,
        reason_codes=codes,
        evidence_spans=tuple(b.span for b in context.candidate_frame.bindings),
        explanation=prose,
    )


TARGET_CERTIFIED_AUTHORITY: Final = ProofAuthority(
    TARGET_CERTIFIED, CERTIFICATION_AUTHORITY_VERSION, prove_target_certified
)
