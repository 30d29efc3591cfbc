"""`kernel verify ...`: the verification adapter's plan/seal/gate bridge."""

import typer

app = typer.Typer(
    name="verify",
    help="Plan, seal and gate deterministic verification (seed 000).",
    no_args_is_help=True,
)
