"""The static authority manifest and the values authorities exchange.

Rules (ADR-0229 §9, §10, §15.1, ARCHITECTURE.md "The replay state machine"):

- The manifest is a frozen value built in code: organ -> contract authority;
  organ -> proof policy (ordered obligation refs, or an explicit "none
  applicable" declaration); obligation ref -> proof authority. There is no
  lookup by name outside these maps, no entry point, no import by string.
- A contract authority maps the exact candidate ``ProblemFrame`` to a sealed
  ``ContractAssessment`` of that frame. A proof authority maps a
  ``ProofContext`` to a sealed ``ProofOutcome`` bound to the same candidate
  and obligation. Anything else they return or raise is adapter failure,
  judged by the state machine, never a candidate verdict.
- Callables never enter an identity: authorities are identified by their
  static ``authority_id`` and ``authority_version`` strings only (§13.2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from enum import Enum
from types import MappingProxyType, TracebackType
from typing import Any, Final, TypeVar, cast, final

import attrs

from kernel._values import DIGEST, NAME, TEXT, UNSEALED_ID, tuple_of
from kernel.frames import ProblemFrame, SourceSpan, spans_payload
from kernel.identity import JsonValue, digest, validated_payloads
from kernel.upstream import ContractAssessment

__all__ = [
    "AuthorityManifest",
    "ContractAuthority",
    "ContractAuthorityFn",
    "NoProofObligationsApplicable",
    "ProofAuthority",
    "ProofAuthorityFn",
    "ProofContext",
    "ProofEvidence",
    "ProofObligations",
    "ProofOutcome",
    "ProofPolicy",
    "ProofStatus",
    "candidate_derived",
    "proof_outcome_id_of",
    "seal_proof_outcome",
]

ContractAuthorityFn = Callable[[ProblemFrame], ContractAssessment]


class ProofStatus(Enum):
    """What a proof authority concluded about one obligation."""

    CLOSED = "closed"
    REFUSED = "refused"
    UNAVAILABLE = "unavailable"


def _bytes(_inst: object, attribute: attrs.Attribute[bytes], value: object) -> None:
    if type(value) is not bytes:
        raise TypeError(f"{attribute.name} must be bytes, got {type(value).__name__}")


@final
@attrs.frozen
class ProofEvidence:
    """Evidence for one obligation gathered outside the pure core, as opaque bytes.

    The impure orchestrator gathers it between ``replay_contract`` and
    ``replay_proofs`` (for example a verification receipt sealed from an
    external checker's output); the obligation's own authority parses and
    judges it. The adapter only routes it by ``obligation_ref``.
    """

    obligation_ref: str = attrs.field(validator=NAME)
    media_type: str = attrs.field(validator=NAME)
    document: bytes = attrs.field(validator=_bytes)


@final
@attrs.frozen
class ProofContext:
    """Everything a proof authority may read: the exact candidate, its contract
    replay, and any evidence gathered for this obligation (in the order given)."""

    obligation_ref: str = attrs.field(validator=NAME)
    candidate_digest: str = attrs.field(validator=DIGEST)
    candidate_frame: ProblemFrame = attrs.field(
        validator=attrs.validators.instance_of(ProblemFrame)
    )
    contract_replay: ContractAssessment = attrs.field(
        validator=attrs.validators.instance_of(ContractAssessment)
    )
    evidence: tuple[ProofEvidence, ...] = attrs.field(default=(), validator=tuple_of(ProofEvidence))


@final
@attrs.frozen
class ProofOutcome:
    """A proof authority's typed, identity-bearing answer for one obligation."""

    proof_outcome_id: str = attrs.field(validator=DIGEST)
    obligation_ref: str = attrs.field(validator=NAME)
    authority_id: str = attrs.field(validator=NAME)
    authority_version: str = attrs.field(validator=NAME)
    candidate_digest: str = attrs.field(validator=DIGEST)
    status: ProofStatus = attrs.field(validator=attrs.validators.instance_of(ProofStatus))
    reason_codes: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))
    evidence_spans: tuple[SourceSpan, ...] = attrs.field(validator=tuple_of(SourceSpan))
    explanation: str = attrs.field(default="", validator=TEXT)

    def payload(self) -> dict[str, JsonValue]:
        return {
            "proof_outcome_id": "",
            "obligation_ref": self.obligation_ref,
            "authority_id": self.authority_id,
            "authority_version": self.authority_version,
            "candidate_digest": self.candidate_digest,
            "status": self.status.value,
            "reason_codes": list(self.reason_codes),
            "evidence_spans": spans_payload(self.evidence_spans),
        }


def proof_outcome_id_of(outcome: ProofOutcome) -> str:
    """Recompute a ProofOutcome's self-sealed id (explanation excluded)."""
    return digest(outcome.payload())


def seal_proof_outcome(
    *,
    context: ProofContext,
    authority_id: str,
    authority_version: str,
    status: ProofStatus,
    reason_codes: tuple[str, ...] = (),
    evidence_spans: tuple[SourceSpan, ...] = (),
    explanation: str = "",
) -> ProofOutcome:
    """A ProofOutcome for ``context`` with its id computed."""
    outcome = ProofOutcome(
        proof_outcome_id=UNSEALED_ID,
        obligation_ref=context.obligation_ref,
        authority_id=authority_id,
        authority_version=authority_version,
        candidate_digest=context.candidate_digest,
        status=status,
        reason_codes=reason_codes,
        evidence_spans=evidence_spans,
        explanation=explanation,
    )
    if attrs.validators.get_disabled():
        sealed = proof_outcome_id_of(outcome)
    else:
        # The constructor just ran every validator of the outcome and nothing
        # has run since: its id takes the payload path (ADR-0007).
        with validated_payloads():
            sealed = proof_outcome_id_of(outcome)
    # Sealed once (ADR 0011): the id is written into the record built above,
    # which nobody else has held (its payload blanks the id), instead of a
    # second construction that would re-run every validator.
    object.__setattr__(outcome, "proof_outcome_id", sealed)
    return outcome


