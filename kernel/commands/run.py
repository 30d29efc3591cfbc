"""`kernel run BUNDLE --work-dir DIR`: the main job's command line (ADR-0006, ADR 0023).

The job itself (the bundle read and kept, the work directory's protocol,
resume, executors, the evidence store, interrupts) is ``kernel.job.MainJob``,
the entry point a Python integrator uses too. This module parses the
options into ``JobSettings``, turns the job's refusals into one ``error:``
line and an exit code (``JobRefused``: 2 input, 3 integrity, 4
environment; ``JobStopped``: 2 ``worker_lost``), streams each recorded
outcome to the output exactly like ``kernel replay`` (``Emitter``), and
prints the summary: the root cause of each attempt that did not close, and
what the certifications were (read back from their runs' metadata).

SIGTERM is raised like Ctrl-C while the job runs (``Terminated``), so the
running certification's processes are stopped and ``DIR/INTERRUPTED`` is
left: exit 130 for SIGINT, 143 for SIGTERM.

Exit codes: README "Exit codes" and adr/0013 (0 / 1 --fail-on / 2 boundary
/ 3 integrity / 4 environment / 130 SIGINT / 143 SIGTERM). The default
``--fail-on`` is ``unclassified``, as for ``kernel replay``: the main job
promises a certification, so an attempt whose checker never concluded (a
producer timeout, a lost worker) or whose obligations are not
certified.v1's fails the run.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from kernel.commands._io import refusals, refuse, refuse_output_is_input
from kernel.commands._outcomes import (
    Emitter,
    FailOnOption,
    FormatOption,
    OutOption,
    QuietOption,
    VerboseOption,
    default_cause,
    fail_on_classes,
    resolve_output,
)
from kernel.commands._sharded import (
    EXECUTOR_NAMES,
    MAX_SHARD_SIZE,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    complete_executor,
    executor_spec,
)
from kernel.commands._signals import Terminated, fragile_frame, interruption, raise_interrupt
from kernel.commands._work_dir import refuse_output_in_work_dir
from kernel.job import JobReport, JobSettings, JobStopped, MainJob
from kernel.orchestrate import (
    ATTEMPT_DIR,
    CERTIFIED_BY,
    DEFAULT_SHARD_SIZE,
    OUTCOMES_FILE,
    RUN_ID,
    RUN_SHARD_SIZE,
)
from kernel.replay import (
    ReplayAdapterOutcome,
    ReplayAdapterResult,
)
from kernel.text import escaped

_HELP = """Run the main job: replay every attempt and certify targets with z3 -> cvc5.

For each attempt, in the run's order: validate, replay the contract, and for
a contract that closes, run the pinned SMT pair (z3 produces, cvc5 checks) on
the candidate's certification problem, seal the outcome as an assurance
receipt, and replay the proofs (evidence_grounded, target_determined,
target_certified) under certified.v1. None of the outcomes is an answer.

BUNDLE: a single-document bundle or a bundle stream (JSON Lines); - for stdin.

Files: each attempt whose contract closes gets DIR/<attempt_id>/ with repository/
(the SMT problem), manifest.json (the pinned check), run/ (snapshot,
evidence, requests, receipts, logs, metadata.json) and certification.json
(request + receipt). DIR/outcomes.jsonl holds the outcome lines recorded so
far, DIR/run-state.json which run the directory belongs to, and
DIR/bundle.json (bundle.jsonl for a stream) the bundle exactly as this run
read it: `kernel audit DIR` re-derives every outcome from it. DIR must be
absent or empty, unless --resume.

Output: as kernel replay (--out, --format table|json|jsonl, -q, -v); the
summary names the root cause of each attempt that did not close (e.g. the
certification's "producer_timeout: producer still running after 1s").

Interrupts: SIGINT/SIGTERM leave DIR/INTERRUPTED and exit 130/143; run again
with --resume to continue without redoing recorded attempts (each recorded
outcome is first derived again from the bundle and the stored certification,
nothing run, and a certification counts only when its run's metadata and
checker receipt give it again under the run-time receipt rules; a line that
differs is refused, exit 3). A certification that had completed when the
interrupt came, though its outcome line was still waiting for the rest of
its shard, is kept the same way and not run again (the summary counts them:
"kept from the interrupted run"); only a verified one is kept, and anything
else the interrupt left is removed and certified afresh.

Evidence store (--evidence-store DIR, off by default; ADR 0019): evidence
kept by content (the check's pins by SHA-256, the problem's digest) and
shared by runs. A stored problem skips its producer; the pinned checker
still runs on the stored evidence with a fresh request. Every stored byte is
checked against its digest; a corrupt entry is a noted miss. Within one
run, a problem posed again after an earlier attempt's certification of it
passed is not run again: the repeat's own request and receipt are sealed
over that attempt's run (DIR/<attempt_id>/certified-by.json names it; the
audit follows it). Outcomes are the same with or without a store;
DIR/<attempt_id>/evidence-source.json says whether the evidence was
produced or reused.

