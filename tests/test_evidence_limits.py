"""Evidence is bounded and its hash stops when asked (issue 18, finding 5): real processes.

Seen on 8c7f5ca: a producer left a 1 TB sparse artifact in ``evidence/``; the
kernel was still hashing it after 25 s and still running 10 s after SIGTERM.
Each test here runs the real command line (``kernel check run`` or ``kernel
check replay``) on a real producer and checker, and ``no_leftovers`` proves
after each one that no process naming the test's directory is still alive.

- sizes are checked before any byte is read: per artifact
  (``artifact_too_large``) and in total (``evidence_too_large``), each file
  counted by the larger of its apparent and its allocated size;
- a hash that is allowed but long stops on SIGTERM (``cancelled``, exit 1,
  as ``kernel check`` documents) within two seconds of the signal, and at the
  step's deadline (``producer_timeout``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.external import RunLimits, Status
from tests.support.cli import KERNEL_MAIN, kernel
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, PYTHON, Scenario

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leftovers")]

TERABYTE = 1 << 40
MIB = 1 << 20
# Room for a 1 TB artifact: a hash the limits allow, and that takes minutes.
ROOMY = ("--artifact-limit", str(2 * TERABYTE), "--evidence-limit", str(2 * TERABYTE))
# A sandboxed step cannot even write a 1 TB file (its file-size rlimit;
# tests/test_sandbox.py): the kernel's own bounds on what a step left, and its
# stoppable hash, are what these tests show, so they run below the sandbox.
BELOW = ("--max-containment", BELOW_SANDBOX.value)


def _sparse_producer(sizes: dict[str, int]) -> str:
    """The honest producer, then each named artifact made sparse at its size (os.truncate)."""
    return HONEST_PRODUCER + (
        f"for name, size in {sizes!r}.items():\n"
        "    os.truncate(os.path.join(evidence, name), size)\n"
    )


def _job_file(scenario: Scenario) -> Path:
    job = scenario.tmp / "job.json"
    job.write_text(json.dumps({
        "schema_version": 1, "job_id": scenario.job.job_id, "check_id": scenario.job.check_id,
        "description": scenario.job.description, "job_digest": scenario.job.job_digest,
    }))  # fmt: skip
    return job


def _start_run(scenario: Scenario, *options: str) -> subprocess.Popen[str]:
    """``kernel check run`` of the scenario's check, run id ``run-1``, in a fresh interpreter."""
    return subprocess.Popen(
        [PYTHON, "-c", KERNEL_MAIN, "check", "run", str(scenario.manifest_path), "demo",
         "--job", str(_job_file(scenario)), "--run-root", str(scenario.run_root),
         "--repo", str(scenario.repo), "--run-id", "run-1", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(process: subprocess.Popen[str], within: float, what: str) -> tuple[int, str, str]:
    """Wait for ``process`` (SIGKILL it, and fail, if it runs past ``within`` seconds)."""
    try:
        stdout, stderr = process.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError(f"kernel still running {within:g} s after {what}") from None
    return process.returncode, stdout, stderr


def _blocked(code: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The metadata of a BLOCKED outcome (exit 1, one JSON document, no traceback)."""
    assert "Traceback" not in stderr, stderr
    assert code == 1, (code, stdout, stderr)
    metadata = json.loads(stdout)["metadata"]
    assert metadata["status"] == "BLOCKED"
    assert isinstance(metadata, dict)
    return metadata


def _wait_until_hashing(process: subprocess.Popen[str], artifact: Path, within: float) -> None:
    """Until ``process`` holds ``artifact`` open (the ledger hashing it, from one descriptor)."""
    target, fds = os.path.realpath(artifact), f"/proc/{process.pid}/fd"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the kernel exited first: {process.communicate()}"
        try:
            links = [os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)]
        except OSError:  # a descriptor closed while it was listed
            links = []
        if target in links:
            return
        time.sleep(0.01)
    raise AssertionError(f"the kernel never opened {target}")


# --- sizes, checked before hashing ----------------------------------------------------


def test_a_one_terabyte_sparse_artifact_is_blocked_before_it_is_hashed(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, producer=_sparse_producer({"proof.txt": TERABYTE}))
    started = time.monotonic()
    code, stdout, stderr = _finish(_start_run(scenario, *BELOW), 60, "it started")
    elapsed = time.monotonic() - started
    metadata = _blocked(code, stdout, stderr)
    assert metadata["reason"] == "artifact_too_large", metadata["detail"]
    assert f"'proof.txt' is {TERABYTE} bytes" in metadata["detail"]
    assert "nothing was hashed" in metadata["detail"]
    assert metadata["checker"] is None and metadata["artifacts"] == []
    assert elapsed < 10.0, f"{elapsed:.1f} s for a run that reads nothing large"
    stored = json.loads((scenario.run_root / "run-1" / "metadata.json").read_bytes())
    assert stored["reason"] == "artifact_too_large"


def test_allocated_size_counts_where_the_apparent_size_is_zero(tmp_path: Path) -> None:
    # fallocate with FALLOC_FL_KEEP_SIZE: 65 MiB of blocks, st_size 0, against an
    # artifact limit of 64 MiB. (The step's file-size limit, 256 MiB, bounds an
    # allocation too where the output is a tmpfs, so the artifact limit is lowered.)
    producer = HONEST_PRODUCER + (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]\n"
        "fd = os.open(os.path.join(evidence, 'proof.txt'), os.O_RDWR | os.O_TRUNC)\n"
        f"assert libc.fallocate(fd, 1, 0, {65 * MIB}) == 0, ctypes.get_errno()\n"
    )
    scenario = Scenario(tmp_path, producer=producer)
    run = _start_run(scenario, "--artifact-limit", str(64 * MIB))
    metadata = _blocked(*_finish(run, 60, "it started"))
    assert metadata["reason"] == "artifact_too_large", metadata["detail"]
    assert "(apparent 0, allocated" in metadata["detail"]


def test_artifacts_each_allowed_but_over_the_total_are_blocked_before_any_is_hashed(
    tmp_path: Path,
) -> None:
    # Five artifacts of 255 MiB (each under 256 MiB), 1275 MiB together (over 1 GiB).
    names = [f"part-{index}.bin" for index in range(5)]
    scenario = Scenario(
        tmp_path,
        producer=_sparse_producer(dict.fromkeys(names, 255 * MIB)),
        artifacts=names,
    )
    metadata = _blocked(*_finish(_start_run(scenario), 60, "it started"))
    assert metadata["reason"] == "evidence_too_large", metadata["detail"]
    assert f"are {5 * 255 * MIB} bytes together" in metadata["detail"]
    assert metadata["checker"] is None and metadata["artifacts"] == []


def test_an_artifact_the_checker_grows_past_the_limit_is_blocked_after_it(tmp_path: Path) -> None:
    grow = (
        "import os\n"
        f"os.truncate(os.path.join(request['paths']['evidence'], 'proof.txt'), {TERABYTE})\n"
    )
    scenario = Scenario(tmp_path, checker_custom=grow)
    metadata = _blocked(*_finish(_start_run(scenario, *BELOW), 60, "it started"))
    assert metadata["reason"] == "artifact_too_large", metadata["detail"]
    assert metadata["detail"].startswith("after the checker: artifact 'proof.txt'")
    assert metadata["receipt_sha256"] is None  # an accepting receipt was written, never read


def test_replay_refuses_retained_evidence_over_the_limit_before_hashing_it(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    assert run.status is Status.PASS, run.metadata.decision.detail
    os.truncate(Path(run.attempt_dir, "evidence", "proof.txt"), TERABYTE)
    started = time.monotonic()
    done = kernel(
        "check", "replay", run.attempt_dir, "--manifest", scenario.manifest_path,
        "--repo", scenario.repo, "--replay-id", "after-growth",
    )  # fmt: skip
    elapsed = time.monotonic() - started
    metadata = _blocked(done.returncode, done.stdout, done.stderr)
    assert metadata["reason"] == "artifact_too_large", metadata["detail"]
    assert metadata["detail"].startswith("retained evidence: artifact 'proof.txt'")
    assert metadata["checker"] is None
    assert elapsed < 10.0


def test_limits_must_be_positive_integers() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="must be a positive integer"):
            RunLimits(1.0, 1.0, artifact_limit_bytes=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must be a positive integer"):
            RunLimits(1.0, 1.0, evidence_limit_bytes=bad)  # type: ignore[arg-type]
    limits = RunLimits(1.0, 1.0)
    assert (limits.artifact_limit_bytes, limits.evidence_limit_bytes) == (256 * MIB, 1024 * MIB)


def test_the_command_line_refuses_a_limit_that_is_not_positive(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    for option in ("--artifact-limit", "--evidence-limit"):
        code, stdout, stderr = _finish(_start_run(scenario, option, "0"), 60, "it started")
        assert code == 2 and stdout == "", (code, stdout, stderr)
        assert stderr.startswith("error: invalid_limits: "), stderr
    assert not scenario.run_root.exists()


# --- a long hash stops: on SIGTERM, at the deadline ------------------------------------


def test_sigterm_during_a_long_allowed_hash_ends_the_kernel_within_two_seconds(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path, producer=_sparse_producer({"proof.txt": TERABYTE}))
    process = _start_run(scenario, *ROOMY, *BELOW)
    try:
        artifact = scenario.run_root / "run-1" / "evidence" / "proof.txt"
        _wait_until_hashing(process, artifact, within=30)
        time.sleep(0.3)  # well inside the hash of 1 TB, which takes minutes
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code, stdout, stderr = _finish(process, 10, "SIGTERM")
        after_signal = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # The CLI's documented answer to SIGTERM: cancellation, BLOCKED cancelled, exit 1.
    metadata = _blocked(code, stdout, stderr)
    assert metadata["reason"] == "cancelled", metadata["detail"]
    assert "cancelled while hashing" in metadata["detail"]
    assert after_signal < 2.0, f"the kernel took {after_signal:.2f} s after SIGTERM"
    stored = json.loads((scenario.run_root / "run-1" / "metadata.json").read_bytes())
    assert stored["reason"] == "cancelled"


def test_a_hash_past_the_producers_deadline_ends_with_producer_timeout(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, producer=_sparse_producer({"proof.txt": TERABYTE}))
    started = time.monotonic()
    process = _start_run(scenario, *ROOMY, *BELOW, "--producer-timeout", "3")
    metadata = _blocked(*_finish(process, 30, "it started"))
    elapsed = time.monotonic() - started
    assert metadata["reason"] == "producer_timeout", metadata["detail"]
    assert "the deadline passed while hashing" in metadata["detail"]
    assert metadata["producer"]["status"] == "exited"  # the producer itself was on time
    assert elapsed < 3.0 + 5.0, f"{elapsed:.1f} s for a 3 s deadline"
