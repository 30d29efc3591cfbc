"""`kernel replay BUNDLE`: classify every attempt of a search run (ADR-0229).

The bundle (a search chain plus one ``ReplayAdapterInput`` per attempt) is
read strictly; each attempt is classified in the run's canonical order with
the built-in authority manifest; one canonical-JSON outcome per line goes to
stdout (or ``--out FILE``, written atomically) and a summary table to stderr.

Exit codes:

- 0: every attempt was classified (a result or a typed refusal each);
- 1: ``--fail-on-refusal`` was given and at least one attempt was refused;
- 2: the bundle was refused at the boundary (unreadable, malformed JSON,
  schema mismatch, or not one input and one reconstruction per attempt);
  nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, assert_never

import typer
from rich.console import Console
from rich.table import Table

from kernel.commands._io import read_document, refuse, write_atomically
from kernel.organs import builtin_manifest
from kernel.replay import (
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    replay_bundle_attempts,
)
from kernel.serde import dumps


def classify_bundle(bundle: ReplayBundle) -> tuple[ReplayAdapterOutcome, ...]:
    """Every attempt's outcome, in the run's order. Raises ValueError on a misshapen bundle."""
    manifest = builtin_manifest()
    return tuple(replay_bundle_attempts(bundle, manifest))


def outcome_lines(outcomes: tuple[ReplayAdapterOutcome, ...]) -> bytes:
    """JSON Lines: one canonical outcome record per line."""
    return b"".join(dumps(outcome) + b"\n" for outcome in outcomes)


def summary_table(outcomes: tuple[ReplayAdapterOutcome, ...]) -> Table:
    table = Table(title="replay outcomes (run order)")
    for column in ("#", "outcome", "disposition", "reason codes", "id"):
        table.add_column(column, overflow="fold")
    for index, outcome in enumerate(outcomes):
        match outcome:
            case ReplayAdapterResult():
                kind, ident = "result", outcome.replay_result_id
            case ReplayAdapterRefusal():
                kind, ident = "refusal", outcome.replay_refusal_id
            case _:
                assert_never(outcome)
        table.add_row(str(index), kind, outcome.replay_disposition.value,
                      "\n".join(outcome.reason_codes) or "-", ident[:16])
    return table


def emit_outcomes(
    outcomes: tuple[ReplayAdapterOutcome, ...],
    *,
    out: Path | None,
    quiet: bool,
    fail_on_refusal: bool,
) -> None:
    """Write the JSON Lines (stdout or ``out``, atomically), the summary, and the exit code."""
    data = outcome_lines(outcomes)
    if out is None:
        typer.echo(data.decode("utf-8"), nl=False)
    else:
        try:
            write_atomically(out, data)
        except OSError as exc:
            refuse("unwritable_output", f"{out}: {exc.strerror or exc}")
    if not quiet:
        Console(stderr=True).print(summary_table(outcomes))
    if fail_on_refusal and any(isinstance(o, ReplayAdapterRefusal) for o in outcomes):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Attach the ``replay`` command to ``app``."""

    @app.command("replay")
    def replay_command(
        bundle_path: Annotated[Path, typer.Argument(
            metavar="BUNDLE", help="Replay bundle: {'chain': SearchChain, 'inputs': [...]}.")],
        out: Annotated[Path | None, typer.Option(
            "--out", help="Write the JSON Lines here (atomically) instead of stdout.")] = None,
        fail_on_refusal: Annotated[bool, typer.Option(
            "--fail-on-refusal", help="Exit 1 if any attempt was refused.")] = False,
        quiet: Annotated[bool, typer.Option(
            "--quiet", help="No summary table on stderr.")] = False,
    ) -> None:
        """Classify every attempt of a bundle; one outcome per line, in run order.

        Outcomes are ReplayAdapterResult (contract_refused,
        contract_closed_but_proof_refused, contract_and_proof_closed) or
        ReplayAdapterRefusal (seven typed reasons). None is an answer.

        Exit codes: 0 every attempt classified; 1 --fail-on-refusal and some
        attempt refused; 2 bundle refused at the boundary (nothing written).
        """
        bundle = read_document(bundle_path, ReplayBundle)
        try:
            outcomes = classify_bundle(bundle)
        except ValueError as exc:
            refuse("bundle_shape_invalid", f"{bundle_path}: {exc}")
        emit_outcomes(outcomes, out=out, quiet=quiet, fail_on_refusal=fail_on_refusal)
