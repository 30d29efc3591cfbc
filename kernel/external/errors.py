"""Errors of the external verifier boundary (seed 003).

Each is raised where input enters ``kernel.external`` and is refused before
any run directory exists, or by a programmer's misuse. Everything that goes
wrong *during* a run is not an exception: it is a BLOCKED outcome with a
``Reason``. Every error carries a stable ``code`` and a one-line message.
"""

from __future__ import annotations

from typing import final

__all__ = [
    "ExternalError",
    "JobError",
    "ManifestError",
    "PinMismatchError",
    "RunDirectoryError",
    "RunRecordError",
]


class ExternalError(Exception):
    """Base of every error raised by ``kernel.external``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@final
class ManifestError(ExternalError):
    """A manifest (or one of its entries) refused when it loads."""


@final
class JobError(ExternalError):
    """A job document refused when it loads."""


@final
class PinMismatchError(ExternalError):
    """A pinned file does not hash to its declared SHA-256 (or cannot be read)."""


@final
class RunDirectoryError(ExternalError):
    """The run or attempt directory cannot be created fresh."""


@final
class RunRecordError(ExternalError):
    """A retained run directory cannot be read back strictly for replay."""
