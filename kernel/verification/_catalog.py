"""The static backend catalog: which backends exist and which operations they offer.

Rules:

- the catalog is a value built in code; nothing is discovered, imported or
  looked up outside it, and an operation it does not list is unsupported
  rather than guessed;
- each operation is either ``check`` (verifies a claim it is given) or
  ``generative`` (proposes claims, so verifying its own proposals would be
  circular): generative operations are denied at planning time;
- a backend identifier is never a role name (a backend is never a role);
- Reverify keeps the identity ``reverify``; no generic name stands in for it.

The argv convention is the adapter's own (see ``argv_for``), not any tool's
native command line: each catalogued program is expected to be a wrapper that
speaks it and prints the backend output document described in ADR-0003.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs

from kernel.verification._records import Candidate, Claim, CommandConfiguration
from kernel.verification._vocabulary import OperationKind, Role

__all__ = [
    "BACKEND_CATALOG",
    "REVERIFY_BACKEND",
    "BackendCatalog",
    "BackendEntry",
    "BackendOperation",
    "argv_for",
    "is_role_name",
]

REVERIFY_BACKEND: Final = "reverify"


def is_role_name(name: str) -> bool:
    """True when ``name`` spells a role (case, spaces and hyphens ignored)."""
    normal = name.strip().casefold().replace(" ", "_").replace("-", "_")
    return any(normal == role.value for role in Role)


@final
@attrs.frozen
class BackendOperation:
    """One operation a backend offers, and whether it checks or proposes claims."""

    name: str
    kind: OperationKind


def _operations(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple or not all(type(op) is BackendOperation for op in value):
        raise TypeError("operations must be a tuple of BackendOperation")
    names = [op.name for op in value]
    if len(names) != len(set(names)):
        raise ValueError("operation names must be unique")


@final
@attrs.frozen
class BackendEntry:
    """A catalogued backend: its identity, the program its argv starts with, its operations."""

    backend: str
    program: str
    operations: tuple[BackendOperation, ...] = attrs.field(validator=_operations)

    def __attrs_post_init__(self) -> None:
        if is_role_name(self.backend):
            raise ValueError(f"backend {self.backend!r} is a role name; a backend is never a role")

    def operation(self, name: str) -> BackendOperation | None:
        """The catalogued operation called ``name``, or ``None``."""
        for op in self.operations:
            if op.name == name:
                return op
        return None


def _entries(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple or not all(type(e) is BackendEntry for e in value):
        raise TypeError("entries must be a tuple of BackendEntry")
    names = [e.backend for e in value]
    if len(names) != len(set(names)):
        raise ValueError("backend identities must be unique")


@final
@attrs.frozen
class BackendCatalog:
    """The closed set of backends the adapter plans for."""

    entries: tuple[BackendEntry, ...] = attrs.field(validator=_entries)

    def entry(self, backend: str) -> BackendEntry | None:
        """The entry whose identity is exactly ``backend``, or ``None``."""
        for e in self.entries:
            if e.backend == backend:
                return e
        return None


BACKEND_CATALOG: Final = BackendCatalog(
    entries=(
        BackendEntry(
            backend=REVERIFY_BACKEND,
            program="reverify",
            operations=(
                BackendOperation("verify-claim", OperationKind.CHECK),
                BackendOperation("replay-evidence", OperationKind.CHECK),
                BackendOperation("propose-claims", OperationKind.GENERATIVE),
                BackendOperation("infer-specification", OperationKind.GENERATIVE),
            ),
        ),
        BackendEntry(
            backend="cbmc",
            program="cbmc",
            operations=(
                BackendOperation("check-property", OperationKind.CHECK),
                BackendOperation("generate-properties", OperationKind.GENERATIVE),
            ),
        ),
        # The external SMT pair (z3 produces, cvc5 re-decides) that certifies
        # an arithmetic frame's targets (ADR-0005); it only checks.
        BackendEntry(
            backend="vkit-smt",
            program="vkit-smt",
            operations=(BackendOperation("check-smt", OperationKind.CHECK),),
        ),
    )
)


def argv_for(
    program: str, candidate: Candidate, claim: Claim, configuration: CommandConfiguration
) -> tuple[str, ...]:
    """The argv for one run: no shell, one element per argument.

    ``program operation --candidate=D --claim-id=I --claim-level=L --claim=S
    [--name=value ...] -- [arguments ...]``. Settings are already sorted by
    name; the ``--`` keeps trailing arguments from being read as options.
    """
    return (
        program,
        configuration.operation,
        f"--candidate={candidate.digest}",
        f"--claim-id={claim.claim_id}",
        f"--claim-level={claim.level.value}",
        f"--claim={claim.statement}",
        *(f"--{s.name}={s.value}" for s in configuration.settings),
        "--",
        *configuration.arguments,
    )
