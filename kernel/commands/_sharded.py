"""``kernel replay --workers N`` / ``--executor dask``: the command's side of sharded replay.

``open_sharded`` reads a bundle like ``open_bundle`` (the same refusals, at
the same points) and keeps its shared part (a stream's header and run as
its reader built them, or the document's bytes) for each worker to get
once (in memory when forked, pickled once when spawned or on Dask), and
cuts the attempt lines into shards as they are read (``StreamShards``). Envelope
defects that serial replay finds after the attempts (lines after the last
attempt, attempt lines missing at the end) are found here by the command's
own reader, positioned past the shards, and reported after every shard's
outcomes, so the stream of outcome lines is the serial one byte for byte.
See ``kernel.orchestrate._shards`` and adr/0020-sharded-replay.md.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, BinaryIO, Final, assert_never, cast

import typer

from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleStreamError,
    BundleStreamReader,
    RefusedAttempt,
    document_attempts,
)
from kernel.commands._io import bounded_lines, is_stdio, open_input, refuse
from kernel.commands._outcomes import (
    Attempt,
    BundleCopy,
    Emitter,
    OutputFormat,
    _Tee,
    replay_hint,
    replay_summary,
    stream_error,
)
from kernel.commands._signals import interruption
from kernel.commands._verdict import FailOn
from kernel.identity import JsonValue
from kernel.orchestrate._executors import (
    ExecutorKind,
    ExecutorSpec,
    TlsFiles,
    check_executor_spec,
)
from kernel.orchestrate._shards import (
    Shard,
    ShardError,
    ShardRunner,
    SharedRun,
    classify_item,
    dask_shards,
    process_shards,
    shared_document,
    shared_stream,
)
from kernel.orchestrate.errors import ExecutorSetupError
from kernel.organs import builtin_manifest
from kernel.replay import ReplayBundle
from kernel.serde import SerdeError, parse_json, structure

__all__ = [
    "EXECUTOR_NAMES", "MAX_SHARD_SIZE", "DocumentShards", "StreamShards", "TlsCaOption",
    "TlsCertOption", "TlsKeyOption", "complete_executor", "executor_spec", "open_sharded",
    "replay_sharded",
]

MAX_SHARD_SIZE: Final = 1_000_000
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


class StreamShards:
    """A stream's attempt lines, cut into shards as they are read.

    Iterate it for the shards; afterwards ``tail`` holds the refusals of
    attempts whose lines never came and ``error`` the envelope defect of a
    line after the last attempt, both as the serial reader gives them.
    """

    def __init__(
        self, reader: BundleStreamReader, lines: Iterator[bytes | None], count: int, size: int
    ) -> None:
        self._reader = reader
        self._lines = lines
        self._count = count
        self._size = size
        self._start = 0
        self.run_id = reader.run_id or ""
        self.tail: tuple[RefusedAttempt, ...] = ()
        self.error: BundleStreamError | None = None

    def take(self, count: int) -> list[Attempt]:
        """The first ``count`` attempts, read here (``kernel run --resume``); shards follow them."""
        reader = self._reader.positioned(0)
        items: list[Attempt] = []
        for line in itertools.islice(self._lines, min(count, self._count)):
            item = reader.feed_oversized() if line is None else reader.feed(line)
            assert item is not None  # within the attempt count, every line is an attempt's
            items.append(item)
        if len(items) < count:  # the stream ended early: the serial reader's refusals
            items += reader.finish()[: count - len(items)]
        self._start = len(items)
        return items

    def __iter__(self) -> Iterator[Shard]:
        start = self._start
        batch: list[bytes | None] = []
        for line in self._lines:
            if start + len(batch) >= self._count:
                if batch:
                    yield Shard(start, len(batch), tuple(batch))
                    start, batch = start + len(batch), []
                try:
                    past = self._reader.positioned(self._count)
                    if line is None:
                        past.feed_oversized()
                    else:
                        past.feed(line)
                except BundleStreamError as exc:
                    self.error = exc
                    return
                raise AssertionError("a line after the last attempt was not refused")
            batch.append(line)
            if len(batch) == self._size:
                yield Shard(start, len(batch), tuple(batch))
                start, batch = start + len(batch), []
        if batch:
            yield Shard(start, len(batch), tuple(batch))
            start += len(batch)
        self.tail = self._reader.positioned(start).finish()


class DocumentShards:
    """A document's attempts as index ranges (the workers hold the document)."""

    def __init__(self, count: int, size: int, run_id: str = "", data: bytes = b"") -> None:
        self._count = count
        self._size = size
        self._start = 0
        self._data = data
        self.run_id = run_id
        self.tail: tuple[RefusedAttempt, ...] = ()
        self.error: BundleStreamError | None = None

    def take(self, count: int) -> list[Attempt]:
        """The first ``count`` attempts, parsed here again (``kernel run --resume``)."""
        value = parse_json(self._data, max_depth=BUNDLE_LIMITS.depth)
        items: list[Attempt] = list(itertools.islice(
            document_attempts(structure(value, ReplayBundle)), count))
        self._start = len(items)
        return items

    def __iter__(self) -> Iterator[Shard]:
        for start in range(self._start, self._count, self._size):
            yield Shard(start, min(self._size, self._count - start))