Example: kernel run bundle.json --work-dir runs/1 -o out/outcomes.jsonl

Executors (--executor): inline (default) certifies one attempt after the
other in this process; process runs them on a pool of --workers local
processes (spawn context); dask runs them on Dask distributed: the cluster
at --scheduler ADDRESS (its own workers: each needs the same bytes of the
kernel, interpreter and solvers, at the driver's paths or under a prefix of
its own, else the pins do not match and the attempt is not certified), or,
without --scheduler, a local cluster of
--workers single-threaded worker processes started and stopped here.
--workers defaults to the number of CPUs available. With process or dask the
pure steps (validate, contract, proofs) run on the workers too, in shards of
--shard-size attempts, and the outcome lines are written here in the run's
order, so the output bytes do not depend on the executor, the worker count
or the shard size. A certification worker that dies or is lost leaves the
attempt it was certifying without evidence (not closed, never PASS); the
pool is started afresh (at most 3 times) and the certifications waiting in
it are run as usual; a shard worker that dies
has its shards run again, and past three deaths the run stops (exit 2,
worker_lost; the recorded outcomes are kept for --resume). A progress bar
goes to stderr when it is a terminal (not with -q).

Exit codes: 0 intact and no outcome in a --fail-on class (default:
unclassified, so every attempt classified by its authorities, whatever they
ruled: a refusal such as unsupported_proof_obligation, for a bundle not
sealed with --manifest certified.v1, or a certification that never
concluded fails the run; --fail-on integrity fails on tampering only); 1
an outcome in a selected class; 2 refused at the
boundary, nothing run (bad bundle, work directory not empty and no
--resume, bad deadline, certifier unavailable, bad worker count,
conflicting executor options, unreachable scheduler), or shard workers
lost (worker_lost: the recorded outcomes are kept; --resume); 3 integrity (an
attempt's input is not what the run recorded, or, with --resume, a recorded
outcome line that the bundle and the stored certification do not give again:
resume_log_tampered, nothing touched); 130 SIGINT; 143 SIGTERM.
"""

_METADATA_LIMIT = 1 << 20


@contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """While the job runs, the first SIGTERM is raised like Ctrl-C (as ``Terminated``).

    Producers and checkers run in their own sessions, so SIGTERM's default
    action (die at once) would leave the running certification behind.
    Raised as a ``KeyboardInterrupt`` in the main thread, it unwinds through
    ``run_process`` (which kills the command's group) and ``open_executor``
    (which stops its workers). Later SIGTERMs are ignored until that cleanup
    is done, so it cannot be cut short; SIGKILL still works.
    """
    fired = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if not fired:
            if not fragile_frame(frame):
                fired = True
            raise_interrupt(signum, frame, Terminated)

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


def _root_cause(work_dir: Path) -> Callable[[int, str | None, ReplayAdapterOutcome], str | None]:
    """The summary's cause for an attempt: its certification's reason, or the refusal's."""

    def cause(_index: int, attempt_id: str | None, outcome: ReplayAdapterOutcome) -> str | None:
        metadata = work_dir / (attempt_id or "-") / RUN_ID / "metadata.json"
        if attempt_id is not None and metadata.is_file():
            try:
                with metadata.open("rb") as handle:
                    record = json.loads(handle.read(_METADATA_LIMIT))
                if record.get("status") != "PASS":
                    # Escaped again: the record may have been edited since.
                    return escaped(f"certification {record.get('status')}: "
                                   f"{record.get('reason')}: {record.get('detail')}")
            except (OSError, ValueError, AttributeError):
                return "certification metadata unreadable"
        elif isinstance(outcome, ReplayAdapterResult) and any(
            code.startswith("proof_unavailable:") for code in outcome.reason_codes
        ):
            return "no certification evidence (see the notes above)"
        return default_cause(_index, attempt_id, outcome)

    return cause


def _certification_lines(root: Path, report: JobReport) -> list[str]:
    """The summary's account of the certifications this invocation ran: who, how many, how long.

    Read back from the attempt directories' ``metadata.json`` (written by the
    external protocol, not by this summary), so it says what ran: z3 as the
    producer, cvc5 as the checker, each in its own sandboxed step.
    """
    kept, adopted, seconds, spec = (report.recorded_earlier, report.kept_from_interrupt,
                                    report.seconds, report.executor)
    statuses: dict[str, int] = {}
    produced = checked = reused = 0
    containment: set[str] = set()
    parts: frozenset[str] | None = None  # the parts that held for every run (schema 4)
    for entry in sorted(root.iterdir()):
        metadata = entry / RUN_ID / "metadata.json"
        if not ATTEMPT_DIR.fullmatch(entry.name) or entry.name in kept | adopted:
            continue
        reused += (entry / CERTIFIED_BY).is_file()
        if not metadata.is_file():
            continue
        try:
            with metadata.open("rb") as handle:
                record = json.loads(handle.read(_METADATA_LIMIT))
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict):
            statuses["unreadable"] = statuses.get("unreadable", 0) + 1
            continue
        status = str(record.get("status"))
        statuses[status] = statuses.get(status, 0) + 1
        produced += isinstance(record.get("producer"), dict)
        checked += isinstance(record.get("checker"), dict)
        containment.add(str(record.get("containment")))
        recorded_parts = record.get("containment_parts")
        held = frozenset(map(str, recorded_parts)) if isinstance(recorded_parts, list) else None
        parts = held if parts is None else parts & (held or frozenset())
    count = sum(statuses.values())
    where = spec.kind.value + (f", {spec.workers} workers" if spec.workers else "")
    repeats = (f"  {reused} more reused an earlier attempt's passed certification of the "
               "same problem (certified-by.json; nothing run)")
    earlier = (f", {len(kept)} recorded earlier" if kept else "") + (
        f", {len(adopted)} kept from the interrupted run (derived again here, not run)"
        if adopted else "")
    if not count:
        why = "" if adopted else ": no attempt's contract closed here"
        lines = [f"certifications: none run ({where}){why}{earlier}"]
        return lines + ([repeats] if reused else [])
    each = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    return [
        f"certifications: {count} run ({each}), {seconds:.1f} s wall "
        f"({seconds / count:.2f} s each on average; {where})" + earlier,
        f"  z3 produced {produced}, cvc5 checked {checked} "
        f"(each step contained: {', '.join(sorted(containment))}"
        + (f"; parts: {', '.join(sorted(parts))}" if parts else "") + ")",
    ] + ([repeats] if reused else [])


