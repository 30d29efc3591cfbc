"""The main job's work directory: what it holds, and how a run is begun, resumed and ended.

The protocol (ADR 0006, ADR 0022; ``kernel run --help`` "Files"):

    DIR/run-state.json     which run the directory belongs to (run id, attempt count)
    DIR/outcomes.jsonl     the outcome lines recorded so far, in run order, flushed
    DIR/<attempt_id>/      one attempt's certification: problem, manifest copy, run,
                           certification.json
    DIR/.bundle.partial    the bundle as read so far; DIR/bundle.json (or
                           bundle.jsonl) once every attempt was read
    DIR/INTERRUPTED        left by an interrupt: which signal, how many outcomes
    DIR/.landing-<id>      a worker's record on its way in (ADR 0022)

Nothing here decides an outcome or trusts a record: a resumed run's recorded
lines are derived again by the caller before they count, and an attempt
directory the interrupted run left is kept only for the certifier to derive
again (``ExternalCertifier.kept_already``). Every refusal is a
``WorkDirError`` with a stable code, raised before anything is written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import BinaryIO, Final, final

from kernel.orchestrate._attempt_record import is_staging
from kernel.orchestrate._certifier import CERTIFICATION_RECORD
from kernel.orchestrate.errors import OrchestrateError

__all__ = [
    "ATTEMPT_DIR",
    "BUNDLE_COPY",
    "BUNDLE_PARTIAL",
    "BUNDLE_STREAM_COPY",
    "INTERRUPTED_FILE",
    "OUTCOMES_FILE",
    "STATE_FILE",
    "WorkDirError",
    "check_fresh_work_dir",
    "clear_unrecorded",
    "create_work_dir",
    "holds_nothing",
    "keep_bundle",
    "mark_interrupted",
    "recorded_count",
    "recorded_outcomes",
    "run_state",
    "still_as_left",
]

STATE_FILE: Final = "run-state.json"
OUTCOMES_FILE: Final = "outcomes.jsonl"
INTERRUPTED_FILE: Final = "INTERRUPTED"
BUNDLE_PARTIAL: Final = ".bundle.partial"
BUNDLE_COPY: Final = "bundle.json"  # a single-document bundle, as the run read it
BUNDLE_STREAM_COPY: Final = "bundle.jsonl"  # a bundle stream, likewise
_STATE_FORMAT: Final = "replay-kernel.run-state.v1"
ATTEMPT_DIR: Final = re.compile(r"[0-9a-f]{64}")


@final
class WorkDirError(OrchestrateError):
    """The work directory cannot hold this run (codes ``work_dir_*`` and ``resume_*``)."""


def run_state(run_id: str, count: int) -> bytes:
    """``run-state.json``'s bytes for a run: the same run always gives the same bytes."""
    return json.dumps({"format": _STATE_FORMAT, "run_id": run_id, "attempt_count": count},
                      sort_keys=True).encode() + b"\n"


def holds_nothing(work_dir: Path) -> bool:
    """An absent work directory, or an empty plain one: nothing of a run to resume."""
    if work_dir.is_symlink():
        return False
    if not work_dir.exists():
        return True
    try:
        return work_dir.is_dir() and not any(work_dir.iterdir())
    except OSError:
        return False


def check_fresh_work_dir(work_dir: Path) -> None:
    """A fresh run's directory must be absent or empty (else ``--resume``)."""
    if work_dir.is_symlink() or (work_dir.exists() and not work_dir.is_dir()):
        raise WorkDirError("work_dir_not_directory", f"{work_dir}: not a plain directory")
    try:
        if work_dir.is_dir() and any(work_dir.iterdir()):
            raise WorkDirError("work_dir_not_empty",
                               f"{work_dir}: not empty (use a fresh directory, or --resume)")
    except OSError as exc:
        raise WorkDirError("work_dir_unreadable", f"{work_dir}: {exc.strerror or exc}") from exc


