"""JSON Schemas (draft 2020-12) generated from the attrs records (ADR 0014). Pure.

The schemas describe, for integrators in any language, the documents the
kernel reads and writes; they are generated from the same attrs classes and
type annotations the strict cattrs converter of ``kernel.serde`` structures,
so they cannot drift from the code (``tests/test_schemas.py`` regenerates the
committed ``schemas/`` and compares bytes).

Rules of the translation (each mirrors what ``kernel.serde`` accepts):

- an attrs record is an object with exactly its fields
  (``additionalProperties: false``); a field is required unless it has a
  default (cattrs structures a missing defaulted field to its default);
- ``int``, ``str``, ``bool`` and ``None`` are the JSON types integer, string,
  boolean and null (the converter never coerces between them);
- a field marked ``kernel.serde.FLATTENED`` (a group of fields kept in its
  own record) contributes its group's fields as properties of the enclosing
  object, as the converter reads and writes them, and gets no ``$defs``
  entry of its own;
- ``tuple[X, ...]`` is an array of X; ``X | None`` is X or null; an enum is
  the list of its values;
- the shared field validators of ``kernel._values`` add what a schema can say
  (a digest is 64 lowercase hex digits, a name is non-empty, a count is
  non-negative).

A schema is a *necessary* condition, never a sufficient one: identities,
cross-field rules and the record validators are the kernel's to check, so a
document that validates may still be refused (with a typed code), while a
document the kernel accepts always validates.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from enum import Enum
from types import NoneType, UnionType
from typing import Final, final

import attrs

from kernel._values import DIGEST, NAME, NON_NEGATIVE_INT, OPTIONAL_DIGEST
from kernel.identity import DIGEST_PATTERN, JsonValue
from kernel.serde import FLATTENED

__all__ = [
    "SCHEMA_DIALECT",
    "SchemaError",
    "closed_object_schema",
    "composite_schema",
    "digest_schema",
    "enum_values",
    "record_schema",
    "render_schema",
]

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

_DIGEST_SCHEMA: Final[Mapping[str, JsonValue]] = {
    "type": "string",
    "pattern": f"^{DIGEST_PATTERN.pattern}$",
}

Schema = dict[str, JsonValue]


@final
class SchemaError(TypeError):
    """A type the schema generator cannot translate (a programming error, never input)."""


def _enum_schema(kind: type[Enum]) -> Schema:
    values: list[JsonValue] = []
    for member in kind:
        value = member.value
        if type(value) is not str and type(value) is not int:
            raise SchemaError(f"{kind.__name__}.{member.name} has a non-JSON value {value!r}")
        values.append(value)
    return {"enum": values}


def _properties(record: type) -> list[tuple[attrs.Attribute[object], object]]:
    """The document's properties of ``record``: each field and its type.

    A ``FLATTENED`` field is replaced in place by its group's fields.
    """
    hints = typing.get_type_hints(record)
    result: list[tuple[attrs.Attribute[object], object]] = []
    for field in attrs.fields(record):
        kind = hints[field.name]
        if field.metadata.get(FLATTENED):
            if not (isinstance(kind, type) and attrs.has(kind)):
                raise SchemaError(f"{record.__name__}.{field.name} is flattened but not a record")
            result.extend(_properties(kind))
        else:
            result.append((field, kind))
    return result


@final
class _Builder:
    """Walks one root's types, collecting one ``$defs`` entry per attrs record."""

    def __init__(self, roots: Sequence[object]) -> None:
        self.defs: dict[str, Schema] = {}
        self._names: dict[type, str] = {}
        records: list[type] = []
        for root in roots:
            self._collect(root, records)
        # Two records may share a class name (kernel.verification.Claim and
        # kernel.external.Claim); such names are qualified by their package.
        short: dict[str, int] = {}
        for record in records:
            short[record.__name__] = short.get(record.__name__, 0) + 1
        for record in records:
            name = record.__name__
            if short[name] > 1:
                package = record.__module__.removeprefix("kernel.").split(".")[0]
                name = f"{package}.{name}"
            self._names[record] = name
        for record in records:
            self.defs[self._names[record]] = self._record(record)

    def _collect(self, tp: object, records: list[type]) -> None:
        if isinstance(tp, type) and attrs.has(tp):
            if tp in records:
                return
            records.append(tp)
            for _, kind in _properties(tp):
                self._collect(kind, records)
            return
        for arg in typing.get_args(tp):
            if arg is not Ellipsis:
                self._collect(arg, records)

    def ref(self, tp: type) -> Schema:
        return {"$ref": f"#/$defs/{self._names[tp]}"}

    def _record(self, record: type) -> Schema:
        properties: dict[str, JsonValue] = {}
        required: list[JsonValue] = []
        for field, kind in _properties(record):
            properties[field.name] = self._field(kind, field.validator)
            if field.default is attrs.NOTHING:
                required.append(field.name)
        schema: Schema = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        doc = (record.__doc__ or "").strip()
        if doc:
            schema["description"] = doc.splitlines()[0]
        return schema

    def _field(self, tp: object, validator: object) -> Schema:
        schema = self.type_schema(tp)
        # Identity comparison: only the shared validators have a known meaning.
        if validator is DIGEST:
            return dict(_DIGEST_SCHEMA)
        if validator is OPTIONAL_DIGEST:
            return {"anyOf": [dict(_DIGEST_SCHEMA), {"type": "null"}]}
        if validator is NAME and schema == {"type": "string"}:
            return {"type": "string", "minLength": 1}
        if validator is NON_NEGATIVE_INT and schema == {"type": "integer"}:
            return {"type": "integer", "minimum": 0}
        return schema

    def type_schema(self, tp: object) -> Schema:
        if tp is NoneType or tp is None:
            return {"type": "null"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is str:
            return {"type": "string"}
        if isinstance(tp, type) and issubclass(tp, Enum):
            return _enum_schema(tp)
        if isinstance(tp, type) and attrs.has(tp):
            return self.ref(tp)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.type_schema(args[0])}
            return {
                "type": "array",
                "prefixItems": [self.type_schema(arg) for arg in args],
                "items": False,
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin is UnionType or origin is typing.Union:
            return {"anyOf": [self.type_schema(arg) for arg in args]}
        raise SchemaError(f"no JSON Schema translation for {tp!r}")


def record_schema(
    name: str, title: str, description: str, roots: Sequence[type]
) -> dict[str, JsonValue]:
    """The schema of a document that is one of ``roots`` (attrs records).

    One root gives ``$ref`` to its definition; several give ``oneOf`` (the
    converter tells them apart by their fields, and no document fits two).
    Raises ``SchemaError`` for a field type with no translation.
    """
    if not roots:
        raise SchemaError("a schema needs at least one root record")
    builder = _Builder(roots)
    schema: dict[str, JsonValue] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"urn:failclosed-replay:schema:{name}",
        "title": title,
        "description": description,
    }
    refs = [builder.ref(root) for root in roots]
    if len(refs) == 1:
        schema.update(refs[0])
    else:
        schema["oneOf"] = list(refs)
    schema["$defs"] = dict(builder.defs)
    return schema


