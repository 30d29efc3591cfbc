"""`kernel run BUNDLE --work-dir DIR`: the main job, end to end (ADR-0006).

Every attempt of the bundle (a single document or a bundle stream, a path or
``-``) is classified in the run's canonical order under the production
manifest (``kernel.organs.CERTIFIED_MANIFEST``); for each attempt whose
contract closes, ``kernel.orchestrate.ExternalCertifier`` runs the pinned
z3 -> cvc5 pair in ``DIR/<attempt_id>/`` and hands the sealed receipt to the
pure ``arithmetic.target_certified`` authority. Inline, attempts are
decided here one at a time; with ``--executor process|dask`` they are taken
in shards whose pure steps run on shard workers, certifications on the
executor in between (ADR 0020, ``kernel.orchestrate._sharded_run``). Each
batch's outcome lines are appended to ``DIR/outcomes.jsonl`` (flushed to
disk) and streamed to the output in run order, exactly like ``kernel replay``.

Interrupts: SIGINT and SIGTERM stop the running certification, leave
``DIR/INTERRUPTED`` (which signal, how many outcomes are recorded) and exit
130 and 143. ``--resume`` continues that work directory: recorded outcomes
are kept (and re-emitted) once the pure core, from the bundle and the stored
certification, gives each recorded line again (else exit 3,
``resume_log_tampered``, nothing touched); the attempts after them are
decided afresh, none twice: a certification the interrupt left complete is
kept once it derives again with a verified receipt (ADR 0022), any other
directory is removed and certified anew. A stored certification counts only
when its attempt directory derives it again (its run's metadata and
receipt, under the run-time receipt rules).

Exit codes: README "Exit codes" and adr/0013 (0 / 1 --fail-on / 2 boundary
/ 3 integrity / 130 SIGINT / 143 SIGTERM). The default ``--fail-on`` is
``unclassified``, as for ``kernel replay``: the main job promises a
certification, so an attempt whose checker never concluded (a producer
timeout, a lost worker) or whose obligations are not certified.v1's fails
the run.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from kernel.audit import (
    StoredCertifications,
    rederive_certification,
)
from kernel.bundles import BundleStreamError, ReadyAttempt, outcome_line
from kernel.commands._io import ENVIRONMENT_EXIT, refuse, refuse_output_is_input
from kernel.commands._outcomes import (
    Attempt,
    BundleCopy,
    Emitter,
    FailOnOption,
    FormatOption,
    OutOption,
    QuietOption,
    VerboseOption,
    default_cause,
    fail_on_classes,
    manifest_hint,
    open_bundle,
    resolve_output,
    stream_error,
)
from kernel.commands._sharded import (
    EXECUTOR_NAMES,
    MAX_SHARD_SIZE,
    DocumentShards,
    StreamShards,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    complete_executor,
    executor_spec,
    open_sharded,
)
from kernel.commands._signals import Terminated, fragile_frame, interruption, raise_interrupt
from kernel.commands._verdict import EXIT_INTEGRITY
from kernel.commands._work_dir import (
    check_utf8_work_dir,
    refuse_output_in_work_dir,
)
from kernel.external import (
    MAX_DEADLINE_SECONDS,
    ContainmentLevel,
    RunLimits,
    default_environment,
    sandbox_shortfall,
)
from kernel.orchestrate import (
    ATTEMPT_DIR,
    BUNDLE_PARTIAL,
    CERTIFIED_BY,
    INTERRUPTED_FILE,
    OUTCOMES_FILE,
    RUN_ID,
    CertifierSetupError,
    EvidenceStore,
    EvidenceTask,
    ExecutorKind,
    ExecutorSetupError,
    ExecutorSpec,
    ExternalCertifier,
    FirstOfKey,
    WorkDirError,
    certification_entry,
    check_fresh_work_dir,
    clear_unrecorded,
    create_work_dir,
    discover_tools,
    holds_nothing,
    keep_bundle,
    mark_interrupted,
    open_executor,
    recorded_count,
    recorded_outcomes,
    replay_requests,
    run_state,
    still_as_left,
)
from kernel.orchestrate._sharded_run import replay_shards
from kernel.orchestrate._shards import (
    DEFAULT_SHARD_SIZE,
    RUN_SHARD_SIZE,
    ShardError,
    ShardRunner,
    shards_beside,
)
from kernel.organs import certified_manifest
from kernel.replay import (
    AuthorityManifest,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    RunFacts,
    facts_for,
)
from kernel.serde import SerdeError, structure
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

# What a builtin.v1 bundle's user should do: kernel run certifies under certified.v1.
_MANIFEST_ADVICE = ("kernel run certifies under certified.v1: seal the draft with "
                    "`kernel bundle --manifest certified.v1` (a builtin.v1 bundle is for "
                    "`kernel replay`)")


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


def _check_recorded(work_dir: Path, prefix: list[Attempt], recorded: list[bytes]) -> None:
    """For --resume: each recorded line is what the bundle and the stored certification give.

    The work directory is a run store, not an authority (THREAT_MODEL: the run
    store is an attacker): a log line is kept only if the pure core, given the
    bundle's attempt and the certification stored for it (nothing is run),
    writes exactly that line again. A stored certification counts only once
    it is derived again from its own run's records (``StoredCertifications``:
    the attempt directory audits intact, its metadata and its checker's
    receipt under the receipt rules the kernel applies at run time, and an
    accepting certification only of a run whose metadata says PASS).
    Otherwise a forged ``contract_and_proof_closed`` line, or a certification
    resealed over a run that was BLOCKED, would be carried into the outcomes
    and the verdict. Integrity (exit 3), checked before anything in the
    directory is touched.
    """
    stored = StoredCertifications(work_dir.absolute())
    ready = [item.request for item in prefix if isinstance(item, ReadyAttempt)]
    decided = iter(replay_requests(ready, certified_manifest(), stored))
    for number, (item, line) in enumerate(zip(prefix, recorded, strict=True), start=1):
        outcome = next(decided) if isinstance(item, ReadyAttempt) else item.refusal
        if outcome_line(item.attempt_index, item.attempt_id, outcome) != line + b"\n":
            refuse("resume_log_tampered",
                   f"{work_dir / OUTCOMES_FILE}: line {number} is not the outcome the bundle "
                   f"and the stored certification give for attempt {item.attempt_index}"
                   f"{_underived(stored, item)}; nothing was changed "
                   "(kernel audit --outcomes --bundle lists what differs)",
                   exit_code=EXIT_INTEGRITY)


def _underived(stored: StoredCertifications, item: Attempt) -> str:
    """Why the attempt's stored certification does not count, for the message ('' if it does)."""
    if item.attempt_id is None or not ATTEMPT_DIR.fullmatch(item.attempt_id):
        return ""  # no directory of its own to look at
    findings = stored.findings(item.attempt_id)
    if not findings:
        return ""
    first = findings[0]
    more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
    return (f" (its certification does not derive from its run's records: {first.code.value} "
            f"{first.path} {first.subject}{more})")


