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
- Integers may have at most ``MAX_INT_DIGITS`` (4,300) decimal digits, the
  kernel's own limit: it does not follow the interpreter's int/str
  conversion limit (``PYTHONINTMAXSTRDIGITS``, ``sys.set_int_max_str_digits``),
  so outcomes never depend on the environment. Integers within the limit are
  converted with ``int_text``/``int_from_digits``, which the interpreter's
  limit does not reach.
- ``digest(v)`` is the lowercase hex SHA-256 of ``canonical_json(v)``.

Fast path (ADR-0007):

- ``canonical_json_reference(v)`` is the definition above, spelled out with
  ``json.dumps``; it is always available and is the authority.
- ``canonical_json(v)`` returns ``orjson.dumps(v, option=OPT_SORT_KEYS)``
  only when one linear scan proves ``v`` lies in the *covered* domain: the
  identity domain with every int in orjson's range ``[-2**63, 2**64 - 1]``.
  Over that domain ``tests/test_identity_fast.py`` proves the bytes equal to
  the reference (UTF-8 byte order of keys is code-point order once
  surrogates are excluded; both escape exactly ``"``, ``\\`` and C0
  controls, in the same spelling). Anything else (a larger int, any value
  outside the domain) and any exception from orjson goes to the reference,
  which also produces every ``IdentityError``, so errors, codes and paths are
  the reference's.
- ``check_domain`` uses the same scan and runs the path-tracking check only
  when the scan does not accept, so its verdicts and errors are unchanged.
- ``set_fast_path(False)`` restores the reference behaviour everywhere (the
  path-tracking check and ``json.dumps``) for benchmarks and tests; since
  both paths give the same bytes and the same errors, it changes speed only.

Payload path (ADR-0007, "validated payloads"):

- Inside ``with validated_payloads():`` ``canonical_json`` and
  ``check_domain`` skip the scan and call orjson with subclasses,
  dataclasses and datetimes passed through (so orjson refuses them). orjson
  then refuses everything outside the domain except floats, ``Enum``
  members, ``UUID``s, ``orjson.Fragment``s and nesting of 201-254 levels;
  whatever it refuses takes the reference, which gives its bytes or its
  ``IdentityError``. The caller promises that none of those five can occur:
  every value is the payload of a record whose field validators ran after
  its last change (at construction, or by ``validate_deep``), and every
  record validator refuses all five (``tests/test_identity_payload.py``
  checks each field of each record, and compares both paths over records
  altered with ``object.__setattr__``). The scope is a ``ContextVar``: it
  holds for the calling thread (or task) only, never for another caller.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from decimal import Decimal
from types import TracebackType
from typing import Any, Final, TypeAlias, final

import orjson

__all__ = [
    "DIGEST_PATTERN",
    "IdentityError",
    "MAX_IDENTITY_DEPTH",
    "MAX_INT_DIGITS",
    "JsonValue",
    "canonical_json",
    "canonical_json_reference",
    "check_domain",
    "digest",
    "fast_path_enabled",
    "int_from_digits",
    "int_text",
    "is_digest",
    "set_fast_path",
    "sha256_hex",
    "validated_payloads",
]

JsonValue: TypeAlias = bool | int | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None

DIGEST_PATTERN: Final = re.compile(r"[0-9a-f]{64}")

# Deeper documents are refused: recursion here must never become a
# RecursionError traceback.
MAX_IDENTITY_DEPTH: Final = 200

# The kernel's integer limit (ADR 0001): decimal digits, sign excluded.
MAX_INT_DIGITS: Final = 4300
_INT_BOUND: Final = 10**MAX_INT_DIGITS
# Below the interpreter's smallest allowed limit (640 digits) str() and int()
# are always safe; longer numbers go through Decimal, which no limit reaches.
_SAFE_DIGITS: Final = 600
_SAFE_BOUND: Final = 10**_SAFE_DIGITS


def int_text(value: int) -> str:
    """The decimal text of ``value`` (as ``str``), whatever the interpreter's limit."""
    if -_SAFE_BOUND < value < _SAFE_BOUND:
        return str(value)
    return str(Decimal(value))


def int_from_digits(text: str) -> int:
    """``int(text)`` for an optional ``-`` and ASCII digits, whatever the interpreter's limit.

    Raises ``ValueError`` for anything else; the caller bounds the length.
    """
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not a decimal integer: {text[:20]!r}")
    if len(digits) < _SAFE_DIGITS:
        return int(text)
    return int(Decimal(text))


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
        assert isinstance(value, int)
        if not -_INT_BOUND < value < _INT_BOUND:
            raise IdentityError(
                "integer_too_large", path, f"integer has more than {MAX_INT_DIGITS} digits"
            )
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


# --- the covered domain (fast path) ---------------------------------------------

# orjson serializes ints in [-2**63, 2**64 - 1] and raises beyond; the
# differential test covers exactly this range (ADR-0007).
_FAST_INT_MIN: Final = -(2**63)
_FAST_INT_MAX: Final = 2**64 - 1
_ORJSON_OPTIONS: Final = orjson.OPT_SORT_KEYS