def create_work_dir(root: Path, state: bytes) -> None:
    """The directory of a fresh run, with its state file."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        (root / STATE_FILE).write_bytes(state)
    except OSError as exc:
        raise WorkDirError("work_dir_unreadable", f"{root}: {exc.strerror or exc}") from exc


def recorded_outcomes(work_dir: Path, run_id: str, count: int) -> list[bytes]:
    """For --resume: the complete outcome lines recorded in ``work_dir`` for this run.

    Only their shape is checked here (one line per attempt, in order); the
    caller derives each again before it counts.
    """
    if work_dir.is_symlink() or not work_dir.is_dir():
        raise WorkDirError("resume_not_a_run", f"{work_dir}: not a work directory of kernel run")
    try:
        state = (work_dir / STATE_FILE).read_bytes()
    except OSError as exc:
        raise WorkDirError("resume_not_a_run",
                           f"{work_dir / STATE_FILE}: {exc.strerror or exc}") from exc
    if state != run_state(run_id, count):
        raise WorkDirError("resume_other_run", f"{work_dir}: holds another run than this bundle's")
    log = work_dir / OUTCOMES_FILE
    data = log.read_bytes() if log.is_file() else b""
    complete = data.split(b"\n")[:-1]  # a last line without its newline was cut by the interrupt
    for index, line in enumerate(complete):
        try:
            record = json.loads(line)
            ok = isinstance(record, dict) and record.get("attempt_index") == index
        except ValueError:
            ok = False
        if not ok or index >= count:
            raise WorkDirError("resume_log_corrupt",
                               f"{log}: line {index + 1} is not attempt {index}")
    return complete


def clear_unrecorded(root: Path, recorded: list[bytes]) -> dict[str, tuple[int, int]]:
    """What an interrupt left of the attempts after the recorded ones, made ready to go on.

    An attempt directory that holds its ``certification.json`` is left for
    the certifier to derive again and keep, or remove (ADR 0022): a
    certification that completed is not run twice. Any other (a step cut
    short) is removed, as is a record half landed; the log is cut back to
    its complete lines. Returns the directories left, by attempt id, with
    their record's inode and time, so the caller can tell afterwards which
    were kept as they were.
    """
    kept = {json.loads(line)["attempt_id"] for line in recorded}
    left: dict[str, tuple[int, int]] = {}
    for entry in root.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            continue
        if ATTEMPT_DIR.fullmatch(entry.name) and entry.name not in kept:
            record = entry / CERTIFICATION_RECORD
            if record.is_file() and not record.is_symlink():
                left[entry.name] = _stamp(record)
                continue
            shutil.rmtree(entry)
        elif is_staging(entry.name):
            shutil.rmtree(entry)
    (root / OUTCOMES_FILE).write_bytes(b"".join(line + b"\n" for line in recorded))
    (root / INTERRUPTED_FILE).unlink(missing_ok=True)
    return left


def _stamp(record: Path) -> tuple[int, int]:
    """Which file ``record`` is, and when it was written: an inode alone may be reused."""
    found = record.stat()
    return found.st_ino, found.st_mtime_ns


def still_as_left(root: Path, left: dict[str, tuple[int, int]]) -> frozenset[str]:
    """Of the directories ``clear_unrecorded`` left, those kept as they were (not run again)."""
    found = set()
    for attempt_id, stamp in left.items():
        try:
            if _stamp(root / attempt_id / CERTIFICATION_RECORD) == stamp:
                found.add(attempt_id)
        except OSError:
            continue
    return frozenset(found)


def keep_bundle(root: Path, kept: BinaryIO, stream: bool) -> None:
    """The bundle as this run read it, every attempt read: DIR/bundle.json (or .jsonl).

    The work directory binds the bundle it ran: ``kernel audit DIR``
    re-derives every outcome from this copy, and ``kernel attest`` signs its
    digest. A run cut short leaves only the partial copy, which --resume
    writes again.
    """
    kept.flush()
    os.fsync(kept.fileno())
    name, other = (BUNDLE_STREAM_COPY, BUNDLE_COPY) if stream else (BUNDLE_COPY, BUNDLE_STREAM_COPY)
    (root / other).unlink(missing_ok=True)
    os.replace(root / BUNDLE_PARTIAL, root / name)


def mark_interrupted(root: Path, signal_name: str) -> int:
    """``INTERRUPTED``, naming the signal and the outcomes recorded; that count.

    Counted on disk: what --resume will keep is the complete lines there (the
    signal may have come between a batch's write and the count).
    """
    done = recorded_count(root)
    (root / INTERRUPTED_FILE).write_text(
        json.dumps({"signal": signal_name, "outcomes_recorded": done}) + "\n")
    return done


def recorded_count(root: Path) -> int:
    """The complete outcome lines on disk."""
    return (root / OUTCOMES_FILE).read_bytes().count(b"\n")
