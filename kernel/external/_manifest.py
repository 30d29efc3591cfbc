"""The accepted manifest: claim, assurance, exact evidence list, pinned commands.

Rules (seed 003, "Roles and accepted declarations", "Command identity",
"Paths and input capture", "Argument placeholders"):

- the document is strict JSON (``kernel.serde.parse_json``) and structures
  exactly: no extra or missing fields, no coercion;
- ``specification`` and ``inputs`` are normalized repository-relative POSIX
  paths; ``evidence_artifacts`` are normalized paths relative to
  ``run_dir/evidence/``. Absolute paths, ``..`` segments, ``.`` segments,
  empty segments, backslashes and control characters are refused; a path is
  never rewritten, so the identity is exactly what the manifest says;
- ``specification`` and ``inputs`` must not resolve (through symlinks) outside
  the repository root when the manifest loads; the run checks it again when
  it copies the snapshot;
- executables and pinned files are absolute normalized paths with a lowercase
  SHA-256; a version string is not a pin;
- ``argv[0]`` is the pinned executable (``{{python}}`` or its literal path):
  no unpinned program is ever launched directly;
- every ``{{...}}`` in an argument is one of the six known placeholders;
- ``required_containment`` (optional: ``"subreaper"``, ``"namespace"`` or
  ``"sandbox"``) is the weakest containment the check may run under (ADR 0009,
  ADR 0018);
- ``required_containment_parts`` (optional: a list of distinct parts of the
  sandbox, ``"bounded_output"``, ``"cgroup"``, ``"filter"``, ``"uid"``,
  ``"view"``) are the parts the check must run with (ADR 0021); requiring a
  part requires the sandbox, so with a weaker ``required_containment`` it is
  refused;
- ``limits`` (optional; every one of its fields, each a positive integer,
  ``entries`` may be left out) replaces the default limits of a sandboxed
  step and of its evidence (ADR 0018, 0021).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Final, final

import attrs
import cattrs
from cattrs.v import format_exception

from kernel.external._contain import ContainmentLevel, ContainmentPart
from kernel.external._sandbox import DEFAULT_STEP_LIMITS, StepLimits
from kernel.external.errors import ManifestError
from kernel.identity import JsonValue, is_digest
from kernel.serde import OPTIONAL_ON_INPUT, SerdeError, make_converter, parse_json

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "PLACEHOLDERS",
    "CheckEntry",
    "Claim",
    "Command",
    "Manifest",
    "Pin",
    "check_identifier",
    "check_relative_path",
    "load_manifest",
    "parse_manifest",
]

MANIFEST_SCHEMA_VERSION: Final = 1
MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024
PLACEHOLDERS: Final = ("python", "snapshot", "run_dir", "request", "evidence", "receipt")

_IDENTIFIER: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_PLACEHOLDER: Final = re.compile(r"\{\{([^{}]*)\}\}")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


# --- guard clauses, shared by validators and the loader ----------------------


def check_identifier(value: str, what: str) -> None:
    """Refuse anything but a short ``[A-Za-z0-9][A-Za-z0-9._-]*`` name."""
    if _IDENTIFIER.fullmatch(value) is None:
        raise ManifestError("invalid_identifier", f"{what} {value!r} is not a plain identifier")


def _check_text(value: str, what: str) -> None:
    if not value or _CONTROL.search(value) is not None:
        raise ManifestError("invalid_text", f"{what} must be non-empty without control characters")


def check_relative_path(value: str, what: str) -> None:
    """Refuse a path that is not normalized, relative and POSIX (seed 003 paths)."""
    if value == "":
        raise ManifestError("path_empty", f"{what} is empty")
    if _CONTROL.search(value) is not None or "\\" in value:
        raise ManifestError("path_invalid", f"{what} {value!r} has a control character or '\\'")
    if value.startswith("/"):
        raise ManifestError("path_absolute", f"{what} {value!r} is absolute")
    segments = value.split("/")
    if ".." in segments:
        raise ManifestError("path_traversal", f"{what} {value!r} contains '..'")
    if "" in segments or "." in segments:
        raise ManifestError("path_not_normalized", f"{what} {value!r} is not normalized")


def _check_absolute_path(value: str, what: str) -> None:
    if _CONTROL.search(value) is not None or not value.startswith("/"):
        raise ManifestError("pin_path_not_absolute", f"{what} {value!r} is not an absolute path")
    if os.path.normpath(value) != value or value.startswith("//"):
        raise ManifestError("pin_path_not_normalized", f"{what} {value!r} is not normalized")


def _unique(values: tuple[str, ...], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ManifestError("duplicate_entry", f"{what} {value!r} appears twice")
        seen.add(value)


def _check_placeholders(argument: str) -> None:
    for name in _PLACEHOLDER.findall(argument):
        if name not in PLACEHOLDERS:
            raise ManifestError("unknown_placeholder", f"argument {argument!r} uses {{{{{name}}}}}")
    rest = _PLACEHOLDER.sub("", argument)
    if "{{" in rest or "}}" in rest:
        raise ManifestError(
            "malformed_placeholder", f"argument {argument!r} has a stray brace pair"
        )


# --- values --------------------------------------------------------------------


def _validate_pin(instance: Pin, _a: attrs.Attribute[str], _v: str) -> None:
    _check_absolute_path(instance.path, "pinned path")
    if not is_digest(instance.sha256):
        raise ManifestError(
            "invalid_sha256", f"pin for {instance.path!r} is not a lowercase SHA-256"
        )


@final
@attrs.frozen
class Pin:
    """An absolute file path and the SHA-256 of the bytes it must deliver."""

    path: str = attrs.field(validator=_validate_pin)
    sha256: str


def _validate_command(
    instance: Command, _a: attrs.Attribute[tuple[str, ...]], _v: tuple[str, ...]
) -> None:
    if not instance.argv:
        raise ManifestError("empty_argv", "argv is empty")
    for argument in instance.argv:
        if "\x00" in argument:
            raise ManifestError("invalid_argument", "an argument contains NUL")
        _check_placeholders(argument)
    if instance.argv[0] not in ("{{python}}", instance.executable.path):
        raise ManifestError(
            "argv_not_pinned_executable",
            f"argv[0] {instance.argv[0]!r} must be '{{{{python}}}}' or the pinned executable",
        )
    paths = tuple(pin.path for pin in instance.dependencies + instance.trusted_tool_dependencies)
    _unique(paths, "pinned file")


@final
@attrs.frozen
class Command:
    """One pinned command: argv vector (no shell), executable and pinned files."""

    argv: tuple[str, ...] = attrs.field(validator=_validate_command)
    executable: Pin
    dependencies: tuple[Pin, ...]
    trusted_tool_dependencies: tuple[Pin, ...]

    def pins(self) -> tuple[Pin, ...]:
        """Every pin of this command, executable first."""
        return (self.executable, *self.dependencies, *self.trusted_tool_dependencies)


def _validate_claim(instance: Claim, _a: attrs.Attribute[str], _v: str) -> None:
    check_relative_path(instance.specification, "specification")
    if not instance.obligations:
        raise ManifestError("no_obligations", "a claim names at least one obligation")
    for name in instance.obligations:
        check_identifier(name, "obligation")
    _unique(instance.obligations, "obligation")
    for assumption in instance.assumptions:
        _check_text(assumption, "assumption")
    _check_text(instance.model_scope, "model_scope")


@final
@attrs.frozen
class Claim:
    """The claim evidence must establish: specification, obligations, scope."""

    specification: str = attrs.field(validator=_validate_claim)
    obligations: tuple[str, ...]
    assumptions: tuple[str, ...]
    model_scope: str


def _validate_entry(instance: CheckEntry, _a: attrs.Attribute[str], _v: str) -> None:
    check_identifier(instance.check_id, "check_id")
    _check_text(instance.assurance, "assurance")
    for path in instance.inputs:
        check_relative_path(path, "input")
    _unique((instance.claim.specification, *instance.inputs), "declared input")
    if not instance.evidence_artifacts:
        raise ManifestError("no_evidence", "the evidence list is empty")
    for path in instance.evidence_artifacts:
        check_relative_path(path, "evidence artifact")
    _unique(instance.evidence_artifacts, "evidence artifact")
    required_parts = instance.required_containment_parts
    if required_parts is not None:
        _unique(tuple(part.value for part in required_parts), "required containment part")
        if instance.required_containment not in (None, ContainmentLevel.SANDBOX):
            raise ManifestError(
                "containment_conflict",
                "required_containment_parts are parts of the sandbox, but required_containment "
                f"is {instance.required_containment.value}",
            )
    declared = set(instance.evidence_artifacts)
    for path in instance.evidence_artifacts:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in declared:
                raise ManifestError(
                    "artifact_path_conflict", f"evidence artifact {path!r} lies under another one"
                )


@final
@attrs.frozen
class CheckEntry:
    """One approved check: what it claims and exactly how it is produced and checked."""

    check_id: str = attrs.field(validator=_validate_entry)
    claim: Claim
    assurance: str
    inputs: tuple[str, ...]
    evidence_artifacts: tuple[str, ...]
    producer: Command
    checker: Command
    # The weakest containment (ADR 0009) this check may run under; None: any.
    # Absent from a document means None, and then absent from identity(check).
    required_containment: ContainmentLevel | None = attrs.field(
        default=None, metadata={OPTIONAL_ON_INPUT: True}
    )
    # The parts of the sandbox this check must run with (ADR 0021); None: none named.
    # Absent from a document means None, and then absent from identity(check).
    required_containment_parts: tuple[ContainmentPart, ...] | None = attrs.field(
        default=None, metadata={OPTIONAL_ON_INPUT: True}
    )
    # What a sandboxed step may use and leave (ADR 0018); None: the defaults.
    # Absent from a document means None, and then absent from identity(check).
    limits: StepLimits | None = attrs.field(default=None, metadata={OPTIONAL_ON_INPUT: True})

    def step_limits(self) -> StepLimits:
        """The limits every step of this check runs under: its own, else the defaults."""
        return self.limits if self.limits is not None else DEFAULT_STEP_LIMITS

    def declared_inputs(self) -> tuple[str, ...]:
        """The specification (always included) followed by the other inputs."""
        return (self.claim.specification, *self.inputs)


def _validate_manifest(instance: Manifest, _a: attrs.Attribute[int], _v: int) -> None:
    if instance.schema_version != MANIFEST_SCHEMA_VERSION:
        raise ManifestError(
            "unsupported_schema_version",
            f"manifest schema_version {instance.schema_version} is not {MANIFEST_SCHEMA_VERSION}",
        )
    if not instance.checks:
        raise ManifestError("no_checks", "the manifest has no check entries")
    _unique(tuple(entry.check_id for entry in instance.checks), "check_id")


@final
@attrs.frozen
class Manifest:
    """The accepted external manifest: a versioned tuple of check entries."""

    schema_version: int = attrs.field(validator=_validate_manifest)
    checks: tuple[CheckEntry, ...]

    def entry(self, check_id: str) -> CheckEntry:
        """The entry named ``check_id``; raises ``ManifestError(unknown_check)``."""
        for entry in self.checks:
            if entry.check_id == check_id:
                return entry
        raise ManifestError("unknown_check", f"no check {check_id!r} in the manifest")


# --- loading -------------------------------------------------------------------

_CONVERTER: Final = make_converter()


def _format(exc: BaseException, type_: type | None) -> str:
    if isinstance(exc, ManifestError):
        return str(exc)
    return format_exception(exc, type_)


def _first_manifest_error(exc: BaseException) -> ManifestError | None:
    if isinstance(exc, ManifestError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_manifest_error(inner)
            if found is not None:
                return found
    return None


def parse_manifest(value: JsonValue) -> Manifest:
    """Structure a parsed manifest document; raises ``ManifestError``."""
    try:
        return _CONVERTER.structure(value, Manifest)
    except ManifestError:
        raise
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        messages = cattrs.transform_error(exc, path="$", format_exception=_format)
        leaf = _first_manifest_error(exc)
        if leaf is not None:
            where = next((m for m in messages if m.startswith(f"{leaf.code}: ")), str(leaf))
            raise ManifestError(leaf.code, where.removeprefix(f"{leaf.code}: ")) from exc
        raise ManifestError("manifest_schema", "; ".join(messages) or str(exc)) from exc


def _check_within_root(root: Path, relative: str) -> None:
    resolved = Path(os.path.realpath(root / relative))
    if not resolved.is_relative_to(root):
        raise ManifestError(
            "path_escapes_root", f"declared input {relative!r} resolves outside the repository"
        )


def _read_regular(path: Path, limit: int) -> bytes:
    # O_NONBLOCK: opening a FIFO does not wait for a writer; it is then refused.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(limit + 1)
    finally:
        os.close(fd)


def load_manifest(path: Path, *, repository_root: Path) -> Manifest:
    """Read, parse and structure a manifest file strictly; raises ``ManifestError``.

    Every declared input of every entry must resolve inside ``repository_root``
    (seed 003: paths are refused when the manifest loads, not when used).
    """
    try:
        data = _read_regular(path, MAX_MANIFEST_BYTES)
    except OSError as exc:  # also a FIFO, device or directory: refused, never read
        raise ManifestError("manifest_unreadable", f"{path}: {exc.strerror or exc}") from exc
    try:
        value = parse_json(data, max_bytes=MAX_MANIFEST_BYTES)
    except SerdeError as exc:  # the message names the file (it did not: issue 20)
        raise ManifestError(f"manifest_{exc.code}", f"{path}: {exc.message}") from exc
    manifest = parse_manifest(value)
    root = Path(os.path.realpath(repository_root))
    if not root.is_dir():
        raise ManifestError("repository_root_missing", f"{repository_root} is not a directory")
    for entry in manifest.checks:
        for relative in entry.declared_inputs():
            _check_within_root(root, relative)
    return manifest