def _outcome_of(line: bytes) -> ReplayAdapterOutcome:
    try:
        record = json.loads(line)["outcome"]
        kind: type[ReplayAdapterOutcome] = (
            ReplayAdapterResult if "replay_result_id" in record else ReplayAdapterRefusal
        )
        return structure(record, kind)
    except (ValueError, KeyError, TypeError, SerdeError) as exc:
        refuse("resume_log_corrupt", f"a recorded outcome does not read back: {exc}")


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


def _certification_lines(
    root: Path, kept: set[str], adopted: frozenset[str], seconds: float, spec: ExecutorSpec
) -> list[str]:
    """The summary's account of the certifications this invocation ran: who, how many, how long.

    Read back from the attempt directories' ``metadata.json`` (written by the
    external protocol, not by this summary), so it says what ran: z3 as the
    producer, cvc5 as the checker, each in its own sandboxed step.
    """
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


# One decided attempt as the command records it: index, attempt id, outcome, line, hint.
_Decided = tuple[int, str | None, ReplayAdapterOutcome, bytes, str | None]


def _hint(item: Attempt, outcome: ReplayAdapterOutcome) -> str | None:
    """The summary's likely cause (a builtin.v1 bundle); module level, so a worker can call it."""
    return manifest_hint(item, outcome, certified_manifest(), _MANIFEST_ADVICE)