def register(app: typer.Typer) -> None:
    """Attach the ``run`` command to ``app``."""

    @app.command("run", help=_HELP)
    def run_command(
        bundle_path: Annotated[Path, typer.Argument(
            metavar="BUNDLE", help="Replay bundle (document or stream); '-' for stdin.")],
        work_dir: Annotated[Path, typer.Option(
            "--work-dir", metavar="DIR",
            help="Absent or empty directory for the per-attempt certification runs "
                 "(or, with --resume, an interrupted one).")],
        out: OutOption = None,
        output_format: FormatOption = None,
        fail_on: FailOnOption = None,
        quiet: QuietOption = False,
        verbose: VerboseOption = False,
        resume: Annotated[bool, typer.Option(
            "--resume", help="Continue an interrupted work directory of this bundle.")] = False,
        deadline: Annotated[float, typer.Option(
            "--deadline", metavar="SECONDS",
            help="Deadline for each producer and each checker run, in seconds: more than 0, "
                 "at most 604800 (7 days).")] = 60.0,
        executor: Annotated[str | None, typer.Option(
            "--executor", metavar=f"[{EXECUTOR_NAMES}]", autocompletion=complete_executor,
            help="Where certifications run: inline (this process, one after the other; the "
                 "default), process (a local process pool) or dask (Dask distributed); "
                 "--workers N alone means process, --scheduler alone dask, as for kernel "
                 "replay. With process or dask the pure steps run on workers too, in "
                 "shards. Output bytes are the same for every choice.")] = None,
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
        tls_ca_file: TlsCaOption = None,
        tls_cert: TlsCertOption = None,
        tls_key: TlsKeyOption = None,
        shard_size: Annotated[int | None, typer.Option(
            "--shard-size", metavar="N", min=1, max=MAX_SHARD_SIZE,
            help=f"Attempts per shard with --executor process or dask (default "
                 f"{RUN_SHARD_SIZE}, not replay's {DEFAULT_SHARD_SIZE}: a shard's outcome lines "
                 "wait for its slowest certification, so smaller shards keep fewer "
                 "waiting). Their pure steps run on the workers a shard at a "
                 "time. Output bytes are the same for every size.")] = None,
        recheck_returned: Annotated[bool, typer.Option(
            "--recheck-returned",
            help="With --executor process or dask: before a certification a worker "
                 "returned counts, run the pinned checker on its evidence here, in this "
                 "machine's sandbox (checker only; kept as DIR/<attempt_id>/run/replays/"
                 "driver-recheck/). A compromised worker can then cost the run its speed, "
                 "never forge its PASS. Outcome bytes are unchanged.")] = False,
        evidence_store: Annotated[Path | None, typer.Option(
            "--evidence-store", metavar="DIR",
            help="Evidence store shared by runs (created if absent; off by default): "
                 "a certification problem already stored for this check skips its "
                 "producer, the checker still runs. Outcomes are the same with or "
                 "without it.")] = None,
    ) -> None:
        chosen = resolve_output(out, output_format)
        classes = fail_on_classes(fail_on)
        spec = executor_spec(executor, workers, scheduler, connect_timeout,
                             (tls_ca_file, tls_cert, tls_key))
        refuse_output_is_input(out, bundle_path, work_dir / OUTCOMES_FILE)
        refuse_output_in_work_dir(out, work_dir)
        settings = JobSettings(work_dir=work_dir, executor=spec, resume=resume,
                               evidence_store=evidence_store, deadline=deadline,
                               shard_size=shard_size, recheck_returned=recheck_returned)
        logger = logging.getLogger("kernel.orchestrate")
        # --quiet still needs a handler, or logging's last resort prints the notes.
        handler = logging.NullHandler() if quiet else _NoteHandler(logging.WARNING)
        code = 0
        with ExitStack() as stack:
            with refusals():  # every check, before anything is written
                job = stack.enter_context(MainJob(bundle_path, settings))
            if job.started_fresh and not quiet:
                # Interrupted before the work directory held anything (issue 35,
                # finding 7): a wrapper that retries with --resume after 130 starts fresh.
                typer.echo(f"note: --resume: {work_dir} holds no run yet (absent or empty); "
                           "starting fresh", err=True)
            logger.addHandler(handler)
            stack.callback(logger.removeHandler, handler)
            try:
                with refusals(), _signals_as_interrupts(), Emitter(
                    out=out, output_format=chosen, quiet=quiet, verbose=verbose,
                    fail_on=classes, total=job.total, label="certifying",
                    explain=_root_cause(job.root),
                    epilogue=lambda: _certification_lines(job.root, job.report()),
                ) as emitter:
                    for recorded in job.outcomes():
                        emitter.add(recorded.index, recorded.attempt_id, recorded.outcome,
                                    recorded.hint, line=recorded.line)
                    restarts = job.report().restarts
                    if restarts and not quiet:
                        typer.echo("note: a worker process died; the shards it had not "
                                   f"returned were run again ({restarts} time(s))", err=True)
                    code = emitter.finish()
            except JobStopped as exc:  # a shard's workers were lost: fail closed, resumable
                refuse(exc.code, f"{exc.message}: {exc.recorded} of {exc.total} attempts "
                       f"recorded; continue with --resume --work-dir {work_dir}")
            except KeyboardInterrupt as exc:
                name, exit_code = interruption(exc)
                done = job.interrupted(exc)
                typer.echo(f"error: interrupted: {name} after {done} of {job.total} attempts; "
                           f"continue with --resume --work-dir {work_dir}", err=True)
                raise typer.Exit(exit_code) from None
        if code:
            raise typer.Exit(code)
