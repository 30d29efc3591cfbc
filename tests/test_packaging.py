"""The package as published (ADR 0014): metadata, pins, licence and the public API.

`make package` builds the sdist and wheel, runs `twine check` and installs the
wheel into a fresh venv (too slow and too networked for the unit suite);
these tests keep the inputs of that build honest on every run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import kernel

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT: dict[str, Any] = PYPROJECT["project"]

PUBLIC_MODULES = (
    "kernel.identity", "kernel.serde", "kernel.frames", "kernel.upstream", "kernel.drafts",
    "kernel.schemas", "kernel.replay", "kernel.verification", "kernel.organs",
    "kernel.external", "kernel.orchestrate", "kernel.audit",
)


def requirements() -> list[tuple[str, Requirement]]:
    found = [("runtime", Requirement(text)) for text in PROJECT["dependencies"]]
    for extra, texts in PROJECT["optional-dependencies"].items():
        found += [(extra, Requirement(text)) for text in texts]
    return found


def pins() -> dict[str, Version]:
    pinned: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        assert version, f"constraints.txt: {line!r} is not an exact pin"
        pinned[re.sub(r"[-_.]+", "-", name).lower()] = Version(version)
    return pinned


def test_distribution_name_is_distinctive_and_the_import_package_is_kernel() -> None:
    assert PROJECT["name"] == "failclosed-replay"
    # `kernel` is the launcher that holds signals through start-up (ADR 0013); the
    # console script it runs is kernel-python.
    assert PROJECT["scripts"] == {"kernel-python": "kernel.cli:main"}
    assert PYPROJECT["tool"]["setuptools"]["script-files"] == ["bin/kernel"]
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["kernel*"]


def test_extras_are_named_for_what_they_do() -> None:
    extras = set(PROJECT["optional-dependencies"])
    assert {"certify", "sat", "scale", "dev"} <= extras
    assert "examples" not in extras


def test_runtime_and_extra_requirements_are_ranges_not_pins() -> None:
    for extra, requirement in requirements():
        operators = {spec.operator for spec in requirement.specifier}
        assert "==" not in operators and "===" not in operators, (extra, str(requirement))
        assert any(op in operators for op in (">=", ">")), (extra, str(requirement))
        assert any(op in operators for op in ("<", "<=")), (extra, str(requirement))


def test_constraints_pin_every_requirement_inside_its_range() -> None:
    pinned = pins()
    for extra, requirement in requirements():
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pinned, f"{requirement.name} ({extra}) has no pin in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside {requirement} ({extra})"
        )


def test_version_is_one_number() -> None:
    assert kernel.__version__ == PROJECT["version"]
    assert importlib.metadata.version("failclosed-replay") == PROJECT["version"]


def test_license_is_the_apache_2_text_pyproject_names() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported: list[str] = module.__all__
    assert exported, module_name
    for name in exported:
        value = getattr(module, name)  # every listed name exists
        if inspect.isfunction(value) or inspect.isclass(value):
            assert (value.__doc__ or "").strip(), f"{module_name}.{name} has no docstring"


_DOTTED = re.compile(r"`(kernel(?:\.[a-z_]+)+)(?:\.([A-Za-z_][A-Za-z0-9_]*))?`")
_IMPORT = re.compile(r"^\s*from (kernel(?:\.[a-z_]+)*) import ([A-Za-z_][A-Za-z0-9_, ]*)$", re.M)


def documented_references() -> list[tuple[str, str, str | None]]:
    """(document, module, name) for every kernel API a README or docs page names."""
    found: list[tuple[str, str, str | None]] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for match in _DOTTED.finditer(text):
            found.append((doc.name, match.group(1), match.group(2)))
        for match in _IMPORT.finditer(text):
            for name in match.group(2).split(","):
                found.append((doc.name, match.group(1), name.strip()))
    return found


def test_docs_name_only_exported_api() -> None:
    references = documented_references()
    assert references
    for doc, module_name, name in references:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            # `kernel.organs.CERTIFIED_MANIFEST`: the last part is a name, not a module.
            parent, _, last = module_name.rpartition(".")
            module, name = importlib.import_module(parent), last
        if name is None:
            continue
        assert hasattr(module, name), f"{doc}: {module.__name__}.{name} does not exist"
        private = any(part.startswith("_") for part in module.__name__.split("."))
        exported = getattr(module, "__all__", None)
        if not private and exported is not None:
            assert name in exported, f"{doc}: {module.__name__}.{name} is not in __all__"


def test_the_certifier_programs_ship_as_package_data() -> None:
    # kernel/programs has no __init__.py (its scripts run as programs, not
    # modules): only the package-data glob puts them in the wheel, and the
    # certification entry finds them there by path.
    from kernel.orchestrate import BACKENDS_DIR

    programs = ROOT / "kernel" / "programs"
    assert programs.resolve() == BACKENDS_DIR
    assert not (programs / "__init__.py").exists()
    shipped = PYPROJECT["tool"]["setuptools"]["package-data"]["kernel"]
    scripts = sorted(p.name for p in programs.glob("*.py"))
    assert scripts == ["smt_certify_checker.py", "smt_certify_producer.py"]
    assert "programs/*.py" in shipped
