"""Red-team tests of the impure edge: kernel.external, kernel.orchestrate, the check/run CLI.

Each test is an attack with real subprocesses and real files. Where the kernel
was wrong, the test was written first and failed; where the attack is a
documented non-guarantee (ADR-0004 "What is not guaranteed"), the test pins
down what does and does not hold, and cleans up after itself. The containment
attacks (forged receipts, SIGKILL, swapped pins) are in tests/test_containment.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kernel.external import (
    JobError,
    ManifestError,
    Reason,
    RunDirectoryError,
    RunOutcome,
    RunRecordError,
    Status,
    load_job,
    load_manifest,
    seal_job,
)
from kernel.orchestrate import replay_requests
from kernel.serde import dumps
from tests.support.cli import KERNEL_MAIN
from tests.support.processes import cmdline, processes_mentioning
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, Scenario, replay_stored

T = TypeVar("T")


pytestmark = pytest.mark.usefixtures("no_leftovers")


def _release(fifo: Path) -> None:
    """Unblock a reader stuck opening ``fifo``: open its write end once, close it (EOF)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _within(seconds: float, fifo: Path, action: Callable[[], T]) -> T:
    """``action()`` in a thread; fail (after releasing ``fifo``) if it is still blocked."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = action()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        while worker.is_alive():
            _release(fifo)
            worker.join(0.1)
        pytest.fail(f"blocked on the FIFO {fifo} for more than {seconds}s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


# --- FIFOs where a regular file is expected: refused, never a hang ----------------------


def test_replay_of_a_run_whose_metadata_is_a_fifo_is_refused_not_hung(tmp_path: Path) -> None:
    run = Scenario(tmp_path).run()
    metadata = Path(run.attempt_dir, "metadata.json")
    metadata.unlink()
    os.mkfifo(metadata)
    with pytest.raises(RunRecordError) as caught:
        _within(5.0, metadata, lambda: replay_stored(run.attempt_dir))
    assert caught.value.code == "metadata_unreadable"


def test_replay_of_a_run_whose_job_is_a_fifo_is_refused_not_hung(tmp_path: Path) -> None:
    run = Scenario(tmp_path).run()
    job = Path(run.attempt_dir, "job.json")
    job.unlink()
    os.mkfifo(job)
    with pytest.raises(RunRecordError) as caught:
        _within(5.0, job, lambda: replay_stored(run.attempt_dir))
    assert caught.value.code == "retained_job_unreadable"


def test_a_job_or_manifest_that_is_a_fifo_is_refused_not_hung(tmp_path: Path) -> None:
    fifo = tmp_path / "document.fifo"
    os.mkfifo(fifo)
    with pytest.raises(JobError) as job:
        _within(5.0, fifo, lambda: load_job(fifo))
    assert job.value.code == "job_unreadable"
    with pytest.raises(ManifestError) as manifest:
        _within(5.0, fifo, lambda: load_manifest(fifo, repository_root=tmp_path))
    assert manifest.value.code == "manifest_unreadable"


def test_a_pinned_file_replaced_by_a_fifo_blocks_the_run_not_hangs_it(tmp_path: Path) -> None:
    # The producer swaps the checker's pinned helper for a FIFO: the pin
    # re-check before the checker launch must refuse it, not wait for a writer.
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    producer = HONEST_PRODUCER + f"os.unlink({str(helper)!r}); os.mkfifo({str(helper)!r})\n"
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer, checker_deps=(helper,)
    )
    outcome = _within(10.0, helper, scenario.run)
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.PIN_CHANGED_BEFORE_LAUNCH
    assert outcome.metadata.execution.checker is None


# --- trees the producer builds to crash the walk, and paths that are not UTF-8 --------


def _remove_chain(top: Path, name: str) -> None:
    """Remove ``top/name/name/...`` bottom-up through directory descriptors.

    ``shutil.rmtree`` recurses once per level, and the chain's paths may be
    longer than ``PATH_MAX``, so walk down and back up with ``dir_fd``.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd, depth = os.open(top, flags), 0
    try:
        while True:
            try:
                inner = os.open(name, flags, dir_fd=fd)
            except FileNotFoundError:
                break
            os.close(fd)
            fd, depth = inner, depth + 1
        for _ in range(depth):
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