def _inline_batches(
    attempts: Iterator[Attempt], manifest: AuthorityManifest, certifier: ExternalCertifier
) -> Iterator[list[_Decided]]:
    """Inline: each attempt decided here, one at a time (a batch of one).

    The run is examined once and its facts passed with every attempt (ADR 0011):
    examined again for each attempt, a run of n attempts cost O(n^2).
    """
    facts: RunFacts | None = None
    reuse: FirstOfKey[EvidenceTask] = FirstOfKey()  # a repeat reuses the run's first (ADR-0019)
    for item in attempts:
        if isinstance(item, ReadyAttempt):
            facts = facts_for(item.request, facts)
            (outcome,) = replay_requests(
                [item.request], manifest, certifier, facts=facts, reuse=reuse
            )
        else:
            outcome = item.refusal
        line = outcome_line(item.attempt_index, item.attempt_id, outcome)
        yield [(item.attempt_index, item.attempt_id, outcome, line, _hint(item, outcome))]


def _sharded_batches(
    runner: ShardRunner, shards: StreamShards | DocumentShards, pool: Executor | None,
    certifier: ExternalCertifier, manifest: AuthorityManifest,
) -> Iterator[list[_Decided]]:
    """On workers: a shard at a time, its pure steps there, its certifications on ``pool``."""
    for batch in replay_shards(runner, shards, pool, certifier, manifest.manifest_version,
                               _hint):
        yield [(s.index, s.attempt_id, s.outcome, s.line, s.hint) for s in batch]
    tail: list[_Decided] = [(item.attempt_index, item.attempt_id, item.refusal,
             outcome_line(item.attempt_index, item.attempt_id, item.refusal),
             _hint(item, item.refusal)) for item in shards.tail]
    if tail:  # attempt lines missing at the end of the stream: the reader's refusals
        yield tail


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
        check_utf8_work_dir(work_dir)
        chosen = resolve_output(out, output_format)
        classes = fail_on_classes(fail_on)
        if not 0 < deadline <= MAX_DEADLINE_SECONDS:
            refuse("invalid_deadline", f"--deadline must be positive and at most "
                   f"{MAX_DEADLINE_SECONDS} seconds (7 days), got {deadline}")
        spec = executor_spec(executor, workers, scheduler, connect_timeout,
                             (tls_ca_file, tls_cert, tls_key))
        if recheck_returned and spec.kind is ExecutorKind.INLINE:
            refuse("option_conflict", "--recheck-returned re-checks what workers return: "
                   "it needs --executor process or dask (inline, every certification "
                   "already runs here)")
        refuse_output_is_input(out, bundle_path, work_dir / OUTCOMES_FILE)
        refuse_output_in_work_dir(out, work_dir)
        copy = BundleCopy()  # what the run reads, kept in the work directory (the audit's input)
        sharded = spec.kind is not ExecutorKind.INLINE
        attempts: Iterator[Attempt] = iter(())
        shards: StreamShards | DocumentShards | None = None
        if sharded:  # the pure steps on the workers too (ADR 0020): the lines, unparsed here
            total, shared, shards = open_sharded(bundle_path, shard_size or RUN_SHARD_SIZE, copy)
            identity = shards.run_id
        else:
            total, identity, attempts = open_bundle(bundle_path, copy)
        recorded: list[bytes] = []
        prefix: list[Attempt] = []
        manifest = certified_manifest()
        if resume and holds_nothing(work_dir):
            # Interrupted before the work directory held anything (issue 35,
            # finding 7): a wrapper that retries with --resume after 130 starts fresh.
            if not quiet:
                typer.echo(f"note: --resume: {work_dir} holds no run yet (absent or empty); "
                           "starting fresh", err=True)
            resume = False
        try:
            if resume:
                recorded = recorded_outcomes(work_dir, identity, total)
                # Read past the recorded attempts, but never take their outcomes on trust.
                prefix = (shards.take(len(recorded)) if shards is not None
                          else list(itertools.islice(attempts, len(recorded))))
                _check_recorded(work_dir, prefix, recorded)
            else:
                check_fresh_work_dir(work_dir)
        except WorkDirError as exc:
            refuse(exc.code, exc.message)
        try:
            entry = certification_entry(discover_tools(Path(sys.executable)))
        except CertifierSetupError as exc:
            refuse("certifier_unavailable", exc.message)
        if entry.required_containment is ContainmentLevel.SANDBOX:
            # Every certification would end BLOCKED containment_unavailable: say
            # so once, before anything runs, with what to install.
            shortfall = sandbox_shortfall()
            if shortfall is not None:
                refuse("sandbox_unavailable", f"certification runs every step in a "
                       f"sandbox: {shortfall}", exit_code=ENVIRONMENT_EXIT)
        root = work_dir.absolute()
        logger = logging.getLogger("kernel.orchestrate")
        # --quiet still needs a handler, or logging's last resort prints the notes.
        handler = logging.NullHandler() if quiet else _NoteHandler(logging.WARNING)
        code = 0
        with ExitStack() as stack:
            try:
                # Opened before anything is written: a refusal leaves no trace.
                pool = stack.enter_context(open_executor(spec))
            except ExecutorSetupError as exc:
                refuse(exc.code, exc.message)
            left: dict[str, tuple[int, int]] = {}
            try:
                if resume:  # a certification the interrupt left complete may be kept
                    left = clear_unrecorded(root, recorded)
                else:
                    create_work_dir(root, run_state(identity, total))
            except WorkDirError as exc:
                refuse(exc.code, exc.message)
            certifier = ExternalCertifier(
                root, entry, RunLimits(deadline, deadline), default_environment(),
                store=None if evidence_store is None else EvidenceStore(evidence_store),
                rederive=rederive_certification,  # a worker's certification is derived here
                adopt=resume, recheck=recheck_returned,
            )
            log = stack.enter_context((root / OUTCOMES_FILE).open("ab"))
            kept = stack.enter_context((root / BUNDLE_PARTIAL).open("wb"))
            copy.attach(kept)
            recorded_ids = {json.loads(line)["attempt_id"] for line in recorded}
            elapsed = 0.0  # seconds spent deciding batches: the certifications, mostly
            runner: ShardRunner | None = None
            logger.addHandler(handler)
            stack.callback(logger.removeHandler, handler)
            try:
                with _signals_as_interrupts(), Emitter(
                    out=out, output_format=chosen, quiet=quiet, verbose=verbose,
                    fail_on=classes, total=total, label="certifying",
                    explain=_root_cause(root),
                    epilogue=lambda: _certification_lines(
                        root, recorded_ids, still_as_left(root, left), elapsed, spec),
                ) as emitter:
                    for index, (item, line) in enumerate(zip(prefix, recorded, strict=True)):
                        outcome = _outcome_of(line)
                        emitter.add(index, json.loads(line)["attempt_id"], outcome,
                                    manifest_hint(item, outcome, manifest, _MANIFEST_ADVICE))
                    if shards is None:
                        batches = _inline_batches(attempts, manifest, certifier)
                    else:
                        runner = stack.enter_context(shards_beside(shared, spec, pool))
                        batches = _sharded_batches(runner, shards, pool, certifier, manifest)
                    try:
                        while True:
                            started = time.monotonic()
                            batch = next(batches, None)
                            elapsed += time.monotonic() - started
                            if batch is None:
                                break
                            for index, attempt_id, outcome, line, hint in batch:
                                emitter.add(index, attempt_id, outcome, hint, line=line)
                            # Recorded (and flushed to disk) a batch at a time: what
                            # --resume keeps is exactly what was decided.
                            log.write(b"".join(entry[3] for entry in batch))
                            log.flush()
                            os.fsync(log.fileno())
                    except BundleStreamError as exc:
                        stream_error(bundle_path, exc)
                    if shards is not None and shards.error is not None:
                        stream_error(bundle_path, shards.error)
                    if runner is not None and runner.restarts and not quiet:
                        typer.echo("note: a worker process died; the shards it had not "
                                   f"returned were run again ({runner.restarts} time(s))",
                                   err=True)
                    keep_bundle(root, kept, copy.stream)
                    code = emitter.finish()
            except ShardError as exc:  # a shard's workers were lost: fail closed, resumable
                log.flush()
                done = recorded_count(root)
                refuse(exc.code, f"{exc.message}: {done} of {total} attempts recorded; "
                       f"continue with --resume --work-dir {work_dir}")
            except KeyboardInterrupt as exc:
                name, exit_code = interruption(exc)
                # What --resume will keep: the complete lines on disk (the signal
                # may have come between a chunk's write and the count).
                log.flush()
                done = mark_interrupted(root, name)
                typer.echo(f"error: interrupted: {name} after {done} of {total} attempts; "
                           f"continue with --resume --work-dir {work_dir}", err=True)
                raise typer.Exit(exit_code) from None
        (root / INTERRUPTED_FILE).unlink(missing_ok=True)
        if code:
            raise typer.Exit(code)

