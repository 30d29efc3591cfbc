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
  empty directory, a deadline that is not positive, a certifier that cannot
  be set up (no z3 binary or cvc5 package for this interpreter), or an
  executor that cannot be opened (bad worker count, conflicting options,
  unreachable scheduler, no dask installed).

``--executor`` picks where certifications run (ADR-0008): inline (default),
a spawn-based process pool, or Dask distributed; the verdicts are always
computed here, so the outcome bytes do not depend on the choice.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kernel.commands._io import read_document, refuse
from kernel.commands.replay import emit_outcomes
from kernel.external import RunLimits, default_environment
from kernel.orchestrate import (
    CertifierSetupError,
    ExecutorKind,
    ExecutorSetupError,
    ExecutorSpec,
    ExternalCertifier,
    certification_entry,
    check_executor_spec,
    discover_tools,
    open_executor,
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

Executors (--executor): inline (default) certifies one attempt after the
other in this process; process runs them on a pool of --workers local
processes (spawn context); dask runs them on Dask distributed: the cluster
at --scheduler ADDRESS (its own workers; the same kernel, interpreter and
solvers at the same paths on every worker, else the pins do not match and
the attempt is not certified), or, without --scheduler, a local cluster of
--workers single-threaded worker processes started and stopped here.
--workers defaults to the number of CPUs available. Only certification runs
on the executor; the verdicts are computed here, in the run's order, so the
output bytes do not depend on the executor or the worker count. A worker
that dies or is lost leaves its attempt without evidence (not closed, never
PASS). A progress bar goes to stderr when it is a terminal (not with --quiet).

Exit codes: 0 every attempt classified; 1 --fail-on-refusal and some attempt
refused; 2 refused at the boundary (bad bundle, non-empty work directory,
bad deadline, certifier unavailable, bad worker count, conflicting executor
options, unreachable scheduler); nothing is written.
"""

_EXECUTORS = "|".join(kind.value for kind in ExecutorKind)


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _executor_spec(
    executor: str, workers: str | None, scheduler: str | None, connect_timeout: float
) -> ExecutorSpec:
    try:
        kind = ExecutorKind(executor)
    except ValueError:
        refuse("unknown_executor", f"--executor must be one of {_EXECUTORS}, got {executor!r}")
    count: int | None = None
    if workers is not None:
        try:
            count = int(workers.strip(), 10)
        except ValueError:
            refuse("invalid_worker_count", f"--workers must be a positive integer, got {workers!r}")
    elif kind is ExecutorKind.PROCESS or (kind is ExecutorKind.DASK and scheduler is None):
        count = _available_cpus()
    if not connect_timeout > 0:
        refuse(
            "invalid_connect_timeout", f"--connect-timeout must be positive, got {connect_timeout}"
        )
    spec = ExecutorSpec(kind, count, scheduler, connect_timeout)
    try:
        check_executor_spec(spec)
    except ExecutorSetupError as exc:
        refuse(exc.code, exc.message)
    return spec


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr, updated from the driver's thread; ``None`` when off."""
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("certifying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("attempts"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("attempts", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    with bar:
        yield update



def _check_work_dir(work_dir: Path) -> None:
    if work_dir.is_symlink() or (work_dir.exists() and not work_dir.is_dir()):
        refuse("work_dir_not_directory", f"{work_dir}: not a plain directory")
    try:
        if work_dir.is_dir() and any(work_dir.iterdir()):
            refuse("work_dir_not_empty", f"{work_dir}: not empty (use a fresh directory)")
    except OSError as exc:
        refuse("work_dir_unreadable", f"{work_dir}: {exc.strerror or exc}")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the job runs, the first SIGTERM is handled like Ctrl-C.

    Producers and checkers run in their own sessions, so SIGTERM's default
    action (die at once) would leave the running certification behind.
    Raised as ``KeyboardInterrupt`` in the main thread, it unwinds through
    ``run_process`` (which kills the command's group) and ``open_executor``
    (which stops its workers). Later SIGTERMs are ignored until that cleanup
    is done, so it cannot be cut short; SIGKILL still works.
    """
    fired = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding test runner): nothing to do
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        executor: Annotated[str, typer.Option(
            "--executor", metavar=f"[{_EXECUTORS}]",
            help="Where certifications run: inline (this process, one after the other), "
                 "process (a local process pool) or dask (Dask distributed). "
                 "Output bytes are the same for every choice.")] = "inline",
        workers: Annotated[str | None, typer.Option(
            "--workers", metavar="N",
            help="Processes for --executor process, or local Dask workers for --executor "
                 "dask without --scheduler (default: the CPUs available).")] = None,
        scheduler: Annotated[str | None, typer.Option(
            "--scheduler", metavar="ADDRESS",
            help="Dask scheduler to use (e.g. tcp://10.0.0.5:8786) instead of starting "
                 "a local cluster; --executor dask only.")] = None,
        connect_timeout: Annotated[float, typer.Option(
            "--connect-timeout", metavar="SECONDS",
            help="How long to try reaching --scheduler before refusing.")] = 10.0,
    ) -> None:
        bundle = read_document(bundle_path, ReplayBundle)
        try:
            requests = requests_from_bundle(bundle)
        except ValueError as exc:
            refuse("bundle_shape_invalid", f"{bundle_path}: {exc}")
        if not deadline > 0:
            refuse("invalid_deadline", f"--deadline must be positive, got {deadline}")
        _check_work_dir(work_dir)
        spec = _executor_spec(executor, workers, scheduler, connect_timeout)
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
            with _sigterm_as_interrupt(), ExitStack() as stack:
                try:
                    pool = stack.enter_context(open_executor(spec))
                except ExecutorSetupError as exc:
                    refuse(exc.code, exc.message)
                progress = stack.enter_context(
                    _progress_bar(not quiet and sys.stderr.isatty())
                )
                outcomes = replay_requests(
                    requests, certified_manifest(), certifier, executor=pool, progress=progress
                )
        finally:
            logger.removeHandler(handler)
        emit_outcomes(outcomes, out=out, quiet=quiet, fail_on_refusal=fail_on_refusal)