def closed_object_schema(
    name: str,
    title: str,
    description: str,
    properties: Mapping[str, Mapping[str, JsonValue]],
) -> dict[str, JsonValue]:
    """The schema of a plain JSON object with exactly ``properties`` (no attrs record).

    For the documents the kernel checks field by field instead of structuring
    (a backend's output document, a checker's receipt).
    """
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"urn:failclosed-replay:schema:{name}",
        "title": title,
        "description": description,
        "type": "object",
        "properties": {key: dict(value) for key, value in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }


PropertySpec = Mapping[str, JsonValue] | type | UnionType | tuple[type, ...]


def composite_schema(
    name: str,
    title: str,
    description: str,
    properties: Mapping[str, PropertySpec],
    *,
    optional: Sequence[str] = (),
) -> dict[str, JsonValue]:
    """A closed JSON object whose properties may embed attrs records (line envelopes).

    For the documents that wrap records without being a record themselves (an
    outcome line, a stream's header line): each property is either a literal
    schema (a mapping), a type translated by the same rules as a record field
    (records land in ``$defs``), or a tuple of records (``oneOf``, as in
    ``record_schema``). Every property is required except those in ``optional``.
    """
    roots: list[object] = []
    for spec in properties.values():
        if isinstance(spec, tuple):
            roots.extend(spec)
        elif not isinstance(spec, Mapping):
            roots.append(spec)
    builder = _Builder(roots)
    rendered: dict[str, JsonValue] = {}
    for key, spec in properties.items():
        if isinstance(spec, tuple):
            refs: list[JsonValue] = [builder.ref(record) for record in spec]
            rendered[key] = {"oneOf": refs}
        elif isinstance(spec, Mapping):
            rendered[key] = dict(spec)
        else:
            rendered[key] = builder.type_schema(spec)
    schema: dict[str, JsonValue] = {
        "$schema": SCHEMA_DIALECT,
        "$id": f"urn:failclosed-replay:schema:{name}",
        "title": title,
        "description": description,
        "type": "object",
        "properties": rendered,
        "required": [key for key in properties if key not in optional],
        "additionalProperties": False,
    }
    if builder.defs:
        schema["$defs"] = dict(builder.defs)
    return schema


def enum_values(kind: type[Enum]) -> dict[str, JsonValue]:
    """``{"enum": [...]}`` for an enum's values, for hand-assembled properties."""
    return _enum_schema(kind)


def digest_schema() -> dict[str, JsonValue]:
    """A lowercase hex SHA-256 string."""
    return dict(_DIGEST_SCHEMA)


def render_schema(schema: Mapping[str, JsonValue]) -> bytes:
    """The committed bytes of a schema: sorted keys, two-space indent, final newline.

    Readable rather than canonical (people read schemas); deterministic all
    the same, so regenerating gives the same bytes.
    """
    return (json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
