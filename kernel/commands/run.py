"""`kernel run BUNDLE --work-dir DIR`: the main job, end to end (ADR-0006).

Every attempt of the bundle is classified in the run's canonical order under
the production manifest (``kernel.organs.CERTIFIED_MANIFEST``); for each
attempt whose contract closes, ``kernel.orchestrate.ExternalCertifier`` runs
the pinned z3 -> cvc5 pair in ``DIR/<attempt_id>/`` and hands the sealed
receipt to the pure ``arithmetic.target_certified`` authority. One
canonical-JSON outcome per line goes to stdout (or ``--out FILE``, written
atomically) and a summary table to stderr, exactly like ``kernel replay``.

Exit codes:

- 0: every attempt was classified (a result or a typed refusal each);
- 1: ``--fail-on-refusal`` was given and at least one attempt was refused;
- 2: refused at the boundary, nothing written: the bundle (unreadable,
  malformed, schema mismatch, misshapen), a work directory that is not an
  empty directory, a deadline that is not positive, or a certifier that
  cannot be set up (no z3 binary or cvc5 package for this interpreter).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from kernel.commands._io import read_document, refuse
from kernel.commands.replay import emit_outcomes
from kernel.external import RunLimits, default_environment
from kernel.orchestrate import (
    CertifierSetupError,
    ExternalCertifier,
    certification_entry,
    discover_tools,
    replay_requests,
)
from kernel.organs import certified_manifest
from kernel.replay import ReplayBundle, requests_from_bundle

_HELP = """Run the main job: replay every attempt and certify targets with z3 -> cvc5.

For each attempt, in the run's order: validate, replay the contract, and for
a contract that closes, run the pinned SMT pair (z3 produces, cvc5 checks) on
the candidate's certification problem, seal the outcome as an assurance
receipt, and replay the proofs (evidence_grounded, target_determined,
target_certified) under certified.v1. None of the outcomes is an answer.

Files: each attempt whose contract closes gets DIR/<attempt_id>/ with repository/
(the SMT problem), manifest.json (the pinned check), run/ (snapshot,
evidence, requests, receipts, logs, metadata.json) and certification.json
(request + receipt). DIR must be absent or empty. Outcomes: JSON Lines on
stdout or --out FILE; summary table and notes on stderr.

Exit codes: 0 every attempt classified; 1 --fail-on-refusal and some attempt
refused; 2 refused at the boundary (bad bundle, non-empty work directory,
bad deadline, certifier unavailable); nothing is written.
"""


def _check_work_dir(work_dir: Path) -> None:
    if work_dir.is_symlink() or (work_dir.exists() and not work_dir.is_dir()):
        refuse("work_dir_not_directory", f"{work_dir}: not a plain directory")
    try:
        if work_dir.is_dir() and any(work_dir.iterdir()):
            refuse("work_dir_not_empty", f"{work_dir}: not empty (use a fresh directory)")
    except OSError as exc:
        refuse("work_dir_unreadable", f"{work_dir}: {exc.strerror or exc}")


class _NoteHandler(logging.Handler):
    """Certifier notes to stderr as ``note: ...`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"note: {record.getMessage()}", err=True)


def register(app: typer.Typer) -> None:
    """Attach the ``run`` command to ``app``."""

    @app.command("run", help=_HELP)
    def run_command(
        bundle_path: Annotated[Path, typer.Argument(
            metavar="BUNDLE", help="Replay bundle: {'chain': SearchChain, 'inputs': [...]}.")],
        work_dir: Annotated[Path, typer.Option(
            "--work-dir", metavar="DIR",
            help="Absent or empty directory for the per-attempt certification runs.")],
        out: Annotated[Path | None, typer.Option(
            "--out", help="Write the JSON Lines here (atomically) instead of stdout.")] = None,
        fail_on_refusal: Annotated[bool, typer.Option(
            "--fail-on-refusal", help="Exit 1 if any attempt was refused.")] = False,
        quiet: Annotated[bool, typer.Option(
            "--quiet", help="No summary table or notes on stderr.")] = False,
        deadline: Annotated[float, typer.Option(
            "--deadline", metavar="SECONDS",
            help="Deadline for each producer and each checker run.")] = 60.0,
    ) -> None:
        bundle = read_document(bundle_path, ReplayBundle)
        try:
            requests = requests_from_bundle(bundle)
        except ValueError as exc:
            refuse("bundle_shape_invalid", f"{bundle_path}: {exc}")
        if not deadline > 0:
            refuse("invalid_deadline", f"--deadline must be positive, got {deadline}")
        _check_work_dir(work_dir)
        try:
            entry = certification_entry(discover_tools(Path(sys.executable)))
        except CertifierSetupError as exc:
            refuse("certifier_unavailable", exc.message)
        certifier = ExternalCertifier(
            work_dir.absolute(), entry, RunLimits(deadline, deadline), default_environment()
        )
        logger = logging.getLogger("kernel.orchestrate")
        # --quiet still needs a handler, or logging's last resort prints the notes.
        handler = logging.NullHandler() if quiet else _NoteHandler(logging.WARNING)
        logger.addHandler(handler)
        try:
            outcomes = replay_requests(requests, certified_manifest(), certifier)
        finally:
            logger.removeHandler(handler)
        emit_outcomes(outcomes, out=out, quiet=quiet, fail_on_refusal=fail_on_refusal)
