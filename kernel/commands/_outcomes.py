"""Reading bundles (either layout) and streaming outcomes, shared by ``replay`` and ``run``.

- the bundle readers are the main job's (``kernel.job``: ``open_bundle``,
  ``BundleCopy``, ``manifest_hint``), imported here for the commands;
- ``Emitter`` takes each outcome as it is decided: writes its outcome line
  (``--out FILE`` atomically, or stdout with ``--format jsonl``), counts it,
  advances the progress bar; ``finish`` prints the summary and the one-line
  verdict and returns the exit code (``kernel.commands._verdict``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, assert_never

import typer

from kernel.bundles import BundleStreamError, outcome_line
from kernel.commands._io import OutputFile, is_stdio, refusals, refuse
from kernel.commands._verdict import (
    DEFAULT_FAIL_ON,
    FAIL_ON_CHOICES,
    Counted,
    FailOn,
    Listed,
    Tally,
    parse_fail_on,
)
from kernel.job import Attempt as Attempt
from kernel.job import BundleCopy as BundleCopy
from kernel.job import manifest_hint as manifest_hint
from kernel.job import open_bundle as read_bundle
from kernel.organs import builtin_manifest
from kernel.replay import ReplayAdapterOutcome, ReplayAdapterRefusal

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID



class OutputFormat(Enum):
    """What stdout carries: a human summary, one summary document, or the outcome lines."""

    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"


def open_bundle(
    path: Path, copy: BundleCopy | None = None
) -> tuple[int, str, Iterator[Attempt]]:
    """``kernel.job.open_bundle``, its refusals as the command's (exit 2)."""
    with refusals():
        return read_bundle(path, copy)


def _progress(enabled: bool, label: str) -> AbstractContextManager[Progress | None]:
    if not enabled:
        return nullcontext(None)
    # rich is imported only when a bar is drawn (start-up cost, ADR 0013).
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("attempts"),
        TimeElapsedColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )


