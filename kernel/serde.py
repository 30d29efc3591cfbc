"""Strict JSON in, canonical JSON out, through one explicit cattrs converter.

Rules (each violation is a ``SerdeError`` with a stable ``code`` and a path):

- a document is at most ``MAX_DOCUMENT_BYTES`` bytes (``document_too_large``)
  and nests at most ``MAX_DEPTH`` arrays/objects (``too_deep``);
- it is strict UTF-8 (``invalid_utf8``) and strict JSON (``malformed_json``);
- object keys are unique (``duplicate_key``); floats (``float_forbidden``),
  ``NaN``/``Infinity`` (``constant_forbidden``), lone surrogates
  (``lone_surrogate``) and integers of more than ``MAX_INT_DIGITS`` digits
  (``integer_too_large``, the kernel's own limit, whatever the
  interpreter's ``PYTHONINTMAXSTRDIGITS``) are refused, so every accepted document lies in the
  canonical identity domain of ``kernel.identity``;
- structuring is exact: no extra or missing fields (a field with a default,
  such as ``explanation``, is still required on input: the seeds define
  every field), no coercion between JSON types (``"1"`` is not an int,
  ``1`` is not a bool, a string is not a tuple), enums by value only
  (``schema_mismatch``); the message names the full path, the expected type
  and what was found (``expected int, found boolean true @ $.inputs[0].attempt_index``);
- a field marked ``FLATTENED`` (a group of fields kept in its own record) is
  read and written as keys of the enclosing object, with the same exactness
  and the same paths (ADR 0017).

Parsing reads with orjson and a strictness pass (``_parse_fast``) and falls
back to the reference parser (``json.loads`` with strict hooks, then the
domain check) on any doubt, so values and errors are always the reference's;
``kernel.identity.set_fast_path(False)`` forces the reference (ADR 0011).

Output is always ``kernel.identity.canonical_json`` of the unstructured value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import Enum
from typing import Any, Final, TypeVar, cast, final, get_args, get_origin

import attrs
import cattrs
import orjson
from cattrs.cols import homogenous_tuple_structure_factory, is_sequence
from cattrs.errors import AttributeValidationNote, ClassValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn

from kernel.identity import (
    MAX_INT_DIGITS,
    IdentityError,
    JsonValue,
    canonical_json,
    check_domain,
    fast_path_enabled,
    int_from_digits,
)

__all__ = [
    "MAX_DEPTH",
    "FLATTENED",
    "MAX_DOCUMENT_BYTES",
    "OPTIONAL_ON_INPUT",
    "SerdeError",
    "dumps",
    "loads",
    "make_converter",
    "parse_json",
    "structure",
    "unstructure",
]

T = TypeVar("T")

#: attrs field metadata key. A field marked ``{OPTIONAL_ON_INPUT: True}`` may be
#: left out of an input document (its default applies). Only for documents the
#: project itself defines with an optional policy field (the external manifest's
#: ``required_containment``, ADR 0009); never for a record of the seeds, which
#: define every field (ADR 0011).
OPTIONAL_ON_INPUT: Final = "kernel.optional_on_input"

#: attrs field metadata key. A field marked ``{FLATTENED: True}`` holds an attrs
#: record whose own fields are read and written as keys of the enclosing
#: object, so a record can be grouped in code while its document stays flat
#: (the external run metadata, ADR 0017). Structuring stays exact over the
#: flat key set: every key required, no extra key, the same error paths
#: (``$.key``) as if the fields were declared on the enclosing record.
FLATTENED: Final = "kernel.flattened"

MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
MAX_DEPTH: Final = 64

# Unrolled-loop form of "(?:[^"\\]|\\.)*": same language, one regex step per
# run of plain characters instead of one per character (BENCHMARKS.md). A
# string that never closes runs to the end of the data (JSON reads no bracket
# inside it either): otherwise the failed match would restart at every
# escaped quote and rescan to the end, quadratic in the document size.
_STRING_LITERAL: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_BRACKET: Final = re.compile(rb"[\[\]{}]")
_PATH_SUFFIX: Final = re.compile(r" @ (\$\S*)$")


@final
class SerdeError(ValueError):
    """A document refused at the JSON boundary."""

    def __init__(self, code: str, path: str, message: str) -> None:
        super().__init__(f"{code} at {path}: {message}")
        self.code = code
        self.path = path
        self.message = message


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _max_depth(data: bytes) -> int:
    # Strings may contain brackets; strip them before counting. Runs before
    # json.loads so a hostile nesting depth never reaches the recursive parser.
    return _depth_outside_strings(_STRING_LITERAL.sub(b"", data))


def _depth_outside_strings(stripped: bytes) -> int:
    depth = deepest = 0
    for match in _BRACKET.finditer(stripped):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused("duplicate_key", f"duplicate object key {key!r}")
        result[key] = value
    return result


def _reject_float(text: str) -> float:
    raise _Refused("float_forbidden", f"float literal {text} is not canonical")


def _reject_constant(text: str) -> float:
    raise _Refused("constant_forbidden", f"{text} is not JSON")


def _parse_int(text: str) -> int:
    # Used only when the interpreter's own int/str limit refused a number:
    # the kernel's limit is MAX_INT_DIGITS, whatever the environment says.
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused("integer_too_large", f"integer has more than {MAX_INT_DIGITS} digits")
    return int_from_digits(text)


def _loads(text: str, *, parse_int: Callable[[str], int] | None = None) -> Any:
    return json.loads(
        text,
        object_pairs_hook=_reject_duplicates,
        parse_float=_reject_float,
        parse_constant=_reject_constant,
        parse_int=parse_int,
    )


def parse_json(
    data: bytes, *, max_bytes: int = MAX_DOCUMENT_BYTES, max_depth: int = MAX_DEPTH
) -> JsonValue:
    """Parse one strict JSON document; raises ``SerdeError``."""
    if type(data) is not bytes:
        raise SerdeError("not_bytes", "$", f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise SerdeError(
            "document_too_large", "$", f"{len(data)} bytes exceeds the limit of {max_bytes}"
        )
    if fast_path_enabled():
        accepted = _parse_fast(data, max_depth)
        if accepted is not _DOUBT:
            return cast(JsonValue, accepted)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise SerdeError("invalid_utf8", "$", f"byte offset {exc.start}: {exc.reason}") from exc
    deepest = _max_depth(data)
    if deepest > max_depth:
        raise SerdeError("too_deep", "$", f"nesting depth {deepest} exceeds {max_depth}")
    return _parse_reference(text)


# orjson is the fast path (ADR 0011); what it accepts is returned only when a
# strictness pass proves the reference parser would return the same value.
_DOUBT: Final = object()


def _parse_fast(data: bytes, max_depth: int) -> object:
    """orjson's value when the reference would accept the document as is, else ``_DOUBT``.

    orjson refuses what strict JSON refuses (bad UTF-8, a BOM, ``NaN``, lone
    surrogate escapes, control characters, trailing commas, leading zeros;
    nesting past 1,024) but silently keeps the last of duplicate keys, reads
    floats, and reads integers past 64 bits as floats. So:

    - one walk refuses to vouch for a float or a depth past ``max_depth``;
    - colons are counted: in a valid document a raw ``:`` is a member
      separator or sits in a string, where it decodes to one ``:``, as does a
      ``\\u003a`` escape. orjson's compact output of the value has exactly one
      ``:`` per kept member plus the decoded colons of kept strings, so with no
      duplicate key ``raw colons == output colons - escaped colons``; a dropped
      duplicate takes at least one separator with it and can only lower the
      right side's share, so it never balances (the escape count, taken on
      the raw bytes, can only over-count, which also never balances).

    Any doubt goes to the reference parser, which owns every error.
    ``tests/test_serde_fast.py`` holds the two equal over hostile documents.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _DOUBT
    if not _plain_within(value, max_depth):
        return _DOUBT
    escaped = data.count(b"\\u003a") + data.count(b"\\u003A")
    if data.count(b":") != orjson.dumps(value).count(b":") - escaped:
        return _DOUBT
    return value


