"""The main job on real executors: a spawn process pool and a local Dask cluster.

Every comparison is of outcome bytes (JSON Lines) against the inline run of
the same bundle with the real z3 -> cvc5 pair. One Dask ``LocalCluster``
(2 single-threaded worker processes) is shared by the module through its
executor, ``client.get_executor(pure=False)`` as ``open_executor`` builds
it; ``open_executor``'s own local cluster runs in the interrupt test and
under ``kernel run --executor dask``. Each test checks that no process it
started is left behind.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import attrs
import pytest
from distributed import Client, LocalCluster
from typer.testing import CliRunner

from kernel.cli import app
from kernel.commands.replay import outcome_lines
from kernel.orchestrate import (
    MAX_WORKERS,
    EvidenceProvider,
    ExecutorKind,
    ExecutorSetupError,
    ExecutorSpec,
    ExternalCertifier,
    NoEvidence,
    open_executor,
    replay_bundle,
)
from kernel.orchestrate._process_pool import MAX_POOL_RESTARTS, _HealingPool
from kernel.organs import CERTIFIED_MANIFEST
from kernel.replay import ContractClosed, ProofEvidence
from tests.orchestrate_helpers import E2E_BUNDLE, certifier, e2e_bundle
from tests.support.cli import kernel
from tests.support.processes import assert_no_new_descendants, descendants
from tests.support.reference import canonical

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leftovers")]

runner = CliRunner()
CLOSED = (0, 2, 3)  # e2e attempts whose contract closes under certified.v1
PROCESS = ExecutorSpec(ExecutorKind.PROCESS, workers=2)


_SHARED_CLUSTERS: list[LocalCluster] = []


def _shared_worker_pids() -> frozenset[int]:
    pids = (nanny.pid for cluster in _SHARED_CLUSTERS for nanny in cluster.workers.values())
    return frozenset(pid for pid in pids if isinstance(pid, int))


@pytest.fixture(autouse=True)
def _no_new_workers() -> Iterator[None]:
    # Runs its check after no_leftovers' (no producer or checker: their argv
    # names tmp_path): no pool or Dask worker of this test is left either.
    before = descendants()
    yield
    assert_no_new_descendants(before, exempt=_shared_worker_pids)


@pytest.fixture(scope="module")
def dask_pool() -> Iterator[Executor]:
    before = descendants()
    with LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
        silence_logs=logging.CRITICAL,
    ) as cluster, Client(cluster, set_as_default=False) as client:  # type: ignore[no-untyped-call]
        _SHARED_CLUSTERS.append(cluster)
        executor = client.get_executor(pure=False)
        yield executor
        executor.shutdown(wait=True)
    _SHARED_CLUSTERS.remove(cluster)
    assert_no_new_descendants(before)  # scheduler and nannies in-process; workers gone


@pytest.fixture(scope="module")
def scheduler_address(dask_pool: Executor) -> str:
    """The shared cluster's scheduler, as a user would pass it to ``--scheduler``."""
    address = _SHARED_CLUSTERS[0].scheduler_address
    assert isinstance(address, str) and address.startswith("tcp://127.0.0.1:")
    return address


@pytest.fixture(scope="module")
def inline(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    work = tmp_path_factory.mktemp("inline") / "work"
    return outcome_lines(replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, certifier(work)))


@pytest.fixture(scope="module")
def no_evidence() -> bytes:
    return outcome_lines(replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, NoEvidence()))


def _envelopes(data: bytes) -> bytes:
    """The CLI's outcome lines for bare outcome lines, built here independently."""
    ids = [a.attempt_id for a in e2e_bundle().chain.run.candidate_attempts]
    return b"".join(
        canonical({"attempt_id": ids[index], "attempt_index": index,
                   "outcome": json.loads(line)}) + b"\n"
        for index, line in enumerate(data.splitlines())
    )


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _dispositions(data: bytes) -> list[str]:
    return [json.loads(line)["replay_disposition"] for line in data.splitlines()]


def _run(executor: Executor | None, provider: EvidenceProvider) -> bytes:
    outcomes = replay_bundle(e2e_bundle(), CERTIFIED_MANIFEST, provider, executor=executor)
    return outcome_lines(outcomes)


