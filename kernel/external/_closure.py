"""The pin closure of an executable: itself, its interpreters, every shared library it loads.

Theory of operation (seed 003 "pinned executable and dependencies"; ADR-0010
"kernel check pins"): a manifest pin is only as good as its coverage. An
executable runs the bytes of its ELF interpreter (``PT_INTERP``, the dynamic
loader) and of every library the loader maps for it, transitively; a script
runs the interpreter its ``#!`` line names. This module computes that set
from the files themselves, the way the loader would, and hashes each file:

- symlinks are resolved (``os.path.realpath``): the pin names the file whose
  bytes run, so a later retargeted link fails the pin instead of passing it;
- ELF is parsed here from the program headers (``PT_INTERP``, ``PT_DYNAMIC``,
  ``PT_LOAD``), so stripped objects without section headers work: the
  dynamic section's ``DT_NEEDED`` names are resolved as ld.so does, through
  ``DT_RPATH`` (of the object and of the objects that loaded it, only when the
  object has no ``DT_RUNPATH``), ``DT_RUNPATH`` (``$ORIGIN`` expanded), the
  directories of ``/etc/ld.so.conf`` (``include`` globs followed) and the
  default directories; a candidate of another ELF class or machine is
  skipped, as the loader skips it;
- ``LD_LIBRARY_PATH`` and ``LD_PRELOAD`` are ignored: they are environment,
  and the external protocol runs its commands with an environment it builds
  (``default_environment``), not the operator's;
- a ``#!`` line is followed: ``#!/usr/bin/env NAME`` pins ``env`` and the
  ``NAME`` found on the ``search_path`` given by the caller; the interpreter
  is then closed over in turn (a script interpreter of a script is followed
  too, up to a small depth);
- a ``DT_NEEDED`` name that cannot be found, an unreadable file, or a
  malformed ELF raises ``ClosureError`` with a stable code: an incomplete
  closure is never printed as if it were whole.

Nothing here runs a program (not ``ldd``: it would execute the loader on the
target). The manifest fragment pins the executable as given (made absolute
and normalised), the other command-line paths as ``dependencies`` and the
rest of the closure, sorted by path, as ``trusted_tool_dependencies``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external.errors import ExternalError
from kernel.identity import JsonValue

__all__ = [
    "ClosureError",
    "ElfInfo",
    "PinClosure",
    "pin_closure",
    "read_elf",
    "script_interpreter",
]

_ELF_MAGIC: Final = b"\x7fELF"
_PT_LOAD: Final = 1
_PT_DYNAMIC: Final = 2
_PT_INTERP: Final = 3
_DT_NULL: Final = 0
_DT_NEEDED: Final = 1
_DT_STRTAB: Final = 5
_DT_RPATH: Final = 15
_DT_RUNPATH: Final = 29
_MAX_SCRIPT_DEPTH: Final = 4
_MAX_HEADER: Final = 4096
_DEFAULT_DIRS: Final = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


@final
class ClosureError(ExternalError):
    """The closure of a path cannot be computed completely (stable ``code``)."""


@final
@attrs.frozen
class ElfInfo:
    """What the loader reads from one ELF object."""

    elf_class: int
    machine: int
    interpreter: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


@final
@attrs.frozen
class PinClosure:
    """An executable, the paths named beside it, and every file they make run, each hashed."""

    executable: tuple[str, str]
    dependencies: tuple[tuple[str, str], ...]
    trusted_tool_dependencies: tuple[tuple[str, str], ...]

    def fragment(self) -> JsonValue:
        """The manifest fragment: the pin fields of one command (``argv`` is the author's)."""

        def pin(item: tuple[str, str]) -> JsonValue:
            return {"path": item[0], "sha256": item[1]}

        return {
            "dependencies": [pin(p) for p in self.dependencies],
            "executable": pin(self.executable),
            "trusted_tool_dependencies": [pin(p) for p in self.trusted_tool_dependencies],
        }


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ClosureError("unreadable", f"{path}: {exc.strerror or exc}") from exc


def _sha256(path: str) -> str:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1024 * 1024):
                hasher.update(chunk)
    except OSError as exc:
        raise ClosureError("unreadable", f"{path}: {exc.strerror or exc}") from exc
    return hasher.hexdigest()


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(_MAX_HEADER)
    except OSError as exc:
        raise ClosureError("unreadable", f"{path}: {exc.strerror or exc}") from exc


