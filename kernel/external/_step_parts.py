"""The parts one sandboxed launch holds, and what is taken back after it (ADR 0018, 0021).

``hold_step`` builds the step's ``StepView`` with every part the attempt
chose (``ContainmentPart``): the syscall filter always, a cgroup of its own,
a uid of its own (a root kernel), a bounded output directory. A part the
attempt chose that cannot be had for this launch is ``BLOCKED
containment_unavailable``, naming it: a step never runs with less than the
attempt recorded. ``take_back`` runs once the step's last process is gone:
it keeps the declared names of a bounded output (or gives a lent output
directory back), and says which total stopped the step, if one did, and what
is wrong with what it left.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external._attempt import Attempt, Block
from kernel.external._contain import ContainmentPart
from kernel.external._evidence import check_evidence_shape
from kernel.external._manifest import CheckEntry
from kernel.external._outcome import Reason, summarize_process
from kernel.external._process import ProcessResult, ProcessStatus
from kernel.external._reclaim import lend, reclaim
from kernel.external._sandbox import StepView
from kernel.external._seccomp import SeccompUnavailableError, step_filter_bpf
from kernel.external._settings import Role, RunLimits
from kernel.external._step_cgroup import CgroupUnavailableError, StepCgroup, StopReason
from kernel.external._step_output import OutputHolder, bounded_output, keep_declared
from kernel.external._step_uids import StepUidError, acquire_step_uid, step_uid_range

__all__ = ["HeldStep", "LOG_NAMES", "hold_step", "take_back"]

#: The names the kernel writes in a step's directory after it (never the step's).
LOG_NAMES: Final = ("stdout.log", "stderr.log")
_RECEIPT: Final = "receipt.json"


@final
@attrs.frozen
class HeldStep:
    """One launch's view with what holds its parts (each None where not chosen)."""

    view: StepView
    cgroup: StepCgroup | None
    output: OutputHolder | None


def _missing(role: Role, part: ContainmentPart, exc: Exception) -> Block:
    return Block(Reason.CONTAINMENT_UNAVAILABLE,
                 f"{role.value}: containment part {part.value} cannot be had: {exc}")


def hold_step(
    role: Role,
    entry: CheckEntry,
    view: StepView,
    parts: frozenset[ContainmentPart],
    held: contextlib.ExitStack,
    *,
    attempt_root: str,
    evidence_bytes: int,
) -> HeldStep:
    """``view`` with every chosen part held in ``held`` for one launch; raises ``Block``.

    ``evidence_bytes`` is the run's bound (the entry's, or ``--evidence-limit``):
    the size of a bounded output's tmpfs."""
    view = attrs.evolve(view, seccomp_fd=_filter_descriptor(role, held))
    limits = entry.step_limits()
    cgroup = None
    if ContainmentPart.CGROUP in parts:
        try:
            cgroup = held.enter_context(StepCgroup.create(limits.memory_bytes, limits.processes))
        except CgroupUnavailableError as exc:
            raise _missing(role, ContainmentPart.CGROUP, exc) from exc
        view = attrs.evolve(view, cgroup_procs=cgroup.procs_files())
    if ContainmentPart.UID in parts:
        try:
            slot = held.enter_context(acquire_step_uid(step_uid_range(os.environ), os.getpid()))
        except StepUidError as exc:
            raise _missing(role, ContainmentPart.UID, exc) from exc
        view = attrs.evolve(view, step_uid=slot.uid)
        _readable_for_others(Path(attempt_root))
    output = None
    if ContainmentPart.BOUNDED_OUTPUT in parts:
        try:
            output = held.enter_context(bounded_output(
                view.output, size_bytes=evidence_bytes,
                # its root and the kernel's read-only files count as entries too
                entries=limits.entries + 1 + len(view.read_only), owner_uid=view.step_uid))
            for path in view.read_only:
                output.copy_in(Path(path), os.path.relpath(path, view.output))
        except OSError as exc:
            raise _missing(role, ContainmentPart.BOUNDED_OUTPUT, exc) from exc
        view = attrs.evolve(view, output_holder=output.pid)
    elif view.step_uid is not None:
        try:
            lend(Path(view.output), view.step_uid)
        except OSError as exc:
            raise Block(Reason.RUN_DIR_TAMPERED,
                        f"{role.value}/: cannot hand the output to the step: {exc}") from exc
    return HeldStep(view, cgroup, output)


def _umask() -> int:
    # Read, not set: os.umask would change it for every thread of the kernel.
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _readable_for_others(root: Path) -> None:
    """Under a umask that hides files from others (077), what the attempt gives its step
    to read would be root's alone, and the step's own uid is another: add read (and
    search) for others inside the attempt. The run root above stays 0700, so no other
    user of the machine reaches any of it."""
    if not _umask() & 0o055:
        return
    for folder, dirs, files in os.walk(root):
        for name in (folder, *(os.path.join(folder, d) for d in dirs)):
            mode = os.lstat(name).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(name, stat.S_IMODE(mode) | 0o055)
        for name in files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, stat.S_IMODE(mode) | 0o044)