class Emitter:
    """Outcomes in, as they are decided: lines out, counts kept, verdict at the end."""

    def __init__(
        self,
        *,
        out: Path | None,
        output_format: OutputFormat,
        quiet: bool,
        verbose: bool,
        fail_on: frozenset[FailOn],
        total: int,
        label: str,
        explain: Callable[[int, str | None, ReplayAdapterOutcome], str | None] | None = None,
        epilogue: Callable[[], list[str]] | None = None,
    ) -> None:
        self.format = output_format
        self.epilogue = epilogue  # more summary lines (table only), asked for at the end
        self.quiet = quiet
        self.verbose = verbose
        self.tally = Tally(fail_on)
        self.total = total
        self.explain = explain
        self._file = None if out is None or is_stdio(out) else OutputFile(out)
        self._stdout_lines = output_format is OutputFormat.JSONL
        self._bar_cm = _progress(not quiet and sys.stderr.isatty() and total > 0, label)
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> Emitter:
        self._bar = self._bar_cm.__enter__()
        if self._bar is not None:
            self._task = self._bar.add_task("attempts", total=self.total)
        return self

    def _stop_bar(self) -> None:
        # Once: the bar is cleared before anything is printed below it (a verdict
        # printed while it was live was glued onto its last frame at a terminal).
        if self._bar is not None:
            self._bar = None
            self._bar_cm.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        self._stop_bar()
        if self._file is not None:
            self._file.discard()  # not committed: an error or an interrupt

    def add(
        self, index: int, attempt_id: str | None, outcome: ReplayAdapterOutcome,
        hint: str | None = None, line: bytes | None = None,
    ) -> None:
        """Write, count and show ``outcome``; ``hint`` is its likely cause, said once at the
        end; ``line`` is its outcome line when a worker already encoded it."""
        if line is None:
            line = outcome_line(index, attempt_id, outcome)
        counted = Counted.of(outcome)
        cause = None
        if counted.classes:  # the cause is looked up only for what did not close
            cause = (self.explain or default_cause)(index, attempt_id, outcome)
        self.add_counted(index, attempt_id, counted, line, cause, hint)

    def add_counted(
        self, index: int, attempt_id: str | None, counted: Counted, line: bytes,
        cause: str | None = None, hint: str | None = None,
    ) -> None:
        """``add`` for an outcome a shard worker reduced to its line, its count and its
        cause (``replay_summary``): the same output, byte for byte."""
        if self._file is not None:
            self._file.write(line)
        if self._stdout_lines:
            sys.stdout.buffer.write(line)
        listed = self.tally.count(index, attempt_id, counted, cause, hint)
        if self.verbose and self.format is OutputFormat.TABLE:
            self._row(index, attempt_id, counted, listed)
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task)

    def _row(self, index: int, attempt_id: str | None, counted: Counted,
             listed: Listed | None) -> None:
        reasons = ",".join(counted.reason_codes) or "-"
        cause = f" cause={listed.cause}" if listed is not None and listed.cause else ""
        typer.echo(f"{index:>6} {counted.disposition:<34} "
                   f"attempt={attempt_id or '-'} outcome={counted.outcome_id} "
                   f"reasons={reasons}{cause}")

    def finish(self) -> int:
        """Commit the outcome file, print the summary and verdict; the exit code."""
        self._stop_bar()
        if self._file is not None:
            self._file.commit()
        sys.stdout.flush()
        tally = self.tally
        match self.format:
            case OutputFormat.TABLE:
                if not self.quiet:
                    typer.echo(self._summary(), nl=False)
            case OutputFormat.JSON:
                typer.echo(json.dumps(tally.summary_json(), sort_keys=True,
                                      separators=(",", ":")))
            case OutputFormat.JSONL:
                pass
            case _:
                assert_never(self.format)
        if not self.quiet:
            typer.echo("\n".join([tally.verdict_line(), *tally.hint_lines()]), err=True)
        return tally.exit_code

    def _summary(self) -> str:
        tally = self.tally
        width = max((len(d) for d in tally.counts), default=0)
        text = [f"{tally.total} attempts (run order)"]
        text += [f"  {d:<{width}}  {n}" for d, n in sorted(tally.counts.items())]
        if tally.listed:
            text.append("not closed:")
        for entry in tally.listed:
            text.append(
                f"  #{entry.attempt_index} {entry.disposition} [{','.join(entry.classes)}] "
                f"attempt {entry.attempt_id or '-'}"
            )
            text.append(f"      outcome {entry.outcome_id}")
            text.append(f"      reasons {', '.join(entry.reason_codes) or '-'}")
            if entry.cause:
                text.append(f"      cause   {entry.cause}")
        if tally.unlisted:
            text.append(f"  ... and {tally.unlisted} more (--format jsonl lists every outcome)")
        if self.epilogue is not None:
            text += self.epilogue()
        return "\n".join(text) + "\n"


def stream_error(path: Path, exc: BundleStreamError) -> None:
    """An envelope defect found after outcomes were streamed: refuse (exit 2)."""
    refuse(exc.code, f"{path}: {exc.message}")


# --- the options ``replay`` and ``run`` share ------------------------------------

OutOption = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="FILE",
    help="Write the outcome lines (JSON Lines, run order) to FILE (a regular file "
         "atomically, a device or FIFO written through, never the bundle itself); "
         "'-' for stdout (same as --format jsonl).")]
FormatOption = Annotated[OutputFormat | None, typer.Option(
    "--format", "-f",
    help="stdout: table (a summary: counts per disposition, each attempt that did not "
         "close with full ids), json (the summary as one JSON document) or jsonl "
         "(one outcome line per attempt, as it is decided).")]
def complete_fail_on(incomplete: str) -> list[str]:
    """Shell completion of ``--fail-on``: the classes, after any already given with commas."""
    given, _, last = incomplete.rpartition(",")
    head = f"{given}," if given else ""
    return [head + c.value for c in FailOn if c.value.startswith(last)]