def read_elf(data: bytes, where: str = "<bytes>") -> ElfInfo | None:
    """Parse the loader's view of an ELF object; ``None`` when ``data`` is not ELF.

    Raises ``ClosureError`` (``elf_malformed``) for a truncated or inconsistent object.
    """
    if not data.startswith(_ELF_MAGIC):
        return None
    try:
        return _parse_elf(data)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ClosureError("elf_malformed", f"{where}: {exc}") from exc


def _parse_elf(data: bytes) -> ElfInfo:
    elf_class, encoding = data[4], data[5]
    if elf_class not in (1, 2) or encoding not in (1, 2):
        raise ValueError("unknown ELF class or data encoding")
    end = "<" if encoding == 1 else ">"
    wide = elf_class == 2
    (machine,) = struct.unpack_from(end + "H", data, 18)
    if wide:
        phoff, = struct.unpack_from(end + "Q", data, 0x20)  # fmt: skip
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    else:
        phoff, = struct.unpack_from(end + "I", data, 0x1C)  # fmt: skip
        phentsize, phnum = struct.unpack_from(end + "HH", data, 0x2A)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    interpreter: str | None = None
    for index in range(phnum):
        at = phoff + index * phentsize
        if wide:
            p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(
                end + "IIQQQQ", data, at
            )
        else:
            p_type, offset, vaddr, _paddr, filesz = struct.unpack_from(end + "IIIII", data, at)
        if p_type == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (offset, filesz)
        elif p_type == _PT_INTERP:
            raw = data[offset : offset + filesz]
            if len(raw) != filesz:
                raise ValueError("PT_INTERP beyond the end of the file")
            interpreter = raw.split(b"\x00", 1)[0].decode("utf-8")
    needed_offsets: list[int] = []
    rpath_offsets: list[int] = []
    runpath_offsets: list[int] = []
    strtab: int | None = None
    if dynamic is not None:
        offset, size = dynamic
        entry = 16 if wide else 8
        fmt = end + ("qQ" if wide else "iI")
        for at in range(offset, offset + size - entry + 1, entry):
            tag, value = struct.unpack_from(fmt, data, at)
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                needed_offsets.append(value)
            elif tag == _DT_RPATH:
                rpath_offsets.append(value)
            elif tag == _DT_RUNPATH:
                runpath_offsets.append(value)
            elif tag == _DT_STRTAB:
                strtab = value
    names: dict[str, tuple[str, ...]] = {"needed": (), "rpath": (), "runpath": ()}
    if needed_offsets or rpath_offsets or runpath_offsets:
        if strtab is None:
            raise ValueError("a dynamic section without DT_STRTAB")
        base = _file_offset(strtab, loads)

        def string(at: int) -> str:
            stop = data.index(b"\x00", base + at)
            return data[base + at : stop].decode("utf-8")

        names["needed"] = tuple(string(o) for o in needed_offsets)
        names["rpath"] = tuple(p for o in rpath_offsets for p in string(o).split(":") if p)
        names["runpath"] = tuple(p for o in runpath_offsets for p in string(o).split(":") if p)
    return ElfInfo(
        elf_class, machine, interpreter, names["needed"], names["rpath"], names["runpath"]
    )


def _file_offset(vaddr: int, loads: Sequence[tuple[int, int, int]]) -> int:
    # DT_STRTAB holds an address; the loader maps it through a PT_LOAD segment.
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    raise ValueError(f"address {vaddr:#x} is in no PT_LOAD segment")


