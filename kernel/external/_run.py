"""run_check: one run of an approved entry, producer then checker.

Theory of operation (seed 003, "Production and checking sequence"; each step
is a guard: the first that fails ends the run BLOCKED with its ``Reason``):

1. create a fresh attempt directory ``run_root/<run_id>`` (never reused);
2. validate the job: its digest, and that it names this check;
3. build identity(check): every pin must hold;
4. hash every declared input (the specification is always one) inside the
   repository root, copy them into ``snapshot/``, and re-hash the copy: the
   snapshot holds exactly the declared inputs with the same bytes;
5. write the producer request; re-check every pin; launch the producer in
   ``snapshot/`` with placeholders expanded per argv element (no shell);
6. after it exits: the snapshot is unchanged, no ``checker/`` directory
   appeared, and ``evidence/`` holds exactly the declared artifacts as
   regular files (missing, symlinked, non-regular or undeclared entries are
   typed failures); hash them; anything the producer wrote to its own
   ``{{receipt}}`` is never read; after each command its own role directory
   (``producer/``, ``checker/``) must still be a plain directory, or nothing
   more is written or read there (``run_dir_tampered``);
7. write a fresh checker request from the manifest and job; re-check every
   pin; launch the checker;
8. after it exits: pins, snapshot and evidence are unchanged; exit status 0
   is required; the receipt is validated field by field;
9. accepted → PASS; a valid rejected/unknown receipt or any failure above →
   BLOCKED. The metadata is written atomically last, in every case.

Nothing here reads the clock, the environment or a global path: deadlines,
the child environment, the run root and the run id are arguments.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, assert_never, final

import attrs

from kernel.external._files import (
    list_digest,
    read_capped,
    sha256_nofollow,
    walk_tree,
    write_atomic,
    write_json_atomic,
)
from kernel.external._identity import CheckIdentity, all_pins, check_identity
from kernel.external._job import Job, job_digest_of
from kernel.external._manifest import PLACEHOLDERS, CheckEntry, Command, check_identifier
from kernel.external._outcome import (
    METADATA_SCHEMA_VERSION,
    FileDigest,
    ProcessSummary,
    Reason,
    RunKind,
    RunMetadata,
    RunOutcome,
    Status,
    Verdict,
    summarize_process,
)
from kernel.external._pins import first_pin_failure
from kernel.external._process import ProcessStatus, run_process
from kernel.external._receipt import ReceiptExpectation, validate_receipt
from kernel.external.errors import ManifestError, PinMismatchError, RunDirectoryError
from kernel.identity import JsonValue, sha256_hex
from kernel.serde import dumps, unstructure

__all__ = [
    "REQUEST_SCHEMA_VERSION",
    "RunLimits",
    "Stage",
    "default_environment",
    "expand_argv",
    "run_check",
]

REQUEST_SCHEMA_VERSION: Final = 1
_PLACEHOLDER: Final = re.compile(r"\{\{([a-z_]+)\}\}")


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive")


def _positive_bytes(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive")


@final
@attrs.frozen
class RunLimits:
    """Deadlines (seconds) and size caps (bytes) for one run or replay."""

    producer_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    checker_timeout_seconds: float = attrs.field(validator=_positive_seconds)
    output_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)
    receipt_limit_bytes: int = attrs.field(default=1024 * 1024, validator=_positive_bytes)


@final
class Stage(enum.Enum):
    """Progress points reported to the optional ``progress`` callback."""

    IDENTITY_BUILT = "identity_built"
    SNAPSHOT_READY = "snapshot_ready"
    PRODUCER_LAUNCH = "producer_launch"
    PRODUCER_EXITED = "producer_exited"
    CHECKER_LAUNCH = "checker_launch"
    CHECKER_EXITED = "checker_exited"


Progress = Callable[[Stage], None]


def default_environment() -> dict[str, str]:
    """The minimal child environment the CLI passes (nothing inherited)."""
    return {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }


def expand_argv(argv: tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """Expand ``{{name}}`` inside each element, one pass, never through a shell."""
    if set(values) != set(PLACEHOLDERS):
        raise ValueError("every placeholder needs exactly one value")
    return tuple(_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in argv)


# --- internals shared with replay --------------------------------------------------


class _Block(Exception):
    """A guard failed: the run ends BLOCKED with ``reason``."""

    def __init__(self, reason: Reason, detail: str, summary: ProcessSummary | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.summary = summary


@attrs.define
class _Recorder:
    """Mutable draft of the metadata; frozen into ``RunMetadata`` at the end."""

    kind: RunKind
    run_id: str
    replay_of: str | None
    check_id: str
    manifest_path: str
    repository_root: str
    job_id: str
    job_digest: str
    check_digest: str | None = None
    input_digest: str | None = None
    inputs: tuple[FileDigest, ...] = ()
    specification_digest: str | None = None
    artifacts: tuple[FileDigest, ...] = ()
    evidence_digest: str | None = None
    producer: ProcessSummary | None = None
    checker: ProcessSummary | None = None
    producer_request_sha256: str | None = None
    checker_request_sha256: str | None = None
    receipt_sha256: str | None = None
    verdict: Verdict | None = None

    def freeze(self, status: Status, reason: Reason | None, detail: str) -> RunMetadata:
        # A detail can quote a path a command created with undecodable bytes
        # (an OSError's filename); the metadata is strict UTF-8, so escape them.
        detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
        return RunMetadata(
            METADATA_SCHEMA_VERSION,
            self.kind,
            self.run_id,
            self.replay_of,
            self.check_id,
            self.manifest_path,
            self.repository_root,
            self.job_id,
            self.job_digest,
            self.check_digest,
            self.input_digest,
            self.inputs,
            self.specification_digest,
            self.artifacts,
            self.evidence_digest,
            self.producer,
            self.checker,
            self.producer_request_sha256,
            self.checker_request_sha256,
            self.receipt_sha256,
            self.verdict,
            status,
            reason,
            detail,
        )


@attrs.frozen
class _Attempt:
    root: Path

    @property
    def snapshot(self) -> Path:
        return self.root / "snapshot"

    @property
    def evidence(self) -> Path:
        return self.root / "evidence"

    def role_dir(self, role: str) -> Path:
        return self.root / role

    def placeholders(self, command: Command, role: str) -> dict[str, str]:
        return {
            "python": command.executable.path,
            "snapshot": str(self.snapshot),
            "run_dir": str(self.root),
            "request": str(self.role_dir(role) / "request.json"),
            "evidence": str(self.evidence),
            "receipt": str(self.role_dir(role) / "receipt.json"),
        }


def require_utf8_path(path: Path | str, what: str) -> None:
    """Refuse a path that is not valid UTF-8: requests and metadata are strict JSON."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RunDirectoryError(
            "path_not_utf8", f"{what} {os.fspath(path)!r} is not valid UTF-8"
        ) from exc


