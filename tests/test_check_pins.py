"""`kernel check pins PATH...`: the pin closure, checked against the system's own loader.

The independent oracle is ``ldd`` (glibc's loader in trace mode), run with an
environment without ``LD_LIBRARY_PATH``; every digest is recomputed here with
``hashlib``. The subjects are real: this interpreter, ``/bin/sh``, the z3 and
cvc5 binaries the main job pins, and scripts written for the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernel.external import ClosureError, pin_closure
from tests.orchestrate_helpers import shipped_entry
from tests.support.cli import kernel
from tests.support.reference import sha256_file

LDD = shutil.which("ldd")
needs_ldd = pytest.mark.skipif(LDD is None, reason="ldd (glibc) is not installed")


def _ldd(path: str) -> set[str]:
    assert LDD is not None
    environment = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    done = subprocess.run(
        [LDD, path], capture_output=True, text=True, check=True, env=environment
    )
    found: set[str] = set()
    for line in done.stdout.splitlines():
        match = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if match:
            found.add(os.path.realpath(match.group(1)))
    return found


def _pins(*paths: str | Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    if env is None:
        done = kernel("check", "pins", *paths)
    else:
        done = subprocess.run(
            [sys.executable, "-m", "kernel", "check", "pins", *map(str, paths)],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fragment = json.loads(done.stdout)
    assert isinstance(fragment, dict)
    for pin in [fragment["executable"], *fragment["dependencies"],
                *fragment["trusted_tool_dependencies"]]:  # fmt: skip
        assert pin["sha256"] == sha256_file(pin["path"]), pin["path"]
    return fragment


def _trusted(fragment: dict[str, Any]) -> set[str]:
    return {p["path"] for p in fragment["trusted_tool_dependencies"]}


@needs_ldd
def test_the_python_interpreter_closure_is_the_loaders(tmp_path: Path) -> None:
    fragment = _pins(sys.executable)
    assert fragment["executable"]["path"] == os.path.abspath(sys.executable)
    real = os.path.realpath(sys.executable)
    expected = _ldd(real) - {real}
    assert _trusted(fragment) - {real} == expected
    assert all(os.path.realpath(p) == p for p in _trusted(fragment))  # symlinks resolved
    paths = [p["path"] for p in fragment["trusted_tool_dependencies"]]
    assert paths == sorted(paths)
    # The main job's own pins of this interpreter's libraries are in the closure.
    libpython = [
        pin.path
        for pin in shipped_entry().checker.trusted_tool_dependencies
        if "libpython" in pin.path
    ]
    assert {os.path.realpath(p) for p in libpython} <= _trusted(fragment) | {real}


@needs_ldd
@pytest.mark.parametrize("tool", ["z3", "cvc5_python_base"])
def test_the_main_jobs_solver_binaries_close_like_the_loader(tool: str) -> None:
    if tool == "z3":
        target = shutil.which("z3", path=str(Path(sys.executable).parent))
    else:
        import cvc5

        matches = sorted(Path(cvc5.__file__).parent.glob("cvc5_python_base*.so"))
        target = str(matches[0]) if matches else None
    if target is None:
        pytest.skip(f"{tool} is not installed next to this interpreter")
    fragment = _pins(target)
    real = os.path.realpath(target)
    assert _trusted(fragment) - {real} == _ldd(real) - {real}


@needs_ldd
def test_a_shell_scripts_interpreter_line_is_followed(tmp_path: Path) -> None:
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh -e\necho checked\n")
    script.chmod(0o755)
    fragment = _pins(script)
    assert fragment["executable"] == {"path": str(script), "sha256": sha256_file(str(script))}
    shell = os.path.realpath("/bin/sh")
    assert _trusted(fragment) == {shell} | _ldd(shell)


@needs_ldd
def test_an_env_interpreter_line_is_followed_on_the_given_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    script = tmp_path / "tool.py"
    script.write_text("#!/usr/bin/env python3\nprint('ok')\n")
    fragment = _pins(script, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    env_real = os.path.realpath("/usr/bin/env")
    python_real = os.path.realpath(sys.executable)
    expected = {env_real, python_real} | _ldd(env_real) | _ldd(python_real)
    assert _trusted(fragment) == expected


def test_a_script_named_after_its_interpreter_is_a_dependency(tmp_path: Path) -> None:
    script = tmp_path / "checker.py"
    script.write_text("print('ok')\n")
    fragment = _pins(sys.executable, script)
    assert fragment["dependencies"] == [{"path": str(script), "sha256": sha256_file(str(script))}]
    assert str(script) not in _trusted(fragment)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils readelf is not installed")
def test_a_missing_library_refuses_the_whole_closure(tmp_path: Path) -> None:
    # A real ELF with its last DT_NEEDED name (read by binutils' readelf)
    # changed, same length, to a library that exists nowhere: the closure is
    # incomplete, so nothing is printed.
    real = os.path.realpath(sys.executable)
    readelf = subprocess.run(
        ["readelf", "-d", real], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )  # fmt: skip
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", readelf.stdout)[-1]
    missing = "libzz" + needed[5:] if not needed.startswith("libzz") else "libyy" + needed[5:]
    data = Path(real).read_bytes()
    assert data.count(needed.encode() + b"\x00") >= 1
    broken = tmp_path / "python-broken"
    broken.write_bytes(data.replace(needed.encode() + b"\x00", missing.encode() + b"\x00"))
    done = kernel("check", "pins", broken)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: library_not_found: {missing}")
    with pytest.raises(ClosureError) as caught:
        pin_closure(broken)
    assert caught.value.code == "library_not_found"


def test_malformed_elf_and_missing_paths_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\xff" * 40)
    done = kernel("check", "pins", bad)
    assert done.returncode == 2 and done.stderr.startswith("error: elf_malformed: ")
    done = kernel("check", "pins", tmp_path / "absent")
    assert done.returncode == 2 and done.stderr.startswith("error: file_not_found: ")
    script = tmp_path / "orphan.sh"
    script.write_text("#!/nonexistent/interpreter\n")
    done = kernel("check", "pins", script)
    assert done.returncode == 2 and done.stderr.startswith("error: interpreter_not_found: ")


@needs_ldd
def test_the_main_job_pins_everything_the_loader_maps_into_each_step() -> None:
    # A swapped libc or ld.so runs inside the producer and the checker as surely
    # as a swapped script: the shipped entry pins what ldd says each step maps.
    import cvc5

    entry = shipped_entry()
    python = os.path.realpath(sys.executable)
    z3 = shutil.which("z3", path=str(Path(sys.executable).parent))
    assert z3 is not None
    extensions = sorted(Path(cvc5.__file__).parent.glob("*.so"))
    assert extensions
    producer_needs = _ldd(python) | _ldd(os.path.realpath(z3))
    checker_needs = _ldd(python).union(*(_ldd(str(p)) for p in extensions))
    for command, needs in ((entry.producer, producer_needs), (entry.checker, checker_needs)):
        pinned = {os.path.realpath(pin.path) for pin in command.trusted_tool_dependencies}
        assert needs - {python} <= pinned, sorted(needs - {python} - pinned)
        loader = [p for p in pinned if os.path.basename(p).startswith("ld-linux")]
        libc = [p for p in pinned if os.path.basename(p).startswith("libc.so")]
        assert loader and libc
        for pin in command.trusted_tool_dependencies:
            assert pin.sha256 == sha256_file(pin.path), pin.path
