"""Issue 34, finding 8: a step's output is bounded while it runs, and only what was
declared is kept.

A producer wrote 12 undeclared files of 256 MiB, then 200,000 files in 5 s:
both runs were refused, and the 3 GiB and the 200,000 entries stayed on disk.
Here each attack runs as a real producer under ``run_check`` in the sandbox,
with the limits lowered by the manifest so that it is quick; each test
asserts the step was stopped while it ran (the producer counts what it
managed to write) with its own typed reason, and that nothing but the
kernel's records and the declared artifacts is left under the run root.
``tests/test_sandbox_ordinary_user.py`` runs this file again as an
unprivileged user.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kernel.external import (
    DEFAULT_STEP_LIMITS,
    ContainmentLevel,
    ContainmentPart,
    Reason,
    RunOutcome,
    Status,
    available_level,
    available_parts,
)
from tests.test_external_helpers import HONEST_PRODUCER, Scenario

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        available_level() is not ContainmentLevel.SANDBOX
        or ContainmentPart.BOUNDED_OUTPUT not in available_parts(),
        reason="needs the sandbox with a bounded output (bubblewrap, util-linux)",
    ),
]

MIB = 1024**2
#: The kernel's own names in an attempt directory (everything else a step made).
KERNEL_NAMES = {"job.json", "identity.json", "metadata.json", "request.json",
                "stdout.log", "stderr.log", "receipt.json"}


def _limits(**changes: int) -> dict[str, int]:
    limits: dict[str, int] = {
        "memory_bytes": 512 * MIB, "processes": 64, "open_files": 256,
        "file_size_bytes": 256 * MIB, "cpu_seconds": 60, "tmpfs_bytes": 8 * MIB,
        "artifact_bytes": 2 * MIB, "evidence_bytes": 8 * MIB,
    }  # fmt: skip
    limits.update(changes)
    return limits


def _run(tmp_path: Path, body: str, limits: dict[str, int]) -> tuple[Scenario, RunOutcome]:
    # The honest producer first writes the declared proof.txt, then does ``body``
    # and prints what it managed (its stdout is kept in producer/stdout.log).
    scenario = Scenario(tmp_path, producer=HONEST_PRODUCER + body)
    document: dict[str, Any] = scenario.document()
    document["checks"][0]["limits"] = limits
    scenario.write_manifest(document)
    return scenario, scenario.run()


def _printed(outcome: RunOutcome) -> dict[str, Any]:
    value = json.loads(Path(outcome.attempt_dir, "producer", "stdout.log").read_bytes())
    assert isinstance(value, dict), value
    return value


def _left_on_disk(scenario: Scenario) -> tuple[list[str], int]:
    """Every path under the run root that the kernel did not write, and the bytes of all."""
    strays: list[str] = []
    total = 0
    for folder, dirs, files in os.walk(scenario.run_root):
        for name in files:
            path = Path(folder, name)
            total += path.lstat().st_size
            relative = path.relative_to(scenario.run_root)
            if "snapshot" in relative.parts:
                continue  # the declared inputs, the kernel's copy
            if name not in KERNEL_NAMES and relative.as_posix() != "run-1/evidence/proof.txt":
                strays.append(relative.as_posix())
        for name in dirs:
            relative = Path(folder, name).relative_to(scenario.run_root)
            if "snapshot" not in relative.parts[:-1] and name not in {
                    "producer", "checker", "evidence", "snapshot", "run-1"}:
                strays.append(relative.as_posix())
    return strays, total


_WRITE_BIG = """
written = 0
try:
    for index in range(12):
        with open(os.path.join(evidence, f"big-{index}"), "wb") as handle:
            for _ in range(256):
                handle.write(b"x" * (1024 * 1024))
                written += 1024 * 1024
except OSError as exc:
    print(json.dumps({"written": written, "error": exc.errno}))
    sys.exit(1)