FailOnOption = Annotated[list[str] | None, typer.Option(
    "--fail-on", metavar="CLASS[,CLASS]", autocompletion=complete_fail_on,
    help=f"Exit 1 when an outcome falls in CLASS ({FAIL_ON_CHOICES}); repeatable or "
         "comma-separated; replaces the default, unclassified (any attempt that its "
         "authorities did not classify: every refusal, every unavailable outcome). "
         "integrity (exit 3) is always selected: --fail-on integrity fails on tampering "
         "only. See README 'Exit codes'.")]
#: ``kernel attest``'s --fail-on: the same classes and default as kernel run's, but
#: attest never exits 1: the classes decide the summary's verificationResult.
AttestFailOnOption = Annotated[list[str] | None, typer.Option(
    "--fail-on", metavar="CLASS[,CLASS]", autocompletion=complete_fail_on,
    help=f"The summary says FAILED when an outcome falls in CLASS ({FAIL_ON_CHOICES}), "
         "PASSED otherwise: PASSED exactly when kernel run with the same --fail-on exits 0. "
         "Repeatable or comma-separated; the default is kernel run's, unclassified; "
         "integrity is always selected. The command itself exits 0 once it has signed.")]
QuietOption = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No summary, verdict line, progress bar or notes on stderr.")]
VerboseOption = Annotated[bool, typer.Option(
    "--verbose", "-v", help="With --format table: one row per attempt as it is decided.")]


def resolve_output(out: Path | None, output_format: OutputFormat | None) -> OutputFormat:
    """``--out -`` means the outcome lines on stdout; any other stdout format conflicts."""
    if is_stdio(out):
        if output_format not in (None, OutputFormat.JSONL):
            refuse("conflicting_options", "--out - writes the outcome lines to stdout; "
                   f"it cannot be combined with --format {output_format.value}")
        return OutputFormat.JSONL
    return output_format or OutputFormat.TABLE


def fail_on_classes(
    values: list[str] | None, default: tuple[FailOn, ...] = DEFAULT_FAIL_ON
) -> frozenset[FailOn]:
    """The classes ``--fail-on`` selects (``default`` when it is not given); integrity always."""
    try:
        chosen = parse_fail_on(values)
    except ValueError as exc:
        refuse("invalid_fail_on", str(exc))
    return chosen if values else chosen | frozenset(default)


# What a certified.v1 bundle's user should do (kernel replay runs no external checker).
REPLAY_MANIFEST_ADVICE = (
    "kernel replay checks builtin.v1's in-process obligations only: run a "
    "certified.v1 bundle with `kernel run`, or seal the draft for kernel replay "
    "with `kernel bundle --manifest builtin.v1`")


def replay_hint(item: Attempt, outcome: ReplayAdapterOutcome) -> str | None:
    """``kernel replay``'s likely cause (a certified.v1 bundle); module level, so that a
    shard worker computes it beside the outcome (ADR 0020) and the summary says it too."""
    return manifest_hint(item, outcome, builtin_manifest(), REPLAY_MANIFEST_ADVICE)


#: What a shard worker of ``kernel replay`` sends back beside an outcome line.
ReplaySummary = tuple[Counted, str | None, str | None]


def replay_summary(item: Attempt, outcome: ReplayAdapterOutcome) -> ReplaySummary:
    """What the command's tally and summary read of ``outcome`` (its count, its cause as
    ``default_cause`` gives it, the hint): computed on the worker (ADR 0020)."""
    counted = Counted.of(outcome)
    cause = default_cause(item.attempt_index, item.attempt_id, outcome) if counted.classes else None
    return counted, cause, replay_hint(item, outcome)


def default_cause(
    _index: int, _attempt_id: str | None, outcome: ReplayAdapterOutcome
) -> str | None:
    """A refusal's own explanation (it names the check that failed); none for a result."""
    if isinstance(outcome, ReplayAdapterRefusal):
        return outcome.explanation
    return None
