"""`kernel digest FILE`: load a record chain strictly and print each identity."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach the ``digest`` command to ``app``."""

    @app.command("digest")
    def digest_command(path: str) -> None:
        """Placeholder until the record chain lands."""
        raise typer.Exit(2)
