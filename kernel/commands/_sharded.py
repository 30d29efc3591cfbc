"""``kernel replay --workers N`` / ``--executor dask``: the command's side of sharded replay.

``open_sharded`` (``kernel.job``'s reader, its refusals the command's) reads
a bundle like ``open_bundle`` (the same refusals, at the same points) and
keeps its shared part for each worker to get once (in memory when forked,
pickled once when spawned or on Dask), and cuts the attempt lines into
shards as they are read. Envelope defects that serial replay finds after the
attempts (lines after the last attempt, attempt lines missing at the end)
are found by the reader positioned past the shards, and reported after
every shard's outcomes, so the stream of outcome lines is the serial one
byte for byte. See adr/0020-sharded-replay.md.
"""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path
from typing import Annotated, Final, assert_never

import typer

from kernel.commands._io import is_stdio, refusals, refuse
from kernel.commands._outcomes import (
    Emitter,
    OutputFormat,
    replay_hint,
    replay_summary,
    stream_error,
)
from kernel.commands._signals import interruption
from kernel.commands._verdict import FailOn
from kernel.job import MAX_SHARD_SIZE as MAX_SHARD_SIZE
from kernel.job import BundleCopy, DocumentShards, StreamShards
from kernel.job import open_sharded as read_sharded
from kernel.orchestrate import (
    ExecutorKind,
    ExecutorSetupError,
    ExecutorSpec,
    ShardError,
    ShardRunner,
    SharedRun,
    TlsFiles,
    check_executor_spec,
    classify_item,
    dask_shards,
    process_shards,
)
from kernel.organs import builtin_manifest

__all__ = [
    "EXECUTOR_NAMES", "MAX_SHARD_SIZE", "DocumentShards", "StreamShards", "TlsCaOption",
    "TlsCertOption", "TlsKeyOption", "complete_executor", "executor_spec", "open_sharded",
    "replay_sharded",
]

#: The --executor choices, as usage lines show them (kernel run, kernel replay).
EXECUTOR_NAMES: Final = "|".join(kind.value for kind in ExecutorKind)

# Dask's own names for its TLS files (``dask scheduler|worker --tls-*``): a cluster
# across machines is mutually authenticated and encrypted (docs/main-job.md).
TlsCaOption = Annotated[Path | None, typer.Option(
    "--tls-ca-file", metavar="PEM", help="With --scheduler tls://...: the certificate "
    "authority the scheduler's certificate (and this client's) is checked against.")]
TlsCertOption = Annotated[Path | None, typer.Option(
    "--tls-cert", metavar="PEM", help="With --scheduler tls://...: this client's certificate.")]
TlsKeyOption = Annotated[Path | None, typer.Option(
    "--tls-key", metavar="PEM", help="With --scheduler tls://...: this client's private key.")]


def complete_executor(incomplete: str) -> list[str]:
    """Shell completion of ``--executor``."""
    return [kind.value for kind in ExecutorKind if kind.value.startswith(incomplete)]


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def executor_spec(
    executor: str | None, workers: str | None, scheduler: str | None, connect_timeout: float,
    tls: tuple[Path | None, Path | None, Path | None] = (None, None, None),
) -> ExecutorSpec:
    """The executor the options name; ``--workers N`` alone means a process pool."""
    if executor is None:
        executor = ExecutorKind.INLINE.value if workers is None else ExecutorKind.PROCESS.value
        if scheduler is not None:
            executor = ExecutorKind.DASK.value
    try:
        kind = ExecutorKind(executor)
    except ValueError:
        refuse("unknown_executor", f"--executor must be one of {EXECUTOR_NAMES}, got {executor!r}")
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
    files = None
    if any(path is not None for path in tls):
        ca, cert, key = tls
        if ca is None or cert is None or key is None:
            refuse("option_conflict", "--tls-ca-file, --tls-cert and --tls-key go together")
        files = TlsFiles(str(ca), str(cert), str(key))
    spec = ExecutorSpec(kind, count, scheduler, connect_timeout, files)
    try:
        check_executor_spec(spec)
    except ExecutorSetupError as exc:
        refuse(exc.code, exc.message)
    return spec


