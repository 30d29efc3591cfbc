"""The replay classification state machine (ADR-0229 §6, §9-§11, §13, §16).

Theory of operation
-------------------

One candidate attempt goes in; one content-addressed outcome comes out.

    ReplayRequest --validate--> Validated --replay_contract--> ContractClosed
        --replay_proofs--> ProofsReplayed --dispose--> ReplayAdapterResult

Every arrow may instead end in a terminal ``ReplayAdapterRefusal``;
``replay_contract`` may also end in ``ReplayAdapterResult(contract_refused)``.
This module is the only one that builds states, results and refusals.

- ``validate`` runs the named guards of ``_guards.py`` in a fixed order,
  first failure wins, and calls no authority (§6): structure
  (``invalid_replay_input``, §16), replay and upstream policy versions and
  schema versions (§6 item 13), the identity chain recomputed from values
  (§6 items 1-10 and 15, §11), the statically allowlisted contract target
  (§6 item 11) and the organ's exact obligation list (§6 item 12).
- ``replay_contract`` runs the organ's contract authority over the exact
  reconstructed candidate frame (§9). Raising, a wrong return type, a wrong
  organ, an assessment of another frame or an id that does not reproduce is
  adapter failure (``contract_replay_unavailable``), never a verdict.
  ``runnable == False`` is ``contract_refused`` and proof replay never runs.
- ``replay_proofs`` discharges every declared obligation in order (§10); any
  authority failure refuses the whole attempt (``proof_replay_unavailable``),
  never a partial result. An empty policy closes only under an explicit
  ``NoProofObligationsApplicable`` declaration.
- ``dispose`` maps the typed proof outcomes to a disposition.
- A guard names a ``ReasonCode``; ``DISPOSITION_OF`` names its disposition.
- Identities are populated on a refusal only once the whole identity chain
  has been validated (§7.2: "without guessing"); earlier refusals carry
  ``None`` and the attempt index the request states (ADR 0011), so early
  refusals of different attempts never share an id.
- The driver is two public half-steps: ``begin_attempt`` (validate, then
  contract replay) and ``finish_attempt`` (proof replay, then dispose).
  ``replay_attempt`` is one after the other; the orchestrator gathers
  evidence between them, outside the pure core.
- Calling a transition with the wrong state is programmer misuse and raises
  ``ReplayMisuseError``; every defect of the input is a refusal value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, TypeVar, assert_never, final

import attrs

from kernel._values import UNSEALED_ID
from kernel.frames import ProblemFrame
from kernel.identity import validated_payloads
from kernel.replay import _guards as guard
from kernel.replay import _outputs as output
from kernel.replay._authority import (
    AuthorityManifest,
    CandidateMemo,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    candidate_scope,
)
from kernel.replay._facts import RunFacts, facts_for
from kernel.replay._guards import SUPPORTED_UPSTREAM_POLICIES, Examined
from kernel.replay._reasons import ReasonCode, Rejection
from kernel.replay._records import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayRequest,
    refusal_id_of,
    result_id_of,
)
from kernel.upstream import ContractAssessment

__all__ = [
    "SUPPORTED_UPSTREAM_POLICIES",
    "ContractClosed",
    "ProofsReplayed",
    "ReplayMisuseError",
    "Validated",
    "begin_attempt",
    "dispose",
    "finish_attempt",
    "refuse_malformed_attempt",
    "replay_attempt",
    "replay_attempts",
    "replay_contract",
    "replay_proofs",
    "validate",
]

D = ReplayDisposition
_Draft = TypeVar("_Draft", ReplayAdapterRefusal, ReplayAdapterResult)


@final
class ReplayMisuseError(TypeError):
    """A transition was called with a value that is not its input state."""


# --- states ------------------------------------------------------------------


# Only ``validate`` builds frame digests with this mark.
_RECOMPUTED: Final = object()


@final
@attrs.frozen(eq=False)
class _FrameDigest:
    """The digest ``validate`` recomputed for ``frame`` before anyone else held it."""

    frame: ProblemFrame
    digest: str
    mark: object


@final
@attrs.frozen
class Validated:
    """The request passed every §6 check; authorities are resolved from the manifest.

    ``validate`` also records the candidate frame's digest it recomputed
    (private): the contract authority's assessment must bind to exactly that
    frame. A ``Validated`` built by hand has none, and the frame is digested
    when the contract is judged, as before.
    """

    request: ReplayRequest
    candidate_frame: ProblemFrame
    contract_authority: ContractAuthority
    proof_policy: ProofObligations | NoProofObligationsApplicable
    proof_authorities: tuple[ProofAuthority, ...]
    _frame_digest: _FrameDigest | None = attrs.field(default=None, repr=False, eq=False)

    def recomputed_frame_digest(self) -> str | None:
        """The candidate frame's digest as ``validate`` recomputed it, if it built this state."""
        known = self._frame_digest
        if (
            type(known) is _FrameDigest
            and known.mark is _RECOMPUTED
            and known.frame is self.candidate_frame
        ):
            return known.digest
        return None


