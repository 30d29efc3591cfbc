"""`kernel check ...`: the external verifier protocol (seed 003).

The command-line shell around ``kernel.external``: it reads the manifest and
the job, generates a fresh run id unless one is given, passes the minimal
child environment (``kernel.external.default_environment``), turns SIGINT and
SIGTERM into cancellation (the running command's process group is killed, a
hash of evidence stops within one chunk: the run ends BLOCKED ``cancelled``,
exit 1, its metadata written), and prints one canonical JSON document and a
newline on stdout.

Exit codes (all subcommands):

- 0: PASS (run, replay) or identity built (identity);
- 1: BLOCKED, with its reason code in the JSON on stdout;
- 2: usage error, or input refused at the boundary (unreadable or malformed
  manifest, job or run record, unknown check, path escaping its root, run
  directory that already exists); a one-line ``error: <code>: <message>``
  goes to stderr and nothing to stdout.
"""

from __future__ import annotations

import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn

import typer

from kernel.commands import check_pins
from kernel.commands._io import is_stdio, refuse_stdio
from kernel.commands._io import refuse as _refuse
from kernel.external import (
    Cancellation,
    ContainmentLevel,
    ExternalError,
    PinMismatchError,
    RunLimits,
    RunOutcome,
    Status,
    check_identity,
    default_environment,
    load_job,
    load_manifest,
    read_job,
    replay_run,
    run_check,
)
from kernel.identity import JsonValue, canonical_json
from kernel.serde import unstructure

_EXIT_CODES = (
    "Exit codes: 0 PASS / identity built; 1 BLOCKED (reason code in the JSON on "
    "stdout); 2 usage error or input refused at the boundary (one line "
    "'error: <code>: <message>' on stderr)."
)

