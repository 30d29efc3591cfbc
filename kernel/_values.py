"""Shared attrs validators for the pure records (private).

Fields use ``attrs.field(validator=...)`` directly (not helper functions) so
that mypy's attrs plugin sees them as fields without defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from kernel.identity import is_digest

__all__ = [
    "DIGEST",
    "EXACT_BOOL",
    "EXACT_INT",
    "NAME",
    "NON_NEGATIVE_INT",
    "OPTIONAL_DIGEST",
    "OPTIONAL_NON_NEGATIVE_INT",
    "TEXT",
    "UNSEALED_ID",
    "tuple_of",
]

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _exact(kind: type) -> Validator:
    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not kind:
            raise TypeError(f"{attribute.name} must be {kind.__name__}, got {type(value).__name__}")

    return check


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _name(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str or not value:
        raise ValueError(f"{attribute.name} must be a non-empty str, got {value!r}")


def _digest(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not is_digest(value):
        raise ValueError(f"{attribute.name} must be a lowercase hex SHA-256, got {value!r}")


def _optional_digest(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _digest(inst, attribute, value)


#: The id a self-sealing record carries while it is built, before its own
#: digest is computed over its payload (ADR 0001): never a real SHA-256.
UNSEALED_ID: Final = "0" * 64

EXACT_INT: Final = _exact(int)
NON_NEGATIVE_INT: Final = attrs.validators.and_(_exact(int), _non_negative)
EXACT_BOOL: Final = _exact(bool)
TEXT: Final = _exact(str)
NAME: Final = _name
DIGEST: Final = _digest
OPTIONAL_DIGEST: Final = _optional_digest
OPTIONAL_NON_NEGATIVE_INT: Final = attrs.validators.optional(NON_NEGATIVE_INT)


def tuple_of(member: type | tuple[type, ...], *, names: bool = False) -> Validator:
    """A validator for a tuple whose members are exactly ``member`` (non-empty if ``names``)."""
    kinds = member if isinstance(member, tuple) else (member,)

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not tuple:
            raise TypeError(f"{attribute.name} must be a tuple, got {type(value).__name__}")
        for i, item in enumerate(value):
            if type(item) not in kinds:
                raise TypeError(
                    f"{attribute.name}[{i}] must be {' | '.join(k.__name__ for k in kinds)}, "
                    f"got {type(item).__name__}"
                )
            if names and not item:
                raise ValueError(f"{attribute.name}[{i}] must be non-empty")

    return check