@final
@attrs.frozen
class ContractClosed:
    """Contract replay ran over the exact candidate and found it runnable."""

    validated: Validated
    contract_replay: ContractAssessment
    # What the contract authority derived from this very candidate frame
    # (``candidate_derived``), shared with the proof authorities of the same
    # attempt; a hand-built state has none and the proofs derive afresh.
    _memo: CandidateMemo | None = attrs.field(default=None, repr=False, eq=False)


@final
@attrs.frozen
class ProofsReplayed:
    """Every declared obligation returned a lawful, bound outcome, in order."""

    contract_closed: ContractClosed
    outcomes: tuple[ProofOutcome, ...]


# --- output builders (the only place outcomes are made) -----------------------


def _refusal(
    rejection: Rejection,
    bound: ReplayAdapterInput | None = None,
    *,
    attempt_index: int | None = None,
) -> ReplayAdapterRefusal:
    disposition = rejection.disposition
    outcome = ReplayAdapterRefusal(
        replay_refusal_id=UNSEALED_ID,
        replay_policy_version=CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        input_digest=bound.input_digest if bound else None,
        run_id=bound.run_id if bound else None,
        attempt_id=bound.attempt_id if bound else None,
        attempt_index=bound.attempt_index if bound else attempt_index,
        candidate_digest=bound.candidate_digest if bound else None,
        replay_disposition=disposition,
        reason_codes=(rejection.code.value,),
        explanation=f"{disposition.value}: {rejection.code.value}: {rejection.detail}",
    )
    return _sealed(outcome, "replay_refusal_id", refusal_id_of)


def _result(
    validated: Validated,
    contract_replay: ContractAssessment,
    disposition: ReplayDisposition,
    reason_codes: Sequence[str],
    proof_replay_refs: Sequence[str],
    explanation: str,
) -> ReplayAdapterResult:
    replay_input = validated.request.replay_input
    outcome = ReplayAdapterResult(
        replay_result_id=UNSEALED_ID,
        replay_policy_version=CONTRACT_PROOF_REPLAY_POLICY_VERSION,
        input_digest=replay_input.input_digest,
        run_id=replay_input.run_id,
        attempt_id=replay_input.attempt_id,
        candidate_digest=replay_input.candidate_digest,
        contract_replay_assessment_id=contract_replay.assessment_id,
        proof_obligation_refs=replay_input.proof_obligation_refs,
        proof_replay_refs=tuple(proof_replay_refs),
        replay_disposition=disposition,
        reason_codes=tuple(reason_codes),
        # §7.1: the reconstruction's exact ordered spans, never merged or sorted.
        evidence_spans=validated.request.reconstruction.evidence_spans,
        explanation=explanation,
    )
    return _sealed(outcome, "replay_result_id", result_id_of)


def _sealed(outcome: _Draft, id_field: str, id_of: Callable[[_Draft], str]) -> _Draft:
    """``outcome``, just built here with its id unsealed, now carrying ``id_of(outcome)``.

    Built once, not draft-then-``evolve``d (ADR 0011, "Sealed once"): the id
    is written into the one record the constructor has just validated and
    nobody else has held; its payload blanks the id, so the id is the digest
    of the very payload a reader recomputes (the vector and golden tests, and
    ``tests/test_replay_floor.py``, recompute it independently). The
    validators ran in the constructor (unless attrs' validators are switched
    off) over values the machine validated or wrote itself, so the payload
    path applies (ADR-0007).
    """
    if attrs.validators.get_disabled():
        sealed = id_of(outcome)
    else:
        with validated_payloads():
            sealed = id_of(outcome)
    # The one write to a frozen record, made before it leaves the machine:
    # a second construction (``attrs.evolve``) would re-run every validator.
    object.__setattr__(outcome, id_field, sealed)
    return outcome


