"""The Contract/Proof Replay Adapter (ADR-0229), pure.

One candidate attempt in, one immutable ``ReplayAdapterResult`` or
``ReplayAdapterRefusal`` out; see ``kernel/replay/_machine.py`` for the theory
of operation and ``adr/0002-replay-state-machine.md`` for the decisions.
"""

from kernel.replay._authority import (
    AuthorityManifest,
    ContractAuthority,
    NoProofObligationsApplicable,
    ProofAuthority,
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    proof_outcome_id_of,
    seal_proof_outcome,
)
from kernel.replay._facts import RunFacts, examine_run, facts_for
from kernel.replay._inputs import (
    build_replay_input,
    replay_bundle_attempts,
    replay_bundle_document,
    requests_from_bundle,
)
from kernel.replay._machine import (
    ContractClosed,
    ProofsReplayed,
    ReplayMisuseError,
    Validated,
    begin_attempt,
    dispose,
    finish_attempt,
    refuse_malformed_attempt,
    replay_attempt,
    replay_attempts,
    replay_contract,
    replay_proofs,
    validate,
)
from kernel.replay._reasons import DISPOSITION_OF, ReasonCode
from kernel.replay._records import (
    CONTRACT_PROOF_REPLAY_POLICY_VERSION,
    ReplayAdapterInput,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayDisposition,
    ReplayRequest,
    input_digest_of,
    refusal_id_of,
    result_id_of,
)

__all__ = [
    "CONTRACT_PROOF_REPLAY_POLICY_VERSION",
    "DISPOSITION_OF",
    "AuthorityManifest",
    "ContractAuthority",
    "ContractClosed",
    "NoProofObligationsApplicable",
    "ProofAuthority",
    "ProofContext",
    "ProofEvidence",
    "ProofObligations",
    "ProofOutcome",
    "ProofStatus",
    "ProofsReplayed",
    "ReasonCode",
    "ReplayAdapterInput",
    "ReplayAdapterOutcome",
    "ReplayAdapterRefusal",
    "ReplayAdapterResult",
    "ReplayBundle",
    "ReplayDisposition",
    "ReplayMisuseError",
    "ReplayRequest",
    "RunFacts",
    "Validated",
    "begin_attempt",
    "build_replay_input",
    "dispose",
    "examine_run",
    "facts_for",
    "finish_attempt",
    "input_digest_of",
    "proof_outcome_id_of",
    "refusal_id_of",
    "refuse_malformed_attempt",
    "replay_attempt",
    "replay_attempts",
    "replay_bundle_attempts",
    "replay_bundle_document",
    "replay_contract",
    "replay_proofs",
    "requests_from_bundle",
    "result_id_of",
    "seal_proof_outcome",
    "validate",
]
