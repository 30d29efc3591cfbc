"""The main job on a real multi-process Dask cluster: ``dask scheduler`` + two ``dask worker``.

Each test starts its own cluster as a user would (the ``dask`` CLI of this
environment, loopback only, no dashboard, workers without a nanny so a
worker is one process), bounded in time, and tears it down (SIGTERM to each
process group, then SIGKILL); afterwards no process it started may be
alive. The run goes through ``open_executor(ExecutorSpec(DASK,
scheduler=...))``, the path of ``kernel run --executor dask --scheduler``,
with the real z3 -> cvc5 certifier; outcomes are compared as JSON Lines
bytes with the serial (inline) run of the same bundle.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.commands.replay import outcome_lines
from kernel.orchestrate import (
    ExecutorKind,
    ExecutorSpec,
    NoEvidence,
    open_executor,
    replay_bundle,
)
from kernel.organs import CERTIFIED_MANIFEST
from tests.orchestrate_helpers import certifier, e2e_bundle
from tests.support.processes import (
    assert_no_leftover,
    assert_no_new_descendants,
    cmdline,
    descendants,
    live_pids,
    stat,
)

pytestmark = pytest.mark.slow

DASK = Path(sys.executable).parent / "dask"
START_SECONDS = 60.0  # a loaded 2-core machine starts a scheduler and a worker in 2-10 s
STOP_SECONDS = 4.0  # then SIGKILL: a worker that ran checks often takes longer to close


def _runs_a_check(pid: int, marker: str) -> bool:
    """Whether a live child of ``pid`` is a producer/checker launch naming ``marker``."""
    return any(
        info.parent == pid and marker.encode() in cmdline(child)
        for child, info in live_pids().items()
    )


def _alive(pid: int) -> bool:
    return (info := stat(pid)) is not None and info.alive


class Cluster:
    """A scheduler and two single-threaded workers, each its own process (and group)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scheduler_file = root / "scheduler.json"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, *argv: str, name: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(DASK), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
            start_new_session=True,  # its own group: torn down as a whole
        )
        log.close()
        self.processes.append(process)
        return process

    def start(self) -> str:
        self._spawn(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
            "--scheduler-file", str(self.scheduler_file), name="scheduler",
        )
        deadline = time.monotonic() + START_SECONDS
        while not self.scheduler_file.is_file() or not self.scheduler_file.stat().st_size:
            assert time.monotonic() < deadline, "the scheduler did not start"
            assert self.processes[0].poll() is None, self.log("scheduler")
            time.sleep(0.1)
        address = json.loads(self.scheduler_file.read_text())["address"]
        assert isinstance(address, str) and address.startswith("tcp://127.0.0.1:")
        for index in range(2):
            self.workers.append(
                self._spawn(
                    "worker", "--scheduler-file", str(self.scheduler_file),
                    "--nthreads", "1", "--no-nanny", "--no-dashboard",
                    "--host", "127.0.0.1", "--name", f"w{index}",
                    "--local-directory", str(self.root / f"w{index}"),
                    "--death-timeout", str(int(START_SECONDS)),
                    name=f"worker-{index}",
                )
            )
        self._wait_for_workers(address, 2, deadline)
        return address

    def _wait_for_workers(self, address: str, count: int, deadline: float) -> None:
        from distributed import Client

        with Client(  # type: ignore[no-untyped-call]
            address, timeout=START_SECONDS, set_as_default=False
        ) as client:
            client.wait_for_workers(count, timeout=max(1.0, deadline - time.monotonic()))

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first, then the scheduler
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    before = descendants()
    root = tmp_path / "cluster"
    root.mkdir()
    running = Cluster(root)
    try:
        yield running, running.start()
    finally:
        running.stop()
    assert_no_leftover(tmp_path)  # nothing that names this test's directory
    assert_no_new_descendants(before)  # scheduler, workers and every check they ran
    for process in running.processes:
        assert not _alive(process.pid)


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    work = tmp_path_factory.mktemp("serial") / "work"
    return outcome_lines(replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, certifier(work)))


@pytest.fixture(scope="module")
def no_evidence() -> bytes:
    return outcome_lines(replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, NoEvidence()))


def _dispositions(data: bytes) -> list[str]:
    return [json.loads(line)["replay_disposition"] for line in data.splitlines()]


def test_a_real_dask_cluster_gives_the_serial_bytes(
    tmp_path: Path, serial: bytes, cluster: tuple[Cluster, str]
) -> None:
    _, address = cluster
    with open_executor(ExecutorSpec(ExecutorKind.DASK, scheduler=address)) as executor:
        outcomes = replay_bundle(
            e2e_bundle(), CERTIFIED_MANIFEST, certifier(tmp_path / "work"), executor=executor
        )
    data = outcome_lines(outcomes)
    assert data == serial
    assert _dispositions(serial).count("contract_and_proof_closed") == 2  # real certifications


def test_a_worker_killed_mid_check_loses_no_outcome(
    tmp_path: Path, serial: bytes, no_evidence: bytes, cluster: tuple[Cluster, str]
) -> None:
    running, address = cluster
    work = tmp_path / "work"
    killed: list[int] = []

    def kill_a_busy_worker() -> None:
        """SIGKILL the first worker seen running a check (its child launched the producer)."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            for worker in running.workers:
                if worker.poll() is None and _runs_a_check(worker.pid, str(work)):
                    os.kill(worker.pid, signal.SIGKILL)
                    killed.append(worker.pid)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_busy_worker)
    with open_executor(ExecutorSpec(ExecutorKind.DASK, scheduler=address)) as executor:
        killer.start()
        provider = certifier(work)
        outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, provider, executor=executor)
    killer.join()
    assert len(killed) == 1, "no worker was seen running a check"
    data = outcome_lines(outcomes)
    got, expected, bare = (d.splitlines() for d in (data, serial, no_evidence))
    # Every attempt has its outcome, in the run's order; the attempt whose
    # check died with its worker is either re-run to the same bytes or
    # fails closed (no evidence: never a PASS it did not earn).
    assert len(got) == len(expected) == 6
    for index, line in enumerate(got):
        assert line in (expected[index], bare[index]), index
    assert [json.loads(line)["attempt_id"] for line in got] == [
        json.loads(line)["attempt_id"] for line in expected
    ]
    assert not _alive(killed[0])
    assert_no_leftover(work)  # the killed worker's producer/checker died with it
