"""Reading a bundle in either layout, for the main job and the commands (ADR 0023).

- ``open_bundle``: ``(attempt count, run id, attempts in run order)``, each
  attempt parsed here (inline runs and ``kernel replay``);
- ``open_sharded``: the same count and the run's shared part (a stream's
  header and run as its reader built them, or the document's bytes) for the
  workers to get once, and the attempt lines cut into shards as they are
  read (``StreamShards``, ``DocumentShards``; ADR 0020).

Both read a path, ``-`` (stdin) or a FIFO front to back, once, never more
than the bundle limits hold, and refuse an envelope defect
(``JobRefused``, a stable code) before anything is classified, except lines
after the last attempt (found at the end, as the serial reader finds them).
With a ``BundleCopy``, every byte read is kept as read: the main job stores
it in its work directory, the audit's input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final, NoReturn, cast

import attrs

from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleStreamError,
    BundleStreamReader,
    ReadyAttempt,
    RefusedAttempt,
    document_attempts,
)
from kernel.identity import JsonValue
from kernel.job._input import STDIO, bounded_lines, is_stdio, is_stream, open_input
from kernel.job.errors import JobRefused
from kernel.orchestrate import Shard, SharedRun, shared_document, shared_stream
from kernel.replay import ReplayBundle
from kernel.serde import SerdeError, parse_json, structure

__all__ = [
    "STDIO", "Attempt", "BundleCopy", "DocumentShards", "StreamShards", "bounded_lines",
    "is_stdio", "is_stream", "open_bundle", "open_input", "open_sharded",
]

#: One attempt of a bundle as its reader gives it: ready to replay, or refused by the reader.
Attempt = ReadyAttempt | RefusedAttempt
_LINE_LIMIT: Final = max(BUNDLE_LIMITS.document_bytes, BUNDLE_LIMITS.line_bytes)


class BundleCopy:
    """The bytes a reader reads, kept as read (the main job stores them in its work dir).

    What was read before ``attach`` is held (at most a document, or a
    stream's header and run lines, which the reader holds anyway); from then
    on every byte read goes to the attached file. ``stream`` tells the layout.
    """

    def __init__(self) -> None:
        self._held: list[bytes] = []
        self._sink: BinaryIO | None = None
        self.stream = False

    def record(self, data: bytes) -> None:
        if self._sink is None:
            self._held.append(data)
        else:
            self._sink.write(data)

    def attach(self, sink: BinaryIO) -> None:
        """Write what was read so far to ``sink``, and everything read from now on."""
        sink.write(b"".join(self._held))
        self._held.clear()
        self._sink = sink


class _Tee:
    """A read handle that hands each byte it reads to a ``BundleCopy`` too."""

    def __init__(self, handle: BinaryIO, copy: BundleCopy) -> None:
        self._handle, self._copy = handle, copy

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._copy.record(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        data = self._handle.readline(size)
        self._copy.record(data)
        return data


def _refuse(path: Path, code: str, message: str) -> NoReturn:
    raise JobRefused(code, f"{path}: {message}")


@attrs.frozen
class _Head:
    """A bundle's first line read: a stream's reader past its run, or a document's bytes."""

    reader: BundleStreamReader | None
    lines: Iterator[bytes | None]
    document: bytes = b""
    bundle: ReplayBundle | None = None


def _read_head(path: Path, copy: BundleCopy | None) -> _Head:
    """Read up to the attempts: a stream's header and run, or the whole document, refusing
    an envelope defect with the serial reader's code."""
    handle = open_input(path)
    if copy is not None:
        handle = cast(BinaryIO, _Tee(handle, copy))
    lines = bounded_lines(handle, _LINE_LIMIT)
    first = next(lines, b"")
    if first is None:
        _refuse(path, "document_too_large", f"more than {_LINE_LIMIT} bytes")
    try:  # parsed once: the first line is a stream's header or (usually) the whole document
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
            _refuse(path, exc.code, exc.message)
        return _Head(reader, lines)
    rest = handle.read(BUNDLE_LIMITS.document_bytes + 1 - len(first))
    data = first
    try:
        if rest.strip():  # a document over several lines: parse it whole
            data = first + b"\n" + rest
            if len(data) > BUNDLE_LIMITS.document_bytes:
                _refuse(path, "document_too_large",
                        f"more than {BUNDLE_LIMITS.document_bytes} bytes")
            head = parse_json(data, max_depth=BUNDLE_LIMITS.depth)
        if isinstance(head, SerdeError):
            raise head
        bundle = structure(head, ReplayBundle)
    except SerdeError as exc:
        _refuse(path, exc.code, exc.message)
    return _Head(None, lines, data, bundle)


def _document_attempts(path: Path, bundle: ReplayBundle) -> tuple[Attempt, ...]:
    try:
        return tuple(document_attempts(bundle))
    except ValueError as exc:
        _refuse(path, "bundle_shape_invalid", str(exc))


def open_bundle(
    path: Path, copy: BundleCopy | None = None
) -> tuple[int, str, Iterator[Attempt]]:
    """``(attempt count, run id, attempts in run order)`` from a bundle in either layout.

    With ``copy``, every byte read is kept there too (a stream's last bytes
    once the attempts have all been read).
    """
    head = _read_head(path, copy)
    if head.reader is None:
        assert head.bundle is not None
        attempts = _document_attempts(path, head.bundle)
        return len(attempts), head.bundle.chain.run.run_id, iter(attempts)
    reader, lines = head.reader, head.lines

    def stream_attempts() -> Iterator[Attempt]:
        for line in lines:
            item = reader.feed_oversized() if line is None else reader.feed(line)
            if item is not None:
                yield item
        yield from reader.finish()

    return reader.attempt_count or 0, reader.run_id or "", stream_attempts()


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
        """The first ``count`` attempts, read here (a resumed run); shards follow them."""
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
        """The first ``count`` attempts, parsed here again (a resumed run)."""
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
    """``(attempt count, shared part, shards)``; refuses what ``open_bundle`` refuses.

    With ``copy``, every byte read is kept there too, as ``open_bundle`` keeps it.
    """
    head = _read_head(path, copy)
    if head.reader is not None:
        count = head.reader.attempt_count or 0
        return (count, shared_stream(head.reader),
                StreamShards(head.reader, head.lines, count, shard_size))
    assert head.bundle is not None
    try:  # counted one at a time: a large document's attempts are never all held here
        count = sum(1 for _ in document_attempts(head.bundle))
    except ValueError as exc:
        _refuse(path, "bundle_shape_invalid", str(exc))
    run_id = head.bundle.chain.run.run_id
    data = head.document
    del head
    return count, shared_document(data), DocumentShards(count, shard_size, run_id, data)
