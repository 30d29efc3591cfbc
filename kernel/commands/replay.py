"""`kernel replay BUNDLE`: classify every attempt of a search run (ADR-0229).

The bundle (a single document, or a bundle stream of any size: see
``kernel.bundles``) is read strictly, from a file or ``-`` (stdin); each
attempt is classified in the run's canonical order with the built-in
authority manifest as soon as its line is read, and its outcome line
(``{"attempt_id", "attempt_index", "outcome"}``, canonical JSON) is written
at once to ``--out FILE`` (atomically, on success) or stdout
(``--format jsonl``). A summary goes to stdout (``--format table|json``) and
a one-line verdict to stderr.

Exit codes (README "Exit codes", adr/0013):

- 0: input intact, no outcome in a ``--fail-on`` class (by default: every
  attempt classified by its authorities, whatever they ruled);
- 1: some outcome is in a selected ``--fail-on`` class (by default
  ``unclassified``: a refusal such as ``unsupported_proof_obligation``, or an
  unavailable authority; the verdict is followed by ``hint:`` lines naming
  the likely cause, e.g. a bundle sealed for ``certified.v1``);
- 2: usage error, or the bundle refused at the boundary (unreadable,
  malformed, schema mismatch, not one input and one reconstruction per
  attempt, an unsound stream envelope); no outcome file is written;
- 3: integrity: some attempt's input is not what the run recorded
  (``candidate_identity_mismatch``, ``invalid_replay_input``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernel.bundles import BundleStreamError, outcome_line
from kernel.commands._io import is_stdio, refuse_output_is_input
from kernel.commands._outcomes import (
    REPLAY_MANIFEST_ADVICE,
    Emitter,
    FailOnOption,
    FormatOption,
    OutOption,
    OutputFormat,
    QuietOption,
    VerboseOption,
    fail_on_classes,
    manifest_hint,
    open_bundle,
    resolve_output,
    stream_error,
)
from kernel.commands._sharded import (
    MAX_SHARD_SIZE,
    TlsCaOption,
    TlsCertOption,
    TlsKeyOption,
    complete_executor,
    executor_spec,
    replay_sharded,
)
from kernel.commands._signals import interruption
from kernel.orchestrate import DEFAULT_SHARD_SIZE, RUN_SHARD_SIZE, ExecutorKind, classify_item
from kernel.organs import builtin_manifest
from kernel.replay import (
    ReplayAdapterOutcome,
    ReplayBundle,
    RunFacts,
    replay_bundle_attempts,
)
from kernel.serde import dumps

_HELP = """Classify every attempt of a bundle, in run order (ADR-0229).

BUNDLE is a single-document bundle or a bundle stream (JSON Lines), a path
or - for stdin. Outcomes are ReplayAdapterResult (contract_refused,
contract_closed_but_proof_refused, contract_and_proof_closed) or
ReplayAdapterRefusal (seven typed reasons); none is an answer. Each outcome
line names its attempt: {"attempt_id", "attempt_index", "outcome"}.

Exit codes: 0 intact and no outcome in a --fail-on class (default
unclassified: every attempt classified by its authorities, whatever they
ruled); 1 an outcome in a selected --fail-on class (by default a refusal,
e.g. unsupported_proof_obligation for a bundle sealed with --manifest
certified.v1, or an unavailable authority; --fail-on integrity fails on
tampering only); 2 usage error or bundle refused at the boundary
(no outcome file written); 3 integrity (candidate_identity_mismatch or
invalid_replay_input: the input is not what the run recorded); 130/143
interrupted (no outcome file written); 141 stdout closed early.

Workers: --workers N classifies the attempts in shards on N local processes,
--executor dask on a Dask cluster (--scheduler ADDRESS, or a local one of
--workers); the run goes to each worker once (local processes are forked
after the run is read, so they share it as parsed), and the output bytes are
the serial ones, in run order. A worker that dies has its shards run again;
past three deaths the run fails closed: exit 2 worker_lost, no outcome file.