def _index(state: ContractClosed) -> int:
    return state.validated.request.replay_input.attempt_index


# --- byte identity ------------------------------------------------------------------


def test_a_process_pool_gives_the_inline_bytes(tmp_path: Path, inline: bytes) -> None:
    with open_executor(PROCESS) as pool:
        data = _run(pool, certifier(tmp_path / "work"))
    assert data == inline
    assert len(list((tmp_path / "work").iterdir())) == len(CLOSED)


def test_a_dask_cluster_gives_the_inline_bytes(
    tmp_path: Path, inline: bytes, dask_pool: Executor
) -> None:
    data = _run(dask_pool, certifier(tmp_path / "work"))
    assert data == inline
    assert _dispositions(data)[0] == "contract_and_proof_closed"
    assert len(list((tmp_path / "work").iterdir())) == len(CLOSED)


def test_a_scheduler_address_gives_the_inline_bytes(
    tmp_path: Path, inline: bytes, scheduler_address: str
) -> None:
    with open_executor(ExecutorSpec(ExecutorKind.DASK, scheduler=scheduler_address)) as pool:
        data = _run(pool, certifier(tmp_path / "work"))
    assert data == inline


@attrs.frozen
class _LateFirst:
    """Certifies for real; the first attempt finishes only after another has.

    A barrier on the marks directory, not a sleep: the order is forced however
    loaded the machine is (the bound only keeps a broken pool from hanging).
    """

    inner: ExternalCertifier
    marks: Path

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        index = _index(state)
        if index == 0:
            give_up = time.monotonic() + 120.0
            while not any(self.marks.iterdir()) and time.monotonic() < give_up:
                time.sleep(0.02)
        evidence = self.inner.gather(state)
        (self.marks / str(index)).write_text(str(time.time_ns()))
        return evidence


def _finish_order(marks: Path) -> list[int]:
    stamps = {int(p.name): int(p.read_text()) for p in marks.iterdir()}
    return sorted(stamps, key=stamps.__getitem__)