_DEEP = """
def chain(root, name, depth):
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
"""


@pytest.mark.parametrize(
    ("where", "reason"),
    [("evidence", Reason.ARTIFACT_UNDECLARED), ("snapshot", Reason.SNAPSHOT_CHANGED)],
)
def test_a_directory_chain_deeper_than_the_recursion_limit_blocks_not_crashes(
    tmp_path: Path, where: str, reason: Reason
) -> None:
    producer = HONEST_PRODUCER + _DEEP + f"chain(request['paths'][{where!r}], 'd', 1200)\n"
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer)
    try:
        outcome = scenario.run()
        assert outcome.status is Status.BLOCKED and outcome.reason is reason
        assert Path(outcome.attempt_dir, "metadata.json").is_file()
    finally:
        _remove_chain(scenario.run_root / "run-1" / where, "d")


def test_a_path_past_path_max_with_undecodable_names_blocks_with_metadata(tmp_path: Path) -> None:
    # 30 levels of 200 undecodable bytes: walking evidence/ hits ENAMETOOLONG on a
    # path that is not UTF-8; the run must still end BLOCKED with its metadata.
    name = "os.fsdecode(b'\\xff' * 200)"
    producer = HONEST_PRODUCER + _DEEP + f"chain(request['paths']['evidence'], {name}, 30)\n"
    scenario = Scenario(tmp_path, producer=producer)
    try:
        outcome = scenario.run()
        assert outcome.status is Status.BLOCKED
        assert outcome.reason in (Reason.IO_ERROR, Reason.ARTIFACT_UNDECLARED)
        stored = Path(outcome.attempt_dir, "metadata.json").read_bytes()
        assert stored.decode("utf-8")  # strict UTF-8, canonical
    finally:
        _remove_chain(scenario.run_root / "run-1" / "evidence", os.fsdecode(b"\xff" * 200))


def test_a_run_root_or_manifest_path_that_is_not_utf8_is_refused_before_running(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    scenario.run_root = tmp_path / os.fsdecode(b"runs-\xff")
    with pytest.raises(RunDirectoryError) as root:
        scenario.run()
    assert root.value.code == "path_not_utf8"
    assert not (scenario.run_root / "run-1").exists()
    scenario.run_root = tmp_path / "runs"
    renamed = tmp_path / os.fsdecode(b"manifest-\xfe.json")
    scenario.manifest_path.rename(renamed)
    scenario.manifest_path = renamed
    with pytest.raises(RunDirectoryError) as manifest:
        scenario.run()
    assert manifest.value.code == "path_not_utf8"
    assert not (scenario.run_root / "run-1").exists()


# --- the run directory itself: the kernel never writes through a planted symlink ------


@pytest.mark.parametrize("role", ["producer", "checker"])
def test_a_command_that_swaps_its_role_directory_for_a_symlink_is_tampering(
    tmp_path: Path, role: str
) -> None:
    # The command moves its own producer/ or checker/ away and leaves a symlink
    # to it: the kernel must not write its logs there, nor read a receipt there.
    outside = tmp_path / "outside"
    outside.mkdir()
    swap = (
        "import os, sys, json\n"
        "directory = os.path.dirname(sys.argv[1])\n"
        f"os.rename(directory, {str(outside / 'moved')!r})\n"
        f"os.symlink({str(outside / 'moved')!r}, directory)\n"
    )
    if role == "producer":
        scenario = Scenario(
            tmp_path, max_containment=BELOW_SANDBOX, producer=HONEST_PRODUCER + swap
        )
    else:
        custom = swap.replace("sys.argv[1]", "receipt_path")
        scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, checker_custom=custom)
    outcome = scenario.run()
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.RUN_DIR_TAMPERED, outcome.metadata.decision.detail
    assert sorted(p.name for p in (outside / "moved").iterdir()) == (
        ["request.json"] if role == "producer" else ["receipt.json", "request.json"]
    )