def refuse_malformed_attempt(attempt_index: int, detail: str) -> ReplayAdapterRefusal:
    """The typed refusal for the attempt at ``attempt_index`` that could not be read.

    For a bundle whose envelope (the run and its upstream chain) is sound but
    one of whose attempts (its input or reconstruction) is malformed: that
    attempt alone is ``invalid_replay_input`` (ADR-0229 §16) and the others are
    still classified. No identity of the attempt was validated, so none is
    reported (§7.2). ``detail`` says what was wrong; characters outside the
    identity domain (a lone surrogate quoted from hostile input) are escaped.
    Raises ``TypeError``/``ValueError`` for a non-int or negative index
    (caller misuse).
    """
    if type(attempt_index) is not int or type(detail) is not str:
        raise TypeError("attempt_index must be int and detail str")
    if attempt_index < 0:
        raise ValueError(f"attempt_index must be >= 0, got {attempt_index}")
    safe = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return _refusal(
        Rejection(ReasonCode.ATTEMPT_MALFORMED, f"attempt {attempt_index}: {safe}"),
        attempt_index=attempt_index,
    )


def _addressed_index(request: object) -> int | None:
    """The attempt index an unvalidated request states, read without trusting its types."""
    if type(request) is not ReplayRequest or type(request.replay_input) is not ReplayAdapterInput:
        return None
    index: object = request.replay_input.attempt_index
    return index if type(index) is int and index >= 0 else None


# --- validate ------------------------------------------------------------------

# §6 in the order ADR 0002 fixes (first failure wins). Versions come before
# identities: an unsupported schema makes recomputing an identity meaningless.
_BEFORE_CANDIDATE: Final[tuple[Callable[[Examined], Rejection | None], ...]] = (
    guard.policies_supported,  # §6 item 13
    guard.schemas_supported,  # §6 item 13
    guard.run_reproduces,  # §6 item 1
    guard.attempt_at_index,  # §6 item 2
    guard.attempt_id_reproduces,  # §6 items 3-4
)
_ON_CANDIDATE: Final[tuple[Callable[[Examined, ProblemFrame], Rejection | None], ...]] = (
    guard.candidate_digest_reproduces,  # §6 item 5
    guard.reconstruction_envelope_reproduces,  # §6 item 6
    guard.evidence_spans_exact,  # §6 item 7
    guard.operator_provenance_matches,  # §6 item 8
)
_AFTER_CANDIDATE: Final[tuple[Callable[[Examined], Rejection | None], ...]] = (
    guard.problem_frame_bound,  # §6 item 9
    guard.assessment_reproduces,  # §6 item 10
    guard.assessment_bound,  # §6 item 9
    guard.residuals_bound,  # §6 item 9
    guard.gate_bound,  # §6 item 9
    guard.budget_bound,  # §6 item 9
    guard.original_assessment_refused,  # §6 item 10
    guard.input_digest_reproduces,  # §6 item 15
)


def _chain(subject: Examined) -> tuple[ProblemFrame, str] | Rejection:
    """§6 items 1-10 and 13-15: everything but the manifest; the candidate frame and digest."""
    for before in _BEFORE_CANDIDATE:
        if (rejected := before(subject)) is not None:
            return rejected
    candidate = guard.reconstruct_candidate(subject)  # §6.1, §11
    if isinstance(candidate, Rejection):
        return candidate
    for on in _ON_CANDIDATE:
        if (rejected := on(subject, candidate[0])) is not None:
            return rejected
    for after in _AFTER_CANDIDATE:
        if (rejected := after(subject)) is not None:
            return rejected
    return candidate


def validate(
    request: object, manifest: AuthorityManifest, *, facts: RunFacts | None = None
) -> Validated | ReplayAdapterRefusal:
    """Run every §6 check in order; the first failure is the refusal. Calls no authority.

    ``facts`` (from ``examine_run`` over this request's run object) spare the
    O(run) examination; facts of another run or not built by ``examine_run``
    are ignored.
    """
    subject = guard.well_formed(request, facts)
    if isinstance(subject, Rejection):
        return _refusal(subject, attempt_index=_addressed_index(request))
    # well_formed re-ran every validator of every record of the request (or
    # holds facts that did, for these very objects) and checked their payloads'
    # domain: the chain's digests take the payload path (ADR-0007). No
    # authority runs inside this block.
    with validated_payloads():
        candidate = _chain(subject)
    if isinstance(candidate, Rejection):
        return _refusal(candidate, attempt_index=_addressed_index(request))
    frame, frame_id = candidate
    # From here on every identity in the input has been recomputed and may be
    # reported on the refusal.
    checked = subject.request
    contract = guard.contract_target_allowlisted(checked, manifest)
    if isinstance(contract, Rejection):
        return _refusal(contract, checked.replay_input)
    proofs = guard.proof_obligations_exact(checked, manifest)
    if isinstance(proofs, Rejection):
        return _refusal(proofs, checked.replay_input)
    policy, proof_authorities = proofs
    return Validated(
        checked,
        frame,
        contract,
        policy,
        proof_authorities,
        _FrameDigest(frame, frame_id, _RECOMPUTED),
    )


