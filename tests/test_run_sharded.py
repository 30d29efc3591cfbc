"""``kernel run --executor process|dask``: its pure steps in shards on the workers (issue 22).

Every run here is real: real z3 -> cvc5 certifications, a real spawn pool, a
real local Dask cluster. The outcome files of inline, ``--workers 2`` and
Dask are compared byte for byte (``cmp``'s strictness) on bundles that hold
refused, contract-refused, certified and tampered attempts, also when a
shard worker is killed, and after an interrupted run is resumed. A counting
test shows where the pure steps ran: never in the calling process of a
sharded run. Bundles are small (a certification costs about a second here):
shards are made smaller still (``--shard-size``) so that they cross many.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernel.replay._facts as facts_module
import kernel.replay._machine as machine
from kernel.cli import app
from tests.orchestrate_helpers import repeating_bundle_run
from tests.support.cli import KERNEL_MAIN
from tests.support.processes import (
    assert_no_new_descendants,
    cmdline,
    communicate_while_killing,
    descendants,
)

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "examples" / "e2e" / "bundle.json"  # refused, contract-refused, certified, tampered
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
STREAM_ATTEMPTS = 12


def _kernel(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, timeout=timeout, check=False)


def _stream(directory: Path, attempts: int) -> Path:
    """A certified.v1 bundle stream: the draft's four candidates in turn (two certify)."""
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    shipped = [json.dumps(c, sort_keys=True) for c in doc.pop("candidates")]
    draft = directory / f"draft-{attempts}.jsonl"
    with draft.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "replay-kernel.draft-stream.v1", "header": doc}) + "\n")
        for i in range(attempts):
            out.write(shipped[i % len(shipped)] + "\n")
    bundle = directory / f"bundle-{attempts}.jsonl"
    done = _kernel("bundle", draft, "--layout", "stream", "--manifest", "certified.v1",
                   "-o", bundle)
    assert done.returncode == 0, done.stderr
    return bundle


def _run(bundle: Path, work: Path, out: Path, *options: str) -> subprocess.CompletedProcess[bytes]:
    return _kernel("run", bundle, "--work-dir", work, "-q", "-o", out, *options)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _stream(tmp_path_factory.mktemp("bundles"), STREAM_ATTEMPTS)


@pytest.fixture(scope="module")
def inline(tmp_path_factory: pytest.TempPathFactory, stream: Path) -> dict[str, tuple[int, bytes]]:
    """Exit code and outcome bytes of the inline run, per bundle (the reference)."""
    directory = tmp_path_factory.mktemp("inline")
    found = {}
    for name, bundle in (("e2e", E2E), ("stream", stream)):
        out = directory / f"{name}.jsonl"
        done = _run(bundle, directory / f"work-{name}", out)
        assert done.returncode in (0, 3), done.stderr
        found[name] = (done.returncode, out.read_bytes())
    e2e = [json.loads(line)["outcome"] for line in found["e2e"][1].splitlines()]
    dispositions = {o["replay_disposition"] for o in e2e}
    # The reference holds every kind this file is about.
    assert {"contract_refused", "contract_and_proof_closed", "candidate_identity_mismatch",
            "unsupported_replay_policy"} <= dispositions, dispositions
    assert found["e2e"][0] == 3  # the tampered attempt
    closed = [json.loads(line)["outcome"]["replay_disposition"]
              for line in found["stream"][1].splitlines()]
    assert closed.count("contract_and_proof_closed") == STREAM_ATTEMPTS // 2, closed
    return found


@pytest.fixture
def no_leftover_workers() -> Iterator[None]:
    before = descendants()
    yield
    assert_no_new_descendants(before)


# --- byte identity ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
@pytest.mark.parametrize("options", [
    ("--executor", "process", "--workers", "2", "--shard-size", "1"),
    ("--executor", "process", "--workers", "2", "--shard-size", "5"),
    ("--executor", "dask", "--workers", "2", "--shard-size", "2"),
], ids=["process-1", "process-5", "dask-2"])
def test_the_outcome_files_of_inline_process_and_dask_are_equal(
    tmp_path: Path, stream: Path, inline: dict[str, tuple[int, bytes]], options: tuple[str, ...]
) -> None:
    for name, bundle in (("e2e", E2E), ("stream", stream)):
        out = tmp_path / f"{name}.jsonl"
        done = _run(bundle, tmp_path / f"work-{name}", out, *options)
        code, expected = inline[name]
        assert done.returncode == code, done.stderr
        assert out.read_bytes() == expected, name
        assert (tmp_path / f"work-{name}" / "outcomes.jsonl").read_bytes() == expected
        audited = _kernel("audit", tmp_path / f"work-{name}")
        assert audited.returncode == 0, audited.stdout + audited.stderr