@pytest.mark.parametrize("planted", ["file", "symlink"])
@pytest.mark.parametrize("role", ["producer", "checker"])
def test_a_command_that_plants_its_own_log_is_tampering(
    tmp_path: Path, role: str, planted: str
) -> None:
    # stdout.log and stderr.log are the kernel's record of the command: one
    # the command wrote itself (or a symlink to a file elsewhere) is never
    # taken as that record, never replaced quietly, never written through.
    outside = tmp_path / "outside.txt"
    outside.write_text("not the kernel's\n")
    log = "os.path.join(os.path.dirname(sys.argv[1]), 'stdout.log')"
    plant = (
        "import os, sys, json\n"
        + (f"open({log}, 'w').write('all obligations accepted\\n')\n" if planted == "file"
           else f"os.symlink({str(outside)!r}, {log})\n")
    )
    if role == "producer":
        scenario = Scenario(
            tmp_path, max_containment=BELOW_SANDBOX, producer=HONEST_PRODUCER + plant
        )
    else:
        scenario = Scenario(
            tmp_path, max_containment=BELOW_SANDBOX,
            checker_custom=plant.replace("sys.argv[1]", "receipt_path"),
        )
    outcome = scenario.run()
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.RUN_DIR_TAMPERED, outcome.metadata.decision.detail
    assert f"{role}/stdout.log existed" in outcome.metadata.decision.detail
    assert outside.read_text() == "not the kernel's\n"


# --- replay of a tampered run directory ---------------------------------------------


def test_replay_never_follows_a_replays_symlink_planted_in_the_run(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    replays = "os.path.join(request['paths']['run_dir'], 'replays')"
    plant = f"os.symlink({str(elsewhere)!r}, {replays})\n"
    run = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=HONEST_PRODUCER + plant).run()
    assert run.status is Status.PASS  # replays/ is not the run's business
    with pytest.raises(RunRecordError) as caught:
        replay_stored(run.attempt_dir)
    assert caught.value.code == "replays_not_directory"
    assert list(elsewhere.iterdir()) == []