def open_sharded(
    path: Path, shard_size: int, copy: BundleCopy | None = None
) -> tuple[int, SharedRun, StreamShards | DocumentShards]:
    """``(attempt count, shared part, shards)``; refuses (exit 2) what ``open_bundle`` refuses.

    With ``copy``, every byte read is kept there too, as ``open_bundle`` keeps it.
    """
    handle = open_input(path)
    if copy is not None:
        handle = cast(BinaryIO, _Tee(handle, copy))
    limit = max(BUNDLE_LIMITS.document_bytes, BUNDLE_LIMITS.line_bytes)
    lines = bounded_lines(handle, limit)
    first = next(lines, b"")
    if first is None:
        refuse("document_too_large", f"{path}: more than {limit} bytes")
    try:
        head: JsonValue | SerdeError = parse_json(first, max_depth=BUNDLE_LIMITS.depth)
    except SerdeError as exc:
        head = exc
    if isinstance(head, dict) and "format" in head:
        if copy is not None:
            copy.stream = True
        reader = BundleStreamReader()
        try:
            reader.feed(first)
            while not reader.run_ready:
                line = next(lines, b"<eof>")
                if line == b"<eof>":
                    reader.finish()  # raises: the run is incomplete
                if line is None:
                    reader.feed_oversized()
                else:
                    reader.feed(line)
        except BundleStreamError as exc:
            refuse(exc.code, f"{path}: {exc.message}")
        count = reader.attempt_count or 0
        return count, shared_stream(reader), StreamShards(reader, lines, count, shard_size)
    rest = handle.read(BUNDLE_LIMITS.document_bytes + 1 - len(first))
    data = first
    try:
        if rest.strip():  # a document over several lines: parse it whole
            data = first + b"\n" + rest
            if len(data) > BUNDLE_LIMITS.document_bytes:
                refuse("document_too_large",
                       f"{path}: more than {BUNDLE_LIMITS.document_bytes} bytes")
            head = parse_json(data, max_depth=BUNDLE_LIMITS.depth)
        if isinstance(head, SerdeError):
            raise head
        bundle = structure(head, ReplayBundle)
    except SerdeError as exc:
        refuse(exc.code, f"{path}: {exc.message}")
    try:
        count = sum(1 for _ in document_attempts(bundle))
    except ValueError as exc:
        refuse("bundle_shape_invalid", f"{path}: {exc}")
    run_id = bundle.chain.run.run_id
    del bundle, head
    return count, shared_document(data), DocumentShards(count, shard_size, run_id, data)


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