def fresh_attempt(parent: Path, attempt_id: str) -> _Attempt:
    """Create ``parent/attempt_id``; raises ``RunDirectoryError`` if it exists."""
    try:
        check_identifier(attempt_id, "run id")
    except ManifestError as exc:
        raise RunDirectoryError("invalid_run_id", exc.message) from exc
    require_utf8_path(os.path.abspath(parent), "run root")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        root = Path(os.path.realpath(parent)) / attempt_id
        require_utf8_path(root, "attempt directory")
        root.mkdir()
    except FileExistsError as exc:
        raise RunDirectoryError("run_dir_exists", f"{parent / attempt_id} already exists") from exc
    except OSError as exc:
        raise RunDirectoryError("run_dir_unwritable", f"{parent}: {exc.strerror}") from exc
    return _Attempt(root)


def check_job(job: Job, entry: CheckEntry) -> None:
    """Seed 003 "Before execution": the job digest and its binding to this check."""
    if job_digest_of(job) != job.job_digest:
        raise _Block(Reason.JOB_DIGEST_MISMATCH, "job_digest does not match the job's content")
    if job.check_id != entry.check_id:
        raise _Block(
            Reason.JOB_CHECK_MISMATCH, f"job is for {job.check_id!r}, not {entry.check_id!r}"
        )


def build_identity(entry: CheckEntry, rec: _Recorder, attempt: _Attempt) -> CheckIdentity:
    """identity(check) with every pin checked; retained as identity.json."""
    try:
        identity = check_identity(entry)
    except PinMismatchError as exc:
        raise _Block(Reason.PIN_MISMATCH, exc.message) from exc
    rec.check_digest = identity.check_digest
    write_atomic(attempt.root / "identity.json", identity.canonical + b"\n")
    return identity


def recheck_pins(entry: CheckEntry, reason: Reason, when: str) -> None:
    """Seed 003 "Pin validation": every pin again, right before (or after) a launch."""
    failure = first_pin_failure(all_pins(entry))
    if failure is not None:
        raise _Block(reason, f"{when}: {failure.detail}")


