"""One vocabulary of options across the commands (issue 35, finding 8).

Walks every command (``kernel check`` and its subcommands included) as click
builds it and fails on an inconsistency a new option could bring: an
``--out`` without ``-o``, a ``--format`` without ``-f``, a ``--quiet``
without ``-q``, a ``--json`` that is not an alias beside ``--format``, a
command that writes (``--out``) or has formats but no ``--quiet``, or one
long option with different short forms in two commands. The checker is
run on made-up commands first, so the test is known to catch what it
claims to.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import typer
from typer import core
from typer._click import core as click  # the click typer builds on (its own copy)

from kernel import cli
from tests.orchestrate_helpers import ROOT
from tests.support.cli import kernel

#: A long option and the short form it must have wherever it appears.
SHORT_OF = {"--out": "-o", "--format": "-f", "--quiet": "-q"}


def _commands(group: click.Command, path: str = "kernel") -> Iterator[tuple[str, click.Command]]:
    yield path, group
    if isinstance(group, core.TyperGroup):
        context = click.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None, name
            yield from _commands(command, f"{path} {name}")


def inconsistencies(commands: list[tuple[str, click.Command]]) -> list[str]:
    """Every breach of the vocabulary among ``commands``, as readable lines."""
    found: list[str] = []
    checked: set[str] = set()
    shorts: dict[str, dict[frozenset[str], list[str]]] = {}
    for path, command in commands:
        options = {o for p in command.params if isinstance(p, core.TyperOption) for o in p.opts}
        if "--json" in options and "--format" not in options:
            found.append(f"{path}: --json without --format (it is an alias of -f json)")
        if options & {"--out", "--format"} and "--quiet" not in options:
            found.append(f"{path}: prints a summary or an output but has no --quiet")
        for param in command.params:
            if not isinstance(param, core.TyperOption):
                continue  # an argument
            checked.add(path)
            longs = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            short = frozenset(o for o in param.opts if not o.startswith("--"))
            for long in longs:
                wanted = SHORT_OF.get(long)
                if wanted is not None and wanted not in short:
                    found.append(f"{path}: {long} without {wanted}")
                shorts.setdefault(long, {}).setdefault(short, []).append(path)
    for long, forms in sorted(shorts.items()):
        if len(forms) > 1:
            found.append(f"{long} has different short forms: "
                         + "; ".join(f"{sorted(k) or 'none'} in {v}" for k, v in forms.items()))
    if not checked:
        found.append("no option was seen at all: the walk checked nothing")
    return found


def test_the_checker_catches_an_out_without_o_and_a_short_form_that_differs() -> None:
    made_up = core.TyperCommand("made-up", params=[
        core.TyperOption(param_decls=["--out"]),
        core.TyperOption(param_decls=["--format", "-F"])])
    other = core.TyperCommand("other", params=[
        core.TyperOption(param_decls=["--format", "-f"]),
        core.TyperOption(param_decls=["--quiet", "-q"])])
    json_only = core.TyperCommand("json-only", params=[core.TyperOption(param_decls=["--json"])])
    found = inconsistencies([("made-up", made_up), ("other", other), ("json-only", json_only)])
    assert "made-up: --out without -o" in found
    assert "made-up: --format without -f" in found
    assert "made-up: prints a summary or an output but has no --quiet" in found
    assert "json-only: --json without --format (it is an alias of -f json)" in found
    assert any(line.startswith("--format has different short forms") for line in found)
    assert inconsistencies([("other", other)]) == []
    assert inconsistencies([]) == ["no option was seen at all: the walk checked nothing"]


def test_every_command_speaks_the_same_options() -> None:
    app = cli.__getattr__("app")
    assert isinstance(app, typer.Typer)
    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) > 10  # every command was reached, check's subcommands too
    assert inconsistencies(commands) == []


def test_workers_alone_means_a_process_pool_in_run_as_in_replay(tmp_path: Path) -> None:
    # kernel run --workers 2 used to fail with option_conflict where replay took it.
    bundle = ROOT / "examples" / "replay" / "bundle.json"
    run = kernel("run", bundle, "--work-dir", tmp_path / "W", "--workers", "2", "-q",
                 "-o", tmp_path / "run.jsonl")
    replay = kernel("replay", bundle, "--workers", "2", "-q", "-o", tmp_path / "replay.jsonl")
    assert "option_conflict" not in run.stderr + replay.stderr
    assert run.returncode == replay.returncode == 3, run.stderr + replay.stderr  # the tampered one
    assert (tmp_path / "W" / "outcomes.jsonl").read_bytes() == (tmp_path / "run.jsonl").read_bytes()


def test_digest_json_is_an_alias_of_format_json_and_quiet_prints_nothing() -> None:
    chain = ROOT / "examples" / "replay" / "chain.json"
    alias, long, text = (kernel("digest", chain, *flags) for flags in
                         (["--json"], ["-f", "json"], []))
    assert alias.returncode == long.returncode == text.returncode == 0
    assert alias.stdout == long.stdout != text.stdout
    assert all(json.loads(line)["ok"] for line in alias.stdout.splitlines())
    quiet = kernel("digest", chain, "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    both = kernel("digest", chain, "--json", "-f", "text")
    assert both.returncode == 2 and "option_conflict" in both.stderr


def test_audit_and_attest_take_q_and_audit_q_keeps_the_verdict_in_its_exit_code(
    tmp_path: Path,
) -> None:
    work = tmp_path / "W"
    bundle = ROOT / "examples" / "replay" / "bundle.json"
    kernel("run", bundle, "--work-dir", work, "-q", "-o", tmp_path / "o.jsonl")
    loud, quiet = kernel("audit", work), kernel("audit", work, "-q")
    assert loud.returncode == quiet.returncode == 0, loud.stdout + loud.stderr
    assert "intact" in loud.stdout and (quiet.stdout, quiet.stderr) == ("", "")
    lines = (work / "outcomes.jsonl").read_bytes()
    (work / "outcomes.jsonl").write_bytes(lines.replace(b'"candidate_', b'"candidatx_', 1))
    tampered = kernel("audit", work, "-q")
    assert (tampered.returncode, tampered.stdout) == (3, "")
    conflict = kernel("audit", work, "-q", "-f", "json")
    assert conflict.returncode == 2 and "option_conflict" in conflict.stderr
    key = tmp_path / "k.pem"
    assert kernel("attest-keygen", key, tmp_path / "k.pub").returncode == 0
    fresh = tmp_path / "F"
    kernel("run", bundle, "--work-dir", fresh, "-q", "-o", tmp_path / "f.jsonl")
    signed = kernel("attest", fresh, "--key", key, "-q", "--fail-on", "integrity")
    assert (signed.returncode, signed.stdout) == (0, ""), signed.stderr
    assert (fresh / "attestation.dsse.json").is_file()


def test_recheck_returned_is_refused_inline_before_anything_is_written(tmp_path: Path) -> None:
    # Inline, every checker already runs on the driver: the flag would promise nothing.
    bundle = ROOT / "examples" / "e2e" / "bundle.json"
    done = kernel("run", bundle, "--work-dir", tmp_path / "W", "--recheck-returned")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: option_conflict: --recheck-returned"), done.stderr
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "W").exists()
