"""Unix manners of the command line: version, help, completion, stdin/stdout, umask, summaries."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernel
from kernel.cli import COMMANDS, app
from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"
runner = CliRunner()


def _kernel(*args: str | Path, stdin: bytes | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)], input=stdin,
                          capture_output=True, timeout=120, check=False,
                          env=None if env is None else {**os.environ, **env})


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    done = _kernel(flag)
    assert done.returncode == 0
    assert done.stdout.decode() == f"kernel {kernel.__version__}\n"


def test_version_imports_no_command_line_library() -> None:
    code = ("import sys; from kernel.cli import main; sys.argv = ['kernel', '--version']; main(); "
            "print(sorted(m for m in ('typer', 'click', 'rich', 'dask', 'kernel.commands') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "[]"


def test_help_lists_every_command_without_importing_them() -> None:
    code = ("import sys, kernel.cli as c; from typer.main import get_command; "
            "get_command(c.app).main(['--help'], standalone_mode=False); "
            "print(sorted(m for m in sys.modules if m.startswith('kernel.commands') "
            "or m.split('.')[0] in ('rich', 'dask')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "[]"
    for name in COMMANDS:
        assert re.search(rf"^  {name} ", done.stdout, re.MULTILINE), name


def test_kernel_check_run_imports_neither_pydantic_nor_the_replay_machine() -> None:
    # Each was about 100-300 ms of CPU in every `kernel check run` (typer 0.29
    # coerced parameters through pydantic; the bundle reader was imported eagerly).
    code = (
        "import sys\n"
        "from kernel.cli import main\n"
        "sys.argv = ['kernel', 'check', 'run', '/nonexistent/m.json', 'c', "
        "'--job', '/nonexistent/j.json', '--run-root', '/nonexistent/r']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    print(exc.code)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' "
        "or m in ('kernel.replay', 'kernel.bundles', 'kernel.drafts')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert "manifest_unreadable" in done.stderr, done.stderr  # the command ran, and refused
    assert done.stdout.splitlines() == ["2", "[]"], done.stdout


@pytest.mark.parametrize("args", [["-h"], ["replay", "-h"], ["run", "-h"], ["bundle", "-h"],
                                  ["digest", "-h"], ["verify", "plan", "-h"],
                                  ["check", "run", "-h"]])
def test_dash_h_is_help(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage: kernel" in result.stdout


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", b"complete -o default -F _kernel_completion kernel"),
    ("zsh", b"#compdef kernel"),
    ("fish", b"complete --command kernel"),
    ("pwsh", b"Register-ArgumentCompleter"),
])
def test_shell_completion_prints_the_named_shell_s_script(shell: str, marker: bytes) -> None:
    # typer's own option ignored the name and printed the script of the shell
    # it ran in ("--show-completion zsh" from bash gave bash's), or, with no
    # shell among its parents, "Shell  not supported.": pytest runs it with none.
    done = _kernel("--show-completion", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout and b"_KERNEL_COMPLETE" in done.stdout


def test_completion_completes_command_names() -> None:
    done = _kernel(env={"_KERNEL_COMPLETE": "complete_bash", "COMP_WORDS": "kernel re",
                        "COMP_CWORD": "1"})
    assert done.stdout.split() == [b"replay"]


@pytest.mark.parametrize("option", ["--show-completion", "--install-completion"])
@pytest.mark.parametrize("shell", ["nosuch", "", "BASH", "sh"])
def test_completion_refuses_a_shell_it_has_no_script_for(
    tmp_path: Path, option: str, shell: str
) -> None:
    done = _kernel(option, shell, env={"HOME": str(tmp_path)})
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().startswith("error: unknown_shell: "), done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing installed


def test_install_completion_writes_the_script_and_sources_it_from_bashrc(tmp_path: Path) -> None:
    done = _kernel("--install-completion", "bash", env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "kernel.sh"
    assert script.read_bytes().strip() == _kernel("--show-completion", "bash").stdout.strip()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    assert str(script) in done.stdout.decode()


def test_dash_is_stdin_for_digest_and_bundle(tmp_path: Path) -> None:
    chain = (ROOT / "examples" / "replay" / "chain.json").read_bytes()
    assert _kernel("digest", "-", stdin=chain).stdout == _kernel(
        "digest", ROOT / "examples" / "replay" / "chain.json").stdout
    sealed = _kernel("bundle", "-", "--out", "-", stdin=DRAFT.read_bytes())
    assert sealed.returncode == 0
    assert sealed.stdout == _kernel("bundle", DRAFT).stdout


def test_out_dash_is_stdout_not_a_file_named_dash(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", KERNEL_MAIN, "bundle", str(DRAFT), "--out", "-"],
                          capture_output=True, cwd=tmp_path, check=False, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(b'{"chain":')
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_files_are_written_with_the_user_s_umask(tmp_path: Path, mask: int) -> None:
    bundle, outcomes = tmp_path / "bundle.json", tmp_path / "outcomes.jsonl"
    script = (f"import os, sys; os.umask({mask}); from kernel.cli import main; "
              "sys.argv[0] = 'kernel'; main()")
    for args in (["bundle", str(DRAFT), "-o", str(bundle)],
                 ["replay", str(bundle), "-q", "-o", str(outcomes)]):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                              check=False, timeout=60)
        assert done.returncode == 0, done.stderr
    for path in (bundle, outcomes):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_the_summary_names_what_did_not_close_with_full_unwrapped_ids() -> None:
    result = runner.invoke(app, ["replay", str(EXAMPLE)])
    lines = result.stdout.splitlines()
    assert lines[0] == "8 attempts (run order)"
    assert "  candidate_identity_mismatch        1" in lines
    envelopes = [json.loads(line) for line in
                 runner.invoke(app, ["replay", str(EXAMPLE), "-q", "-f", "jsonl"]).stdout
                 .splitlines()]
    for envelope in envelopes:
        outcome = envelope["outcome"]
        ident = outcome.get("replay_result_id") or outcome["replay_refusal_id"]
        if outcome["replay_disposition"] != "contract_and_proof_closed":
            assert any(line.endswith(f"outcome {ident}") for line in lines), ident
            assert any(line.endswith(f"attempt {envelope['attempt_id']}") for line in lines)
    assert len(lines) < 60  # a summary, not a row per attempt


def test_verbose_adds_one_row_per_attempt_and_quiet_silences_stderr() -> None:
    verbose = runner.invoke(app, ["replay", str(EXAMPLE), "-v"])
    rows = [line for line in verbose.stdout.splitlines() if re.match(r"^ +\d+ ", line)]
    assert len(rows) == 8
    quiet = runner.invoke(app, ["replay", str(EXAMPLE), "-q"])
    assert quiet.stderr == "" and quiet.stdout == "" and quiet.exit_code == 3


def test_format_json_is_one_summary_document() -> None:
    result = runner.invoke(app, ["replay", str(EXAMPLE), "-f", "json", "--fail-on", "blocked"])
    summary = json.loads(result.stdout)
    assert summary["exit_code"] == result.exit_code == 3
    assert summary["attempts"] == 8 and sum(summary["counts"].values()) == 8
    assert summary["fail_on"] == ["integrity", "blocked"]
    assert [entry["attempt_index"] for entry in summary["listed"]] == [1, 2, 4, 5, 6, 7]
