"""`kernel audit RUN_DIR`: recompute every id of a stored run, offline (ADR-0010).

The shell around ``kernel.audit.audit_run`` and, with ``--verify-key``,
``kernel.audit.verify_attestation``. Nothing it reads from the run is
configuration: the outcomes file, the bundle and the public key are the
operator's, named on the command line.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated, assert_never

import typer

from kernel.audit import (
    ATTESTATION_FILE,
    SUMMARY_FILE,
    AttestationError,
    AuditInputError,
    AuditReport,
    audit_run,
    load_public_key,
    report_document,
    summary_path,
    verify_attestation,
)
from kernel.commands._io import (
    is_stdio,
    read_document,
    refuse,
    refuse_a_stream,
    refuse_stdio,
)
from kernel.commands._verdict import EXIT_INTEGRITY
from kernel.identity import canonical_json
from kernel.replay import ReplayBundle

_HELP = """Recompute every id of a stored run from its bytes, offline.

RUN_DIR is a `kernel check run` run directory (it holds metadata.json) or a
`kernel run` work directory (run-state.json, one directory per certified
attempt). Every content address the stored records carry is recomputed from
the stored bytes (job, check identity, snapshot inputs, evidence artifacts,
requests, receipts, logs, certification request and receipt ids, the
receipt's evidence digest over the run's metadata, the stored manifest's
pins) and compared; no producer, checker or solver runs. A work directory
is audited whole by default: every entry is one kernel run writes, every
attempt directory holds its run, and every line of its own outcomes.jsonl
is re-derived by the pure core from the bundle the directory keeps
(bundle.json, or bundle.jsonl for a stream) and the stored certifications
that audit intact; an attempt the run certified whose directory is gone is
reported. --outcomes audits another copy of the lines (kernel run -o) the
same way; --bundle re-derives from the operator's own bundle instead, which
must hold the attempts the kept copy holds. With --verify-key, the DSSE
envelope written by `kernel attest` is verified (Ed25519 over the DSSE PAE)
and each subject's digest recomputed, and so is the SLSA Verification
Summary beside it (its input attestation, its policy digest).

Exit codes (the kernel's scheme, README "Exit codes"): 0 intact (every id
reproduces, and the attestation verifies when --verify-key is given);
2 input refused (RUN_DIR is not a stored run, an unreadable outcomes file,
bundle or key), one line 'error: <code>: <message>' on stderr; 3 integrity:
the stored run is not what was recorded, at least one id, binding or
outcome does not reproduce, or the attestation does not verify (wrong key,
altered payload or signature, a subject changed; each is listed). Exit 1
(a policy verdict) is not used: an audit has no policy to fail.

Output: one line per mismatch and a verdict line on stdout (--format json:
one document; -q: nothing, the exit code says it).

