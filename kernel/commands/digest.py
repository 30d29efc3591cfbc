"""`kernel digest FILE`: load a chain or bundle strictly and print every identity.

Each line names a record, its stored id and the id recomputed from its
content, and says ``ok`` or ``MISMATCH``. Nothing is trusted: the point is
that anyone can recompute what the kernel will check.

Exit codes (README "Exit codes"): 0 every stored id reproduces; 3
integrity: at least one does not; 2 the file was refused at the boundary
(unreadable, malformed, non-canonical JSON, wrong schema). FILE may be ``-``
(stdin).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, assert_never

import typer

from kernel.commands._io import read_bounded, read_document, refuse, refuse_a_stream
from kernel.commands._verdict import EXIT_INTEGRITY
from kernel.frames import delta_digest, frame_digest
from kernel.replay import ReplayBundle, input_digest_of
from kernel.serde import SerdeError, parse_json
from kernel.upstream import (
    SearchChain,
    assessment_id_of,
    attempt_id_of,
    budget_id_of,
    candidate_digest_of,
    gate_decision_id_of,
    reconstruction_digest_of,
    residual_id_of,
    run_id_of,
    run_input_digest,
)

Row = tuple[str, str | None, str]


class DigestFormat(enum.Enum):
    """How the rows are printed."""

    TEXT = "text"
    JSON = "json"


def chain_rows(chain: SearchChain, prefix: str = "") -> Iterator[Row]:
    """(record, stored id, recomputed id) for every identity in ``chain``."""
    yield f"{prefix}problem_frame", None, frame_digest(chain.problem_frame)
    yield f"{prefix}assessment", chain.assessment.assessment_id, assessment_id_of(chain.assessment)
    for i, residual in enumerate(chain.residuals):
        yield f"{prefix}residuals[{i}]", residual.residual_id, residual_id_of(residual)
    yield f"{prefix}gate", chain.gate.gate_decision_id, gate_decision_id_of(chain.gate)
    yield f"{prefix}budget", chain.budget.budget_id, budget_id_of(chain.budget)
    run = chain.run
    yield f"{prefix}run.input_digest", run.input_digest, run_input_digest(run.run_input)
    yield f"{prefix}run", run.run_id, run_id_of(run)
    for i, attempt in enumerate(run.candidate_attempts):
        yield f"{prefix}run.candidate_attempts[{i}]", attempt.attempt_id, attempt_id_of(attempt)
    for i, rec in enumerate(chain.reconstructions):
        where = f"{prefix}reconstructions[{i}]"
        if rec.candidate_problem_frame is not None:
            yield (f"{where}.candidate_problem_frame", rec.candidate_problem_frame_digest,
                   frame_digest(rec.candidate_problem_frame))
        if rec.frame_delta is not None:
            yield f"{where}.frame_delta", rec.frame_delta_digest, delta_digest(rec.frame_delta)
        yield f"{where}.candidate_digest", rec.candidate_digest, candidate_digest_of(rec)
        yield where, rec.candidate_reconstruction_digest, reconstruction_digest_of(rec)


def register(app: typer.Typer) -> None:
    """Attach the ``digest`` command to ``app``."""

    @app.command("digest")
    def digest_command(
        path: Annotated[Path, typer.Argument(
            help="A search chain or replay bundle (JSON); '-' for stdin.")],
        output_format: Annotated[DigestFormat | None, typer.Option(
            "--format", "-f",
            help="text (a line per record: ok or MISMATCH, the recomputed id, the record) "
                 "or json (one canonical JSON object per record); default text.")] = None,
        as_json: Annotated[bool, typer.Option(
            "--json", help="The same as --format json (kept for scripts that use it).")
        ] = False,
        quiet: Annotated[bool, typer.Option(
            "--quiet", "-q",
            help="Print nothing; the exit code says it (0 every id reproduces, 3 not).")
        ] = False,
    ) -> None:
        """Recompute and print the identity of every record in a chain or bundle.

        PATH is a search chain or a single-document replay bundle (JSON), or -
        for stdin; a bundle stream is refused (kernel replay reads streams, and
        recomputes the same ids). Output on stdout, one line per record:
        ok or MISMATCH, the recomputed id, the record (-f json, or --json: one
        object a line with record, stored, recomputed, ok). The count of ids
        that do not reproduce goes to stderr.

        Exit codes: 0 every stored id reproduces; 3 integrity: some id does not;
        2 the file was refused at the boundary (or --json with -f text).

        Example: kernel digest examples/replay/chain.json -f json
        """
        if as_json and output_format is DigestFormat.TEXT:
            refuse("option_conflict", "--json is --format json; it cannot go with --format text")
        chosen = DigestFormat.JSON if as_json else (output_format or DigestFormat.TEXT)
        rows = list(_rows_for(path))
        mismatches = 0
        for name, stored, recomputed in rows:
            ok = stored is None or stored == recomputed
            mismatches += not ok
            if quiet:
                continue
            match chosen:
                case DigestFormat.JSON:
                    typer.echo(json.dumps(
                        {"record": name, "stored": stored, "recomputed": recomputed, "ok": ok},
                        sort_keys=True, separators=(",", ":")))
                case DigestFormat.TEXT:
                    typer.echo(f"{'ok' if ok else 'MISMATCH':8} {recomputed}  {name}")
                case _:
                    assert_never(chosen)
        if mismatches:
            if not quiet:
                typer.echo(f"{mismatches} of {len(rows)} identities do not reproduce", err=True)
            raise typer.Exit(EXIT_INTEGRITY)


def _rows_for(path: Path) -> Iterator[Row]:
    # A bundle is a chain plus inputs; tell them apart by their top-level keys.
    hint = ("kernel digest reads one document (a chain or a single-document bundle); "
            "kernel replay reads streams and recomputes every id")
    refuse_a_stream(path, hint)
    data = read_bounded(path)
    try:
        head = parse_json(data)
    except SerdeError as exc:
        refuse(exc.code, f"{path}: {exc.message}")
    if isinstance(head, dict) and set(head) == {"chain", "inputs"}:
        bundle = read_document(path, ReplayBundle)
        yield from chain_rows(bundle.chain, "chain.")
        for i, replay_input in enumerate(bundle.inputs):
            yield f"inputs[{i}]", replay_input.input_digest, input_digest_of(replay_input)
    else:
        yield from chain_rows(read_document(path, SearchChain))
