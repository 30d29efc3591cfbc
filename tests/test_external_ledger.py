"""Each file read once per attempt: the FileLedger and the stat fingerprint it trusts.

The ledger replaces re-hashing a pinned file, a snapshot copy or an artifact
by comparing ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``. These
tests make the changes a fingerprint must still see, with real files and
real steps: a same-size rewrite whose mtime is put back (only the ctime,
which no process can set, tells), a rename over the path, and changes
made by a producer or a checker while it runs. Hashes are recomputed here
with hashlib, never with the package's helpers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.audit import audit_run
from kernel.external import Reason, RunOutcome, Status
from kernel.external._files import FileLedger, _filesystem_types, copy_hashed
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamping(path: Path) -> bool:
    return _filesystem_types().get(os.stat(path).st_dev) in {"ext2", "ext3", "ext4", "xfs", "btrfs"}


def _stored(outcome: RunOutcome) -> dict[str, Any]:
    """The run's metadata.json as written (a flat object), read with the stdlib."""
    value = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    assert isinstance(value, dict)
    return value


def _needs_stamping(path: Path) -> None:
    if not _stamping(path):
        pytest.skip(f"{path} is not on a filesystem whose fingerprints the ledger trusts")


def rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Same size, other bytes, in place (same inode), atime and mtime put back."""
    before = os.stat(path)
    assert len(data) == before.st_size
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def _settled_ledger(tmp_path: Path, target: Path) -> FileLedger:
    """A ledger that has hashed ``target`` and settled it with a probe written after."""
    ledger = FileLedger()
    assert ledger.sha256(target, follow_symlinks=False) == _sha256(target)
    probe = tmp_path / "probe"
    time.sleep(0.01)  # a later clock tick than the target's, whatever the timer
    probe.write_bytes(b"written after the record")
    ledger.settle(probe)
    return ledger


# --- the ledger itself ------------------------------------------------------------------


def test_a_settled_unchanged_file_is_not_read_again(tmp_path: Path) -> None:
    _needs_stamping(tmp_path)
    target = tmp_path / "input.bin"
    target.write_bytes(os.urandom(4096))
    ledger = _settled_ledger(tmp_path, target)
    read = ledger.hashed_bytes
    assert read == 4096
    assert ledger.sha256(target, follow_symlinks=False) == _sha256(target)
    assert ledger.hashed_bytes == read


def test_a_record_not_yet_settled_is_read_again(tmp_path: Path) -> None:
    # Without a later probe, and with a ctime younger than the clock margin,
    # a change in the same clock tick could keep the fingerprint: hash again.
    target = tmp_path / "input.bin"
    target.write_bytes(os.urandom(4096))
    ledger = FileLedger()
    ledger.sha256(target, follow_symlinks=False)
    ledger.sha256(target, follow_symlinks=False)
    assert ledger.hashed_bytes == 2 * 4096


def test_a_same_size_rewrite_with_its_mtime_put_back_is_seen(tmp_path: Path) -> None:
    _needs_stamping(tmp_path)
    target = tmp_path / "input.bin"
    target.write_bytes(b"a" * 4096)
    ledger = _settled_ledger(tmp_path, target)
    rewrite_keeping_mtime(target, b"b" * 4096)
    assert ledger.sha256(target, follow_symlinks=False) == hashlib.sha256(b"b" * 4096).hexdigest()
    assert ledger.hashed_bytes == 2 * 4096


def test_a_file_renamed_over_the_path_is_seen(tmp_path: Path) -> None:
    _needs_stamping(tmp_path)
    target = tmp_path / "input.bin"
    target.write_bytes(b"a" * 4096)
    ledger = _settled_ledger(tmp_path, target)
    stat = os.stat(target)
    other = tmp_path / "other.bin"
    other.write_bytes(b"c" * 4096)
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, target)
    assert ledger.sha256(target, follow_symlinks=False) == hashlib.sha256(b"c" * 4096).hexdigest()


def test_a_symlink_put_in_place_of_a_recorded_file_is_refused(tmp_path: Path) -> None:
    _needs_stamping(tmp_path)
    target = tmp_path / "input.bin"
    target.write_bytes(b"a" * 64)
    ledger = _settled_ledger(tmp_path, target)
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(b"a" * 64)
    target.unlink()
    target.symlink_to(elsewhere)
    with pytest.raises(OSError):
        ledger.sha256(target, follow_symlinks=False)


def test_a_probe_on_another_filesystem_settles_nothing(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to put the probe on")
    target = tmp_path / "input.bin"
    target.write_bytes(b"a" * 64)
    ledger = FileLedger()
    ledger.sha256(target, follow_symlinks=False)
    probe = shm / f"ledger-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"probe")
        ledger.settle(probe)
    finally:
        probe.unlink()
    ledger.sha256(target, follow_symlinks=False)
    assert ledger.hashed_bytes == 2 * 64


def test_a_file_on_tmpfs_is_always_read_again(tmp_path: Path) -> None:
    # tmpfs does not stamp a write through a shared mapping: never trusted.
    shm = Path("/dev/shm")
    if not shm.is_dir() or _filesystem_types().get(os.stat(shm).st_dev) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    target = shm / f"ledger-target-{os.getpid()}"
    probe = shm / f"ledger-probe-{os.getpid()}"
    try:
        target.write_bytes(b"a" * 64)
        ledger = FileLedger()
        ledger.sha256(target, follow_symlinks=False)
        time.sleep(0.01)
        probe.write_bytes(b"probe")
        ledger.settle(probe)
        ledger.sha256(target, follow_symlinks=False)
        assert ledger.hashed_bytes == 2 * 64
    finally:
        for path in (target, probe):
            path.unlink(missing_ok=True)


# --- real steps: what the fingerprint must still catch ------------------------------------

_REWRITE = """
import os
def rewrite_keeping_mtime(path, data):
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
"""


@pytest.mark.parametrize("age", ["fresh", "settled by the clock"])
def test_a_checker_rewriting_its_pinned_helper_keeping_size_and_mtime_is_caught(
    tmp_path: Path, age: str
) -> None:
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    if age != "fresh":
        _needs_stamping(tmp_path)
        time.sleep(2.2)  # older than the ledger's clock margin: trusted from the first hash
    checker_custom = _REWRITE + f"rewrite_keeping_mtime({str(helper)!r}, b'VALUE = 2\\n')\n"
    scenario = Scenario(
        tmp_path,
        max_containment=BELOW_SANDBOX,
        checker_custom=checker_custom,
        checker_deps=(helper,),
    )
    outcome = scenario.run()
    assert helper.read_text() == "VALUE = 2\n"  # the checker did run and rewrite it
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.PIN_CHANGED_DURING_RUN


def test_a_producer_rewriting_a_checker_pin_keeping_size_and_mtime_blocks_the_checker(
    tmp_path: Path,
) -> None:
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    producer = (
        HONEST_PRODUCER + _REWRITE + f"rewrite_keeping_mtime({str(helper)!r}, b'VALUE = 2\\n')\n"
    )
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer, checker_deps=(helper,)
    )
    outcome = scenario.run()
    assert outcome.reason is Reason.PIN_CHANGED_BEFORE_LAUNCH
    assert _stored(outcome)["checker"] is None


def test_a_producer_rewriting_a_snapshot_input_keeping_size_and_mtime_is_caught(
    tmp_path: Path,
) -> None:
    producer = (
        HONEST_PRODUCER
        + _REWRITE
        + "path = os.path.join(request['paths']['snapshot'], 'data', 'input.txt')\n"
        + "rewrite_keeping_mtime(path, b'INPUT data/input.txt\\n')\n"
    )
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer, inputs=("data/input.txt",)
    )
    assert (scenario.repo / "data" / "input.txt").read_bytes() == b"input data/input.txt\n"
    outcome = scenario.run()
    assert outcome.reason is Reason.SNAPSHOT_CHANGED
    assert "after the producer" in _stored(outcome)["detail"]


def test_a_checker_rewriting_the_evidence_keeping_size_and_mtime_is_caught(
    tmp_path: Path,
) -> None:
    checker_custom = (
        _REWRITE
        + "path = os.path.join(request['paths']['evidence'], 'proof.txt')\n"
        + "rewrite_keeping_mtime(path, b'EVIDENCE for proof.txt\\n')\n"
    )
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, checker_custom=checker_custom)
    outcome = scenario.run()
    evidence = Path(outcome.attempt_dir, "evidence", "proof.txt")
    assert evidence.read_bytes() == b"EVIDENCE for proof.txt\n"
    assert outcome.reason is Reason.EVIDENCE_CHANGED


def test_an_honest_run_passes_with_every_file_read_once(tmp_path: Path) -> None:
    # The control for the attacks above: the same scenario, nothing rewritten.
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    scenario = Scenario(tmp_path, checker_deps=(helper,), inputs=("data/input.txt",))
    outcome = scenario.run()
    assert outcome.status is Status.PASS, _stored(outcome)["detail"]
    assert _stored(outcome)["inputs"] == [
        {"path": relative, "sha256": _sha256(scenario.repo / relative)}
        for relative in ("data/input.txt", "spec/claim.txt")
    ]


# --- one commit point: what a crash may lose is reported, never trusted -------------------


@pytest.fixture(scope="module")
def passed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outcome = Scenario(tmp_path_factory.mktemp("commit")).run()
    assert outcome.status is Status.PASS, _stored(outcome)["detail"]
    return Path(outcome.attempt_dir)


@pytest.mark.parametrize(
    "relative",
    [
        "checker/receipt.json",
        "checker/request.json",
        "producer/request.json",
        "job.json",
        "identity.json",
        "evidence/proof.txt",
    ],
)
@pytest.mark.parametrize("loss", ["lost", "torn"])
def test_a_file_not_fsynced_and_lost_in_a_crash_is_reported_by_the_audit(
    passed_run: Path, tmp_path: Path, relative: str, loss: str
) -> None:
    # Only metadata.json is fsynced: simulate a crash that kept it but lost
    # (or left empty) a file it names. The audit must not call the run intact.
    run = tmp_path / "run"
    shutil.copytree(passed_run, run, symlinks=True)
    assert audit_run(run).intact  # the control: the run as written audits intact
    target = run / relative
    if loss == "lost":
        target.unlink()
    else:
        target.write_bytes(b"")
    report = audit_run(run)
    assert not report.intact


# --- the snapshot copy: copied by the kernel, hashed from the copy ------------------------


@pytest.mark.parametrize("where", ["same filesystem", "from tmpfs"])
def test_a_snapshot_copy_holds_the_source_bytes_and_their_digest(
    tmp_path: Path, where: str
) -> None:
    # From tmpfs to another filesystem type, copy_file_range is refused and the
    # copy falls back to reading and writing: both paths must give the same bytes.
    folder = tmp_path
    if where == "from tmpfs":
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("no tmpfs at /dev/shm apart from tmp_path")
        folder = shm / f"ledger-copy-{os.getpid()}"
        folder.mkdir()
    try:
        data = os.urandom(3 * 1024 * 1024 + 17)  # more than one chunk, not a multiple of it
        source = folder / "source.bin"
        source.write_bytes(data)
        ledger = FileLedger()
        digest = copy_hashed(source, tmp_path / "copy.bin", ledger)
        assert (tmp_path / "copy.bin").read_bytes() == data
        assert digest == hashlib.sha256(data).hexdigest()
        with pytest.raises(FileExistsError):  # never over an existing file
            copy_hashed(source, tmp_path / "copy.bin")
    finally:
        if folder != tmp_path:
            shutil.rmtree(folder)