print(json.dumps({"written": written, "error": None}))
"""


def test_undeclared_bytes_stop_at_the_disk_limit_and_none_are_kept(tmp_path: Path) -> None:
    limits = _limits(evidence_bytes=8 * MIB)
    scenario, outcome = _run(tmp_path, _WRITE_BIG, limits)
    assert outcome.reason is Reason.DISK_LIMIT_REACHED, outcome.metadata.decision.detail
    assert "evidence_bytes=8388608" in outcome.metadata.decision.detail
    printed = _printed(outcome)
    # Stopped while it ran, by ENOSPC, at the limit: not 3 GiB written, then judged.
    assert printed["error"] == 28, printed
    assert printed["written"] <= limits["evidence_bytes"]
    strays, total = _left_on_disk(scenario)
    assert strays == []
    assert total < MIB  # the records and proof.txt; none of the megabytes


_MANY_FILES = """
made = 0
try:
    for index in range(200000):
        open(os.path.join(evidence, f"f{index}"), "w").close()
        made += 1
except OSError as exc:
    print(json.dumps({"made": made, "error": exc.errno}))
    sys.exit(1)
print(json.dumps({"made": made, "error": None}))
"""


def test_entries_stop_at_their_limit_and_none_are_kept(tmp_path: Path) -> None:
    scenario, outcome = _run(tmp_path, _MANY_FILES, _limits(entries=300))
    assert outcome.reason is Reason.ENTRIES_LIMIT_REACHED, outcome.metadata.decision.detail
    printed = _printed(outcome)
    assert printed["error"] == 28, printed
    # proof.txt is the first of the 300 the step may create; 299 more, then ENOSPC.
    assert printed["made"] == 299, printed
    assert _left_on_disk(scenario)[0] == []
    stored = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    assert stored["limits"]["entries"] == 300


def test_the_default_entries_limit_holds_without_a_manifest_key(tmp_path: Path) -> None:
    scenario, outcome = _run(tmp_path, _MANY_FILES, _limits())
    assert outcome.reason is Reason.ENTRIES_LIMIT_REACHED, outcome.metadata.decision.detail
    assert _printed(outcome)["made"] == DEFAULT_STEP_LIMITS.entries - 1
    assert _left_on_disk(scenario)[0] == []


_JUNK_BESIDE_THE_PROOF = """
os.makedirs(os.path.join(evidence, "cache", "deep"))
with open(os.path.join(evidence, "cache", "deep", "junk.bin"), "wb") as handle:
    handle.write(b"j" * 4096)
os.chmod(os.path.join(evidence, "proof.txt"), 0o6777)
os.chmod(evidence, 0o777)
print(json.dumps({}))
"""


def test_a_refused_step_keeps_its_declared_artifact_and_nothing_undeclared(
    tmp_path: Path,
) -> None:
    _, outcome = _run(tmp_path, _JUNK_BESIDE_THE_PROOF, _limits())
    # Refused for what it left, as before; the reason names what was not kept.
    assert outcome.reason is Reason.ARTIFACT_UNDECLARED, outcome.metadata.decision.detail
    assert "'cache'" in outcome.metadata.decision.detail
    evidence = Path(outcome.attempt_dir, "evidence")
    assert sorted(p.name for p in evidence.iterdir()) == ["proof.txt"]
    # The kept copy is the kernel's, in run-store modes, whatever the step chmod-ed.
    kept = (evidence / "proof.txt").lstat()
    assert stat.S_IMODE(kept.st_mode) == 0o644
    assert stat.S_IMODE(evidence.lstat().st_mode) & 0o022 == 0
    assert (kept.st_uid, kept.st_gid) == (os.geteuid(), os.getegid())
    assert (evidence / "proof.txt").read_bytes() == b"evidence for proof.txt\n"


def test_an_honest_step_passes_with_a_bounded_output_recorded(tmp_path: Path) -> None:
    scenario, outcome = _run(tmp_path, "", _limits())
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    assert outcome.metadata.containment_parts is not None
    assert ContainmentPart.BOUNDED_OUTPUT in outcome.metadata.containment_parts
    assert _left_on_disk(scenario)[0] == []


def test_a_kernel_under_umask_077_still_gives_its_step_the_snapshot(tmp_path: Path) -> None:
    # The run root stays 0700 (nobody else reaches it); what inside it a step is
    # given to read is made readable for the step's own uid whatever the umask.
    previous = os.umask(0o077)
    try:
        scenario = Scenario(tmp_path, producer=HONEST_PRODUCER
                            + "open(os.path.join(os.getcwd(), 'spec', 'claim.txt')).read()\n")
        outcome = scenario.run()
    finally:
        os.umask(previous)
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    assert stat.S_IMODE(scenario.run_root.stat().st_mode) == 0o700