def _filter_descriptor(role: Role, held: contextlib.ExitStack) -> int:
    """A fresh descriptor of the compiled syscall filter, at offset 0 (bubblewrap reads
    it to its end, so one launch never shares it with another)."""
    try:
        program = step_filter_bpf()
    except SeccompUnavailableError as exc:
        raise _missing(role, ContainmentPart.FILTER, exc) from exc
    fd = os.memfd_create("kernel-step-filter", os.MFD_CLOEXEC)
    held.callback(os.close, fd)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@final
@attrs.frozen
class TakenBack:
    """After a step: the total that stopped it, and what is wrong with what it left."""

    stopped: Block | None
    problem: Block | None


def take_back(
    role: Role,
    entry: CheckEntry,
    attempt: Attempt,
    step: HeldStep,
    result: ProcessResult,
    limits: RunLimits,
) -> TakenBack:
    """What the step left, once its every process is gone (its PID namespace died
    with the launcher): the kernel's again, with run-store modes, and only the
    declared names of a bounded output. Raises ``Block`` (``io_error``) where
    it cannot be taken back."""
    view = step.view
    try:
        if step.output is None:
            # Entries not reached keep the step's uid, never root's (THREAT_MODEL.md).
            reclaim(Path(view.output), view.step_uid)
            problem = None
        else:
            problem = _keep(role, entry, attempt, step.output, limits)
    except OSError as exc:
        raise Block(Reason.IO_ERROR, f"{role.value}: its output cannot be taken back: {exc}",
                    summarize_process(result)) from exc
    return TakenBack(_stopped(role, entry, step, result, limits), problem)


def _keep(
    role: Role, entry: CheckEntry, attempt: Attempt, output: OutputHolder, limits: RunLimits
) -> Block | None:
    """Copy the declared names out of the tmpfs; the first thing wrong with what was there."""
    target = Path(output.output)
    if role is Role.PRODUCER:
        declared = entry.evidence_artifacts
        problem = None
        try:
            check_evidence_shape(Path(output.path()), declared, limits=limits)
        except Block as block:
            problem = block
        keep_declared(output, target, declared, artifact_limit=limits.artifact_limit_bytes,
                      total_limit=limits.evidence_limit_bytes)
        return problem
    keep_declared(output, target, (_RECEIPT,), artifact_limit=limits.receipt_limit_bytes,
                  total_limit=limits.receipt_limit_bytes)
    for name in LOG_NAMES:
        if os.path.lexists(output.path(name)):
            # The log names are the kernel's: the step wrote into its record of it.
            return Block(Reason.RUN_DIR_TAMPERED,
                         f"{role.value}/{name} existed before the kernel wrote it")
    receipt = output.path(_RECEIPT)
    if os.path.lexists(receipt) and not os.path.exists(attempt.role_dir(role) / _RECEIPT):
        return Block(Reason.RECEIPT_NOT_REGULAR, "the receipt is not a regular file")
    return None


_STOPPED: Final = {
    StopReason.MEMORY: (Reason.MEMORY_LIMIT_REACHED, "memory"),
    StopReason.PROCESSES: (Reason.PROCESS_LIMIT_REACHED, "process"),
}


def _stopped(
    role: Role, entry: CheckEntry, step: HeldStep, result: ProcessResult, run_limits: RunLimits
) -> Block | None:
    """The total that stopped the step: its cgroup's (when it failed), else its output's
    (whenever the tmpfs is full: what it wrote there is cut short)."""
    limits = entry.step_limits()
    failed = result.status is not ProcessStatus.EXITED or result.returncode != 0
    summary = summarize_process(result)
    if step.cgroup is not None and failed:
        stop = step.cgroup.stop_reason()
        if stop is not None:
            reason, what = _STOPPED[stop]
            bound = (f"memory_bytes={limits.memory_bytes}" if stop is StopReason.MEMORY
                     else f"processes={limits.processes}")
            return Block(reason, f"{role.value} {result.detail}: it reached its {what} limit "
                         f"({bound} for the step as a whole)", summary)
    if step.output is not None:
        usage = step.output.usage()
        if usage.entries_full:
            return Block(Reason.ENTRIES_LIMIT_REACHED,
                         f"{role.value} {result.detail}: it reached its entries limit "
                         f"(entries={limits.entries} in its output directory)", summary)
        if usage.bytes_full:
            return Block(Reason.DISK_LIMIT_REACHED,
                         f"{role.value} {result.detail}: it reached its disk limit "
                         f"(evidence_bytes={run_limits.evidence_limit_bytes} in its output "
                         "directory)",
                         summary)
    return None
