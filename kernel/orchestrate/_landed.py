"""What a landed attempt directory's manifest copy says about the check it ran (ADR 0022).

A worker under another install prefix certifies with its own entry: the
same bytes at its own paths (``ExternalCertifier.on_this_machine``). Its
check digest then differs from the driver's, and its content digest
(ADR 0019) must not. The audit binds both to the manifest copy that came
back.
"""

from __future__ import annotations

from pathlib import Path

from kernel.external import CheckEntry, ExternalError, Manifest, content_digest, identity_object
from kernel.identity import digest
from kernel.serde import SerdeError, loads

__all__ = ["landed_check_digest"]


def landed_check_digest(target: Path, entry: CheckEntry, own: str) -> str:
    """The check digest ``target``'s request may name: ``own``, or a worker's same bytes."""
    try:
        manifest = loads((target / "manifest.json").read_bytes(), Manifest)
        landed = manifest.entry(entry.check_id)
    except (OSError, SerdeError, ExternalError):
        return own
    if len(manifest.checks) != 1 or content_digest(landed) != content_digest(entry):
        return own
    return digest(identity_object(landed))