# --- replay_contract -----------------------------------------------------------


def replay_contract(
    state: Validated,
) -> ContractClosed | ReplayAdapterResult | ReplayAdapterRefusal:
    """§9: replay the organ's contract over the exact candidate frame."""
    if not isinstance(state, Validated):
        raise ReplayMisuseError(f"replay_contract needs Validated, got {type(state).__name__}")
    replay_input = state.request.replay_input
    memo = CandidateMemo(state.candidate_frame)  # this attempt's, never another's
    with candidate_scope(memo):
        outcome = output.contract_outcome_of(
            state.contract_authority,
            state.candidate_frame,
            replay_input.candidate_organ,
            state.recomputed_frame_digest(),
        )
    if isinstance(outcome, Rejection):
        return _refusal(outcome, replay_input)
    if outcome.runnable:
        return ContractClosed(state, outcome, memo)
    # §9: refusal evidence in the authority's own order; proofs never run.
    reasons = [f"missing_binding:{m}" for m in outcome.missing_bindings]
    reasons += [f"hazard:{h}" for h in outcome.unresolved_hazards]
    return _result(
        state,
        outcome,
        D.CONTRACT_REFUSED,
        reasons,
        (),
        f"contract_refused by {state.contract_authority.target}: "
        + (", ".join(reasons) or "no reason given")
        + (f". {outcome.explanation}" if outcome.explanation else ""),
    )


# --- replay_proofs ---------------------------------------------------------------


def _context(
    ref: str,
    candidate_digest: str,
    frame: ProblemFrame,
    contract_replay: ContractAssessment,
    evidence: tuple[ProofEvidence, ...],
) -> ProofContext:
    """``ProofContext(ref, candidate_digest, frame, contract_replay, evidence)``, its
    validators not run again (ADR 0011, "Validators not re-run").

    Every value was validated by this attempt's machine a moment ago: the
    obligation ref and candidate digest by ``validate`` (the input's own
    validators, re-run by ``well_formed``), the frame by ``validate`` (exactly
    a ``ProblemFrame``), the contract replay by ``contract_outcome_of``
    (exactly a ``ContractAssessment``, re-validated) and the evidence by
    ``evidence_admissible`` (exactly ``ProofEvidence`` items, re-validated);
    a context built by hand still runs them. ``tests/test_replay_floor.py``
    holds every context replay builds equal to the constructor's and valid.
    """
    context = object.__new__(ProofContext)
    object.__setattr__(context, "obligation_ref", ref)
    object.__setattr__(context, "candidate_digest", candidate_digest)
    object.__setattr__(context, "candidate_frame", frame)
    object.__setattr__(context, "contract_replay", contract_replay)
    object.__setattr__(context, "evidence", evidence)
    return context



def replay_proofs(
    state: ContractClosed, evidence: Sequence[ProofEvidence] = ()
) -> ProofsReplayed | ReplayAdapterRefusal:
    """§10: discharge every declared obligation, in order, through its authority.

    ``evidence`` is what the caller gathered outside the pure core for the
    declared obligations; each authority sees only the items for its ref.
    """
    if not isinstance(state, ContractClosed):
        raise ReplayMisuseError(f"replay_proofs needs ContractClosed, got {type(state).__name__}")
    replay_input = state.validated.request.replay_input
    refs = replay_input.proof_obligation_refs
    items = output.evidence_admissible(evidence, refs)
    if isinstance(items, Rejection):
        return _refusal(items, replay_input)
    frame = state.validated.candidate_frame
    memo = state._memo
    if type(memo) is not CandidateMemo or memo.frame is not frame:
        memo = CandidateMemo(frame)
    outcomes = []
    with candidate_scope(memo):
        for ref, authority in zip(refs, state.validated.proof_authorities, strict=True):
            context = _context(
                ref,
                replay_input.candidate_digest,
                frame,
                state.contract_replay,
                tuple(item for item in items if item.obligation_ref == ref) if items else (),
            )
            outcome = output.proof_outcome_of(
                authority, context, ref, replay_input.candidate_digest
            )
            if isinstance(outcome, Rejection):
                return _refusal(outcome, replay_input)
            outcomes.append(outcome)
    return ProofsReplayed(state, tuple(outcomes))