app = typer.Typer(
    name="check",
    help=(
        "Run, replay and identify pinned external producer/checker pairs (seed 003).\n\n"
        + _EXIT_CODES
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help like every other command: rich's boxes cut long option help
    # with an ellipsis (--max-containment's reason code was lost).
    rich_markup_mode=None,
)
check_pins.register(app)

ArtifactLimitOption = Annotated[
    int | None,
    typer.Option(
        "--artifact-limit",
        metavar="BYTES",
        help=(
            "Largest declared artifact in bytes, the larger of its apparent and allocated "
            "size, checked before hashing (else BLOCKED artifact_too_large). "
            "Default: 268435456 (256 MiB)."
        ),
    ),
]
EvidenceLimitOption = Annotated[
    int | None,
    typer.Option(
        "--evidence-limit",
        metavar="BYTES",
        help=(
            "Largest total of the declared artifacts in bytes, counted the same way, "
            "checked before hashing (else BLOCKED evidence_too_large). "
            "Default: 1073741824 (1 GiB)."
        ),
    ),
]

_REPO_HELP = "Repository root for the specification and inputs (default: the manifest's folder)."
_CONTAINMENT_HELP = (
    "Use at most this containment level (default: the strongest this machine gives). "
    "sandbox: bubblewrap, read-only filesystem but the step's own output directory, "
    "private /tmp, no network, resource limits (ADR 0018); namespace: its own user + PID "
    "namespace; subreaper: every descendant killed at the end. A check whose manifest "
    "requires more ends BLOCKED containment_unavailable."
)


def _emit(value: JsonValue) -> None:
    typer.echo(canonical_json(value).decode("utf-8"))


def _emit_outcome(outcome: RunOutcome) -> NoReturn:
    _emit({"attempt_dir": outcome.attempt_dir, "metadata": unstructure(outcome.metadata)})
    raise typer.Exit(0 if outcome.status is Status.PASS else 1)


def _fresh_id() -> str:
    return f"r{secrets.token_hex(8)}"


@contextmanager
def _cancel_on_signals() -> Iterator[threading.Event]:
    # A Cancellation, not a plain Event: the wait for a step wakes on it at once
    # instead of looking every 20 ms.
    cancel = Cancellation()

    def handler(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    previous: list[tuple[signal.Signals, signal._HANDLER]] = []
    try:
        for signum in (signal.Signals.SIGINT, signal.Signals.SIGTERM):
            previous.append((signum, signal.signal(signum, handler)))
    except ValueError:  # not the main thread (e.g. an embedding test runner)
        pass
    try:
        yield cancel
    finally:
        for signum, old in previous:
            signal.signal(signum, old)


def _limits(
    producer_timeout: float,
    checker_timeout: float,
    artifact_limit: int | None,
    evidence_limit: int | None,
) -> RunLimits:
    sizes = {
        name: value
        for name, value in (
            ("artifact_limit_bytes", artifact_limit),
            ("evidence_limit_bytes", evidence_limit),
        )
        if value is not None  # not given: RunLimits' default
    }
    try:
        return RunLimits(producer_timeout, checker_timeout, **sizes)
    except ValueError as exc:
        _refuse("invalid_limits", str(exc))


def _guard(action: Callable[[], None]) -> None:
    try:
        action()
    except typer.Exit:
        raise
    except ExternalError as exc:
        _refuse(exc.code, exc.message)
    except OSError as exc:
        _refuse("io_error", str(exc))
    except Exception as exc:  # fail closed, and never a traceback
        _refuse("internal_error", f"{type(exc).__name__}: {exc}")


@app.command("run")
def run_command(
    manifest: Annotated[Path, typer.Argument(help="The accepted external manifest (JSON).")],
    check_id: Annotated[str, typer.Argument(help="The approved check to run.")],
    job: Annotated[Path, typer.Option(
        "--job", metavar="FILE", help="The job file (JSON, sealed digest); '-' for stdin.")],
    run_root: Annotated[
        Path, typer.Option("--run-root", help="Folder that receives the fresh run directory.")
    ],
    repo: Annotated[Path | None, typer.Option("--repo", help=_REPO_HELP)] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Run id (default: a fresh random one).")
    ] = None,
    producer_timeout: Annotated[
        float, typer.Option("--producer-timeout", help="Producer deadline in seconds.")
    ] = 300.0,
    checker_timeout: Annotated[
        float, typer.Option("--checker-timeout", help="Checker deadline in seconds.")
    ] = 300.0,
    max_containment: Annotated[
        ContainmentLevel | None, typer.Option("--max-containment", help=_CONTAINMENT_HELP)
    ] = None,
    artifact_limit: ArtifactLimitOption = None,
    evidence_limit: EvidenceLimitOption = None,
) -> None:
    """Run the producer, then the checker, in RUN_ROOT/<run id>; print its metadata.

    PASS only for an accepting, valid, bound receipt from a checker that exited
    0; anything else is BLOCKED with a reason code. Exit 0 PASS, 1 BLOCKED,
    2 usage error or input refused.

    Example: kernel check run manifest.json CHECK_ID --job job.json --run-root runs
    """

    refuse_stdio(MANIFEST=manifest, run_root=run_root, repo=repo)

    def action() -> None:
        limits = _limits(producer_timeout, checker_timeout, artifact_limit, evidence_limit)
        root = repo if repo is not None else manifest.resolve().parent
        entry = load_manifest(manifest, repository_root=root).entry(check_id)
        # '-': the job from stdin, as wherever the kernel reads a document.
        job_value = read_job(sys.stdin.buffer, "<stdin>") if is_stdio(job) else load_job(job)
        with _cancel_on_signals() as cancel:
            outcome = run_check(
                entry,
                job_value,
                repository_root=root,
                manifest_path=manifest,
                run_root=run_root,
                run_id=run_id or _fresh_id(),
                limits=limits,
                environment=default_environment(),
                cancel=cancel,
                max_containment=max_containment,
            )
        _emit_outcome(outcome)

    _guard(action)


@app.command("replay")
def replay_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by 'check run'.")],
    manifest: Annotated[
        Path,
        typer.Option(
            "--manifest",
            help="The current accepted manifest (required: never read from the run directory).",
        ),
    ],
    repo: Annotated[
        Path,
        typer.Option(
            "--repo", help="Repository root (required: never read from the run directory)."
        ),
    ],
    replay_id: Annotated[
        str | None, typer.Option("--replay-id", help="Replay id (default: a fresh random one).")
    ] = None,
    checker_timeout: Annotated[
        float, typer.Option("--checker-timeout", help="Checker deadline in seconds.")
    ] = 300.0,
    max_containment: Annotated[
        ContainmentLevel | None, typer.Option("--max-containment", help=_CONTAINMENT_HELP)
    ] = None,
    evidence_digest: Annotated[
        str | None,
        typer.Option(
            "--evidence-digest",
            help=(
                "The evidence_digest the run printed, kept by the operator: the retained "
                "evidence must still have it (else BLOCKED evidence_changed)."
            ),
        ),
    ] = None,
    artifact_limit: ArtifactLimitOption = None,
    evidence_limit: EvidenceLimitOption = None,
) -> None:
    """Re-run only the currently pinned checker on the retained evidence.

    The manifest and repository are the operator's: nothing in RUN_DIR is
    configuration, only evidence checked against the digests the run recorded.
    The stored status and receipt are ignored; the result lands in
    RUN_DIR/replays/<replay id>. Exit 0 PASS, 1 BLOCKED, 2 usage error or
    input refused.

    Example: kernel check replay runs/RUN_ID --manifest manifest.json --repo .
    """

    refuse_stdio(RUN_DIR=run_dir, manifest=manifest, repo=repo)

    def action() -> None:
        limits = _limits(checker_timeout, checker_timeout, artifact_limit, evidence_limit)
        with _cancel_on_signals() as cancel:
            outcome = replay_run(
                run_dir,
                manifest_path=manifest,
                repository_root=repo,
                replay_id=replay_id or _fresh_id(),
                limits=limits,
                environment=default_environment(),
                cancel=cancel,
                max_containment=max_containment,
                expected_evidence_digest=evidence_digest,
            )
        _emit_outcome(outcome)

    _guard(action)


@app.command("identity")
def identity_command(
    manifest: Annotated[Path, typer.Argument(help="The accepted external manifest (JSON).")],
    check_id: Annotated[str, typer.Argument(help="The approved check.")],
    repo: Annotated[Path | None, typer.Option("--repo", help=_REPO_HELP)] = None,
) -> None:
    """Check every pin and print identity(check) with its check digest.

    Exit 0 identity built; 1 BLOCKED (a pin does not hold: reason
    pin_mismatch); 2 usage error or input refused.

    Example: kernel check identity manifest.json CHECK_ID
    """

    refuse_stdio(MANIFEST=manifest, repo=repo)

    def action() -> None:
        root = repo if repo is not None else manifest.resolve().parent
        entry = load_manifest(manifest, repository_root=root).entry(check_id)
        try:
            built = check_identity(entry)
        except PinMismatchError as exc:
            _emit(
                {
                    "check_id": check_id,
                    "status": "BLOCKED",
                    "reason": exc.code,
                    "detail": exc.message,
                }
            )
            raise typer.Exit(1) from exc
        _emit(
            {
                "check_id": built.check_id,
                "check_digest": built.check_digest,
                "identity": built.identity,
            }
        )

    _guard(action)