@pytest.mark.parametrize("where", ["process", "dask"])
def test_attempts_that_finish_out_of_order_give_the_inline_bytes(
    tmp_path: Path, inline: bytes, dask_pool: Executor, where: str
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    provider = _LateFirst(certifier(tmp_path / "work"), marks)
    if where == "dask":
        data = _run(dask_pool, provider)
    else:
        with open_executor(ExecutorSpec(ExecutorKind.PROCESS, workers=3)) as pool:
            data = _run(pool, provider)
    order = _finish_order(marks)
    assert sorted(order) == list(CLOSED) and order != list(CLOSED)
    assert order[0] != 0  # the first attempt finished after a later one
    assert data == inline


# --- nothing is lost ----------------------------------------------------------------


@attrs.frozen
class _KillsItsWorker:
    """Certifies for real, except one attempt, which kills the process it runs in.

    With ``marks``, the victim first waits until the other attempts are done
    (so that what is lost is exactly the victim, however often it is retried).
    """

    inner: ExternalCertifier
    victim: int
    marks: Path | None = None
    once: Path | None = None  # kill only while this file is absent (it is created first)

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        if self.once is not None and _index(state) == self.victim:
            if self.once.exists():
                return self.inner.gather(state)
            self.once.write_text("")
        if _index(state) != self.victim:
            evidence = self.inner.gather(state)
            if self.marks is not None:
                (self.marks / str(_index(state))).write_text("")
            return evidence
        if self.marks is not None:
            deadline = time.monotonic() + 30
            while len(list(self.marks.iterdir())) < len(CLOSED) - 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.5)  # and their results reached the caller
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def test_a_killed_dask_worker_leaves_its_attempt_unclosed_and_the_rest_intact(
    tmp_path: Path,
    inline: bytes,
    no_evidence: bytes,
    dask_pool: Executor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    provider = _KillsItsWorker(certifier(tmp_path / "work"), victim=0, marks=marks)
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        data = _run(dask_pool, provider)
    got, closed, bare = _lines(data), _lines(inline), _lines(no_evidence)
    assert len(got) == len(closed) == 6
    assert got[0] == bare[0]  # no evidence: proof_unavailable, never PASS
    assert _dispositions(inline)[0] == "contract_and_proof_closed"
    assert _dispositions(data)[0] == "contract_closed_but_proof_refused"
    assert got[1:] == closed[1:]
    notes = [r.getMessage() for r in caplog.records if r.name == "kernel.orchestrate"]
    assert len(notes) == 1 and "evidence task failed KilledWorker" in notes[0]


def test_a_killed_pool_worker_never_loses_or_closes_an_attempt(
    tmp_path: Path, inline: bytes, no_evidence: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), open_executor(
        PROCESS
    ) as pool:
        data = _run(pool, _KillsItsWorker(certifier(tmp_path / "work"), victim=0))
    got, closed, bare = _lines(data), _lines(inline), _lines(no_evidence)
    assert len(got) == 6
    assert got[0] == bare[0] and _dispositions(data)[0] != "contract_and_proof_closed"
    # A dead worker breaks the whole pool: attempts still in flight in it get
    # no evidence too. Each line is the certified one or the no-evidence one.
    for index, line in enumerate(got):
        assert line in (closed[index], bare[index]), index
    assert "evidence task failed BrokenProcessPool" in caplog.text


def test_a_pool_worker_killed_before_its_certification_began_loses_nothing(
    tmp_path: Path, inline: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # One worker: the victim (the first closed attempt) kills it while the
    # other certifications wait in the queue. A ProcessPoolExecutor is then
    # broken for good: every queued certification failed with it and every
    # later one was refused, so one killed worker cost the rest of the run.
    # Now the pool is started afresh and each task it failed is submitted
    # once more; the victim had written nothing, so its re-run certifies too.
    provider = _KillsItsWorker(certifier(tmp_path / "work"), victim=0, once=tmp_path / "killed")
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), open_executor(
        ExecutorSpec(ExecutorKind.PROCESS, workers=1)
    ) as pool:
        data = _run(pool, provider)
        assert isinstance(pool, _HealingPool) and pool.restarts == 1
    assert (tmp_path / "killed").exists()  # the worker was killed
    assert data == inline
    assert "a certification worker died; a fresh pool of 1 worker(s) takes over" in caplog.text
    assert "evidence task failed" not in caplog.text


def test_a_worker_that_dies_whenever_its_task_runs_costs_at_most_max_restarts_pools(
    tmp_path: Path, inline: bytes, no_evidence: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # The victim kills every pool it runs in, also when submitted again: it
    # is sent once more, never again, and past MAX_POOL_RESTARTS the pool
    # stays broken (every later task: no evidence), so a run never loops.
    marks = tmp_path / "marks"
    marks.mkdir()
    provider = _KillsItsWorker(certifier(tmp_path / "work"), victim=0, marks=marks)
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), open_executor(
        PROCESS
    ) as pool:
        data = _run(pool, provider)
        assert isinstance(pool, _HealingPool) and 1 <= pool.restarts <= MAX_POOL_RESTARTS
    got, closed, bare = _lines(data), _lines(inline), _lines(no_evidence)
    assert got[0] == bare[0] and _dispositions(data)[0] == "contract_closed_but_proof_refused"
    assert got[1:] == closed[1:]  # the others were done before the victim ran
    assert "evidence task failed BrokenProcessPool" in caplog.text


def _mark_and_wait(marks: Path, name: str, seconds: float) -> str:
    # Whole or absent (a rename): the test read the mark between its creation and
    # its write once, an empty pid (round 5 of the interrupts loop).
    (marks / f".{name}").write_text(str(os.getpid()))
    (marks / f".{name}").rename(marks / name)
    time.sleep(seconds)
    return name


def test_a_pool_worker_stopped_by_sigterm_begins_no_further_task(tmp_path: Path) -> None:
    # The pool's worker loop caught the SystemExit that SIGTERM raises in a
    # task, sent it back as the task's result and began the next queued task:
    # after another worker's death (the pool SIGTERMs the rest), the next
    # certification was begun there and its attempt directory used, so its
    # second run found it taken (3 of 12 lost, not 2; seen in CI).
    with open_executor(ExecutorSpec(ExecutorKind.PROCESS, workers=1)) as pool:
        assert pool is not None
        first = pool.submit(_mark_and_wait, tmp_path, "first", 60.0)
        second = pool.submit(_mark_and_wait, tmp_path, "second", 0.0)
        deadline = time.monotonic() + 60
        while not (tmp_path / "first").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(int((tmp_path / "first").read_text()), signal.SIGTERM)
        done, _ = futures.wait((first, second), timeout=60)
        assert done == {first, second}
    assert isinstance(first.exception(), BrokenProcessPool)
    assert isinstance(second.exception(), BrokenProcessPool)
    assert not (tmp_path / "second").exists()


@attrs.frozen
class _Unpicklable:
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        raise AssertionError("never runs: the task cannot be shipped")


@pytest.mark.parametrize("where", ["process", "dask"])
def test_a_task_that_cannot_be_pickled_is_no_evidence_for_every_attempt(
    no_evidence: bytes, dask_pool: Executor, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"):
        if where == "dask":
            data = _run(dask_pool, _Unpicklable())
        else:
            with open_executor(PROCESS) as pool:
                data = _run(pool, _Unpicklable())
    assert data == no_evidence
    notes = [r.getMessage() for r in caplog.records if r.name == "kernel.orchestrate"]
    assert len(notes) == len(CLOSED)
    assert all("evidence task" in note for note in notes)


@attrs.frozen
class _RaisesLate:
    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        time.sleep({0: 0.8, 2: 0.4}.get(_index(state), 0.0))
        raise OSError(f"disk on fire at {_index(state)}")


def test_worker_notes_come_back_to_the_caller_in_canonical_order(
    no_evidence: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    spec = ExecutorSpec(ExecutorKind.PROCESS, workers=3)
    with caplog.at_level(logging.WARNING, logger="kernel.orchestrate"), open_executor(
        spec
    ) as pool:
        data = _run(pool, _RaisesLate())
    assert data == no_evidence
    notes = [r.getMessage() for r in caplog.records if r.name == "kernel.orchestrate"]
    assert [re.findall(r"disk on fire at (\d)", n) for n in notes] == [["0"], ["2"], ["3"]]


# --- the factory: refusals and clean shutdown ----------------------------------------


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        (ExecutorSpec(ExecutorKind.PROCESS, workers=0), "invalid_worker_count"),
        (ExecutorSpec(ExecutorKind.PROCESS, workers=MAX_WORKERS + 1), "invalid_worker_count"),
        (ExecutorSpec(ExecutorKind.PROCESS, workers=None), "invalid_worker_count"),
        (ExecutorSpec(ExecutorKind.PROCESS, workers=True), "invalid_worker_count"),
        (ExecutorSpec(ExecutorKind.INLINE, workers=2), "option_conflict"),
        (ExecutorSpec(ExecutorKind.PROCESS, workers=2, scheduler="tcp://h:1"), "option_conflict"),
        (ExecutorSpec(ExecutorKind.DASK, workers=2, scheduler="tcp://h:1"), "option_conflict"),
        (ExecutorSpec(ExecutorKind.DASK, scheduler="nonsense"), "scheduler_unreachable"),
    ],
)
def test_a_spec_that_cannot_be_opened_is_a_typed_error(spec: ExecutorSpec, code: str) -> None:
    with pytest.raises(ExecutorSetupError) as caught, open_executor(spec):
        pytest.fail("opened")
    assert caught.value.code == code


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def test_an_unreachable_scheduler_is_refused_within_the_connect_timeout() -> None:
    spec = ExecutorSpec(ExecutorKind.DASK, scheduler=_closed_port(), connect_seconds=0.5)
    start = time.monotonic()
    with pytest.raises(ExecutorSetupError) as caught, open_executor(spec):
        pytest.fail("connected")
    assert caught.value.code == "scheduler_unreachable"
    assert time.monotonic() - start < 5


def test_inline_is_no_executor() -> None:
    with open_executor(ExecutorSpec(ExecutorKind.INLINE)) as executor:
        assert executor is None


def _mark_then_sleep(path: Path, seconds: float) -> None:
    path.write_text("")
    time.sleep(seconds)


@pytest.mark.parametrize(
    "spec",
    [ExecutorSpec(ExecutorKind.PROCESS, workers=2), ExecutorSpec(ExecutorKind.DASK, workers=1)],
    ids=["process", "dask"],
)
def test_an_interrupt_closes_the_executor_promptly_and_leaves_no_process(
    tmp_path: Path, spec: ExecutorSpec
) -> None:
    before = descendants()
    started = tmp_path / "started"
    with pytest.raises(KeyboardInterrupt), open_executor(spec) as executor:
        assert executor is not None
        executor.submit(_mark_then_sleep, started, 60.0)
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists()
        interrupted = time.monotonic()
        raise KeyboardInterrupt
    assert time.monotonic() - interrupted < 15  # not the 60 s of the running task
    assert_no_new_descendants(before)


# --- the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [("--executor", "process", "--workers", "2"), ("--executor", "dask", "--workers", "2")],
    ids=["process", "dask"],
)
def test_kernel_run_on_an_executor_writes_the_inline_bytes(
    tmp_path: Path, inline: bytes, options: tuple[str, ...]
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = kernel("run", E2E_BUNDLE, "--work-dir", tmp_path / "work", "--out", out, *options)
    assert done.returncode == 3, done.stderr  # the bundle's tampered attempt: integrity
    assert "Traceback" not in done.stderr and "note:" not in done.stderr
    assert out.read_bytes() == _envelopes(inline)


def test_kernel_run_on_a_running_scheduler_writes_the_inline_bytes(
    tmp_path: Path, inline: bytes, scheduler_address: str
) -> None:
    out = tmp_path / "outcomes.jsonl"
    done = kernel(
        "run", E2E_BUNDLE, "--work-dir", tmp_path / "work", "--out", out, "--quiet",
        "--executor", "dask", "--scheduler", scheduler_address,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the bundle's tampered attempt: integrity
    assert done.stderr == ""
    assert out.read_bytes() == _envelopes(inline)


@pytest.mark.parametrize(
    ("options", "code"),
    [
        (["--workers", "0"], "invalid_worker_count"),
        (["--executor", "process", "--workers", "-3"], "invalid_worker_count"),
        (["--executor", "process", "--workers", "two"], "invalid_worker_count"),
        (["--executor", "process", "--workers", str(MAX_WORKERS + 1)], "invalid_worker_count"),
        (["--executor", "threads"], "unknown_executor"),
        # (--workers 2 alone means a process pool, as for kernel replay: issue 35, item 8)
        (["--executor", "inline", "--workers", "2"], "option_conflict"),
        (["--executor", "process", "--scheduler", "tcp://h:1"], "option_conflict"),
        (["--executor", "dask", "--scheduler", "tcp://h:1", "--workers", "2"], "option_conflict"),
        (["--executor", "dask", "--scheduler", "nonsense"], "scheduler_unreachable"),
        (["--executor", "dask", "--connect-timeout", "0"], "invalid_connect_timeout"),
    ],
)
def test_bad_executor_options_are_one_line_with_exit_2(
    tmp_path: Path, options: list[str], code: str
) -> None:
    out = tmp_path / "o.jsonl"
    args = ["run", str(E2E_BUNDLE), "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    result = runner.invoke(app, args + options)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {code}: ") and result.stderr.count("\n") == 1
    assert not out.exists() and not (tmp_path / "work").exists()


def test_kernel_run_refuses_an_unreachable_scheduler_before_anything_runs(
    tmp_path: Path,
) -> None:
    options = ["--executor", "dask", "--scheduler", _closed_port(), "--connect-timeout", "0.5"]
    args = ["run", str(E2E_BUNDLE), "--work-dir", str(tmp_path / "work"), *options]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: scheduler_unreachable: tcp://127.0.0.1:")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "work").exists()


def test_help_names_each_executor_its_defaults_and_byte_identity() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for phrase in (
        "--executor",
        "inline (default)",
        "process runs them on a pool of --workers local processes",
        "dask runs them on Dask distributed",
        "--scheduler ADDRESS",
        "--workers defaults to the number of CPUs available",
        "the output bytes do not depend on the executor, the worker count or the shard size",
        "unreachable scheduler",
    ):
        assert phrase in text, phrase