# --- dispose ---------------------------------------------------------------------


def dispose(state: ProofsReplayed) -> ReplayAdapterResult:
    """Map the ordered proof outcomes to a semantic disposition."""
    if not isinstance(state, ProofsReplayed):
        raise ReplayMisuseError(f"dispose needs ProofsReplayed, got {type(state).__name__}")
    validated = state.contract_closed.validated
    reasons: list[str] = []
    match validated.proof_policy:
        case NoProofObligationsApplicable(policy_version=version):
            reasons.append(f"{ReasonCode.NO_PROOF_OBLIGATION_APPLICABLE.value}:{version}")
        case ProofObligations():
            pass
        case _:
            assert_never(validated.proof_policy)
    for outcome in state.outcomes:
        match outcome.status:
            case ProofStatus.CLOSED:
                continue
            case ProofStatus.REFUSED | ProofStatus.UNAVAILABLE:
                reasons.append(f"proof_{outcome.status.value}:{outcome.obligation_ref}")
                reasons += [f"{outcome.obligation_ref}:{code}" for code in outcome.reason_codes]
            case _:
                assert_never(outcome.status)
    closed = all(o.status is ProofStatus.CLOSED for o in state.outcomes)
    disposition = D.CONTRACT_AND_PROOF_CLOSED if closed else D.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    summary = ", ".join(f"{o.obligation_ref}={o.status.value}" for o in state.outcomes)
    return _result(
        validated,
        state.contract_closed.contract_replay,
        disposition,
        reasons,
        [o.proof_outcome_id for o in state.outcomes],
        f"{disposition.value}: contract closed; proofs: {summary or 'none applicable'}",
    )


# --- driver: two half-steps, evidence gathered (outside) in between --------------


def begin_attempt(
    request: object, manifest: AuthorityManifest, *, facts: RunFacts | None = None
) -> ContractClosed | ReplayAdapterOutcome:
    """First half-step: ``validate`` then ``replay_contract``.

    Returns ``ContractClosed`` when proofs are to be replayed (gather their
    evidence, then call ``finish_attempt``), or the attempt's final outcome.
    ``facts`` as for ``validate``. Never raises for bad input.
    """
    validated = validate(request, manifest, facts=facts)
    match validated:
        case ReplayAdapterRefusal():
            return validated
        case Validated():
            return replay_contract(validated)
        case _:
            assert_never(validated)


def finish_attempt(
    state: ContractClosed, evidence: Sequence[ProofEvidence] = ()
) -> ReplayAdapterOutcome:
    """Second half-step: ``replay_proofs`` over ``evidence``, then ``dispose``."""
    proofs = replay_proofs(state, evidence)
    match proofs:
        case ReplayAdapterRefusal():
            return proofs
        case ProofsReplayed():
            return dispose(proofs)
        case _:
            assert_never(proofs)


def replay_attempt(
    request: object,
    manifest: AuthorityManifest,
    evidence: Sequence[ProofEvidence] = (),
    *,
    facts: RunFacts | None = None,
) -> ReplayAdapterOutcome:
    """Classify one candidate attempt: a ReplayAdapterResult or a ReplayAdapterRefusal.

    Never raises for bad input; every defect is a typed refusal (ADR-0229 §16).
    ``facts`` as for ``validate`` (see ``replay_attempts`` for a whole batch).
    """
    begun = begin_attempt(request, manifest, facts=facts)
    match begun:
        case ContractClosed():
            return finish_attempt(begun, evidence)
        case ReplayAdapterResult() | ReplayAdapterRefusal():
            return begun
        case _:
            assert_never(begun)


def replay_attempts(
    requests: Iterable[object], manifest: AuthorityManifest
) -> Iterator[ReplayAdapterOutcome]:
    """Classify each request in the order given, streaming one outcome per request.

    The batch form of ``replay_attempt`` with no evidence: consecutive requests
    that share one run object share one ``examine_run``, so a run of n
    attempts costs O(run + n), not O(run x n). Outcomes equal
    ``replay_attempt`` request by request; nothing is compared across attempts.
    """
    facts: RunFacts | None = None
    for request in requests:
        facts = facts_for(request, facts)
        yield replay_attempt(request, manifest, facts=facts)