def script_interpreter(head: bytes) -> tuple[str, ...] | None:
    """The interpreter words of a ``#!`` line (path first), or ``None`` without one."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip()
    words = tuple(line.decode("utf-8", errors="strict").split())
    return words or None


def _ld_so_conf_dirs(conf: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    try:
        text = Path(conf).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include") and depth < 4:
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) == 2 else ""
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(conf), pattern)
            for included in sorted(glob.glob(pattern)):
                found.extend(_ld_so_conf_dirs(included, depth + 1))
        elif os.path.isabs(line):
            found.append(line)
    return found


def _expand_origin(entry: str, origin: str) -> str:
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def _matches(path: str, info: ElfInfo) -> bool:
    # The loader skips a library of another class or machine: e_ident and e_machine.
    try:
        head = _head(path)
    except ClosureError:
        return False
    if len(head) < 20 or not head.startswith(_ELF_MAGIC) or head[5] not in (1, 2):
        return False
    (machine,) = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)
    return head[4] == info.elf_class and machine == info.machine


def _resolve_needed(
    name: str, info: ElfInfo, origin: str, inherited_rpath: Sequence[str], system: Sequence[str]
) -> str:
    if "/" in name:
        candidates: Iterable[str] = [name if os.path.isabs(name) else os.path.join(origin, name)]
    else:
        directories: list[str] = []
        if not info.runpath:
            directories.extend(_expand_origin(d, origin) for d in info.rpath)
            directories.extend(inherited_rpath)
        directories.extend(_expand_origin(d, origin) for d in info.runpath)
        directories.extend(system)
        candidates = (os.path.join(d, name) for d in directories)
    for candidate in candidates:
        if os.path.isfile(candidate) and _matches(candidate, info):
            return os.path.realpath(candidate)
    raise ClosureError("library_not_found", f"{name} (needed by {origin}) is found nowhere")


def pin_closure(
    executable: Path,
    dependencies: Sequence[Path] = (),
    *,
    search_path: Sequence[str] = (),
    library_dirs: Sequence[str] | None = None,
) -> PinClosure:
    """The pins of ``executable``, ``dependencies`` and everything they make run.

    ``search_path`` is where ``#!/usr/bin/env NAME`` finds ``NAME`` (the
    caller passes its ``PATH`` explicitly); ``library_dirs`` replaces the
    system directories (``/etc/ld.so.conf`` then the defaults) when given.
    Raises ``ClosureError`` when any part of the closure cannot be found or read.
    """
    system = list(library_dirs) if library_dirs is not None else [
        *_ld_so_conf_dirs(), *_DEFAULT_DIRS,
    ]  # fmt: skip
    named = [os.path.abspath(executable), *(os.path.abspath(d) for d in dependencies)]
    for path in named:
        if not os.path.lexists(path):
            raise ClosureError("file_not_found", f"{path}: no such file")
        if not os.path.isfile(path):
            raise ClosureError("not_a_file", f"{path}: not a regular file")
    closure: set[str] = set()
    for path in named:
        _close_over(path, closure, search_path, system, (), 0)
    pinned = set(named) | {os.path.realpath(p) for p in named}
    rest = sorted(closure - pinned)
    return PinClosure(
        (named[0], _sha256(named[0])),
        tuple((p, _sha256(p)) for p in named[1:]),
        tuple((p, _sha256(p)) for p in rest),
    )


def _close_over(
    path: str,
    closure: set[str],
    search_path: Sequence[str],
    system: Sequence[str],
    inherited_rpath: tuple[str, ...],
    depth: int,
) -> None:
    real = os.path.realpath(path)
    if real in closure:
        return
    closure.add(real)
    head = _head(real)
    words = script_interpreter(head)
    if words is not None:
        if depth >= _MAX_SCRIPT_DEPTH:
            raise ClosureError("interpreter_loop", f"{path}: #! interpreters nest too deep")
        interpreter = words[0]
        if not os.path.isabs(interpreter) or not os.path.isfile(interpreter):
            raise ClosureError("interpreter_not_found", f"{path}: #!{interpreter} is no file")
        _close_over(interpreter, closure, search_path, system, (), depth + 1)
        if os.path.basename(interpreter) == "env":
            program = next((w for w in words[1:] if not w.startswith("-")), None)
            if program is None:
                raise ClosureError(
                    "interpreter_not_found", f"{path}: #!{interpreter} names no program"
                )
            _close_over(_which(program, search_path, path), closure, search_path, system, (),
                        depth + 1)  # fmt: skip
        return
    info = read_elf(_read_file(real), real)
    if info is None:
        return  # a data file (e.g. a Python source named beside its interpreter)
    origin = os.path.dirname(real)
    if info.interpreter is not None:
        loader = info.interpreter
        if not os.path.isfile(loader):
            raise ClosureError("interpreter_not_found", f"{path}: loader {loader} is no file")
        _close_over(loader, closure, search_path, system, (), depth)
    rpath = inherited_rpath + tuple(_expand_origin(d, origin) for d in info.rpath)
    for name in info.needed:
        library = _resolve_needed(name, info, origin, inherited_rpath, system)
        _close_over(library, closure, search_path, system, rpath, depth)


def _which(program: str, search_path: Sequence[str], script: str) -> str:
    if "/" in program:
        if os.path.isfile(program):
            return os.path.abspath(program)
    else:
        for directory in search_path:
            candidate = os.path.join(directory, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    raise ClosureError(
        "interpreter_not_found", f"{script}: env program {program!r} is not on the search path"
    )
