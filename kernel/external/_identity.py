"""identity(check): the complete identity object of one approved entry.

Rules (seed 003, "Command identity" and "Checker receipt"):

- the identity object is the whole entry (claim, assurance, inputs, exact
  evidence list, both commands with argv, executable pins and every
  dependency and trusted-tool pin), tagged with ``identity_version``;
- ``check_digest`` is the canonical digest of that object: it is also the
  digest of the approved manifest entry, because the object *is* the entry;
- the identity is built only after every pin holds (``check_identity``
  raises ``PinMismatchError`` otherwise); a receipt must carry this object
  exactly, compared as canonical bytes so ``true`` never equals ``1``.
"""

from __future__ import annotations

from typing import Final, final

import attrs

from kernel.external._manifest import CheckEntry, Pin
from kernel.external._pins import verify_pins
from kernel.identity import JsonValue, canonical_json, sha256_hex
from kernel.serde import unstructure

__all__ = [
    "IDENTITY_VERSION",
    "CheckIdentity",
    "all_pins",
    "check_identity",
    "identity_object",
    "identity_of",
]

IDENTITY_VERSION: Final = 1


@final
@attrs.frozen
class CheckIdentity:
    """identity(check), its canonical bytes and its digest (the check digest)."""

    check_id: str
    canonical: bytes
    check_digest: str
    identity: JsonValue = attrs.field(eq=False, hash=False)


def all_pins(entry: CheckEntry) -> tuple[Pin, ...]:
    """Every pin of the entry: producer's, then checker's."""
    return entry.producer.pins() + entry.checker.pins()


def identity_object(entry: CheckEntry) -> JsonValue:
    """The identity object of ``entry`` without checking pins (pure)."""
    body = unstructure(entry)
    assert isinstance(body, dict)
    # An entry that requires no containment level is identified exactly as
    # before the field existed: the identity is the entry as written.
    for optional in ("required_containment", "limits"):
        if body.get(optional) is None:
            body.pop(optional, None)
    return {"identity_version": IDENTITY_VERSION, **body}


def check_identity(entry: CheckEntry) -> CheckIdentity:
    """Check every pin, then build identity(check); raises ``PinMismatchError``."""
    verify_pins(all_pins(entry))
    return identity_of(entry)


def identity_of(entry: CheckEntry) -> CheckIdentity:
    """identity(check) without checking pins: for a caller that has just checked
    every one of them (a run, through its ``FileLedger``)."""
    value = identity_object(entry)
    canonical = canonical_json(value)
    return CheckIdentity(entry.check_id, canonical, sha256_hex(canonical), value)
