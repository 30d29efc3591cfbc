"""The orchestrator (impure): the run's attempts in canonical order, with external evidence.

It sits above the pure core and the external protocol and imports downwards
only (``kernel.replay``, ``kernel.organs``, ``kernel.verification``,
``kernel.external``, ``kernel.serde``, ``kernel.identity``); nothing pure
imports it. See ``adr/0006-orchestrator-and-main-job.md``.

- ``replay_bundle`` / ``replay_requests``: validate -> replay_contract ->
  (``provider.gather`` on an optional ``concurrent.futures.Executor``) ->
  replay_proofs -> dispose, outcomes in the run's order;
- ``open_executor(ExecutorSpec(...))``: that executor (inline, a spawn
  process pool, or Dask distributed), closed on exit (ADR-0008);
- ``EvidenceProvider``: the seam; ``NoEvidence`` gathers nothing;
- ``ExternalCertifier``: evidence for ``arithmetic.target_certified`` from
  the pinned z3 -> cvc5 pair (``discover_tools``, ``certification_entry``),
  sealed by the verification adapter in an independent session.
"""

from kernel.orchestrate._certifier import (
    CERTIFICATION_RECORD,
    RUN_ID,
    ExternalCertifier,
    author_session,
    backend_output,
    producer_session,
)
from kernel.orchestrate._driver import gather_safely, replay_bundle, replay_requests
from kernel.orchestrate._executors import (
    MAX_WORKERS,
    ExecutorKind,
    ExecutorSpec,
    check_executor_spec,
    open_executor,
)
from kernel.orchestrate._provider import EvidenceProvider, NoEvidence
from kernel.orchestrate._tools import (
    BACKENDS_DIR,
    CERTIFY_CHECK_ID,
    CERTIFY_OBLIGATION,
    CERTIFY_SPECIFICATION,
    CertifierTools,
    certification_entry,
    discover_tools,
)
from kernel.orchestrate.errors import CertifierSetupError, ExecutorSetupError, OrchestrateError

__all__ = [
    "BACKENDS_DIR",
    "CERTIFICATION_RECORD",
    "CERTIFY_CHECK_ID",
    "CERTIFY_OBLIGATION",
    "CERTIFY_SPECIFICATION",
    "CertifierSetupError",
    "CertifierTools",
    "EvidenceProvider",
    "ExecutorKind",
    "ExecutorSetupError",
    "ExecutorSpec",
    "ExternalCertifier",
    "MAX_WORKERS",
    "NoEvidence",
    "OrchestrateError",
    "RUN_ID",
    "author_session",
    "backend_output",
    "certification_entry",
    "check_executor_spec",
    "discover_tools",
    "gather_safely",
    "open_executor",
    "producer_session",
    "replay_bundle",
    "replay_requests",
]
