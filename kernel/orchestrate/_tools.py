"""The SMT certification pair as a pinned external check entry.

Rules (seed 003 "Command identity"; ADR-0004; ADR-0006):

- the producer (``kernel/programs/smt_certify_producer.py``, running the z3
  binary) and the checker (``kernel/programs/smt_certify_checker.py``, loading
  cvc5) ship inside the package and run as scripts by absolute path under the given
  interpreter; nothing is looked up on ``PATH``;
- every pin is computed from the bytes on this machine when the entry is
  built: executable (the interpreter), the script as a dependency, and as
  trusted tools libpython plus the solver files each side loads (the z3
  binary; cvc5's package files and bundled libraries), and the shared
  libraries the dynamic loader maps for the interpreter, z3 and cvc5's
  extension modules (the loader itself, libc, libm, libstdc++...), found by the
  same ELF walk as ``kernel check pins`` (ADR 0009). Python modules the scripts
  import stay unpinned (ADR-0004 "What is not guaranteed");
- the claim is fixed: the specification ``certification.smt2`` (written per
  attempt), one obligation, two artifacts.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external import (
    CheckEntry,
    Claim,
    ClosureError,
    Command,
    ContainmentLevel,
    ContainmentPart,
    ManifestError,
    Pin,
    pin_closure,
)
from kernel.orchestrate.errors import CertifierSetupError

__all__ = [
    "BACKENDS_DIR",
    "CERTIFY_CHECK_ID",
    "CERTIFY_OBLIGATION",
    "CERTIFY_SPECIFICATION",
    "CertifierTools",
    "certification_entry",
    "discover_tools",
    "this_machine_entry",
]

# The programs the certifier runs (not modules: kernel/programs has no __init__.py).
BACKENDS_DIR: Final = Path(__file__).resolve().parents[1] / "programs"
CERTIFY_CHECK_ID: Final = "arithmetic-target-certified"
CERTIFY_OBLIGATION: Final = "target_certified"
CERTIFY_SPECIFICATION: Final = "certification.smt2"
_CHUNK: Final = 1024 * 1024


def _absolute(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if type(value) is not str or not value.startswith("/"):
        raise ValueError(f"{attribute.name} must be an absolute path, got {value!r}")


def _absolutes(_: object, attribute: attrs.Attribute[tuple[str, ...]], value: object) -> None:
    if type(value) is not tuple or not all(
        type(p) is str and p.startswith("/") for p in value
    ):
        raise ValueError(f"{attribute.name} must be a tuple of absolute paths")


@final
@attrs.frozen
class CertifierTools:
    """Absolute paths of everything the SMT pair runs or loads as code."""

    python: str = attrs.field(validator=_absolute)
    z3: str = attrs.field(validator=_absolute)
    producer_script: str = attrs.field(validator=_absolute)
    checker_script: str = attrs.field(validator=_absolute)
    libpython: tuple[str, ...] = attrs.field(validator=_absolutes)
    cvc5_files: tuple[str, ...] = attrs.field(validator=_absolutes)
    # The loader closure (ld.so, libc, libm, libstdc++...) of the interpreter,
    # z3 and cvc5's extension modules, minus what the fields above already pin:
    # a swapped libc runs inside both steps as surely as a swapped checker.
    system_libraries: tuple[str, ...] = attrs.field(default=(), validator=_absolutes)


#: How to get the pair: the distribution's ``certify`` extra installs both.
_CERTIFY_HINT: Final = (
    "z3 and cvc5 come with the certify extra: pip install 'failclosed-replay[certify]'"
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise CertifierSetupError(
            "tool_missing", f"python package {name!r} is not installed ({_CERTIFY_HINT})"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _libpython() -> tuple[str, ...]:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    candidate = Path(sysconfig.get_config_var("LIBDIR") or "") / name
    return (str(candidate.resolve()),) if name and candidate.is_file() else ()


def _loader_closure(roots: Sequence[str], pinned: Sequence[str]) -> tuple[str, ...]:
    found: set[str] = set()
    for root in roots:
        try:
            closure = pin_closure(Path(root), library_dirs=None)
        except ClosureError as exc:
            raise CertifierSetupError("tool_unreadable", exc.message) from exc
        found.update(path for path, _ in closure.trusted_tool_dependencies)
    already = {os.path.realpath(p) for p in (*roots, *pinned)}
    return tuple(sorted(found - already))


def discover_tools(python: Path) -> CertifierTools:
    """The pair as installed for ``python`` (the running interpreter's packages).

    ``python`` is the interpreter both scripts run under; pass
    ``Path(sys.executable)`` so that the cvc5 found here is the one the
    checker loads. The z3 binary is the one ``z3-solver`` installs next to
    it. Raises ``CertifierSetupError(tool_missing)`` when either is absent.
    """
    interpreter = Path(python).absolute()
    z3 = interpreter.parent / "z3"
    if not z3.is_file():
        raise CertifierSetupError(
            "tool_missing", f"no z3 binary next to {interpreter} ({_CERTIFY_HINT})"
        )
    package = _package_dir("cvc5")
    libs = package.parent / "cvc5.libs"
    extensions = sorted(package.glob("*.so"))
    cvc5_files = [package / "__init__.py", *extensions]
    cvc5_files += sorted(libs.glob("*.so*")) if libs.is_dir() else []
    libpython = _libpython()
    cvc5_paths = tuple(str(p) for p in cvc5_files)
    return CertifierTools(
        python=str(interpreter),
        z3=str(z3.absolute()),
        producer_script=str(BACKENDS_DIR / "smt_certify_producer.py"),
        checker_script=str(BACKENDS_DIR / "smt_certify_checker.py"),
        libpython=libpython,
        cvc5_files=cvc5_paths,
        system_libraries=_loader_closure(
            (str(interpreter), str(z3.absolute()), *(str(p) for p in extensions)),
            (*libpython, *cvc5_paths),
        ),
    )


def _pin(path: str) -> Pin:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                hasher.update(chunk)
    except OSError as exc:
        raise CertifierSetupError("tool_unreadable", f"{path}: {exc.strerror or exc}") from exc
    return Pin(path, hasher.hexdigest())


def _command(python: str, script: str, extra: Sequence[str], tools: Sequence[str]) -> Command:
    return Command(
        argv=("{{python}}", script, *extra),
        executable=_pin(python),
        dependencies=(_pin(script),),
        trusted_tool_dependencies=tuple(_pin(p) for p in tools),
    )


def certification_entry(tools: CertifierTools) -> CheckEntry:
    """The approved check entry for the pair, pinned to the files as they are now.

    Raises ``CertifierSetupError`` when a file cannot be read or the entry is
    not a valid manifest entry.
    """
    try:
        return CheckEntry(
            check_id=CERTIFY_CHECK_ID,
            claim=Claim(
                specification=CERTIFY_SPECIFICATION,
                obligations=(CERTIFY_OBLIGATION,),
                assumptions=(
                    "quantities are unbounded mathematical integers (SMT-LIB Int)",
                    "the specification is kernel.organs.certification_problem of the candidate",
                ),
                model_scope="QF_NIA; two copies of every quantity, all integer values",
            ),
            assurance="independent-solver-recheck",
            inputs=(),
            evidence_artifacts=(f"{CERTIFY_OBLIGATION}.smt2", "z3-answer.txt"),
            producer=_command(
                tools.python,
                tools.producer_script,
                ("--z3", tools.z3, "{{request}}"),
                (*tools.libpython, tools.z3, *tools.system_libraries),
            ),
            checker=_command(
                tools.python,
                tools.checker_script,
                ("{{request}}", "{{receipt}}"),
                (*tools.libpython, *tools.cvc5_files, *tools.system_libraries),
            ),
            # A certification is only as good as its checker's isolation: never
            # run the pair weaker than the sandbox (ADR 0018).
            required_containment=ContainmentLevel.SANDBOX,
            # Named, not implied: the allow-list view and the syscall filter on
            # every machine. A root kernel's own uid per step and a cgroup where
            # one is delegated are had wherever the machine gives them
            # (ADR 0021), so an ordinary user without delegation still certifies.
            required_containment_parts=(ContainmentPart.FILTER, ContainmentPart.VIEW),
        )
    except ManifestError as exc:
        raise CertifierSetupError("entry_invalid", exc.message) from exc


@functools.cache
def this_machine_entry() -> CheckEntry | None:
    """This process's own certify entry (its interpreter's tools, pinned), once; None: none.

    What a worker under another prefix certifies with when it holds the
    driver's bytes (``ExternalCertifier.on_this_machine``, issue 36).
    """
    try:
        return certification_entry(discover_tools(Path(sys.executable)))
    except Exception as exc:  # no tools here: the driver's entry stays, and fails closed
        logging.getLogger("kernel.orchestrate").warning(
            "this machine has no certify tools of its own: %s", exc)
        return None