def _counting_in(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[object]:
    """Calls of ``module.name`` made in this process, by their first argument."""
    calls: list[object] = []
    real: Callable[..., object] = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[object]:
    return _counting_in(monkeypatch, machine, name)


@pytest.mark.usefixtures("no_leftover_workers")
def test_a_sharded_run_never_runs_the_pure_steps_in_the_calling_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline: dict[str, tuple[int, bytes]]
) -> None:
    runner = CliRunner()
    contracts = _counting(monkeypatch, "replay_contract")
    proofs = _counting(monkeypatch, "replay_proofs")
    # The counters see this process's calls: inline, every attempt's pure steps are here.
    out = tmp_path / "inline.jsonl"
    done = runner.invoke(app, ["run", str(E2E), "--work-dir", str(tmp_path / "a"),
                               "-q", "-o", str(out)])
    assert done.exit_code == 3, done.output
    assert out.read_bytes() == inline["e2e"][1]
    lines = inline["e2e"][1].splitlines()
    refused = sum(json.loads(line)["outcome"].get("replay_result_id") is None for line in lines)
    assert len(contracts) == len(lines) - refused and len(proofs) >= 1
    contracts.clear()
    proofs.clear()
    # Sharded: the workers (spawned interpreters, uncounted) run them all.
    out = tmp_path / "sharded.jsonl"
    done = runner.invoke(app, ["run", str(E2E), "--work-dir", str(tmp_path / "b"), "-q",
                               "-o", str(out), "--executor", "process", "--workers", "2",
                               "--shard-size", "2"])
    assert done.exit_code == 3, done.output
    assert out.read_bytes() == inline["e2e"][1]
    assert contracts == [] and proofs == []


def test_an_inline_run_examines_its_run_once_not_once_per_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 20 contract-refused attempts (the draft's second candidate): nothing to certify.
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    doc["candidates"] = [doc["candidates"][1]] * 20
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(doc), encoding="utf-8")
    bundle = tmp_path / "bundle.json"
    runner = CliRunner()
    made = runner.invoke(app, ["bundle", str(draft), "--manifest", "certified.v1",
                               "-o", str(bundle)])
    assert made.exit_code == 0, made.output
    examined = _counting_in(monkeypatch, facts_module, "examine_run")
    out = tmp_path / "outcomes.jsonl"
    done = runner.invoke(app, ["run", str(bundle), "--work-dir", str(tmp_path / "w"), "-q",
                               "-o", str(out)])
    assert done.exit_code == 0, done.output
    dispositions = [json.loads(line)["outcome"]["replay_disposition"]
                    for line in out.read_bytes().splitlines()]
    assert dispositions == ["contract_refused"] * 20
    # ADR 0011: O(run + n). Examined once per attempt, a run of n cost O(n^2).
    assert len(examined) == 1


# --- faults -----------------------------------------------------------------------------


_TWO_WORKERS = ("--executor", "process", "--workers", "2")


def _started(bundle: Path, work: Path, *options: str | Path) -> subprocess.Popen[bytes]:
    """``kernel run BUNDLE --work-dir WORK OPTIONS...``, started (stdout and stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-c", KERNEL_MAIN, "run", str(bundle), "--work-dir", str(work),
         *map(str, options)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _start_time(pid: int) -> int:
    """A process's start time (clock ticks since boot: /proc/PID/stat field 22)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def _spawned(pid: int) -> list[int]:
    """The command's spawn-pool workers, oldest first."""
    found = []
    for child in descendants(pid):
        with contextlib.suppress(OSError, ValueError):
            if b"spawn_main" in cmdline(child):
                found.append((_start_time(child), child))
    return [child for _, child in sorted(found)]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