def test_replay_of_a_run_whose_job_was_swapped_is_refused(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    # another job, correctly sealed, for the same check: replay must not bind to it
    other = seal_job("job-2", "demo", "a job this run never ran")
    Path(run.attempt_dir, "job.json").write_bytes(dumps(other) + b"\n")
    with pytest.raises(RunRecordError) as caught:
        replay_stored(run.attempt_dir)
    assert caught.value.code == "retained_job_mismatch"
    assert not Path(run.attempt_dir, "replays", "replay-1").exists()


def test_replay_of_a_run_whose_job_is_a_symlink_is_refused(tmp_path: Path) -> None:
    run = Scenario(tmp_path).run()
    job = Path(run.attempt_dir, "job.json")
    copy = tmp_path / "job-copy.json"
    copy.write_bytes(job.read_bytes())
    job.unlink()
    job.symlink_to(copy)
    with pytest.raises(RunRecordError) as caught:
        replay_stored(run.attempt_dir)
    assert caught.value.code == "retained_job_unreadable"


# --- the certifier binds what ran to the problem it planned --------------------------


# Another problem in the certification grammar (ADR 0012), trivially certified.
SWAPPED = (
    "(set-logic QF_NIA)\n(declare-const q0_1 Int)\n(declare-const q0_2 Int)\n"
    "(assert (= q0_1 1))\n(assert (= q0_2 1))\n(assert (distinct q0_1 q0_2))\n(check-sat)\n"
)


def test_a_pass_for_another_specification_never_closes_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A concurrent writer (simulated here, deterministically) replaces the
    # certification problem between the certifier writing it and run_check
    # freezing it. z3 and cvc5 really run, on a trivially unsat problem, and
    # PASS: that PASS is about another specification and must not close.
    import kernel.orchestrate._certifier as certifier_module
    from kernel.external import run_check as real_run_check
    from kernel.organs import CERTIFIED_MANIFEST
    from kernel.replay import ReplayDisposition, requests_from_bundle
    from tests.orchestrate_helpers import certifier, e2e_bundle

    seen: list[RunOutcome] = []

    def swapped(*args: Any, **kwargs: Any) -> RunOutcome:
        problem = Path(kwargs["repository_root"]) / "certification.smt2"
        problem.write_text(SWAPPED)
        seen.append(real_run_check(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(certifier_module, "run_check", swapped)
    work = tmp_path / "work"
    with caplog.at_level("WARNING", logger="kernel.orchestrate"):
        (outcome,) = replay_requests(
            (requests_from_bundle(e2e_bundle())[0],), CERTIFIED_MANIFEST, certifier(work)
        )
    assert [o.status for o in seen] == [Status.PASS]  # the pair accepted the swapped problem
    assert outcome.replay_disposition is ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert "not the planned problem" in caplog.text


# --- kernel run under SIGTERM: the running certification's processes die with it ------

def _venv_with_a_slow_z3(tmp_path: Path) -> Path:
    """A venv-shaped directory whose ``z3`` never answers (the interpreter is the real one)."""
    config = Path(sys.prefix) / "pyvenv.cfg"
    if not config.is_file():
        pytest.skip("needs the tests to run from a virtual environment")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copyfile(config, venv / "pyvenv.cfg")
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    (venv / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    z3 = venv / "bin" / "z3"
    z3.write_text("#!/bin/sh\nwhile :; do /bin/sleep 0.1; done\n")
    z3.chmod(0o755)
    return venv


def test_sigterm_to_kernel_run_kills_the_running_certification(tmp_path: Path) -> None:
    from tests.orchestrate_helpers import E2E_BUNDLE

    venv = _venv_with_a_slow_z3(tmp_path)
    out = tmp_path / "outcomes.jsonl"
    kernel = subprocess.Popen(
        [str(venv / "bin" / "python"), "-c", KERNEL_MAIN, "run", str(E2E_BUNDLE),
         "--work-dir", str(tmp_path / "work"), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    slow = str(venv / "bin" / "z3")
    try:
        deadline = time.monotonic() + 30
        while not processes_mentioning(slow) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes_mentioning(slow), "the producer never started z3"
        kernel.send_signal(signal.SIGTERM)
        kernel.wait(30)
        assert kernel.returncode != 0 and not out.exists()
        assert kernel.stderr is not None
        assert "Traceback" not in kernel.stderr.read().decode(errors="replace")
        deadline = time.monotonic() + 2
        while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {
            pid: line[:160]
            for pid in processes_mentioning(str(tmp_path))
            if (line := cmdline(pid))
        }
        assert not left, f"the certification outlived kernel run: {left}"
    finally:
        for pid in processes_mentioning(str(tmp_path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        assert kernel.stdout is not None and kernel.stderr is not None
        kernel.stdout.close()
        kernel.stderr.close()


# --- a setsid daemon no longer outlives its step (ADR 0009) ------------------------------


def test_a_setsid_daemon_dies_with_its_step(tmp_path: Path) -> None:
    # Double fork + setsid: the grandchild leaves the producer's process group.
    # Before containment it escaped the group kill (ADR 0004 documented it);
    # now it dies with its step's namespace (or subreaper).
    pid_file = tmp_path / "daemon.pid"
    producer = HONEST_PRODUCER + (
        "import time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.closerange(0, 3)\n"
        f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        f"        time.sleep(30)  # {tmp_path}\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        f"while not os.path.exists({str(pid_file)!r}): time.sleep(0.01)\n"
    )
    outcome = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer).run()
    assert outcome.status is Status.PASS
    assert pid_file.exists()  # the daemon did start
    assert processes_mentioning(str(tmp_path)) == []