def _plain_within(value: object, max_depth: int) -> bool:
    """No float anywhere in orjson's ``value`` and no nesting past ``max_depth``."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict:
            items: Any = cast("dict[str, object]", node).values()
        elif kind is list:
            items = node
        else:
            if kind is float:
                return False
            continue
        if depth >= max_depth:
            return False
        for item in items:
            inner = type(item)
            if inner is dict or inner is list:
                stack.append((item, depth + 1))
            elif inner is float:
                return False
    return True


def _parse_reference(text: str) -> JsonValue:
    """The reference parser: ``json.loads`` with strict hooks, then the domain check."""
    try:
        try:
            value = _loads(text)
        except json.JSONDecodeError:
            raise
        except ValueError:  # the interpreter's int/str limit, not ours: read again
            value = _loads(text, parse_int=_parse_int)
    except _Refused as exc:
        raise SerdeError(exc.code, "$", str(exc)) from exc
    except json.JSONDecodeError as exc:
        raise SerdeError(
            "malformed_json", "$", f"line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except ValueError as exc:  # defensive: _parse_int owns the integer limit
        raise SerdeError("integer_too_large", "$", str(exc)) from exc
    except RecursionError as exc:  # defensive: the pre-scan should prevent it
        raise SerdeError("too_deep", "$", "nesting too deep for the parser") from exc
    try:
        check_domain(value)
    except IdentityError as exc:
        raise SerdeError(exc.code, exc.path, exc.message) from exc
    return cast(JsonValue, value)


# --- the converter -----------------------------------------------------------


class _Mismatch(TypeError):
    """A JSON value of the wrong kind; ``found`` says what it was."""

    def __init__(self, found: object) -> None:
        self.found = _found(found)
        super().__init__(f"found {self.found}")


def _found(value: object) -> str:
    """What a JSON value is, for an error message (short, in JSON's words)."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return f"boolean {'true' if value else 'false'}"
    if kind is int:
        assert isinstance(value, int)
        return "integer " + (repr(value) if -(10**30) < value < 10**30 else "of over 30 digits")
    if kind is str:
        assert isinstance(value, str)
        shown = value if len(value) <= 40 else value[:40] + "..."
        return "string " + ascii(shown)
    if kind is list or kind is tuple:
        assert isinstance(value, list | tuple)
        return f"array of {len(value)}"
    if kind is dict:
        return "object"
    return kind.__name__


def _expected(tp: object) -> str:
    if tp is None:
        return "a value"
    if _is_tuple_type(tp):
        return "array"
    if isinstance(tp, type):
        if attrs.has(tp):
            return f"object {tp.__name__}"
        return tp.__name__
    args = get_args(tp)
    if args:
        return " or ".join("null" if a is type(None) else _expected(a) for a in args)
    return repr(tp)


def _format(exc: BaseException, tp: type | None) -> str:
    """One line per error: what was expected and what was found (the path is added by cattrs)."""
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unexpected fields {sorted(exc.extra_fields)}"
    if isinstance(exc, KeyError):
        return f"required field missing, expected {_expected(tp)}"
    if isinstance(exc, _Mismatch):
        return f"expected {_expected(tp)}, {exc}"
    if isinstance(exc, TypeError | ValueError):
        return f"expected {_expected(tp)}: {exc}"
    return f"invalid value ({type(exc).__name__}: {exc})"


def _exact(kind: type) -> Callable[[Any, type], Any]:
    def hook(value: Any, _: type) -> Any:
        if type(value) is not kind:
            raise _Mismatch(value)
        return value

    return hook


def _enum_factory(enum_type: type[Enum]) -> Callable[[Any, type], Enum]:
    def hook(value: Any, _: type) -> Enum:
        if type(value) not in (str, int) or type(value) is bool:
            raise _Mismatch(value)
        try:
            return enum_type(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum_type)
            raise ValueError(
                f"{value!r} is not a {enum_type.__name__} (one of {allowed})"
            ) from None

    return hook


def _is_tuple_type(tp: Any) -> bool:
    return get_origin(tp) is tuple or tp is tuple


def make_converter() -> cattrs.Converter:
    """A fresh strict converter: exact JSON types, no extra keys, paths kept."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    # cattrs' defaults coerce (int("1"), bool("no"), str(5)); ours check the
    # exact JSON type. Records use plain Enums, never str/int mixins, so no
    # annotation is a subclass of these three.
    for kind in (int, str, bool):
        conv.register_structure_hook(kind, _exact(kind))

    def tuple_factory(tp: Any, c: cattrs.Converter) -> Callable[[Any, type], Any]:
        args = get_args(tp)
        inner: Callable[[Any, type], Any]
        if len(args) == 2 and args[1] is Ellipsis:
            inner = homogenous_tuple_structure_factory(tp, c)
        else:
            hooks = [c.get_structure_hook(arg) for arg in args]

            def fixed(value: Any, _t: type) -> Any:
                if len(value) != len(args):
                    raise ValueError(f"expected {len(args)} elements, got {len(value)}")
                return tuple(h(v, a) for h, v, a in zip(hooks, value, args, strict=True))

            inner = fixed

        def hook(value: Any, t: type) -> Any:
            if type(value) is not list and type(value) is not tuple:
                raise _Mismatch(value)
            return inner(value, t)

        return hook

    conv.register_structure_hook_factory(_is_tuple_type, tuple_factory)

    def list_guard(tp: Any, c: cattrs.Converter) -> Callable[[Any, type], Any]:
        raise TypeError(f"records use tuples, not {tp!r}")

    conv.register_structure_hook_factory(
        lambda tp: is_sequence(tp) and not _is_tuple_type(tp), list_guard
    )
    conv.register_structure_hook_factory(
        lambda tp: isinstance(tp, type) and issubclass(tp, Enum),
        lambda tp, _c: _enum_factory(tp),
    )

    def attrs_factory(tp: Any, c: cattrs.Converter) -> Callable[[Any, type], Any]:
        if _has_flattened(tp):
            return _flattened_structure_fn(tp, c)
        inner = make_dict_structure_fn(tp, c, _cattrs_forbid_extra_keys=True)
        fields = tuple(
            (a.alias or a.name, a.type)
            for a in attrs.fields(tp)
            if not a.metadata.get(OPTIONAL_ON_INPUT)
        )

        def hook(value: Any, t: type) -> Any:
            if type(value) is not dict:
                raise _Mismatch(value)
            _require_all(tp, fields, value)
            return inner(value, t)

        return hook

    conv.register_structure_hook_factory(attrs.has, attrs_factory)
    conv.register_unstructure_hook_factory(_has_flattened, _flattened_unstructure_fn)
    conv.register_unstructure_hook_func(
        lambda tp: isinstance(tp, type) and issubclass(tp, Enum),
        lambda member: member.value,
    )
    return conv


def _require_all(tp: type, fields: tuple[tuple[str, Any], ...], value: dict[str, Any]) -> None:
    # Every field is required on input, defaults included: cattrs would fill
    # a default in silently (ADR-0229 defines every field).
    missing = [(name, kind) for name, kind in fields if name not in value]
    if missing:
        errors = []
        for name, kind in missing:
            error = KeyError(name)
            error.add_note(
                AttributeValidationNote(
                    f"Structuring class {tp.__name__} @ attribute {name}", name, kind
                )
            )
            errors.append(error)
        raise ClassValidationError(f"While structuring {tp.__name__}", errors, tp)


# --- flattened groups (FLATTENED) --------------------------------------------


def _has_flattened(tp: Any) -> bool:
    return (
        isinstance(tp, type)
        and attrs.has(tp)
        and any(a.metadata.get(FLATTENED) for a in attrs.fields(tp))
    )


@final
@attrs.frozen
class _FlatKey:
    """One key of a flattened document: its type, and the group that owns it (None: the record)."""

    key: str
    kind: Any
    group: str | None


def _flat_layout(tp: type) -> tuple[_FlatKey, ...]:
    """The document's keys in declaration order, groups expanded in place.

    Refuses (``TypeError``, a programming error) what the flat form cannot
    express: a group that is not an attrs record, a group inside a group, an
    optional key, a key two fields would share.
    """
    attrs.resolve_types(tp)
    layout: list[_FlatKey] = []
    for field in attrs.fields(tp):
        if field.metadata.get(OPTIONAL_ON_INPUT):
            raise TypeError(f"{tp.__name__}.{field.name}: a flattened record has no optional key")
        if not field.metadata.get(FLATTENED):
            layout.append(_FlatKey(field.name, field.type, None))
            continue
        group = field.type
        if not (isinstance(group, type) and attrs.has(group)) or _has_flattened(group):
            raise TypeError(f"{tp.__name__}.{field.name}: only a flat record can be flattened")
        attrs.resolve_types(group)
        for inner in attrs.fields(group):
            if inner.metadata.get(OPTIONAL_ON_INPUT):
                raise TypeError(f"{group.__name__}.{inner.name}: a flattened key is never optional")
            layout.append(_FlatKey(inner.name, inner.type, field.name))
    keys = [item.key for item in layout]
    if len(set(keys)) != len(keys):
        raise TypeError(f"{tp.__name__}: two flattened fields share a key")
    return tuple(layout)


def _flattened_structure_fn(tp: Any, c: cattrs.Converter) -> Callable[[Any, type], Any]:
    """Structure a flat document into ``tp`` and its groups, as cattrs would a flat record.

    Same order of work and same errors as the generated function of a record
    declaring every key itself: required keys first, then each value by its
    type (errors collected, each noted with its key, so paths read
    ``$.key``), then unexpected keys; construction errors (validators) last.
    """
    layout = _flat_layout(tp)
    hooks = tuple(c.get_structure_hook(item.kind) for item in layout)
    required = tuple((item.key, item.kind) for item in layout)
    known = frozenset(item.key for item in layout)
    groups = {
        field.name: (field.type, field.alias or field.name)
        for field in attrs.fields(tp)
        if field.metadata.get(FLATTENED)
    }
    plain = {field.name: field.alias or field.name for field in attrs.fields(tp)}
    inits = {
        name: {f.name: f.alias or f.name for f in attrs.fields(group)}
        for name, (group, _) in groups.items()
    }

    def hook(value: Any, _t: type) -> Any:
        if type(value) is not dict:
            raise _Mismatch(value)
        _require_all(tp, required, value)
        parts: dict[str | None, dict[str, Any]] = {None: {}, **{name: {} for name in groups}}
        errors: list[Exception] = []
        for item, structure_value in zip(layout, hooks, strict=True):
            try:
                parts[item.group][item.key] = structure_value(value[item.key], item.kind)
            except Exception as exc:  # collected and reported as cattrs' own function does
                exc.add_note(
                    AttributeValidationNote(
                        f"Structuring class {tp.__name__} @ attribute {item.key}",
                        item.key,
                        item.kind,
                    )
                )
                errors.append(exc)
        unknown = set(value) - known
        if unknown:
            errors.append(ForbiddenExtraKeysError("", tp, unknown))
        if errors:
            raise ClassValidationError(f"While structuring {tp.__name__}", errors, tp)
        try:
            kwargs: dict[str, Any] = {}
            for field in attrs.fields(tp):
                if field.name in groups:
                    group, init_name = groups[field.name]
                    names = inits[field.name]
                    kwargs[init_name] = group(
                        **{names[k]: v for k, v in parts[field.name].items()}
                    )
                else:
                    kwargs[plain[field.name]] = parts[None][field.name]
            return tp(**kwargs)
        except Exception as exc:  # a validator's refusal, reported at $ as cattrs does
            raise ClassValidationError(f"While structuring {tp.__name__}", [exc], tp) from exc

    return hook


def _flattened_unstructure_fn(tp: Any, c: cattrs.Converter) -> Callable[[Any], Any]:
    """Unstructure ``tp`` into one flat object: each group's keys beside the plain ones."""
    _flat_layout(tp)  # refuse, at first use, what the structuring side would refuse
    plan = tuple(
        (field.name, bool(field.metadata.get(FLATTENED)), c.get_unstructure_hook(field.type))
        for field in attrs.fields(tp)
    )

    def hook(value: Any) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for name, flattened, unstructure_value in plan:
            unstructured = unstructure_value(getattr(value, name))
            if flattened:
                document.update(unstructured)
            else:
                document[name] = unstructured
        return document

    return hook


_CONVERTER: Final = make_converter()


def _describe(exc: BaseException) -> tuple[str, str]:
    messages = cattrs.transform_error(exc, format_exception=_format)
    first = messages[0] if messages else str(exc)
    match = _PATH_SUFFIX.search(first)
    path = match.group(1) if match else "$"
    return path, "; ".join(messages) if messages else str(exc)


def structure(value: JsonValue, cls: type[T], *, converter: cattrs.Converter | None = None) -> T:
    """Structure a parsed JSON value into ``cls`` exactly; raises ``SerdeError``."""
    conv = converter or _CONVERTER
    try:
        return conv.structure(value, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        path, message = _describe(exc)
        raise SerdeError("schema_mismatch", path, message) from exc
    except RecursionError as exc:
        raise SerdeError("too_deep", "$", "value nests too deeply to structure") from exc


def unstructure(value: object, *, converter: cattrs.Converter | None = None) -> JsonValue:
    """Plain JSON-domain data for a record (enums by value, tuples kept)."""
    conv = converter or _CONVERTER
    return cast(JsonValue, conv.unstructure(value))


def loads(data: bytes, cls: type[T], *, max_bytes: int = MAX_DOCUMENT_BYTES) -> T:
    """Parse and structure one document; raises ``SerdeError``."""
    return structure(parse_json(data, max_bytes=max_bytes), cls)


def dumps(value: object) -> bytes:
    """Canonical JSON bytes of a record or plain value."""
    return canonical_json(unstructure(value))
