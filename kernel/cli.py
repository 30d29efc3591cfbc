"""The ``kernel`` command line: one typer app assembling each command group.

Exit codes shared by every command (a group may add its own, documented in
its ``--help``):

- 0: the command did what it says;
- 1: the command ran, and its verdict is negative (refusal, BLOCKED, ...);
- 2: usage error or input refused at the boundary (malformed, hostile, ...).
"""

from __future__ import annotations

import typer

from kernel.commands import attest, audit, bundle, check, digest, replay, run, schema, verify

app = typer.Typer(
    name="kernel",
    help=(
        "replay-kernel: fail-closed candidate replay and verification.\n\n"
        "Exit codes: 0 success; 1 negative verdict (refusal, BLOCKED); "
        "2 usage error or input refused at the boundary."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
digest.register(app)
bundle.register(app)
replay.register(app)
run.register(app)
audit.register(app)
attest.register(app)
schema.register(app)
app.add_typer(verify.app)
app.add_typer(check.app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