def _source_file(root: Path, relative: str) -> Path:
    resolved = Path(os.path.realpath(root / relative))
    if not resolved.is_relative_to(root):
        raise _Block(Reason.INPUT_ESCAPES_ROOT, f"{relative!r} resolves outside the repository")
    try:
        mode = os.stat(resolved).st_mode
    except OSError as exc:
        raise _Block(Reason.INPUT_MISSING, f"{relative!r}: {exc.strerror}") from exc
    if not stat.S_ISREG(mode):
        raise _Block(Reason.INPUT_MISSING, f"{relative!r} is not a regular file")
    return resolved


def freeze_snapshot(
    entry: CheckEntry, repository_root: Path, rec: _Recorder, attempt: _Attempt
) -> tuple[FileDigest, ...]:
    """Hash the declared inputs, copy them into snapshot/, and verify the copy."""
    root = Path(os.path.realpath(repository_root))
    digests: list[FileDigest] = []
    attempt.snapshot.mkdir()
    for relative in entry.declared_inputs():
        source = _source_file(root, relative)
        target = attempt.snapshot / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target, follow_symlinks=False)
        digests.append(FileDigest(relative, sha256_nofollow(source)))
    inputs = tuple(sorted(digests, key=lambda d: d.path))
    rec.inputs = inputs
    rec.input_digest = list_digest(inputs)
    rec.specification_digest = next(d.sha256 for d in inputs if d.path == entry.claim.specification)
    verify_snapshot(attempt, inputs, Reason.SNAPSHOT_MISMATCH, "copied snapshot")
    return inputs


def verify_snapshot(
    attempt: _Attempt, inputs: tuple[FileDigest, ...], reason: Reason, when: str
) -> None:
    """The snapshot holds exactly the declared inputs, byte for byte."""
    if not _is_real_directory(attempt.snapshot):
        raise _Block(reason, f"{when}: snapshot/ is no longer a plain directory")
    expected = {d.path: d.sha256 for d in inputs}
    parents = {"/".join(p.split("/")[:i]) for p in expected for i in range(1, p.count("/") + 1)}
    for relative, kind in walk_tree(attempt.snapshot):
        if kind == "dir" and relative in parents:
            continue
        if kind != "file" or relative not in expected:
            raise _Block(reason, f"{when}: unexpected {kind} {relative!r} in snapshot/")
        if sha256_nofollow(attempt.snapshot / relative) != expected[relative]:
            raise _Block(reason, f"{when}: {relative!r} differs from the declared input")
    present = {relative for relative, kind in walk_tree(attempt.snapshot) if kind == "file"}
    missing = sorted(set(expected) - present)
    if missing:
        raise _Block(reason, f"{when}: {missing[0]!r} is missing from snapshot/")


def _is_real_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def hash_evidence(evidence: Path, declared: tuple[str, ...]) -> tuple[FileDigest, ...]:
    """Seed 003 step 3: hash exactly the declared artifacts; the list is exact."""
    if not _is_real_directory(evidence):
        raise _Block(Reason.ARTIFACT_SYMLINK, "evidence/ is no longer a plain directory")
    digests: list[FileDigest] = []
    for relative in declared:
        current = evidence
        parts = relative.split("/")
        for index, part in enumerate(parts):
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError as exc:
                raise _Block(Reason.ARTIFACT_MISSING, f"artifact {relative!r} is missing") from exc
            if stat.S_ISLNK(mode):
                raise _Block(
                    Reason.ARTIFACT_SYMLINK, f"artifact {relative!r} goes through a symlink"
                )
            last = index == len(parts) - 1
            if (last and not stat.S_ISREG(mode)) or (not last and not stat.S_ISDIR(mode)):
                raise _Block(
                    Reason.ARTIFACT_NOT_REGULAR, f"artifact {relative!r} is not a regular file"
                )
        digests.append(FileDigest(relative, sha256_nofollow(current)))
    allowed = set(declared) | {
        "/".join(p.split("/")[:i]) for p in declared for i in range(1, p.count("/") + 1)
    }
    for relative, kind in walk_tree(evidence):
        if relative not in allowed:
            raise _Block(
                Reason.ARTIFACT_UNDECLARED, f"undeclared {kind} {relative!r} under evidence/"
            )
    return tuple(sorted(digests, key=lambda d: d.path))


def _reason_for(role: str, status: ProcessStatus) -> Reason:
    match status:
        case ProcessStatus.TIMED_OUT:
            return Reason.PRODUCER_TIMEOUT if role == "producer" else Reason.CHECKER_TIMEOUT
        case ProcessStatus.CANCELLED:
            return Reason.CANCELLED
        case ProcessStatus.LAUNCH_FAILED:
            return Reason.LAUNCH_FAILED
        case ProcessStatus.EXITED:
            return Reason.PRODUCER_FAILED if role == "producer" else Reason.CHECKER_FAILED
        case _:
            assert_never(status)