def _utf8_clean(s: str) -> bool:
    # Callers test isascii() first (a C scan, no allocation); only non-ASCII
    # text pays for the encode that finds lone surrogates.
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _covered(value: Any, depth: int) -> bool:
    """True only if ``_check_domain`` accepts ``value`` and every int fits orjson.

    No paths are built here; a value this scan does not accept goes to the
    path-tracking check (and the reference encoder), which owns every error.
    ``value`` is ``Any`` because the exact-type tests below are the narrowing
    (``assert isinstance`` would cost a third of the scan).
    """
    if depth > MAX_IDENTITY_DEPTH:
        return False
    kind = type(value)
    if kind is str:
        text: str = value
        return text.isascii() or _utf8_clean(text)
    if kind is int:
        number: int = value
        return _FAST_INT_MIN <= number <= _FAST_INT_MAX
    if kind is dict:
        key: str
        for key, item in value.items():
            if (
                type(key) is not str
                or not (key.isascii() or _utf8_clean(key))
                or not _covered(item, depth + 1)
            ):
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:  # noqa: SIM110 -- a plain loop is faster than all(<genexpr>)
            if not _covered(item, depth + 1):
                return False
        return True
    return value is None or kind is bool


# Benchmarks and tests flip this to price the fast path; it never changes bytes.
_fast_path = True


def set_fast_path(enabled: bool) -> bool:
    """Use the scan and orjson where covered (``True``, the default) or the reference only.

    Returns the previous setting so callers can restore it. Meant for
    benchmarks and tests: the bytes are the same either way (ADR-0007).
    """
    global _fast_path
    previous = _fast_path
    _fast_path = bool(enabled)
    return previous


def fast_path_enabled() -> bool:
    """Whether ``canonical_json`` may use orjson (see ``set_fast_path``)."""
    return _fast_path


# --- the payload path: values whose exact types validators already proved ----------

# With these options orjson hands subclasses of str/int/dict/list, dataclasses
# and datetimes to ``default`` (there is none, so it raises) instead of
# rendering them; it raises for lone surrogates, non-str keys, ints past 64
# bits, bytes, sets, named tuples and cycles as well. What it still renders
# that the domain refuses: float, Enum, UUID, Fragment, depth 201-254. The
# scope's contract excludes exactly those (ADR-0007).
_PAYLOAD_OPTIONS: Final = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_validated: Final[ContextVar[bool]] = ContextVar("kernel.identity.validated", default=False)


@final
class validated_payloads:  # lower case: read as ``with validated_payloads():``
    """Within this block, canonicalise without the domain scan (the payload path).

    Only for payloads of records whose attrs field validators ran after the
    record's last change (at construction with attrs' validators enabled, or
    through ``kernel.replay``'s ``validate_deep``), and values composed of
    such payloads, their parts, digests and plain ``str``/``int`` literals.
    Those validators admit no float, ``Enum`` member, ``UUID``,
    ``orjson.Fragment`` or deep nesting, the only values orjson would render
    although the domain refuses them; everything else outside the domain is
    refused by orjson and then by the reference, with the reference's error.
    Bytes are the reference's either way. Re-entrant; per thread/task.
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: Token[bool] | None = None

    def __enter__(self) -> None:
        self._token = _validated.set(True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _validated.reset(self._token)
            self._token = None


# --- public API ----------------------------------------------------------------


def check_domain(value: object) -> None:
    """Raise ``IdentityError`` unless ``value`` lies in the identity domain."""
    if _fast_path:
        if _validated.get():
            try:
                orjson.dumps(value, option=_PAYLOAD_OPTIONS)
            except orjson.JSONEncodeError:
                pass
            else:
                return
        elif _covered(value, 0):
            return
    _check_domain(value, "$", 0)


def canonical_json_reference(value: JsonValue) -> bytes:
    """The reference canonical bytes: ``json.dumps`` exactly as ADR-0001 defines them.

    Raises ``IdentityError`` for a value outside the identity domain. This is
    the authority the fast path is proved against and falls back to.
    """
    _check_domain(value, "$", 0)
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except ValueError:
        # Only the interpreter's int/str limit (set below MAX_INT_DIGITS) can
        # get here: the domain check passed. Same bytes, limit-free ints.
        text = "".join(_encode_reference(value))
    return text.encode("utf-8")


def _encode_reference(value: Any) -> Iterator[str]:
    """``json.dumps`` (sorted keys, compact, ensure_ascii off) with ``int_text`` for ints.

    Only for values ``_check_domain`` accepted; yields the text in pieces.
    """
    kind = type(value)
    if value is None:
        yield "null"
    elif kind is bool:
        yield "true" if value else "false"
    elif kind is int:
        yield int_text(value)
    elif kind is str:
        yield json.encoder.encode_basestring(value)
    elif kind is list or kind is tuple:
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ","
            yield from _encode_reference(item)
        yield "]"
    else:
        yield "{"
        for i, key in enumerate(sorted(value)):
            if i:
                yield ","
            yield json.encoder.encode_basestring(key)
            yield ":"
            yield from _encode_reference(value[key])
        yield "}"


def canonical_json(value: JsonValue) -> bytes:
    """The canonical UTF-8 JSON bytes of ``value``; raises ``IdentityError``.

    Byte-identical to ``canonical_json_reference``: orjson is used only over
    the covered domain (or, inside ``validated_payloads``, wherever it does
    not refuse), everything else takes the reference.
    """
    if _fast_path:
        if _validated.get():
            try:
                return orjson.dumps(value, option=_PAYLOAD_OPTIONS)
            except orjson.JSONEncodeError:  # outside the domain or past 64 bits
                pass
        elif _covered(value, 0):
            try:
                return orjson.dumps(value, option=_ORJSON_OPTIONS)
            except orjson.JSONEncodeError:  # defensive: the scan should make this unreachable
                pass
    return canonical_json_reference(value)


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def digest(value: JsonValue) -> str:
    """Lowercase hex SHA-256 of ``canonical_json(value)``."""
    return sha256_hex(canonical_json(value))


def is_digest(value: object) -> bool:
    """True for a full lowercase hex SHA-256 string."""
    return type(value) is str and DIGEST_PATTERN.fullmatch(value) is not None