def test_a_shard_worker_killed_mid_run_loses_and_duplicates_no_outcome(
    tmp_path: Path, stream: Path, inline: dict[str, tuple[int, bytes]]
) -> None:
    work, out = tmp_path / "work", tmp_path / "outcomes.jsonl"
    process = _started(stream, work, "-o", out, *_TWO_WORKERS, "--shard-size", "1")
    deadline = time.monotonic() + 300
    # The shard pool starts its two workers before any certification is submitted:
    # they are the two oldest; the certification pool's come later.
    while _lines(work / "outcomes.jsonl") < 1 or len(workers := _spawned(process.pid)) < 3:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    os.kill(workers[0], signal.SIGKILL)
    _, stderr = process.communicate(timeout=600)
    code, expected = inline["stream"]
    assert process.returncode == code, stderr
    assert out.read_bytes() == expected  # each attempt once, in order, the inline bytes
    assert b"note: a worker process died; the shards it had not returned were run again" in stderr


@pytest.mark.usefixtures("no_leftover_workers")
def test_shard_workers_that_keep_dying_fail_closed_with_worker_lost(
    tmp_path: Path, stream: Path
) -> None:
    work, out = tmp_path / "work", tmp_path / "outcomes.jsonl"
    process = _started(stream, work, "-q", "-o", out, *_TWO_WORKERS, "--shard-size", "1")
    stderr = communicate_while_killing(process, lambda: _spawned(process.pid))
    assert process.returncode == 2, stderr
    assert stderr.startswith(b"error: worker_lost: a worker process died 4 times"), stderr
    assert b"continue with --resume --work-dir" in stderr
    assert b"Traceback" not in stderr
    assert not out.exists()
    recorded = (work / "outcomes.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["attempt_index"] for line in recorded] == list(range(len(recorded)))


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
def test_a_resumed_interrupted_sharded_run_gives_the_uninterrupted_bytes(
    tmp_path: Path, stream: Path, inline: dict[str, tuple[int, bytes]]
) -> None:
    work = tmp_path / "work"
    options = (*_TWO_WORKERS, "--shard-size", "1")
    process = _started(stream, work, "-q", *options)
    deadline = time.monotonic() + 300
    while _lines(work / "outcomes.jsonl") < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - sent < 15
    assert process.returncode == 130, stderr
    assert b"Traceback" not in stderr
    recorded = _lines(work / "outcomes.jsonl")
    assert 2 <= recorded < STREAM_ATTEMPTS
    assert json.loads((work / "INTERRUPTED").read_text())["outcomes_recorded"] == recorded
    out = tmp_path / "outcomes.jsonl"
    resumed = _run(stream, work, out, "--resume", *options)
    code, expected = inline["stream"]
    assert resumed.returncode == code, resumed.stderr
    assert out.read_bytes() == expected
    assert (work / "outcomes.jsonl").read_bytes() == expected
    audited = _kernel("audit", work)
    assert audited.returncode == 0, audited.stdout + audited.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
def test_a_certification_worker_killed_mid_run_costs_only_what_it_was_certifying(
    tmp_path: Path,
) -> None:
    # A ProcessPoolExecutor is broken for good once a worker dies: every
    # certification queued in it, and every later one, got no evidence (24
    # of 30 attempts of one run, by hand). The kernel's pool is started
    # afresh and the tasks it failed are sent again: only the certifications
    # running at the kill (at most --workers) fail closed, as unavailable.
    bundle, expected = repeating_bundle_run(tmp_path, tuple(range(12)))
    work, out = tmp_path / "work", tmp_path / "outcomes.jsonl"
    process = _started(bundle, work, "-o", out, *_TWO_WORKERS, "--shard-size", "12")
    deadline = time.monotonic() + 300
    victim = None
    while victim is None:  # a certification worker (not one of the two shard workers) at work
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        victim = next((w for w in _spawned(process.pid)[2:] if descendants(w)), None)
        time.sleep(0.02)
    os.kill(victim, signal.SIGKILL)
    _, stderr = process.communicate(timeout=600)
    got, want = out.read_bytes().splitlines(), expected.splitlines()
    assert len(got) == len(want) == 12
    lost = [i for i in range(12) if got[i] != want[i]]
    assert 1 <= len(lost) <= 2, (lost, stderr)  # what was running when the worker died
    for i in lost:
        assert "target_certified=unavailable" in json.loads(got[i])["outcome"]["explanation"]
    assert process.returncode == 1, stderr  # unavailable is unclassified: the run fails
    assert b"a certification worker died; a fresh pool of 2 worker(s) takes over" in stderr
    # Only the broken pool was stopped: the shard workers, started after it, kept working.
    assert b"note: a worker process died" not in stderr
    assert b"Traceback" not in stderr


def _finished_certifications(work: Path) -> dict[str, tuple[int, bytes]]:
    """Each attempt directory holding its certification.json: its inode and run metadata."""
    found = {}
    for entry in work.iterdir() if work.is_dir() else ():
        metadata = entry / "run" / "metadata.json"
        if (entry / "certification.json").is_file() and metadata.is_file():
            found[entry.name] = (entry.stat().st_ino, metadata.read_bytes())
    return found


@pytest.mark.slow
@pytest.mark.usefixtures("no_leftover_workers")
def test_an_interrupt_mid_shard_keeps_the_certifications_that_completed(
    tmp_path: Path,
) -> None:
    # Issue 35, item 7: "SIGINTs 2-7 s into a 12 s run recorded 0 of 60 attempts:
    # the first shard of 50 is lost and redone." A shard's outcome lines wait for
    # its slowest certification, but each certification that completed is home
    # (ADR 0022) and --resume derives it again instead of running it twice.
    bundle, expected = repeating_bundle_run(tmp_path, tuple(range(12)))
    work = tmp_path / "work"
    process = _started(bundle, work, "-q", *_TWO_WORKERS, "--shard-size", "12")
    deadline = time.monotonic() + 300
    while len(_finished_certifications(work)) < 3:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert _lines(work / "outcomes.jsonl") == 0, "the single shard was not written"
    finished = _finished_certifications(work)
    assert 3 <= len(finished) < 12, finished.keys()
    resumed = _kernel("run", bundle, "--work-dir", work, "--resume")  # the table, to stdout
    assert resumed.returncode == 0, resumed.stderr
    assert (work / "outcomes.jsonl").read_bytes() == expected
    # Not run again: the same directory, the same run record, byte for byte.
    assert _finished_certifications(work).items() >= finished.items()
    summary = resumed.stdout.decode()
    assert f"{len(finished)} kept from the interrupted run" in summary, summary
    assert f"certifications: {12 - len(finished)} run" in summary, summary
    audited = _kernel("audit", work)
    assert audited.returncode == 0, audited.stdout + audited.stderr


@pytest.mark.slow
def test_a_forged_certification_left_by_an_interrupt_is_run_again_not_kept(
    tmp_path: Path,
) -> None:
    # Whoever writes the run store between the interrupt and --resume: an attempt
    # directory left with a verified-looking certification that does not derive
    # from its own run's records is removed and certified afresh, never kept.
    bundle, expected = repeating_bundle_run(tmp_path, tuple(range(4)))
    work = tmp_path / "work"
    process = _started(bundle, work, "-q", *_TWO_WORKERS, "--shard-size", "4")
    deadline = time.monotonic() + 300
    while not _finished_certifications(work):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    finished = _finished_certifications(work)
    victim = sorted(finished)[0]
    # The evidence the checker judged, edited: its digest in the run's records no longer holds.
    artifact = work / victim / "run" / "evidence" / "target_certified.smt2"
    artifact.write_bytes(artifact.read_bytes() + b"\n; edited after the interrupt\n")
    resumed = _kernel("run", bundle, "--work-dir", work, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert (work / "outcomes.jsonl").read_bytes() == expected
    notes, summary = resumed.stderr.decode(), resumed.stdout.decode()
    assert (f"attempt {victim[:16]}: the certification the interrupted run left is not "
            "kept") in notes, notes
    kept = len(finished) - 1
    assert (f"{kept} kept from the interrupted run" in summary) == (kept > 0), summary
    assert b"edited after the interrupt" not in artifact.read_bytes()  # certified afresh
    audited = _kernel("audit", work)
    assert audited.returncode == 0, audited.stdout + audited.stderr