Example: kernel replay bundle.json -o out/outcomes.jsonl --fail-on blocked
"""




def classify_bundle(bundle: ReplayBundle) -> tuple[ReplayAdapterOutcome, ...]:
    """Every attempt's outcome, in the run's order. Raises ValueError on a misshapen bundle."""
    manifest = builtin_manifest()
    return tuple(replay_bundle_attempts(bundle, manifest))


def outcome_lines(outcomes: tuple[ReplayAdapterOutcome, ...]) -> bytes:
    """The bare outcome records, one canonical JSON record per line (the library's view)."""
    return b"".join(dumps(outcome) + b"\n" for outcome in outcomes)


def attempt_lines(
    outcomes: tuple[ReplayAdapterOutcome, ...], attempt_ids: tuple[str | None, ...]
) -> bytes:
    """What ``kernel replay`` and ``kernel run`` write: each outcome in its attempt envelope.

    ``attempt_ids`` are the run's attempt ids, in order (``kernel.bundles.outcome_line``).
    """
    return b"".join(
        outcome_line(index, attempt_id, outcome)
        for index, (outcome, attempt_id) in enumerate(zip(outcomes, attempt_ids, strict=True))
    )


def register(app: typer.Typer) -> None:
    """Attach the ``replay`` command to ``app``."""

    @app.command("replay", help=_HELP)
    def replay_command(
        bundle_path: Annotated[Path, typer.Argument(
            metavar="BUNDLE", help="Replay bundle (document or stream); '-' for stdin.")],
        out: OutOption = None,
        output_format: FormatOption = None,
        fail_on: FailOnOption = None,
        quiet: QuietOption = False,
        verbose: VerboseOption = False,
        executor: Annotated[str | None, typer.Option(
            "--executor", metavar="[inline|process|dask]", autocompletion=complete_executor,
            help="Where attempts are classified: inline (default) in this process, "
                 "process on --workers local processes (the default with --workers), "
                 "dask on a Dask cluster (--scheduler, or a local one of --workers).")] = None,
        workers: Annotated[str | None, typer.Option(
            "--workers", metavar="N",
            help="Worker processes (process), or local Dask workers (dask without "
                 "--scheduler); default: the CPUs available.")] = None,
        scheduler: Annotated[str | None, typer.Option(
            "--scheduler", metavar="ADDRESS",
            help="Dask scheduler (e.g. tcp://10.0.0.5:8786) instead of a local cluster.")] = None,
        connect_timeout: Annotated[float, typer.Option(
            "--connect-timeout", metavar="SECONDS",
            help="How long to try reaching --scheduler before refusing.")] = 10.0,
        tls_ca_file: TlsCaOption = None,
        tls_cert: TlsCertOption = None,
        tls_key: TlsKeyOption = None,
        shard_size: Annotated[int | None, typer.Option(
            "--shard-size", metavar="N", min=1, max=MAX_SHARD_SIZE,
            help=f"Attempts per shard with --workers or --executor dask "
                 f"(default {DEFAULT_SHARD_SIZE}, where kernel run takes "
                 f"{RUN_SHARD_SIZE}: replay has no "
                 "certification to wait for, so a larger shard spreads the cost of sending "
                 "one over more attempts). Output bytes are the same for every size.")] = None,
    ) -> None:
        chosen = resolve_output(out, output_format)
        classes = fail_on_classes(fail_on)
        refuse_output_is_input(out, bundle_path)
        spec = executor_spec(executor, workers, scheduler, connect_timeout,
                             (tls_ca_file, tls_cert, tls_key))
        if spec.kind is not ExecutorKind.INLINE:
            replay_sharded(
                bundle_path, spec, shard_size or DEFAULT_SHARD_SIZE, out=out,
                output_format=chosen, quiet=quiet, verbose=verbose, fail_on=classes,
            )
            return
        total, _, attempts = open_bundle(bundle_path)
        manifest = builtin_manifest()
        # The run is examined once and its facts reused while consecutive
        # attempts hold the same run object (linear batches, ADR 0011).
        # A single document is not handed to replay_bundle_document (which
        # skips that examination): it takes bytes, and this command has
        # already parsed them, to tell a document from a stream and to know
        # the count and the run's attempt ids before the first outcome. The
        # second parse, and two parsed copies alive at once, cost what the
        # skipped examination saves (4,000 attempts: 4.0-5.0 s either way,
        # peak RSS 155 MB here against 199 MB; outcome bytes identical).
        facts: RunFacts | None = None
        with Emitter(out=out, output_format=chosen, quiet=quiet, verbose=verbose,
                     fail_on=classes, total=total, label="replaying") as emitter:
            try:
                for item in attempts:
                    outcome, facts = classify_item(item, manifest, facts)
                    emitter.add(item.attempt_index, item.attempt_id, outcome,
                                manifest_hint(item, outcome, manifest, REPLAY_MANIFEST_ADVICE))
            except BundleStreamError as exc:
                stream_error(bundle_path, exc)
            except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (kernel.commands._signals)
                # Leaving the block discards the unfinished --out file.
                name, exit_code = interruption(exc)
                where = ("the outcome lines on stdout are incomplete"
                         if chosen is OutputFormat.JSONL else "no summary")
                written = "" if out is None or is_stdio(out) else "; no outcome file written"
                typer.echo(f"error: interrupted: {name} after {emitter.tally.total} of {total} "
                           f"attempts; {where}{written}", err=True)
                raise typer.Exit(exit_code) from None
            code = emitter.finish()
        if code:
            raise typer.Exit(code)


__all__ = [
    "OutputFormat", "attempt_lines", "classify_bundle", "outcome_lines", "register",
]