Example: kernel audit runs/1 --bundle bundle.json"""


class OutputFormat(enum.Enum):
    """How the report is printed."""

    TEXT = "text"
    JSON = "json"


def _print_text(report: AuditReport, attestation: list[str] | None) -> None:
    for f in report.findings:
        line = f"MISMATCH {f.code.value} {f.path} {f.subject}: {f.message}"
        if f.recorded is not None and f.recorded == f.recomputed:
            # The same value on both sides (an id that binds fields other than
            # the one that differs): saying it twice reads as no difference.
            line += f" (both {f.recorded}: the records differ, not this value)"
        elif f.recorded is not None or f.recomputed is not None:
            line += f" (recorded {f.recorded}, recomputed {f.recomputed})"
        typer.echo(line)
    if attestation is not None:
        for problem in attestation:
            typer.echo(f"MISMATCH attestation: {problem}")
        if not attestation:
            typer.echo("attestation verified: the signatures, every subject's digest and the "
                       "verification summary")
    verdict = "intact" if report.intact and not attestation else "NOT intact"
    typer.echo(
        f"{verdict}: {report.layout.value} {report.root}: {report.checked} ids recomputed, "
        f"{len(report.findings) + len(attestation or [])} do not reproduce"
    )


def register(app: typer.Typer) -> None:
    """Attach the ``audit`` command to ``app``."""

    @app.command("audit", help=_HELP)
    def audit_command(
        run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="The stored run.")],
        outcomes: Annotated[Path | None, typer.Option(
            "--outcomes", metavar="FILE",
            help="Another copy of the outcome lines of this work directory (kernel run -o; "
                 "'-' reads them from stdin); "
                 "its own outcomes.jsonl is always audited.")] = None,
        bundle: Annotated[Path | None, typer.Option(
            "--bundle", metavar="FILE",
            help="The bundle that was run (yours): re-derive every outcome from it instead of "
                 "the work directory's copy.")] = None,
        verify_key: Annotated[Path | None, typer.Option(
            "--verify-key", metavar="PUBKEY",
            help="Ed25519 public key (PEM): verify the run's DSSE attestation.")] = None,
        attestation: Annotated[Path | None, typer.Option(
            "--attestation", metavar="FILE",
            help=f"The envelope to verify (default RUN_DIR/{ATTESTATION_FILE}); the "
                 f"verification summary beside it ({SUMMARY_FILE}) is verified too.")] = None,
        output_format: Annotated[OutputFormat, typer.Option(
            "--format", "-f", help="text (one line per mismatch and a verdict) or json.")
        ] = OutputFormat.TEXT,
        quiet: Annotated[bool, typer.Option(
            "--quiet", "-q",
            help="Print nothing on stdout: the exit code is the verdict (0 intact, 3 not, "
                 "2 refused, whose error line still goes to stderr). Not with -f json.")
        ] = False,
    ) -> None:
        if quiet and output_format is OutputFormat.JSON:
            refuse("option_conflict", "-q prints nothing and -f json prints the report: "
                   "choose one")
        refuse_stdio(RUN_DIR=run_dir, verify_key=verify_key, attestation=attestation)
        with contextlib.ExitStack() as stack:
            if outcomes is not None and is_stdio(outcomes):
                # '-' is stdin, as for every document (README): the lines are kept
                # in a private file for the audit, which reads them by path.
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                outcomes = folder / "outcomes-from-stdin.jsonl"
                with outcomes.open("wb") as kept:
                    shutil.copyfileobj(sys.stdin.buffer, kept)
            _audit(run_dir, outcomes, bundle, verify_key, attestation, output_format, quiet)

    def _audit(
        run_dir: Path,
        outcomes: Path | None,
        bundle: Path | None,
        verify_key: Path | None,
        attestation: Path | None,
        output_format: OutputFormat,
        quiet: bool,
    ) -> None:
        loaded = None
        if bundle is not None:
            refuse_a_stream(bundle, "kernel audit --bundle reads a single-document bundle "
                            "(kernel bundle --layout document writes one)")
            loaded = read_document(bundle, ReplayBundle)
        try:
            report = audit_run(run_dir, outcomes=outcomes, bundle=loaded)
        except AuditInputError as exc:
            refuse(exc.code, exc.message)
        problems: list[str] | None = None
        if verify_key is not None:
            try:
                key = load_public_key(verify_key)
                problems = list(
                    verify_attestation(
                        run_dir, attestation or run_dir / ATTESTATION_FILE, key,
                        outcomes=outcomes,
                        summary=summary_path(run_dir.absolute(), attestation),
                    )
                )
            except AttestationError as exc:
                refuse(exc.code, exc.message)
        if not quiet:
            match output_format:
                case OutputFormat.JSON:
                    document = report_document(report)
                    assert isinstance(document, dict)
                    if problems is not None:
                        document["attestation"] = {
                            "problems": list(problems), "verified": not problems}
                        document["intact"] = report.intact and not problems
                    typer.echo(canonical_json(document).decode("utf-8"))
                case OutputFormat.TEXT:
                    _print_text(report, problems)
                case _:
                    assert_never(output_format)
        if not report.intact or problems:
            raise typer.Exit(EXIT_INTEGRITY)