def launch(
    role: str,
    entry: CheckEntry,
    attempt: _Attempt,
    *,
    timeout_seconds: float,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None,
) -> ProcessSummary:
    """Re-check every pin, run one command in snapshot/, keep its output; map failures."""
    command = entry.producer if role == "producer" else entry.checker
    recheck_pins(entry, Reason.PIN_CHANGED_BEFORE_LAUNCH, f"before the {role} launch")
    argv = expand_argv(command.argv, attempt.placeholders(command, role))
    if argv[0] != command.executable.path:  # the manifest validator makes this an invariant
        raise _Block(Reason.LAUNCH_FAILED, f"{role} argv[0] is not the pinned executable")
    result = run_process(
        argv,
        cwd=attempt.snapshot,
        env=environment,
        timeout_seconds=timeout_seconds,
        cancel=cancel,
        stdout_limit=limits.output_limit_bytes,
        stderr_limit=limits.output_limit_bytes,
    )
    directory = attempt.role_dir(role)
    summary = summarize_process(result)
    if not _is_real_directory(directory):
        # Never write (logs) or read (a receipt) through a directory the command swapped.
        raise _Block(
            Reason.RUN_DIR_TAMPERED, f"{role}/ is no longer a plain directory", summary
        )
    write_atomic(directory / "stdout.log", result.stdout)
    write_atomic(directory / "stderr.log", result.stderr)
    if result.status is not ProcessStatus.EXITED or result.returncode != 0:
        raise _Block(_reason_for(role, result.status), f"{role} {result.detail}", summary)
    return summary


def request_object(
    role: str,
    kind: RunKind,
    entry: CheckEntry,
    job: Job,
    identity: CheckIdentity,
    rec: _Recorder,
    attempt: _Attempt,
) -> JsonValue:
    """A fresh request built only from the manifest entry, the job and this attempt."""
    command = entry.producer if role == "producer" else entry.checker
    places = attempt.placeholders(command, role)
    checker = role == "checker"
    return {
        "request_schema_version": REQUEST_SCHEMA_VERSION,
        "role": role,
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
        "paths": {
            name: places[name] for name in ("run_dir", "snapshot", "evidence", "request", "receipt")
        },
    }


def check_phase(
    kind: RunKind,
    entry: CheckEntry,
    job: Job,
    identity: CheckIdentity,
    rec: _Recorder,
    attempt: _Attempt,
    *,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None,
    progress: Progress | None,
) -> Verdict:
    """Seed 003 steps 4-6: fresh request, checker run, post-run checks, receipt."""
    directory = attempt.role_dir("checker")
    try:
        directory.mkdir()
    except FileExistsError as exc:
        raise _Block(Reason.RUN_DIR_TAMPERED, "checker/ existed before the checker ran") from exc
    request = write_json_atomic(
        directory / "request.json",
        request_object("checker", kind, entry, job, identity, rec, attempt),
    )
    rec.checker_request_sha256 = sha256_hex(request)
    if progress is not None:
        progress(Stage.CHECKER_LAUNCH)
    try:
        rec.checker = launch(
            "checker",
            entry,
            attempt,
            timeout_seconds=limits.checker_timeout_seconds,
            limits=limits,
            environment=environment,
            cancel=cancel,
        )
    except _Block as block:
        rec.checker = block.summary
        if block.reason is Reason.CHECKER_FAILED:
            _retain_receipt_digest(directory / "receipt.json", rec, limits)
        raise
    if progress is not None:
        progress(Stage.CHECKER_EXITED)
    recheck_pins(entry, Reason.PIN_CHANGED_DURING_RUN, "after the checker exited")
    verify_snapshot(attempt, rec.inputs, Reason.SNAPSHOT_CHANGED, "after the checker")
    try:
        after = hash_evidence(attempt.evidence, entry.evidence_artifacts)
    except _Block as block:
        raise _Block(Reason.EVIDENCE_CHANGED, f"after the checker: {block.detail}") from block
    if after != rec.artifacts:
        raise _Block(Reason.EVIDENCE_CHANGED, "evidence changed while the checker ran")
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
    if checked.reason is not None:
        raise _Block(checked.reason, checked.detail)
    assert checked.verdict is not None
    rec.verdict = checked.verdict
    if checked.verdict is Verdict.REJECTED:
        raise _Block(Reason.CHECKER_REJECTED, "the checker rejected the evidence (inconclusive)")
    if checked.verdict is Verdict.UNKNOWN:
        raise _Block(Reason.CHECKER_UNKNOWN, "the checker answered unknown (inconclusive)")
    return checked.verdict


