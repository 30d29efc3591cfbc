"""Deadlines, cancellation and process-group killing, with real grandchildren."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kernel.external import (
    Cancellation,
    ProcessResult,
    ProcessStatus,
    Reason,
    Status,
    default_environment,
    run_process,
)
from tests.support.processes import assert_no_leftover
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, PYTHON, Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _spawner(tmp_path: Path, then: str) -> str:
    """Script code that starts a grandchild, records both pids, then runs ``then``."""
    pids = tmp_path / "pids.json"
    return (
        "import json, os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', "
        f"{str(tmp_path)!r}])\n"
        f"open({str(pids)!r}, 'w').write(json.dumps([os.getpid(), child.pid]))\n"
        f"{then}\n"
    )


def _assert_started_then_gone(tmp_path: Path) -> None:
    """The command and its grandchild ran, and no process of theirs is left.

    The pids they record are their own namespace's (ADR 0009), meaningless
    here; every process of the test mentions ``tmp_path`` on its command line.
    """
    value = json.loads((tmp_path / "pids.json").read_text())
    assert isinstance(value, list) and len(value) == 2
    assert_no_leftover(tmp_path)


def test_producer_past_its_deadline_is_killed_with_its_grandchild(tmp_path: Path) -> None:
    producer = _spawner(tmp_path, "time.sleep(120)")
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer)
    started = time.monotonic()
    outcome = scenario.run(producer_timeout=1.0)
    assert time.monotonic() - started < 20
    assert outcome.status is Status.BLOCKED and outcome.reason is Reason.PRODUCER_TIMEOUT
    assert outcome.metadata.execution.producer is not None
    assert outcome.metadata.execution.producer.status.value == "timed_out"
    assert outcome.metadata.execution.checker is None
    _assert_started_then_gone(tmp_path)


def test_checker_past_its_deadline_is_never_read_as_a_result(tmp_path: Path) -> None:
    # The checker writes a perfectly valid accepting receipt, then overstays.
    checker_custom = (
        "with open(receipt_path, 'w') as h:\n"
        "    h.write(json.dumps(receipt))\n"
        "WRITE = False\n" + _spawner(tmp_path, "time.sleep(120)")
    )
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, checker_custom=checker_custom)
    outcome = scenario.run(checker_timeout=1.5)
    assert outcome.reason is Reason.CHECKER_TIMEOUT
    assert outcome.metadata.decision.verdict is None
    assert outcome.metadata.execution.receipt_sha256 is None
    assert Path(outcome.attempt_dir, "checker", "receipt.json").exists()
    _assert_started_then_gone(tmp_path)


def test_grandchild_left_running_after_a_normal_exit_is_stopped(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + _spawner(tmp_path, "sys.exit(0)")
    outcome = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer).run()
    assert outcome.status is Status.PASS
    _assert_started_then_gone(tmp_path)


def test_cancellation_kills_the_running_group(tmp_path: Path) -> None:
    producer = _spawner(tmp_path, "time.sleep(120)")
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer)
    cancel = threading.Event()
    pids = tmp_path / "pids.json"

    def cancel_once_started() -> None:
        deadline = time.monotonic() + 20
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        cancel.set()

    helper = threading.Thread(target=cancel_once_started)
    helper.start()
    outcome = scenario.run(producer_timeout=60.0, cancel=cancel)
    helper.join()
    assert outcome.reason is Reason.CANCELLED
    _assert_started_then_gone(tmp_path)


def _cancel_when_started(tmp_path: Path, cancel: threading.Event) -> ProcessStatus:
    """Run a command that marks its start, sleeps 3 s and exits 0; set ``cancel``
    once it has started; its status.

    ``poll_seconds`` is an hour: a wait that looks at the event only on a
    tick sleeps until the command exits by itself (``EXITED``).
    """
    marker = tmp_path / "started"
    helper_done = threading.Event()

    def cancel_once_started() -> None:
        limit = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < limit:
            time.sleep(0.02)
        cancel.set()
        helper_done.set()

    helper = threading.Thread(target=cancel_once_started)
    helper.start()
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(3)"
    result = run_process(
        [PYTHON, "-c", code, str(tmp_path)],
        cwd=tmp_path,
        env=default_environment(),
        timeout_seconds=60.0,
        cancel=cancel,
        stdout_limit=10,
        stderr_limit=10,
        poll_seconds=3600.0,
    )
    helper.join()
    assert helper_done.is_set()
    return result.status


def test_a_cancellation_wakes_the_wait_without_a_polling_tick(tmp_path: Path) -> None:
    assert _cancel_when_started(tmp_path, Cancellation()) is ProcessStatus.CANCELLED
    assert_no_leftover(tmp_path)


def test_a_plain_event_is_only_seen_on_a_tick(tmp_path: Path) -> None:
    # The control for the test above: the same wait with an event that has no
    # descriptor sleeps until the command exits on its own.
    assert _cancel_when_started(tmp_path, threading.Event()) is ProcessStatus.EXITED
    assert_no_leftover(tmp_path)


def test_a_cleared_cancellation_no_longer_wakes_a_wait() -> None:
    import select

    cancel = Cancellation()
    poller = select.poll()
    poller.register(cancel.fileno(), select.POLLIN)
    assert not poller.poll(0) and not cancel.is_set()
    cancel.set()
    cancel.set()
    assert poller.poll(0) and cancel.is_set()
    cancel.clear()
    assert not poller.poll(0) and not cancel.is_set()


def test_cancel_already_set_never_lets_a_command_run_long(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    started = time.monotonic()
    result = run_process(
        [PYTHON, "-c", "import time; time.sleep(60)", str(tmp_path)],
        cwd=tmp_path,
        env=default_environment(),
        timeout_seconds=60,
        cancel=cancel,
        stdout_limit=10,
        stderr_limit=10,
    )
    assert result.status is ProcessStatus.CANCELLED and result.returncode is None
    assert time.monotonic() - started < 10


def test_run_process_caps_output_and_reports_exit_status(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('a' * 100000); sys.stderr.write('b' * 10); sys.exit(4)"
    result = run_process(
        [PYTHON, "-c", code, str(tmp_path)],
        cwd=tmp_path,
        env=default_environment(),
        timeout_seconds=30,
        cancel=None,
        stdout_limit=1000,
        stderr_limit=1000,
    )
    assert result.status is ProcessStatus.EXITED and result.returncode == 4
    assert result.stdout == b"a" * 1000 and result.stdout_truncated
    assert result.stderr == b"b" * 10 and not result.stderr_truncated


def test_run_process_reports_a_launch_failure(tmp_path: Path) -> None:
    result = run_process(
        [str(tmp_path / "missing-program")],
        cwd=tmp_path,
        env={},
        timeout_seconds=5,
        cancel=None,
        stdout_limit=10,
        stderr_limit=10,
    )
    assert result.status is ProcessStatus.LAUNCH_FAILED


def test_run_process_passes_exactly_the_given_environment(tmp_path: Path) -> None:
    result = run_process(
        [PYTHON, "-c", "import json, os; print(json.dumps(sorted(os.environ)))", str(tmp_path)],
        cwd=tmp_path,
        env={"ONLY": "this"},
        timeout_seconds=30,
        cancel=None,
        stdout_limit=1000,
        stderr_limit=1000,
    )
    # the interpreter may add LC_CTYPE on its own; nothing from our environment leaks
    assert set(json.loads(result.stdout)) <= {"ONLY", "LC_CTYPE"}



def _run(tmp_path: Path, code: str, *, limit: int, timeout: float = 30,
         cancel: threading.Event | None = None) -> ProcessResult:
    return run_process(
        [PYTHON, "-c", code, str(tmp_path)], cwd=tmp_path, env=default_environment(),
        timeout_seconds=timeout, cancel=cancel, stdout_limit=limit, stderr_limit=limit,
    )


def _open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_both_pipes_are_drained_while_the_command_writes_far_past_their_buffers(
    tmp_path: Path,
) -> None:
    """Alternate 64 KiB writes to stdout and stderr, 2 MiB each: a pipe left unread
    (drained only after the other one, or after the exit) stalls the command."""
    code = (
        "import os\n"
        "for i in range(32):\n"
        "    os.write(1, bytes([65 + i % 26]) * 65536)\n"
        "    os.write(2, bytes([97 + i % 26]) * 65536)\n"
    )
    before = _open_descriptors()
    result = _run(tmp_path, code, limit=4 * 1024 * 1024, timeout=60)
    assert result.status is ProcessStatus.EXITED and result.returncode == 0
    assert result.stdout == b"".join(bytes([65 + i % 26]) * 65536 for i in range(32))
    assert result.stderr == b"".join(bytes([97 + i % 26]) * 65536 for i in range(32))
    assert not result.stdout_truncated and not result.stderr_truncated
    assert _open_descriptors() == before


def test_a_descendant_holding_the_pipes_after_the_exit_delays_the_result_by_a_bound(
    tmp_path: Path,
) -> None:
    """Without containment a descendant that called setsid survives the group kill and
    keeps both pipes open: the result still comes, with what the leader wrote, after
    at most the bounded drain, and no descriptor of ours stays open."""
    pid_file = tmp_path / "daemon.pid"
    code = (
        "import os, sys, time\n"
        "sys.stdout.write('leader'); sys.stdout.flush()\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "while not os.path.exists(" + repr(str(pid_file)) + "): time.sleep(0.01)\n"
    )
    before = _open_descriptors()
    started = time.monotonic()
    try:
        result = _run(tmp_path, code, limit=1000)
        took = time.monotonic() - started
    finally:
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert result.status is ProcessStatus.EXITED and result.returncode == 0
    assert result.stdout == b"leader"
    assert 4.0 <= took < 30, took  # the drain waited its bound for an EOF that never came
    assert _open_descriptors() == before


@pytest.mark.parametrize("kind", ["cancellation", "plain event"])
def test_a_cancellation_stops_a_command_that_floods_its_pipes(tmp_path: Path, kind: str) -> None:
    """Output arriving all the time must not hide the event: a Cancellation wakes the
    wait through its descriptor, a plain Event is still looked at on every tick."""
    cancel = Cancellation() if kind == "cancellation" else threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    started = time.monotonic()
    try:
        result = _run(tmp_path, "import os\nwhile True: os.write(1, b'x' * 65536)",
                      limit=1000, timeout=60, cancel=cancel)
    finally:
        timer.cancel()
    assert result.status is ProcessStatus.CANCELLED and result.returncode is None
    assert result.stdout == b"x" * 1000 and result.stdout_truncated
    assert time.monotonic() - started < 10


def _cleanup_lines() -> range:
    """``run_process``'s lines from the cleanup's ``finally:`` to the end of its drain.

    An interrupt inside a ``finally`` block skips the rest of that block in any
    Python code; what the kernel promises is the body, not its own cleanup.
    """
    import inspect

    from kernel.external import _process

    lines, first = inspect.getsourcelines(_process.run_process)
    text = [line.strip() for line in lines]
    start = text.index("status = _wait_draining(proc.pid, pidfd, outputs, timeout_seconds, cancel,")
    end = next(i for i, line in enumerate(text) if line.startswith("outputs.finish("))
    return range(first + start + 2, first + end)


def test_an_interrupt_on_any_line_of_a_launch_leaves_no_process_and_no_descriptor(
    tmp_path: Path,
) -> None:
    """A KeyboardInterrupt raised at the n-th line run in ``kernel.external._process``,
    for every n until a launch ends without one: the command's group is killed (a
    grandchild it left behind included) and no pipe of it stays open."""
    import sys

    from kernel.external import _process

    source = _process.__file__
    skipped = _cleanup_lines()
    argv = [PYTHON, "-I", "-S", "-c", "import os, time; os.fork() or time.sleep(60)",
            str(tmp_path)]
    interrupted = 0
    for target in range(1, 400):
        seen = 0
        at: list[int] = []

        cleaning = False

        def local(frame: object, event: str, arg: object, target: int = target,
                  at: list[int] = at) -> object:
            nonlocal seen, cleaning
            line = getattr(frame, "f_lineno", 0)
            if event != "line":
                return local
            if getattr(getattr(frame, "f_code", None), "co_name", "") == "run_process":
                # No injection from the cleanup's finally to the drain, helpers included.
                cleaning = line in skipped
            if not cleaning:
                seen += 1
                if seen == target:
                    at.append(line)
                    raise KeyboardInterrupt
            return local

        def tracer(frame: object, event: str, arg: object) -> object:
            code = getattr(frame, "f_code", None)
            return local if getattr(code, "co_filename", "") == source else None

        before = _open_descriptors()
        sys.settrace(tracer)  # type: ignore[arg-type]
        try:
            run_process(argv, cwd=tmp_path, env=default_environment(), timeout_seconds=30,
                        cancel=None, stdout_limit=100, stderr_limit=100)
        except KeyboardInterrupt:
            interrupted += 1
        else:
            break
        finally:
            sys.settrace(None)
        try:
            assert_no_leftover(tmp_path)
        except AssertionError as exc:
            raise AssertionError(f"interrupted at _process.py line {at}: {exc}") from None
        assert _open_descriptors() == before, f"a descriptor left open at line {at}"
    else:
        raise AssertionError("the launch never ended without an interrupt")
    assert interrupted >= 20  # the body was interrupted at many places, not only at the start
    assert_no_leftover(tmp_path)
