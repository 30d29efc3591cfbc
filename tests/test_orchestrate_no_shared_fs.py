"""Workers that share no file system with the driver (issue 36, deliverables 1, 2 and 4, in part).

Each of two real ``dask worker`` processes runs in a mount namespace of its
own, with a private tmpfs over the parent of the driver's work directory, as
a second machine would have: nothing a worker writes there reaches the
driver. Before ADR 0022 the driver's work directory then held only the
outcome log and ``kernel audit`` said NOT intact ("a certified outcome
without .../certification.json" for every certified attempt). Now each
attempt's record comes back with its evidence and lands on the driver.

The forged-record tests drive ``ExternalCertifier.keep`` with a record a
real certification left, then altered as a compromised worker would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from kernel.audit import rederive_certification
from kernel.orchestrate._attempt_record import AttemptRecord, RecordEntry, take_record
from kernel.orchestrate._certifier import CertificationTask, ExternalCertifier
from kernel.organs import CERTIFICATION_MEDIA_TYPE, CERTIFIED_MANIFEST, TARGET_CERTIFIED
from kernel.replay import (
    ContractClosed,
    ProofEvidence,
    Validated,
    replay_contract,
    requests_from_bundle,
    validate,
)
from tests.orchestrate_helpers import ROOT, certifier, e2e_bundle, repeating_bundle_run
from tests.support.cli import KERNEL_MAIN
from tests.support.separate_workers import can_make_networks, can_unshare, separate_workers

pytestmark = pytest.mark.slow

BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"


def _kernel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, text=True, timeout=600, check=False)


def _tree(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.mark.skipif(not can_unshare(), reason="needs root and unshare -m (a mount namespace)")
def test_a_run_on_workers_that_share_no_file_system_audits_intact_on_the_driver(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    work = shared / "W"
    inline = _kernel("run", BUNDLE, "--work-dir", work, "-q", "-o", tmp_path / "inline.jsonl")
    assert inline.returncode == 3, inline.stderr  # the e2e bundle holds a tampered attempt
    expected = _tree(work)
    work.rename(tmp_path / "inline-W")
    cluster_root = tmp_path / "cluster"
    cluster_root.mkdir()
    with separate_workers(cluster_root, shared) as address:
        done = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                       "--work-dir", work, "-q", "-o", tmp_path / "dask.jsonl")
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "dask.jsonl").read_bytes() == (tmp_path / "inline.jsonl").read_bytes()
    certified = [p.parent.name for p in work.glob("*/certification.json")]
    assert len(certified) == 3, sorted(_tree(work))
    # Byte for byte what the inline run wrote at the same path (ADR 0022: no field differs).
    assert _tree(work) == expected
    audited = _kernel("audit", work)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "intact" in audited.stdout


# --- a compromised worker: what it sends back is checked on the driver ------------------


def _task(work: Path) -> tuple[ExternalCertifier, CertificationTask]:
    provider = attrs.evolve(certifier(work), rederive=rederive_certification)
    for request in requests_from_bundle(e2e_bundle()):
        validated = validate(request, CERTIFIED_MANIFEST)
        if isinstance(validated, Validated):
            state = replay_contract(validated)
            if isinstance(state, ContractClosed):
                return provider, provider.task_for(state)
    raise AssertionError("the e2e bundle has no contract-closed attempt")


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertificationTask, Path]:
    """One real certification on a "worker" directory, and the task that made it."""
    worker = tmp_path_factory.mktemp("worker")
    _, task = _task(worker / "W")
    evidence = task.gather()
    assert len(evidence) == 1
    return task, worker / "W"


def _keep(tmp_path: Path, task: CertificationTask, record: AttemptRecord | None
          ) -> tuple[tuple[ProofEvidence, ...], tuple[str, ...]]:
    """What the driver counts of ``record`` and the evidence the worker returned with it."""
    driver, driver_task = _task(tmp_path / "driver-W")
    (tmp_path / "driver-W").mkdir()
    source = task.certifier.work_dir / task.attempt_id / "certification.json"
    evidence = (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE,
                              source.read_bytes().rstrip(b"\n")),)
    return driver.keep(driver_task, evidence, record)


def _altered(record: AttemptRecord, path: str, data: bytes) -> AttemptRecord:
    entries = tuple(attrs.evolve(e, data=data) if e.path == path else e for e in record.entries)
    assert entries != record.entries, path
    return attrs.evolve(record, entries=entries)


def test_an_honest_record_lands_and_its_certification_counts(
    tmp_path: Path, certified: tuple[CertificationTask, Path]
) -> None:
    task, worker = certified
    record = take_record(worker / task.attempt_id, 1 << 30)
    evidence, notes = _keep(tmp_path, task, record)
    assert notes == () and len(evidence) == 1
    assert _tree(tmp_path / "driver-W" / task.attempt_id) == _tree(worker / task.attempt_id)


@pytest.mark.parametrize("path, data", [
    ("run/evidence/z3-answer.txt", b"target_certified sat\n"),  # swapped evidence
    ("run/checker/receipt.json", b'{"verdict":"accepted"}\n'),  # a forged receipt
], ids=["swapped_evidence", "forged_receipt"])
def test_a_record_altered_by_its_worker_is_refused_on_the_driver(
    tmp_path: Path, certified: tuple[CertificationTask, Path], path: str, data: bytes
) -> None:
    task, worker = certified
    record = _altered(take_record(worker / task.attempt_id, 1 << 30), path, data)
    evidence, notes = _keep(tmp_path, task, record)
    assert evidence == ()
    assert len(notes) == 1 and "not counted" in notes[0], notes


@pytest.mark.parametrize("entry", [
    RecordEntry("../escaped", 0o644, b"x"),
    RecordEntry("/etc/escaped", 0o644, b"x"),
    RecordEntry("run/setuid", 0o4755, b"x"),
], ids=["dot_dot", "absolute", "setuid"])
def test_a_record_that_would_escape_or_plant_a_mode_is_refused_and_writes_nothing(
    tmp_path: Path, certified: tuple[CertificationTask, Path], entry: RecordEntry
) -> None:
    task, worker = certified
    record = take_record(worker / task.attempt_id, 1 << 30)
    record = attrs.evolve(record, entries=(*record.entries, entry))
    evidence, notes = _keep(tmp_path, task, record)
    assert evidence == () and "refused" in notes[0], notes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver-W"]
    assert list((tmp_path / "driver-W").iterdir()) == []


def test_evidence_without_its_record_is_not_counted(
    tmp_path: Path, certified: tuple[CertificationTask, Path]
) -> None:
    task, _ = certified
    evidence, notes = _keep(tmp_path, task, None)
    assert evidence == () and "without the attempt's record" in notes[0]


def test_a_worker_killed_mid_run_costs_at_most_its_attempt_and_the_driver_audits_intact(
    tmp_path: Path,
) -> None:
    # Issue 36, deliverable 4: on workers that share nothing with the driver, a
    # worker SIGKILLed mid-run loses at most what it was certifying (Dask runs
    # its other tasks elsewhere; an attempt begun there and run again finds a
    # fresh directory on the other machine), and what came home audits intact.
    if not can_unshare():
        pytest.skip("needs root and unshare -m (a mount namespace)")
    bundle, expected = repeating_bundle_run(tmp_path, tuple(range(12)))
    shared = tmp_path / "shared"
    shared.mkdir()
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    work, out = shared / "W", tmp_path / "dask.jsonl"
    with separate_workers(cluster, shared, network=can_make_networks()) as address:
        process = subprocess.Popen(
            [sys.executable, "-c", KERNEL_MAIN, "run", str(bundle), "--executor", "dask",
             "--scheduler", address, "--work-dir", str(work), "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while len(list(work.glob("*/certification.json"))) < 2:  # landed on the driver
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.02)
        # This cluster's w0 only: another test's cluster may run beside it (-n 2),
        # with a worker of the same name but a directory of its own.
        ours = b"\0--local-directory\0" + bytes(cluster / "w0") + b"\0"
        (victim,) = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                     if ours in _cmdline(pid) + b"\0"]
        os.kill(victim, signal.SIGKILL)
        _, stderr = process.communicate(timeout=600)
    assert process.returncode in (0, 1), stderr
    got, want = out.read_bytes().splitlines(), expected.splitlines()
    assert len(got) == len(want) == 12
    lost = [i for i in range(12) if got[i] != want[i]]
    assert len(lost) <= 1, (lost, stderr)  # the one w0 was certifying, if Dask gave up on it
    for i in lost:
        assert "target_certified=unavailable" in json.loads(got[i])["outcome"]["explanation"]
    audited = _kernel("audit", work, "--outcomes", out, "--bundle", bundle)
    assert audited.returncode == 0, audited.stdout + audited.stderr


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not can_make_networks(), reason="needs root, ip, network namespaces, veth")
def test_make_demos_main_job_on_workers_with_networks_of_their_own_audits_intact(
    tmp_path: Path,
) -> None:
    # Issue 36, deliverable 4: the two kernel run steps of `make demo` (the honest
    # draft sealed for certified.v1, PASS; the e2e scenario, a tampered attempt
    # caught) on two workers that each have their own mount namespace (a private
    # tmpfs over the work directory's parent) and their own network namespace,
    # joined to the driver's over a veth pair on a bridge: the inline bytes, and
    # kernel audit intact on the driver.
    honest = tmp_path / "marbles-certified.json"
    sealed = _kernel("bundle", ROOT / "examples" / "drafts" / "marbles.json",
                     "--manifest", "certified.v1", "-o", honest)
    assert sealed.returncode == 0, sealed.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    cases = {"marbles": (honest, 0), "e2e": (BUNDLE, 3)}
    for name, (bundle, code) in cases.items():
        done = _kernel("run", bundle, "--work-dir", tmp_path / f"inline-{name}", "-q",
                       "-o", tmp_path / f"inline-{name}.jsonl")
        assert done.returncode == code, done.stderr
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    with separate_workers(cluster, shared, network=True) as address:
        assert not address.startswith("tcp://127."), address  # the bridge, not loopback
        for name, (bundle, code) in cases.items():
            out = tmp_path / f"dask-{name}.jsonl"
            done = _kernel("run", bundle, "--executor", "dask", "--scheduler", address,
                           "--work-dir", shared / name, "-q", "-o", out)
            assert done.returncode == code, (name, done.stderr)
            assert out.read_bytes() == (tmp_path / f"inline-{name}.jsonl").read_bytes(), name
            assert list((shared / name).glob("*/certification.json")), name
            audited = _kernel("audit", shared / name)
            assert audited.returncode == 0, (name, audited.stdout + audited.stderr)
    # Each worker listened on its own namespace's veth address, not on loopback.
    prefix = address.removeprefix("tcp://").rsplit(".", 1)[0] + "."
    for index in range(2):
        log = (cluster / f"worker-{index}.log").read_text(errors="replace")
        (line,) = [x for x in log.splitlines() if "Start worker at:" in x]
        assert f"tcp://{prefix}{2 + index}:" in line, line


def test_the_drivers_evidence_store_fills_from_what_comes_home(tmp_path: Path) -> None:
    # Issue 36, deliverable 1: --evidence-store works on the driver as for an inline
    # run. The workers' stores are their own (the same path, on their machines);
    # the driver's fills from the records that land, so a later run here reuses
    # the evidence (its checker still runs), with the same outcome bytes.
    if not can_unshare():
        pytest.skip("needs root and unshare -m (a mount namespace)")
    shared = tmp_path / "shared"
    shared.mkdir()
    store = shared / "store"  # hidden from the workers too: only the driver's copy is here
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    first = tmp_path / "first.jsonl"
    with separate_workers(cluster, shared, network=can_make_networks()) as address:
        done = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                       "--work-dir", shared / "W1", "-q", "-o", first, "--evidence-store", store)
    assert done.returncode == 3, done.stderr
    # The same entries as an inline run fills a store of its own with.
    inline_store = tmp_path / "inline-store"
    done = _kernel("run", BUNDLE, "--work-dir", tmp_path / "inline-W", "-q",
                   "-o", tmp_path / "inline.jsonl", "--evidence-store", inline_store)
    assert done.returncode == 3, done.stderr
    keys = sorted(p.parent.name for p in store.rglob("entry.json"))
    assert keys and keys == sorted(p.parent.name for p in inline_store.rglob("entry.json"))
    again = tmp_path / "again.jsonl"
    done = _kernel("run", BUNDLE, "--work-dir", shared / "W2", "-q", "-o", again,
                   "--evidence-store", store)
    assert done.returncode == 3, done.stderr
    assert again.read_bytes() == first.read_bytes()
    sources = [json.loads(p.read_bytes()) for p in (shared / "W2").glob("*/evidence-source.json")]
    assert {s["lookup"] for s in sources} <= {"hit", "run"}, sources  # a repeat: the run's own
    assert sum(s["lookup"] == "hit" for s in sources) == len(keys), sources
    audited = _kernel("audit", shared / "W2")
    assert audited.returncode == 0, audited.stdout + audited.stderr
