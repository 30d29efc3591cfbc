"""The steps of one run or replay, shared by ``run_check`` and ``replay_run``.

Each step is a guard: the first that fails raises ``Block`` and the attempt
ends BLOCKED with its ``Reason`` (seed 003, "Production and checking
sequence"; the order is ``run_check``'s, in ``_run.py``). A ``Recorder``
collects what the attempt learns and is frozen into ``RunMetadata`` by
``finish``, which writes ``metadata.json`` last, in every case.

Nothing here reads the clock, the environment or a global path: deadlines,
the child environment, the run root and the run id are arguments. (The
``FileLedger`` reads the wall clock only to trust a fingerprint, never records it;
a ``StopWhen`` reads the monotonic clock for the deadline a hash of evidence keeps.)
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import assert_never

import attrs

from kernel.external._attempt import Attempt, Block, Recorder, fresh_attempt, require_utf8_path
from kernel.external._contain import (
    ContainmentLevel,
    ContainmentPart,
    SealedFile,
    available_level,
    available_parts,
    part_shortfall,
)
from kernel.external._evidence import KEPT_EVIDENCE_REASONS, hash_evidence, is_real_directory
from kernel.external._files import (
    FileLedger,
    StopWhen,
    copy_hashed,
    fsync_directory,
    list_digest,
    read_capped,
    walk_tree,
    write_atomic,
    write_json_new,
    write_new,
)
from kernel.external._identity import CheckIdentity, all_pins, identity_of
from kernel.external._job import Job, job_digest_of
from kernel.external._manifest import CheckEntry, Command, Pin
from kernel.external._outcome import (
    PASS_DETAIL,
    FileDigest,
    ProcessSummary,
    Reason,
    RunKind,
    RunOutcome,
    Status,
    Verdict,
    summarize_process,
)
from kernel.external._pins import first_pin_failure
from kernel.external._process import ProcessStatus, run_process
from kernel.external._receipt import ReceiptExpectation, reason_for, validate_receipt
from kernel.external._sandbox import StepView, sandbox_environment
from kernel.external._settings import (
    REQUEST_SCHEMA_VERSION,
    Progress,
    Role,
    RunLimits,
    Stage,
    expand_argv,
)
from kernel.external._step_parts import LOG_NAMES, HeldStep, hold_step, take_back
from kernel.external.errors import RunDirectoryError
from kernel.identity import JsonValue, sha256_hex
from kernel.serde import dumps, unstructure

__all__ = [
    "KEPT_EVIDENCE_REASONS",
    "Attempt",
    "Block",
    "Recorder",
    "build_identity",
    "check_job",
    "check_phase",
    "choose_containment",
    "finish",
    "freeze_snapshot",
    "fresh_attempt",
    "limits_for",
    "hash_evidence",
    "launch",
    "recheck_pins",
    "request_object",
    "require_utf8_path",
    "step_view",
    "verify_snapshot",
]

# --- the steps ------------------------------------------------------------------------

def check_job(job: Job, entry: CheckEntry) -> None:
    """Seed 003 "Before execution": the job digest and its binding to this check."""
    if job_digest_of(job) != job.job_digest:
        raise Block(Reason.JOB_DIGEST_MISMATCH, "job_digest does not match the job's content")
    if job.check_id != entry.check_id:
        raise Block(
            Reason.JOB_CHECK_MISMATCH, f"job is for {job.check_id!r}, not {entry.check_id!r}"
        )


def limits_for(entry: CheckEntry, limits: RunLimits) -> RunLimits:
    """The run's limits with the evidence bounds this check approved (ADR 0018).

    An entry's own ``limits`` fix its evidence bounds (they are part of
    identity(check)); an entry without them takes the caller's (the defaults,
    or ``--artifact-limit`` / ``--evidence-limit``).
    """
    if entry.limits is None:
        return limits
    return attrs.evolve(
        limits,
        artifact_limit_bytes=entry.limits.artifact_bytes,
        evidence_limit_bytes=entry.limits.evidence_bytes,
    )


def choose_containment(
    entry: CheckEntry,
    rec: Recorder,
    max_containment: ContainmentLevel | None,
    limits: RunLimits,
) -> ContainmentLevel:
    """The level every step of this run uses (ADR 0009); never weaker than required.

    In the sandbox, the parts the machine gives are chosen, every one of
    them (ADR 0021: a part that can be had is never left out), and recorded
    with the limits its steps run under: the entry's (or the defaults), with
    the evidence bounds of ``limits_for``. A required part the machine
    cannot give blocks the attempt, naming it and why.
    """
    level = available_level(max_containment)
    required = entry.required_containment
    wanted = entry.required_containment_parts or ()
    if wanted and required is None:
        required = ContainmentLevel.SANDBOX  # a part is a part of the sandbox
    if level is None or not level.satisfies(required):
        have = "none" if level is None else level.value
        want = "any" if required is None else required.value
        missing = "".join(f"; {part.value}: {part_shortfall(part)}" for part in wanted)
        raise Block(
            Reason.CONTAINMENT_UNAVAILABLE,
            f"the check requires containment {want}; this machine gives {have}{missing}",
        )
    rec.containment = level
    if level is ContainmentLevel.SANDBOX:
        parts = available_parts()
        for part in wanted:
            if part not in parts:
                raise Block(
                    Reason.CONTAINMENT_UNAVAILABLE,
                    f"the check requires containment part {part.value}; this machine "
                    f"cannot give it: {part_shortfall(part)}",
                )
        rec.containment_parts = tuple(sorted(parts, key=lambda part: part.value))
        rec.limits = attrs.evolve(
            entry.step_limits(),
            artifact_bytes=limits.artifact_limit_bytes,
            evidence_bytes=limits.evidence_limit_bytes,
        )
    return level


def _sealed_paths(entry: CheckEntry, attempt: Attempt, *, producer: bool) -> frozenset[str]:
    """The pinned paths a launch runs from sealed copies: each launching command's
    executable and every argument of its expanded argv naming one of its dependencies."""
    paths: set[str] = set()
    roles = ((Role.PRODUCER, entry.producer),) if producer else ()
    for role, command in (*roles, (Role.CHECKER, entry.checker)):
        arguments = set(expand_argv(command.argv, attempt.placeholders(command, role))[1:])
        paths.add(command.executable.path)
        paths.update(pin.path for pin in command.dependencies if pin.path in arguments)
    return frozenset(paths)


def build_identity(
    entry: CheckEntry, rec: Recorder, attempt: Attempt, *, producer: bool = True
) -> CheckIdentity:
    """identity(check) with every pin checked (each pinned file read once for the attempt:
    executables and scripts into the sealed copies that run); retained as identity.json.

    Without ``producer`` (the evidence is supplied and no producer launches,
    ADR-0019) only the checker's pins are read: a pin is checked so that
    what launches is what was approved, and the producer's files never run.
    The identity is the entry's either way, every pin included.
    """
    failure = first_pin_failure(
        all_pins(entry) if producer else entry.checker.pins(),
        attempt.pins,
        sealed=attempt.sealed,
        sealing=_sealed_paths(entry, attempt, producer=producer),
    )
    if failure is not None:
        raise Block(Reason.PIN_MISMATCH, failure.detail)
    identity = identity_of(entry)
    rec.check_digest = identity.check_digest
    write_new(attempt.root / "identity.json", identity.canonical + b"\n")
    return identity


def recheck_pins(pins: tuple[Pin, ...], reason: Reason, when: str, ledger: FileLedger) -> None:
    """Seed 003 "Pin validation": these pins again, right before (or after) a launch
    (by fingerprint where ``ledger`` hashed the file already and can trust it)."""
    failure = first_pin_failure(pins, ledger)
    if failure is not None:
        raise Block(reason, f"{when}: {failure.detail}")


def _source_file(root: Path, relative: str) -> Path:
    resolved = Path(os.path.realpath(root / relative))
    if not resolved.is_relative_to(root):
        raise Block(Reason.INPUT_ESCAPES_ROOT, f"{relative!r} resolves outside the repository")
    try:
        mode = os.stat(resolved).st_mode
    except OSError as exc:
        raise Block(Reason.INPUT_MISSING, f"{relative!r}: {exc.strerror}") from exc
    if not stat.S_ISREG(mode):
        raise Block(Reason.INPUT_MISSING, f"{relative!r} is not a regular file")
    return resolved


def freeze_snapshot(
    entry: CheckEntry, repository_root: Path, rec: Recorder, attempt: Attempt
) -> tuple[FileDigest, ...]:
    """Copy the declared inputs into snapshot/ and hash each copy once.

    Each input is read once (by the kernel's copy); the digest is of the copy's bytes.
    The snapshot is then checked to hold exactly the declared files (its bytes
    are checked again after each command).
    """
    root = Path(os.path.realpath(repository_root))
    digests: list[FileDigest] = []
    attempt.snapshot.mkdir()
    for relative in entry.declared_inputs():
        source = _source_file(root, relative)
        target = attempt.snapshot / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        digests.append(FileDigest(relative, copy_hashed(source, target, attempt.files)))
    inputs = tuple(sorted(digests, key=lambda d: d.path))
    rec.inputs = inputs
    rec.input_digest = list_digest(inputs)
    rec.specification_digest = next(d.sha256 for d in inputs if d.path == entry.claim.specification)
    verify_snapshot(attempt, inputs, Reason.SNAPSHOT_MISMATCH, "copied snapshot", rehash=False)
    return inputs


def verify_snapshot(
    attempt: Attempt,
    inputs: tuple[FileDigest, ...],
    reason: Reason,
    when: str,
    *,
    rehash: bool = True,
) -> None:
    """The snapshot holds exactly the declared inputs, byte for byte (``rehash``; by
    fingerprint for a copy the attempt's ledger can trust)."""
    if not is_real_directory(attempt.snapshot):
        raise Block(reason, f"{when}: snapshot/ is no longer a plain directory")
    expected = {d.path: d.sha256 for d in inputs}
    parents = {"/".join(p.split("/")[:i]) for p in expected for i in range(1, p.count("/") + 1)}
    entries = walk_tree(attempt.snapshot)
    for relative, kind in entries:
        if kind == "dir" and relative in parents:
            continue
        if kind != "file" or relative not in expected:
            raise Block(reason, f"{when}: unexpected {kind} {relative!r} in snapshot/")
        path = attempt.snapshot / relative
        if rehash and attempt.files.sha256(path, follow_symlinks=False) != expected[relative]:
            raise Block(reason, f"{when}: {relative!r} differs from the declared input")
    present = {relative for relative, kind in entries if kind == "file"}
    missing = sorted(set(expected) - present)
    if missing:
        raise Block(reason, f"{when}: {missing[0]!r} is missing from snapshot/")


def _reason_for(role: Role, status: ProcessStatus) -> Reason:
    match status:
        case ProcessStatus.TIMED_OUT:
            return Reason.PRODUCER_TIMEOUT if role is Role.PRODUCER else Reason.CHECKER_TIMEOUT
        case ProcessStatus.CANCELLED:
            return Reason.CANCELLED
        case ProcessStatus.LAUNCH_FAILED:
            return Reason.LAUNCH_FAILED
        case ProcessStatus.EXITED:
            return Reason.PRODUCER_FAILED if role is Role.PRODUCER else Reason.CHECKER_FAILED
        case _:
            assert_never(status)


def step_view(role: Role, entry: CheckEntry, attempt: Attempt) -> StepView:
    """What one step of this attempt may see, write and use (ADR 0018).

    The producer writes only ``evidence/``; the checker only its receipt's
    directory, where its request stays read-only. Both need the attempt
    directory, their pinned files and the launcher's interpreter visible.
    """
    command = entry.producer if role is Role.PRODUCER else entry.checker
    read_only: tuple[str, ...] = ()
    if role is Role.PRODUCER:
        output = attempt.evidence
    else:
        output = attempt.role_dir(Role.CHECKER)
        read_only = (str(output / "request.json"),)
    needed = (str(attempt.root), sys.executable, sys.prefix, sys.base_prefix,
              *(pin.path for pin in command.pins()))
    return StepView(
        output=str(output),
        read_only=read_only,
        needed=tuple(os.path.abspath(path) for path in needed),
        workdir=str(attempt.snapshot),
        limits=entry.step_limits(),
    )


def _sealed_command(
    role: Role, command: Command, argv: tuple[str, ...], attempt: Attempt
) -> tuple[SealedFile, tuple[str, ...], tuple[SealedFile, ...]]:
    """The attempt's sealed executable, the argv with each argument naming a pinned
    dependency replaced by ``/dev/fd/N`` of its sealed copy, and those copies; each
    copy's hash is checked against this command's pin. Raises ``Block``."""
    executable = _sealed_pin(role, command.executable, attempt)
    pinned = {pin.path: pin for pin in command.dependencies}
    rewritten = [argv[0]]
    scripts: list[SealedFile] = []
    for argument in argv[1:]:
        pin = pinned.get(argument)
        if pin is None:
            rewritten.append(argument)
            continue
        copy = _sealed_pin(role, pin, attempt)
        scripts.append(copy)
        rewritten.append(f"/dev/fd/{copy.fd}")
    return executable, tuple(rewritten), tuple(scripts)


def _sealed_pin(role: Role, pin: Pin, attempt: Attempt) -> SealedFile:
    try:
        copy = attempt.sealed.get(pin.path)
    except OSError as exc:
        raise Block(
            Reason.PIN_CHANGED_BEFORE_LAUNCH,
            f"before the {role.value} launch: {pin.path}: {exc.strerror or exc}",
        ) from exc
    if copy.sha256 != pin.sha256:
        raise Block(
            Reason.PIN_CHANGED_BEFORE_LAUNCH,
            f"before the {role.value} launch: {pin.path}: "
            f"sha256 {copy.sha256} != pinned {pin.sha256}",
        )
    return copy


def launch(
    role: Role,
    entry: CheckEntry,
    attempt: Attempt,
    *,
    timeout_seconds: float,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None,
    containment: ContainmentLevel,
    parts: frozenset[ContainmentPart],
    recheck: tuple[Pin, ...],
) -> ProcessSummary:
    """Re-check ``recheck``'s pins, run one command in snapshot/, keep its output; map failures.

    What runs is sealed copies (ADR 0009): the executable and the scripts named
    in argv are the bytes hashed when the identity was built, whatever happens
    to the files meanwhile. The files on disk are checked too (a changed file
    still blocks the launch), by fingerprint where the ledger can trust one.
    """
    command = entry.producer if role is Role.PRODUCER else entry.checker
    argv = expand_argv(command.argv, attempt.placeholders(command, role))
    if argv[0] != command.executable.path:  # the manifest validator makes this an invariant
        raise Block(Reason.LAUNCH_FAILED, f"{role.value} argv[0] is not the pinned executable")
    recheck_pins(
        recheck, Reason.PIN_CHANGED_BEFORE_LAUNCH, f"before the {role.value} launch", attempt.pins
    )
    executable, argv, scripts = _sealed_command(role, command, argv, attempt)
    # Any change the step makes is stamped later than its request (FileLedger.settle).
    attempt.files.settle(attempt.role_dir(role) / "request.json")
    if attempt.pins is not attempt.files:
        attempt.pins.settle(attempt.role_dir(role) / "request.json")
    with contextlib.ExitStack() as held:
        step: HeldStep | None = None
        if containment is ContainmentLevel.SANDBOX:
            step = hold_step(role, entry, step_view(role, entry, attempt), parts, held,
                             attempt_root=str(attempt.root),
                             evidence_bytes=limits.evidence_limit_bytes)
            environment = sandbox_environment(environment)
            if step.view.cgroup_procs:
                environment = {**environment,
                               "KERNEL_STEP_CGROUP_PROCS": "\n".join(step.view.cgroup_procs)}
        view = None if step is None else step.view
        result = run_process(
            argv,
            cwd=attempt.snapshot,
            env=environment,
            timeout_seconds=timeout_seconds,
            cancel=cancel,
            stdout_limit=limits.output_limit_bytes,
            stderr_limit=limits.output_limit_bytes,
            containment=containment,
            executable_fd=executable.fd,
            pass_fds=(*(script.fd for script in scripts),
                      *(() if view is None or view.seccomp_fd is None else (view.seccomp_fd,))),
            view=view,
        )
        taken = None if step is None else take_back(role, entry, attempt, step, result, limits)
    directory = attempt.role_dir(role)
    summary = summarize_process(result)
    if not is_real_directory(directory):
        # Never write (logs) or read (a receipt) through a directory the command swapped.
        raise Block(
            Reason.RUN_DIR_TAMPERED, f"{role.value}/ is no longer a plain directory", summary
        )
    problem = None if taken is None else taken.problem
    if problem is not None and problem.reason is Reason.RUN_DIR_TAMPERED:
        raise Block(problem.reason, problem.detail, summary)
    for name, data in zip(LOG_NAMES, (result.stdout, result.stderr), strict=True):
        try:
            write_new(directory / name, data)
        except FileExistsError as exc:
            # The log names are the kernel's: a step that put something there
            # wrote into the kernel's record of it.
            raise Block(
                Reason.RUN_DIR_TAMPERED,
                f"{role.value}/{name} existed before the kernel wrote it",
                summary,
            ) from exc
    if taken is not None and taken.stopped is not None:
        # A total stopped it (the cgroup's, the output's): that, not "exited with 1".
        raise taken.stopped
    if result.status is not ProcessStatus.EXITED or result.returncode != 0:
        raise Block(_reason_for(role, result.status), f"{role.value} {result.detail}", summary)
    if problem is not None:
        # What it left where only the declared names were kept (the evidence's
        # or the receipt's checks, as they would have read the directory).
        raise Block(problem.reason, problem.detail, summary)
    return summary


def request_object(
    role: Role,
    kind: RunKind,
    entry: CheckEntry,
    job: Job,
    identity: CheckIdentity,
    rec: Recorder,
    attempt: Attempt,
) -> JsonValue:
    """A fresh request built only from the manifest entry, the job and this attempt."""
    command = entry.producer if role is Role.PRODUCER else entry.checker
    places = attempt.placeholders(command, role)
    checker = role is Role.CHECKER
    return {
        "request_schema_version": REQUEST_SCHEMA_VERSION,
        "role": role.value,
        "mode": kind.value,
        "run_id": rec.run_id,
        "replay_of": rec.replay_of,
        "job_id": job.job_id,
        "job_digest": job.job_digest,
        "job": unstructure(job),
        "check_id": entry.check_id,
        "check_digest": identity.check_digest,
        "identity": identity.identity,
        "claim": unstructure(entry.claim),
        "specification_digest": rec.specification_digest,
        "assurance": entry.assurance,
        "inputs": unstructure(rec.inputs),
        "input_digest": rec.input_digest,
        "evidence_artifacts": list(entry.evidence_artifacts),
        "evidence": unstructure(rec.artifacts) if checker else None,
        "evidence_digest": rec.evidence_digest if checker else None,
        "receipt_schema_version": 1,
        "containment": rec.containment.value if rec.containment is not None else None,
        "paths": {
            name: places[name] for name in ("run_dir", "snapshot", "evidence", "request", "receipt")
        },
    }


def check_phase(
    kind: RunKind,
    entry: CheckEntry,
    job: Job,
    identity: CheckIdentity,
    rec: Recorder,
    attempt: Attempt,
    *,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None,
    progress: Progress | None,
    containment: ContainmentLevel,
    produced: bool = True,
) -> Verdict:
    """Seed 003 steps 4-6: fresh request, checker run, post-run checks, receipt.

    ``produced`` is False in a run whose evidence was supplied: no producer
    ran, so only the checker's pins are checked again before its launch.
    """
    directory = attempt.role_dir(Role.CHECKER)
    try:
        directory.mkdir()
    except FileExistsError as exc:
        raise Block(Reason.RUN_DIR_TAMPERED, "checker/ existed before the checker ran") from exc
    request = write_json_new(
        directory / "request.json",
        request_object(Role.CHECKER, kind, entry, job, identity, rec, attempt),
    )
    rec.checker_request_sha256 = sha256_hex(request)
    if progress is not None:
        progress(Stage.CHECKER_LAUNCH)
    # The checker's deadline also bounds the hash of the evidence after it.
    stop = StopWhen.within(limits.checker_timeout_seconds, cancel)
    try:
        rec.checker = launch(
            Role.CHECKER,
            entry,
            attempt,
            timeout_seconds=limits.checker_timeout_seconds,
            limits=limits,
            environment=environment,
            cancel=cancel,
            containment=containment,
            parts=frozenset(rec.containment_parts),
            # In a run the producer ran since the identity was built: every pin
            # again. In a replay, or a run on supplied evidence, no producer ran.
            recheck=all_pins(entry) if kind is RunKind.RUN and produced else entry.checker.pins(),
        )
    except Block as block:
        rec.checker = block.summary
        if block.reason is Reason.CHECKER_FAILED:
            _retain_receipt_digest(directory / "receipt.json", rec, limits)
        raise
    if progress is not None:
        progress(Stage.CHECKER_EXITED)
    recheck_pins(
        entry.checker.pins(),
        Reason.PIN_CHANGED_DURING_RUN,
        "after the checker exited",
        attempt.pins,
    )
    verify_snapshot(attempt, rec.inputs, Reason.SNAPSHOT_CHANGED, "after the checker")
    try:
        after = hash_evidence(
            attempt.evidence,
            entry.evidence_artifacts,
            attempt.files,
            limits=limits,
            stop=stop,
            timeout_reason=Reason.CHECKER_TIMEOUT,
        )
    except Block as block:
        reason = block.reason if block.reason in KEPT_EVIDENCE_REASONS else Reason.EVIDENCE_CHANGED
        raise Block(reason, f"after the checker: {block.detail}") from block
    if after != rec.artifacts:
        raise Block(Reason.EVIDENCE_CHANGED, "evidence changed while the checker ran")
    data = _read_receipt(directory / "receipt.json", limits)
    rec.receipt_sha256 = sha256_hex(data)
    assert rec.specification_digest is not None and rec.evidence_digest is not None
    checked = validate_receipt(
        data,
        ReceiptExpectation(
            job_id=job.job_id,
            run_id=rec.run_id,
            check_id=entry.check_id,
            check_digest=identity.check_digest,
            specification_digest=rec.specification_digest,
            identity_canonical=identity.canonical,
            evidence_digest=rec.evidence_digest,
            obligations=entry.claim.obligations,
            artifacts=entry.evidence_artifacts,
        ),
        max_bytes=limits.receipt_limit_bytes,
    )
    rec.verdict = checked.verdict  # None for a refused receipt
    # reason_for is the one mapping; kernel audit and --resume apply it to stored receipts.
    ending = reason_for(checked)
    if ending is Reason.CHECKER_REJECTED:
        raise Block(ending, "the checker rejected the evidence (inconclusive)")
    if ending is Reason.CHECKER_UNKNOWN:
        raise Block(ending, "the checker answered unknown (inconclusive)")
    if ending is not None:
        raise Block(ending, checked.detail)
    assert checked.verdict is Verdict.ACCEPTED
    return checked.verdict


def _retain_receipt_digest(path: Path, rec: Recorder, limits: RunLimits) -> None:
    # Retained for the record only; a failed checker's receipt is never validated.
    with contextlib.suppress(OSError):
        rec.receipt_sha256 = sha256_hex(read_capped(path, limits.receipt_limit_bytes))


def _read_receipt(path: Path, limits: RunLimits) -> bytes:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError as exc:
        raise Block(Reason.RECEIPT_MISSING, "the checker exited 0 without a receipt") from exc
    if not stat.S_ISREG(mode):
        raise Block(Reason.RECEIPT_NOT_REGULAR, "the receipt is not a regular file")
    return read_capped(path, limits.receipt_limit_bytes)


def finish(rec: Recorder, attempt: Attempt, body: Callable[[], None]) -> RunOutcome:
    """Run ``body``; turn a block or an I/O failure into BLOCKED; write metadata last."""
    try:
        try:
            body()
        finally:
            attempt.sealed.close()  # every launch is over
    except Block as block:
        metadata = rec.freeze(Status.BLOCKED, block.reason, block.detail)
    except OSError as exc:
        metadata = rec.freeze(Status.BLOCKED, Reason.IO_ERROR, f"{exc.filename or ''}: {exc}")
    else:
        metadata = rec.freeze(Status.PASS, None, PASS_DETAIL)
    try:
        # The commit point (ADR 0009, "Lean steps"), with the attempt's own entry.
        write_atomic(attempt.root / "metadata.json", dumps(metadata) + b"\n", durable=True)
        fsync_directory(attempt.root.parent)
    except OSError as exc:
        raise RunDirectoryError("metadata_unwritable", f"{attempt.root}: {exc}") from exc
    return RunOutcome(str(attempt.root), metadata)
