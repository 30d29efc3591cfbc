"""replay_bundle: every attempt of a search run, in canonical order, with gathered evidence.

Theory of operation (ADR-0229 §5, §12; ADR-0002; ADR-0006):

    for each request in GeometricSearchRun.candidate_attempts order:
        validate -> replay_contract            (pure, here, in order)
        ContractClosed: provider.gather         (impure, on the executor)
        replay_proofs(state, evidence) -> dispose   (pure, here, in order)

- The pure transitions run in the caller: they are cheap, and the authority
  manifest holds callables behind read-only mappings that need not cross a
  process boundary. Only ``provider.gather`` (the slow, impure step) is
  submitted to the executor, one task per contract-closed attempt, all
  submitted before any is awaited.
- Outcomes are collected by attempt index, never by completion order, so the
  result is the run's canonical order and byte-identical whichever executor
  ran the work (inline, threads, processes, Dask's ``Client.get_executor()``).
- A gather that raises, or a worker that dies, is no evidence plus a note on
  the ``kernel.orchestrate`` logger: the obligation's authority reports
  ``unavailable`` and the attempt fails closed. It never becomes a verdict.
- Nothing compares, ranks or selects candidates (§12); each attempt is
  classified on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import Final, assert_never

from kernel.orchestrate._provider import EvidenceProvider
from kernel.replay import (
    AuthorityManifest,
    ContractClosed,
    ProofEvidence,
    ProofsReplayed,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayRequest,
    Validated,
    dispose,
    replay_contract,
    replay_proofs,
    requests_from_bundle,
    validate,
)

__all__ = ["replay_bundle", "replay_requests"]

LOG: Final = logging.getLogger("kernel.orchestrate")


def _contract_stage(
    request: ReplayRequest, manifest: AuthorityManifest
) -> ContractClosed | ReplayAdapterOutcome:
    validated = validate(request, manifest)
    match validated:
        case ReplayAdapterRefusal():
            return validated
        case Validated():
            pass
        case _:
            assert_never(validated)
    contract = replay_contract(validated)
    match contract:
        case ReplayAdapterResult() | ReplayAdapterRefusal() | ContractClosed():
            return contract
        case _:
            assert_never(contract)


def _proof_stage(state: ContractClosed, evidence: Sequence[ProofEvidence]) -> ReplayAdapterOutcome:
    proofs = replay_proofs(state, evidence)
    match proofs:
        case ReplayAdapterRefusal():
            return proofs
        case ProofsReplayed():
            return dispose(proofs)
        case _:
            assert_never(proofs)


def _label(state: ContractClosed) -> str:
    return f"attempt {state.validated.request.replay_input.attempt_id[:16]}"


def gather_safely(provider: EvidenceProvider, state: ContractClosed) -> tuple[ProofEvidence, ...]:
    """``provider.gather(state)``; a raise is no evidence plus a note (module level: picklable)."""
    try:
        return provider.gather(state)
    except Exception as exc:  # a provider failure is never a verdict
        LOG.warning("%s: evidence provider raised %s: %s", _label(state), type(exc).__name__, exc)
        return ()


def _collect(future: Future[tuple[ProofEvidence, ...]], state: ContractClosed) -> tuple[
    ProofEvidence, ...
]:
    try:
        return future.result()
    except Exception as exc:  # the worker died or the task could not be shipped
        LOG.warning("%s: evidence task failed %s: %s", _label(state), type(exc).__name__, exc)
        return ()


def replay_requests(
    requests: Sequence[ReplayRequest],
    manifest: AuthorityManifest,
    provider: EvidenceProvider,
    *,
    executor: Executor | None = None,
) -> tuple[ReplayAdapterOutcome, ...]:
    """One outcome per request, in the order given (see the module docstring).

    ``executor`` runs ``provider.gather`` per contract-closed attempt; ``None``
    runs it inline, in order. The provider (and the states) must be picklable
    for a process-based executor.
    """
    staged = [_contract_stage(request, manifest) for request in requests]
    evidence: dict[int, tuple[ProofEvidence, ...]] = {}
    if executor is None:
        for index, stage in enumerate(staged):
            if isinstance(stage, ContractClosed):
                evidence[index] = gather_safely(provider, stage)
    else:
        futures = {
            index: executor.submit(gather_safely, provider, stage)
            for index, stage in enumerate(staged)
            if isinstance(stage, ContractClosed)
        }
        for index, future in futures.items():  # by index: canonical, not completion, order
            stage = staged[index]
            assert isinstance(stage, ContractClosed)
            evidence[index] = _collect(future, stage)
    outcomes: list[ReplayAdapterOutcome] = []
    for index, stage in enumerate(staged):
        match stage:
            case ContractClosed():
                outcomes.append(_proof_stage(stage, evidence[index]))
            case ReplayAdapterResult() | ReplayAdapterRefusal():
                outcomes.append(stage)
            case _:
                assert_never(stage)
    return tuple(outcomes)


def replay_bundle(
    bundle: ReplayBundle,
    manifest: AuthorityManifest,
    provider: EvidenceProvider,
    *,
    executor: Executor | None = None,
) -> tuple[ReplayAdapterOutcome, ...]:
    """Classify every attempt of ``bundle`` in the run's canonical order.

    With ``NoEvidence`` the outcomes are byte-identical to ``replay_attempt``
    over ``requests_from_bundle(bundle)``. Raises ``ValueError`` unless the
    bundle holds one input and one reconstruction per attempt.
    """
    return replay_requests(requests_from_bundle(bundle), manifest, provider, executor=executor)
