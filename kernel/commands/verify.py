"""`kernel verify ...`: the verification adapter's plan/seal/gate bridge.

The impure shell around ``kernel.verification``: it reads files, structures
them strictly through ``kernel.serde``, calls the pure functions and prints
canonical JSON (one document and a newline) on stdout. It never runs a
backend: the caller runs ``argv`` from ``plan`` and hands the output to
``seal``.

Exit codes (all subcommands):

- 0: planned, sealed, or gate-eligible;
- 1: a typed rejection (printed as JSON on stdout) or a gate decision that is
  not eligible;
- 2: usage error, or input refused at the boundary (unreadable file,
  malformed or non-canonical JSON, schema mismatch); a one-line
  ``error: <code>: <message>`` goes to stderr and nothing to stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from kernel.commands._io import read_bounded
from kernel.commands._io import refuse as _refuse
from kernel.identity import JsonValue
from kernel.serde import SerdeError, dumps, parse_json, structure
from kernel.verification import (
    Candidate,
    Producer,
    Rejection,
    RepairHistory,
    Role,
    VerificationPlan,
    VerificationSpec,
    evaluate_gate,
    plan_verification,
    seal_verification,
)
from kernel.verification import VerificationReceipt as Receipt

T = TypeVar("T")

_EXIT_CODES = (
    "Exit codes: 0 planned / sealed / gate-eligible; 1 typed rejection or not "
    "gate-eligible (JSON on stdout); 2 usage error or input refused at the "
    "boundary (one line 'error: <code>: <message>' on stderr)."
)

app = typer.Typer(
    name="verify",
    help="Plan, seal and gate deterministic verification (seed 000).\n\n" + _EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help like every other command: rich's boxes cut long option help
    # with an ellipsis (--max-containment's reason code was lost).
    rich_markup_mode=None,
)


def _read_json(path: str) -> JsonValue:
    # Bounded read: a device, FIFO or oversized file is refused, never slurped.
    data = read_bounded(Path(path))
    try:
        return parse_json(data)
    except SerdeError as exc:
        _refuse(exc.code, f"{path}: {exc.path}: {exc.message}")


def _invariant(exc: BaseException) -> str:
    # cattrs reports a record validator's own error as "invalid value"; the
    # validator's message is the useful part, so surface the innermost one.
    cause: BaseException | None = exc.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if cause is exc.__cause__ or not isinstance(cause, ValueError | TypeError):
        return ""
    return f" ({cause})"


def _read(path: str, cls: type[T]) -> T:
    value = _read_json(path)
    try:
        return structure(value, cls)
    except SerdeError as exc:
        _refuse(exc.code, f"{path}: {exc.path}: {exc.message}{_invariant(exc)}")


def _emit(value: object, ok: bool) -> NoReturn:
    typer.echo(dumps(value).decode("utf-8"))
    raise typer.Exit(0 if ok else 1)


@app.command("plan")
def plan_command(
    spec_path: Annotated[str, typer.Argument(metavar="SPEC.json", help="A VerificationSpec.")],
) -> None:
    """Validate a spec and print the plan (request + argv), or the rejection.

    Output: the plan (or the rejection) as JSON on stdout.

    Exit codes: 0 planned; 1 typed rejection; 2 input refused at the boundary.

    Example: kernel verify plan examples/verify/spec.json > plan.json
    """
    spec = _read(spec_path, VerificationSpec)
    outcome = plan_verification(spec)
    _emit(outcome, not isinstance(outcome, Rejection))


def _role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        allowed = ", ".join(r.value for r in Role)
        _refuse("usage_error", f"--produced-by {value!r} is not a role (one of {allowed})")


@app.command("seal")
def seal_command(
    plan_path: Annotated[str, typer.Argument(metavar="PLAN.json", help="Output of 'plan'.")],
    output_path: Annotated[
        str, typer.Argument(metavar="OUTPUT.json", help="The backend's output document.")
    ],
    produced_by: Annotated[
        str,
        typer.Option(
            "--produced-by",
            metavar="ROLE",
            help="Role that executed the run: " + ", ".join(r.value for r in Role) + ".",
        ),
    ],
    session: Annotated[
        str, typer.Option("--session", metavar="SESSION", help="Session the run executed in.")
    ],
) -> None:
    """Seal the backend output of a planned run into a receipt, or print the rejection.

    Output: the receipt (or the rejection) as JSON on stdout.

    Exit codes: 0 sealed; 1 typed rejection; 2 input refused at the boundary.

    Example: kernel verify seal plan.json output.json --produced-by test_engineer
    --session S1 > receipt.json
    """
    plan = _read(plan_path, VerificationPlan)
    output = _read_json(output_path)
    role = _role(produced_by)
    try:
        producer = Producer(role=role, session=session)
    except (TypeError, ValueError) as exc:
        _refuse("usage_error", f"--session: {exc}")
    outcome = seal_verification(plan, output, producer)
    _emit(outcome, not isinstance(outcome, Rejection))


@app.command("gate")
def gate_command(
    plan_path: Annotated[
        str, typer.Argument(metavar="PLAN.json", help="The plan whose request is gated.")
    ],
    receipt_path: Annotated[str, typer.Argument(metavar="RECEIPT.json", help="Output of 'seal'.")],
    candidate: Annotated[
        str, typer.Option("--candidate", metavar="DIGEST", help="The current candidate digest.")
    ],
    author_session: Annotated[
        str,
        typer.Option(
            "--author-session", metavar="SESSION", help="Session that authored the candidate."
        ),
    ],
    prior_candidate: Annotated[
        list[str] | None,
        typer.Option(
            "--prior-candidate", metavar="DIGEST", help="A replaced candidate (repeatable)."
        ),
    ] = None,
    pre_repair_evidence: Annotated[
        list[str] | None,
        typer.Option(
            "--pre-repair-evidence",
            metavar="DIGEST",
            help="An evidence digest recorded before a repair (repeatable).",
        ),
    ] = None,
) -> None:
    """Decide whether a receipt passes the assurance gate for the plan's request.

    Output: the gate decision as JSON on stdout.

    Exit codes: 0 gate-eligible; 1 not gate-eligible (reason in the JSON);
    2 input refused at the boundary.

    Example: kernel verify gate plan.json receipt.json --candidate DIGEST
    --author-session S0
    """
    plan = _read(plan_path, VerificationPlan)
    receipt = _read(receipt_path, Receipt)
    try:
        current = Candidate(digest=candidate, author_session=author_session)
        history = RepairHistory(
            prior_candidates=tuple(sorted(set(prior_candidate or ()))),
            pre_repair_evidence_digests=tuple(sorted(set(pre_repair_evidence or ()))),
        )
    except (TypeError, ValueError) as exc:
        _refuse("usage_error", str(exc))
    decision = evaluate_gate(receipt, plan.request, current, history)
    _emit(decision, decision.gate_eligible)
