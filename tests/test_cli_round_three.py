"""Small messages and one vocabulary of options (issue 35, findings 8 and 10).

Each case runs the real command line in a fresh interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import kernel


@pytest.mark.parametrize("command", ["attest", "audit"])
@pytest.mark.parametrize("kind", ["file", "absent"])
def test_a_run_dir_that_is_no_directory_is_not_a_directory_for_audit_and_attest_alike(
    tmp_path: Path, command: str, kind: str
) -> None:
    # attest used to say "unwritable_output: --out FILE/attestation.dsse.json: Not a
    # directory" where audit says not_a_directory.
    target = tmp_path / "run"
    if kind == "file":
        target.write_text("")
    key = tmp_path / "key.pem"
    key.write_text("")
    args = ("--key", key) if command == "attest" else ()
    done = kernel(command, target, *args)
    assert done.returncode == 2, done.stderr
    what = "not a directory" if kind == "file" else "no such directory"
    assert done.stderr == f"error: not_a_directory: {target}: {what}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["key.pem", *(["run"] if kind == "file" else [])])


def test_attest_takes_o_as_every_writing_command_does() -> None:
    done = kernel("attest", "--help")
    assert done.returncode == 0
    assert "-o, --out" in done.stdout or "-o FILE, --out FILE" in done.stdout, done.stdout