def open_sharded(
    path: Path, shard_size: int, copy: BundleCopy | None = None
) -> tuple[int, SharedRun, StreamShards | DocumentShards]:
    """``kernel.job.open_sharded``, its refusals as the command's (exit 2)."""
    with refusals():
        return read_sharded(path, shard_size, copy)


def replay_sharded(
    bundle_path: Path,
    spec: ExecutorSpec,
    shard_size: int,
    *,
    out: Path | None,
    output_format: OutputFormat,
    quiet: bool,
    verbose: bool,
    fail_on: frozenset[FailOn],
) -> None:
    """``kernel replay`` on workers: the serial command's output, byte for byte.

    Exit codes as serial, and: 2 ``worker_lost`` / ``shard_failed`` (a shard
    could not be classified after its re-runs: no outcome file written, the
    outcome lines on stdout incomplete), 2 for an executor that cannot be
    set up (nothing classified).
    """
    total, shared, shards = open_sharded(bundle_path, shard_size)
    # The run and its lines are held to the end of the command: out of the
    # collector's generations, they are not walked again at every full
    # collection that the outcomes unpickled from the workers set off.
    gc.freeze()
    with contextlib.ExitStack() as stack:
        # The workers first: a pool's are forked from this process while it
        # runs no other thread (the progress bar's comes with the emitter) and
        # holds no output file.
        emitter: Emitter | None = None
        try:
            try:
                runner = stack.enter_context(_runner(spec, shared))
            except ExecutorSetupError as exc:
                refuse(exc.code, exc.message)
            emitter = stack.enter_context(Emitter(
                out=out, output_format=output_format, quiet=quiet, verbose=verbose,
                fail_on=fail_on, total=total, label="replaying"))
            manifest = builtin_manifest()
            for index, attempt_id, summary, line in runner.run(shards, replay_summary):
                counted, cause, hint = summary
                emitter.add_counted(index, attempt_id, counted, line, cause, hint)
            if runner.restarts and not quiet:
                typer.echo(f"note: a worker process died; the shards it had not returned were "
                           f"run again ({runner.restarts} time(s))", err=True)
            for item in shards.tail:  # attempt lines missing at the end of the stream
                outcome, _ = classify_item(item, manifest, None)
                emitter.add(item.attempt_index, item.attempt_id, outcome,
                            replay_hint(item, outcome))
            if shards.error is not None:
                stream_error(bundle_path, shards.error)
        except ShardError as exc:
            written = "" if out is None or is_stdio(out) else "; no outcome file written"
            done = 0 if emitter is None else emitter.tally.total
            refuse(exc.code, f"{exc.message}: {done} of {total} attempts written{written}")
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (kernel.commands._signals)
            name, exit_code = interruption(exc)
            where = ("the outcome lines on stdout are incomplete"
                     if output_format is OutputFormat.JSONL else "no summary")
            written = "" if out is None or is_stdio(out) else "; no outcome file written"
            done = 0 if emitter is None else emitter.tally.total
            typer.echo(f"error: interrupted: {name} after {done} of {total} "
                       f"attempts; {where}{written}", err=True)
            raise typer.Exit(exit_code) from None
        assert emitter is not None  # set before the first outcome
        code = emitter.finish()
    if code:
        raise typer.Exit(code)


def _runner(spec: ExecutorSpec, shared: SharedRun) -> contextlib.AbstractContextManager[
    ShardRunner
]:
    match spec.kind:
        case ExecutorKind.PROCESS:
            assert spec.workers is not None
            # Forked: each worker has the parsed run in its copy of this process's
            # memory, without a pickle or an interpreter's start (ADR 0020).
            return process_shards(shared, spec.workers, fork=True)
        case ExecutorKind.DASK:
            return dask_shards(shared, workers=spec.workers, scheduler=spec.scheduler,
                               connect_seconds=spec.connect_seconds, tls=spec.tls)
        case ExecutorKind.INLINE:
            raise AssertionError("inline replay is not sharded")
        case _:
            assert_never(spec.kind)