ProofAuthorityFn = Callable[[ProofContext], ProofOutcome]


# --- what the authorities of one attempt derive from its candidate, once ----------

_V = TypeVar("_V")


@final
class CandidateMemo:
    """What authorities derived from one attempt's candidate frame (the very object).

    Private to ``kernel.replay``: the machine makes one per attempt, holds it
    in that attempt's states only, and opens it around that attempt's
    authority calls (``candidate_scope``). Keyed by the deriving function
    (code), never by a value of the frame.
    """

    __slots__ = ("frame", "values")

    def __init__(self, frame: ProblemFrame) -> None:
        self.frame: Final = frame
        self.values: dict[Callable[[Any], object], object] = {}


_candidate: Final[ContextVar[CandidateMemo | None]] = ContextVar(
    "kernel.replay.candidate", default=None
)


@final
class candidate_scope:  # lower case: read as ``with candidate_scope(memo):``
    """Within this block, ``candidate_derived`` shares values derived from ``memo.frame``.

    Per thread/task (a ``ContextVar``); re-entrant. Private to ``kernel.replay``.
    """

    __slots__ = ("_memo", "_token")

    def __init__(self, memo: CandidateMemo) -> None:
        self._memo = memo
        self._token: Token[CandidateMemo | None] | None = None

    def __enter__(self) -> None:
        self._token = _candidate.set(self._memo)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _candidate.reset(self._token)
            self._token = None


def candidate_derived(frame: ProblemFrame, compute: Callable[[ProblemFrame], _V]) -> _V:
    """``compute(frame)``, computed once per attempt when ``frame`` is its candidate.

    For an organ whose authorities read the same thing off the candidate (an
    analysis of the frame, its digest): while replay runs the authorities of
    one attempt, the first call computes and later calls for the very same
    frame object and the very same function get that value; anything else
    (another frame, however equal; outside replay; another thread) is
    computed afresh. ``compute`` must be a pure function of the frame and
    return an immutable value (ADR 0011, "One candidate, derived once").
    """
    memo = _candidate.get()
    if memo is None or memo.frame is not frame:
        return compute(frame)
    values = memo.values
    if compute in values:
        return cast("_V", values[compute])
    value = compute(frame)
    values[compute] = value
    return value


@final
@attrs.frozen
class ContractAuthority:
    """The statically allowlisted contract authority of one organ."""

    authority_id: str = attrs.field(validator=NAME)
    authority_version: str = attrs.field(validator=NAME)
    assess: ContractAuthorityFn = attrs.field(eq=False)

    @property
    def target(self) -> str:
        """The replay target string an input must name: ``id@version``."""
        return f"{self.authority_id}@{self.authority_version}"


@final
@attrs.frozen
class ProofAuthority:
    """The proof authority that discharges one obligation ref."""

    authority_id: str = attrs.field(validator=NAME)
    authority_version: str = attrs.field(validator=NAME)
    prove: ProofAuthorityFn = attrs.field(eq=False)


@final
@attrs.frozen
class ProofObligations:
    """An organ's ordered, non-empty list of obligation refs."""

    refs: tuple[str, ...] = attrs.field(validator=tuple_of(str, names=True))

    def __attrs_post_init__(self) -> None:
        if not self.refs:
            raise ValueError("use NoProofObligationsApplicable to declare an empty policy")
        if len(set(self.refs)) != len(self.refs):
            raise ValueError("obligation refs must be unique")


@final
@attrs.frozen
class NoProofObligationsApplicable:
    """The explicit, versioned declaration that an organ has no proof obligation (§10)."""

    policy_version: str = attrs.field(validator=NAME)


ProofPolicy = ProofObligations | NoProofObligationsApplicable


def _frozen_map(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


@final
@attrs.frozen
class AuthorityManifest:
    """organ -> contract authority, organ -> proof policy, obligation -> proof authority."""

    manifest_version: str = attrs.field(validator=NAME)
    contract_authorities: Mapping[str, ContractAuthority] = attrs.field(
        converter=_frozen_map, eq=False
    )
    proof_policies: Mapping[str, ProofPolicy] = attrs.field(converter=_frozen_map, eq=False)
    proof_authorities: Mapping[str, ProofAuthority] = attrs.field(converter=_frozen_map, eq=False)

    def __attrs_post_init__(self) -> None:
        # Runtime checks too: a manifest is code, but a wrong value in it must
        # fail when the manifest is built, not when a candidate is replayed.
        _check_members(self.contract_authorities, (ContractAuthority,), "contract authority")
        _check_members(
            self.proof_policies, (ProofObligations, NoProofObligationsApplicable), "proof policy"
        )
        _check_members(self.proof_authorities, (ProofAuthority,), "proof authority")
        for organ, policy in self.proof_policies.items():
            if isinstance(policy, ProofObligations):
                for ref in policy.refs:
                    if ref not in self.proof_authorities:
                        raise ValueError(f"organ {organ!r} declares {ref!r} with no authority")


def _check_members(mapping: Mapping[str, object], kinds: tuple[type, ...], label: str) -> None:
    for key, value in mapping.items():
        if type(key) is not str or not isinstance(value, kinds):
            raise TypeError(f"{label} for {key!r} is {type(value).__name__}")
