"""The evidence-provider seam between contract replay and proof replay.

Rules (ADR-0002 "Evidence gathered outside the pure core", ADR-0006):

- a provider is called only for a ``ContractClosed`` state, never after
  ``contract_refused`` or a refusal;
- it returns the evidence it could gather, as a tuple of ``ProofEvidence``,
  and nothing for obligations it could not serve: the obligation's authority
  then reports ``unavailable`` and the attempt fails closed;
- a provider must be picklable to cross a process boundary (a process pool
  or Dask executor ships it with each attempt).
"""

from __future__ import annotations

from typing import Protocol, final

import attrs

from kernel.replay import ContractClosed, ProofEvidence

__all__ = ["EvidenceProvider", "NoEvidence"]


class EvidenceProvider(Protocol):
    """Gathers evidence for a contract-closed attempt's declared obligations."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """The evidence for ``state``'s obligations; ``()`` when there is none."""
        ...


@final
@attrs.frozen
class NoEvidence:
    """The provider that gathers nothing (the pure ``replay_attempt`` behaviour)."""

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """Always ``()``."""
        return ()
