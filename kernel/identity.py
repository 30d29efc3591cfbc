"""Canonical JSON bytes and SHA-256 digests (ADR-0229 §13).

Rules:

- ``canonical_json(v)`` is exactly ``json.dumps(v, ensure_ascii=False,
  sort_keys=True, separators=(",", ":")).encode("utf-8")``, but only over the
  identity domain: ``None``, ``bool``, ``int``, ``str``, ``list``/``tuple`` of
  the domain and ``dict`` with ``str`` keys. Exact types only: a subclass (an
  enum, a named tuple) must be converted by its owner first, so that the bytes
  never depend on how some class happens to render.
- Floats (NaN and infinities included), bytes, sets, non-str keys, lone
  surrogates and every other type are refused with ``IdentityError``.
- Integers may be arbitrarily large up to the interpreter's int/str
  conversion limit (4300 digits by default); beyond it Python's own JSON
  parser cannot read the number back, so it is refused rather than hashed.
- ``digest(v)`` is the lowercase hex SHA-256 of ``canonical_json(v)``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias, final

__all__ = [
    "DIGEST_PATTERN",
    "IdentityError",
    "MAX_IDENTITY_DEPTH",
    "JsonValue",
    "canonical_json",
    "check_domain",
    "digest",
    "is_digest",
    "sha256_hex",
]

JsonValue: TypeAlias = bool | int | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None

DIGEST_PATTERN: Final = re.compile(r"[0-9a-f]{64}")

# Deeper documents are refused: recursion here must never become a
# RecursionError traceback.
MAX_IDENTITY_DEPTH: Final = 200


@final
class IdentityError(ValueError):
    """A value outside the canonical identity domain."""

    def __init__(self, code: str, path: str, message: str) -> None:
        super().__init__(f"{code} at {path}: {message}")
        self.code = code
        self.path = path
        self.message = message


def _check_str(s: str, path: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IdentityError(
            "lone_surrogate", path, f"string contains a lone surrogate at index {exc.start}"
        ) from exc


def _check_domain(value: object, path: str, depth: int) -> None:
    if depth > MAX_IDENTITY_DEPTH:
        raise IdentityError("too_deep", path, f"nesting exceeds {MAX_IDENTITY_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool:
        return
    if kind is int:
        try:
            str(value)
        except ValueError as exc:
            raise IdentityError("integer_too_large", path, str(exc)) from exc
        return
    if kind is str:
        assert isinstance(value, str)
        _check_str(value, path)
        return
    if kind is list or kind is tuple:
        assert isinstance(value, list | tuple)
        for i, item in enumerate(value):
            _check_domain(item, f"{path}[{i}]", depth + 1)
        return
    if kind is dict:
        assert isinstance(value, dict)
        for key, item in value.items():
            if type(key) is not str:
                raise IdentityError(
                    "non_string_key", path, f"object key {key!r} is {type(key).__name__}"
                )
            _check_str(key, f"{path}.<key>")
            _check_domain(item, f"{path}.{key}", depth + 1)
        return
    if kind is float:
        raise IdentityError("float_forbidden", path, f"float {value!r} is not canonical")
    raise IdentityError("unsupported_type", path, f"{kind.__name__} is not in the identity domain")


def check_domain(value: object) -> None:
    """Raise ``IdentityError`` unless ``value`` lies in the identity domain."""
    _check_domain(value, "$", 0)


def canonical_json(value: JsonValue) -> bytes:
    """The canonical UTF-8 JSON bytes of ``value``; raises ``IdentityError``."""
    _check_domain(value, "$", 0)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode(
        "utf-8"
    )


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def digest(value: JsonValue) -> str:
    """Lowercase hex SHA-256 of ``canonical_json(value)``."""
    return sha256_hex(canonical_json(value))


def is_digest(value: object) -> bool:
    """True for a full lowercase hex SHA-256 string."""
    return type(value) is str and DIGEST_PATTERN.fullmatch(value) is not None
