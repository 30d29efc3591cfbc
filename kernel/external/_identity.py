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

The content identity (ADR-0019) is the same entry with every pin named by
its content: each pin's path is dropped and its SHA-256 kept, in its role
(the executable, the dependencies in order, the trusted tools as a sorted
list of digests), and each argv token that is exactly the path of one of
the command's pins becomes ``{{pin:<sha256>}}``. Two installs whose pinned
files have the same bytes at different absolute paths have the same content
identity and different identities(check). ``content_digest`` is its
canonical digest; it never replaces the check digest in a seed 003 record.
"""

from __future__ import annotations

from typing import Final, final

import attrs

from kernel.external._manifest import CheckEntry, Command, Pin
from kernel.external._pins import verify_pins
from kernel.identity import JsonValue, canonical_json, sha256_hex
from kernel.serde import unstructure

__all__ = [
    "CONTENT_IDENTITY_VERSION",
    "IDENTITY_VERSION",
    "CheckIdentity",
    "all_pins",
    "check_identity",
    "content_digest",
    "content_identity_object",
    "identity_object",
    "identity_of",
]

IDENTITY_VERSION: Final = 1
CONTENT_IDENTITY_VERSION: Final = 1


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
    for optional in ("required_containment", "required_containment_parts", "limits"):
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


def _content_command(command: Command) -> JsonValue:
    by_path = {pin.path: pin.sha256 for pin in command.pins()}
    return {
        "argv": [f"{{{{pin:{by_path[t]}}}}}" if t in by_path else t for t in command.argv],
        "dependencies": [pin.sha256 for pin in command.dependencies],
        "executable": command.executable.sha256,
        "trusted_tool_dependencies": sorted(p.sha256 for p in command.trusted_tool_dependencies),
    }


def content_identity_object(entry: CheckEntry) -> JsonValue:
    """The entry with its pins named by content, no absolute path kept (pure; ADR-0019)."""
    body = identity_object(entry)
    assert isinstance(body, dict)
    body.pop("identity_version")
    body["producer"] = _content_command(entry.producer)
    body["checker"] = _content_command(entry.checker)
    return {"content_identity_version": CONTENT_IDENTITY_VERSION, **body}


def content_digest(entry: CheckEntry) -> str:
    """The canonical digest of ``content_identity_object(entry)``."""
    return sha256_hex(canonical_json(content_identity_object(entry)))
