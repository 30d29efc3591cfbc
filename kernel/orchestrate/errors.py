"""Errors of the orchestrator's setup boundary.

Everything that goes wrong while gathering evidence for one attempt is not an
exception: it is the absence of evidence plus a logged note, which the pure
authority reports as ``unavailable`` (fail closed). Only setting the
certifier or the executor up can fail loudly, before any attempt runs.
"""

from __future__ import annotations

from typing import final

__all__ = ["CertifierSetupError", "ExecutorSetupError", "OrchestrateError"]


class OrchestrateError(Exception):
    """Base of every error raised by ``kernel.orchestrate``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@final
class CertifierSetupError(OrchestrateError):
    """The certifier's tools cannot be found or pinned on this machine."""


@final
class ExecutorSetupError(OrchestrateError):
    """The executor cannot be opened: bad options, no dask, scheduler or cluster unreachable."""