def _retain_receipt_digest(path: Path, rec: _Recorder, limits: RunLimits) -> None:
    # Retained for the record only; a failed checker's receipt is never validated.
    with contextlib.suppress(OSError):
        rec.receipt_sha256 = sha256_hex(read_capped(path, limits.receipt_limit_bytes))


def _read_receipt(path: Path, limits: RunLimits) -> bytes:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError as exc:
        raise _Block(Reason.RECEIPT_MISSING, "the checker exited 0 without a receipt") from exc
    if not stat.S_ISREG(mode):
        raise _Block(Reason.RECEIPT_NOT_REGULAR, "the receipt is not a regular file")
    return read_capped(path, limits.receipt_limit_bytes)


def finish(rec: _Recorder, attempt: _Attempt, body: Callable[[], None]) -> RunOutcome:
    """Run ``body``; turn a block or an I/O failure into BLOCKED; write metadata last."""
    try:
        body()
    except _Block as block:
        metadata = rec.freeze(Status.BLOCKED, block.reason, block.detail)
    except OSError as exc:
        metadata = rec.freeze(Status.BLOCKED, Reason.IO_ERROR, f"{exc.filename or ''}: {exc}")
    else:
        metadata = rec.freeze(Status.PASS, None, "accepted by a valid receipt")
    try:
        write_atomic(attempt.root / "metadata.json", dumps(metadata) + b"\n")
    except OSError as exc:
        raise RunDirectoryError("metadata_unwritable", f"{attempt.root}: {exc}") from exc
    return RunOutcome(str(attempt.root), metadata)


# --- the driver -----------------------------------------------------------------------


def run_check(
    entry: CheckEntry,
    job: Job,
    *,
    repository_root: Path,
    manifest_path: Path,
    run_root: Path,
    run_id: str,
    limits: RunLimits,
    environment: Mapping[str, str],
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
) -> RunOutcome:
    """Run the producer and the checker of ``entry`` for ``job`` in a fresh directory.

    Returns PASS only for an accepting valid receipt, else BLOCKED with a
    ``Reason``. Raises ``RunDirectoryError`` if ``run_root/run_id`` cannot be
    created fresh (or a path it records is not UTF-8: ``path_not_utf8``) or its
    metadata cannot be written.
    """
    require_utf8_path(os.path.abspath(manifest_path), "manifest path")
    require_utf8_path(os.path.abspath(repository_root), "repository root")
    attempt = fresh_attempt(run_root, run_id)
    rec = _Recorder(
        kind=RunKind.RUN,
        run_id=run_id,
        replay_of=None,
        check_id=entry.check_id,
        manifest_path=os.path.abspath(manifest_path),
        repository_root=os.path.abspath(repository_root),
        job_id=job.job_id,
        job_digest=job.job_digest,
    )

    def body() -> None:
        write_atomic(attempt.root / "job.json", dumps(job) + b"\n")
        check_job(job, entry)
        identity = build_identity(entry, rec, attempt)
        if progress is not None:
            progress(Stage.IDENTITY_BUILT)
        freeze_snapshot(entry, repository_root, rec, attempt)
        if progress is not None:
            progress(Stage.SNAPSHOT_READY)
        attempt.evidence.mkdir()
        producer_dir = attempt.role_dir("producer")
        producer_dir.mkdir()
        request = write_json_atomic(
            producer_dir / "request.json",
            request_object("producer", RunKind.RUN, entry, job, identity, rec, attempt),
        )
        rec.producer_request_sha256 = sha256_hex(request)
        if progress is not None:
            progress(Stage.PRODUCER_LAUNCH)
        try:
            rec.producer = launch(
                "producer",
                entry,
                attempt,
                timeout_seconds=limits.producer_timeout_seconds,
                limits=limits,
                environment=environment,
                cancel=cancel,
            )
        except _Block as block:
            rec.producer = block.summary
            raise
        if progress is not None:
            progress(Stage.PRODUCER_EXITED)
        verify_snapshot(attempt, rec.inputs, Reason.SNAPSHOT_CHANGED, "after the producer")
        if attempt.role_dir("checker").exists() or attempt.role_dir("checker").is_symlink():
            raise _Block(Reason.RUN_DIR_TAMPERED, "checker/ appeared while the producer ran")
        rec.artifacts = hash_evidence(attempt.evidence, entry.evidence_artifacts)
        rec.evidence_digest = list_digest(rec.artifacts)
        check_phase(
            RunKind.RUN,
            entry,
            job,
            identity,
            rec,
            attempt,
            limits=limits,
            environment=environment,
            cancel=cancel,
            progress=progress,
        )

    return finish(rec, attempt, body)
