"""`kernel check pins PATH...`: the manifest pin fragment of an executable and its closure.

The shell around ``kernel.external.pin_closure`` (ADR-0010). The search path
for ``#!/usr/bin/env NAME`` is this process's ``PATH``, read here, in the
shell, and handed to the closure explicitly; ``LD_LIBRARY_PATH`` is not read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from kernel.commands._io import refuse
from kernel.external import ClosureError, pin_closure
from kernel.identity import IdentityError, canonical_json

_HELP = """Print the manifest pin fragment for an executable and everything it makes run.

The first PATH is the command's executable; further PATHs (a script the
executable runs, its data) are its dependencies. Every file they make run is
added as trusted_tool_dependencies: a script's #! interpreter (through env,
on this PATH), the ELF loader (PT_INTERP) and every shared library of the
DT_NEEDED closure, resolved as ld.so does (RPATH, RUNPATH with $ORIGIN,
/etc/ld.so.conf, the default directories; LD_LIBRARY_PATH is ignored),
symlinks resolved, each with its SHA-256. Nothing is executed. Paste the
fields into a manifest entry's producer or checker (argv stays yours).

Output: one JSON object on stdout (executable, dependencies).

Exit codes: 0 printed; 2 refused (a PATH that is not a file, a library that
cannot be found, an unreadable file, a malformed ELF object, a path that is
not UTF-8), one line 'error: <code>: <message>' on stderr.

Example: kernel check pins /usr/bin/z3"""


def register(app: typer.Typer) -> None:
    """Attach the ``pins`` command to the ``check`` group."""

    @app.command("pins", help=_HELP)
    def pins_command(
        paths: Annotated[
            list[Path],
            typer.Argument(metavar="PATH...", help="The executable, then the files it runs."),
        ],
    ) -> None:
        search_path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
        try:
            closure = pin_closure(paths[0], paths[1:], search_path=search_path)
        except ClosureError as exc:
            refuse(exc.code, exc.message)
        try:
            fragment = canonical_json(closure.fragment())
        except IdentityError as exc:
            # A manifest pins each path as JSON text: a path that is not UTF-8
            # (a lone surrogate once decoded) cannot be pinned at all.
            refuse("path_not_utf8", f"a pinned path is not UTF-8 text, so no manifest can "
                   f"name it ({exc.code} at {exc.path.removeprefix('$.')})")
        typer.echo(fragment.decode("utf-8"))
