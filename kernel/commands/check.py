"""`kernel check ...`: the external verifier protocol (seed 003)."""

import typer

app = typer.Typer(
    name="check",
    help="Run, replay and identify pinned external producer/checker pairs (seed 003).",
    no_args_is_help=True,
)
