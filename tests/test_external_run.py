"""run_check end to end with real producer/checker scripts (seed 003 sequence)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from kernel.external import Reason, RunDirectoryError, Stage, Status, Verdict, seal_job
from tests.support.reference import canonical, sha256_file
from tests.test_external_helpers import BELOW_SANDBOX, HONEST_PRODUCER, PYTHON, Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _metadata(attempt_dir: str) -> dict[str, object]:
    value = json.loads(Path(attempt_dir, "metadata.json").read_bytes())
    assert isinstance(value, dict)
    return value


def test_honest_pair_passes_and_retains_request_receipt_and_digests(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, artifacts=("proof.txt", "logs/trace.txt"))
    outcome = scenario.run()
    assert outcome.status is Status.PASS and outcome.reason is None
    run_dir = Path(outcome.attempt_dir)
    assert run_dir == (scenario.run_root / "run-1").resolve()
    meta = _metadata(outcome.attempt_dir)
    # digests recomputed here with hashlib
    proof = hashlib.sha256(b"evidence for proof.txt\n").hexdigest()
    trace = hashlib.sha256(b"evidence for logs/trace.txt\n").hexdigest()
    assert meta["artifacts"] == [
        {"path": "logs/trace.txt", "sha256": trace},
        {"path": "proof.txt", "sha256": proof},
    ]
    pairs = [["logs/trace.txt", trace], ["proof.txt", proof]]
    assert meta["evidence_digest"] == hashlib.sha256(canonical(pairs)).hexdigest()
    spec = sha256_file(scenario.repo / "spec" / "claim.txt")
    assert meta["specification_digest"] == spec
    assert meta["input_digest"] == hashlib.sha256(canonical([["spec/claim.txt", spec]])).hexdigest()
    assert meta["receipt_sha256"] == sha256_file(run_dir / "checker" / "receipt.json")
    assert meta["checker_request_sha256"] == sha256_file(run_dir / "checker" / "request.json")
    assert meta["producer_request_sha256"] == sha256_file(run_dir / "producer" / "request.json")
    assert meta["verdict"] == "accepted" and meta["status"] == "PASS" and meta["reason"] is None
    identity = json.loads((run_dir / "identity.json").read_bytes())
    assert meta["check_digest"] == hashlib.sha256(canonical(identity)).hexdigest()
    # the metadata is canonical JSON and no temporary file is left behind
    assert (run_dir / "metadata.json").read_bytes() == canonical(meta) + b"\n"
    assert not [p for p in run_dir.rglob("*.tmp")]
    # the checker request is fresh and complete
    request = json.loads((run_dir / "checker" / "request.json").read_bytes())
    assert request["role"] == "checker" and request["run_id"] == "run-1"
    assert request["identity"] == identity and request["evidence_digest"] == meta["evidence_digest"]
    assert request["claim"]["obligations"] == ["first", "second"]
    assert request["paths"]["receipt"] == str(run_dir / "checker" / "receipt.json")
    assert (run_dir / "snapshot" / "spec" / "claim.txt").read_bytes() == (
        scenario.repo / "spec" / "claim.txt"
    ).read_bytes()


def test_run_directory_is_fresh_and_never_reused(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    assert scenario.run("again").status is Status.PASS
    with pytest.raises(RunDirectoryError) as caught:
        scenario.run("again")
    assert caught.value.code == "run_dir_exists"
    with pytest.raises(RunDirectoryError) as bad:
        scenario.run("../escape")
    assert bad.value.code == "invalid_run_id"


def test_producer_runs_in_the_snapshot_and_argv_is_not_shell_expanded(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + (
        "import os\n"
        "open(os.path.join(request['paths']['evidence'], 'env.txt'), 'w').write("
        "os.getcwd() + '\\n' + repr(sys.argv[1:]) + '\\n' + repr(sorted(os.environ)))\n"
    )
    scenario = Scenario(tmp_path, producer=producer, artifacts=("proof.txt", "env.txt"))
    document = scenario.document()
    document["checks"][0]["producer"]["argv"] += ["$HOME", "`id`", "a b;{{run_dir}}"]
    scenario.write_manifest(document)
    outcome = scenario.run()
    assert outcome.status is Status.PASS
    cwd, argv, env = Path(outcome.attempt_dir, "evidence", "env.txt").read_text().splitlines()
    assert cwd == str(Path(outcome.attempt_dir) / "snapshot")
    assert argv == repr(
        [str(Path(outcome.attempt_dir) / "producer" / "request.json"), "$HOME", "`id`",
         f"a b;{outcome.attempt_dir}"]
    )  # fmt: skip
    # The sandbox's environment (ADR 0018): the kernel's minimal one, nothing
    # PYTHON* from outside but its own three, and the private /tmp as HOME
    # (bubblewrap adds PWD, the working directory it changed to).
    assert env == repr(sorted([
        "HOME", "LC_ALL", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH", "TMPDIR",
    ]))  # fmt: skip


@pytest.mark.parametrize("target", ["executable", "dependency", "trusted_tool"])
def test_pin_swapped_after_identity_build_and_before_producer_launch_blocks(
    tmp_path: Path, target: str
) -> None:
    wrapper = tmp_path / "bin" / "py"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{PYTHON}" "$@"\n')
    wrapper.chmod(0o755)
    tool = tmp_path / "tool.bin"
    tool.write_bytes(b"trusted tool v1\n")
    marker = tmp_path / "producer-ran"
    producer = HONEST_PRODUCER + f"open({str(marker)!r}, 'w').write('ran')\n"
    scenario = Scenario(
        tmp_path, producer=producer, executable=str(wrapper), producer_tools=(tool,)
    )
    swapped = {"executable": wrapper, "dependency": scenario.producer_script, "trusted_tool": tool}[
        target
    ]

    def swap(stage: Stage) -> None:
        if stage is Stage.IDENTITY_BUILT:
            swapped.write_bytes(swapped.read_bytes() + b"\n# swapped\n")

    outcome = scenario.run(progress=swap)
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.PIN_CHANGED_BEFORE_LAUNCH
    assert str(swapped) in outcome.metadata.decision.detail
    assert not marker.exists(), "the producer must not have been launched"
    execution = outcome.metadata.execution
    assert execution.producer is None and execution.checker is None


def test_checker_dependency_swapped_by_the_producer_blocks_before_checker_launch(
    tmp_path: Path,
) -> None:
    helper = tmp_path / "scripts_helper.py"
    helper.write_text("VALUE = 1\n")
    producer = HONEST_PRODUCER + f"open({str(helper)!r}, 'w').write('VALUE = 2\\n')\n"
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer, checker_deps=(helper,)
    )
    outcome = scenario.run()
    assert outcome.reason is Reason.PIN_CHANGED_BEFORE_LAUNCH
    assert "before the checker launch" in outcome.metadata.decision.detail
    execution = outcome.metadata.execution
    assert execution.producer is not None and execution.checker is None
    assert not Path(outcome.attempt_dir, "checker", "receipt.json").exists()


def test_pin_that_does_not_hold_at_identity_build_blocks(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    entry = scenario.entry()
    scenario.checker_script.write_text(scenario.checker_script.read_text() + "# edit\n")
    outcome = scenario.run(entry=entry)
    assert outcome.reason is Reason.PIN_MISMATCH
    assert outcome.metadata.checked.check_digest is None


def test_checker_that_modifies_its_own_script_blocks_after_the_run(tmp_path: Path) -> None:
    # The checker runs a sealed copy (its __file__ is /dev/fd/N, read-only), so
    # it edits the pinned file through its path on disk.
    script = tmp_path / "scripts" / "checker.py"
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX,
        checker_custom=f"open({str(script)!r}, 'a').write('# tampered\\n')",
    )
    assert scenario.checker_script == script
    assert scenario.run().reason is Reason.PIN_CHANGED_DURING_RUN


def test_a_checker_cannot_write_to_the_sealed_copy_it_runs(tmp_path: Path) -> None:
    scenario = Scenario(
        tmp_path,
        checker_custom=(
            "try:\n"
            "    with open(__file__, 'r+b') as handle:\n"
            "        handle.write(b'#')\n"
            "except OSError:\n"
            "    pass\n"
            "else:\n"
            "    EXIT = 3\n"
        ),
    )
    outcome = scenario.run()
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    assert outcome.metadata.containment is not None


def test_job_digest_and_binding_are_validated_before_execution(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    forged = seal_job("job-1", "demo", "a test job").__class__(
        1, "job-1", "demo", "a different description", scenario.job.job_digest
    )
    assert scenario.run("a", job=forged).reason is Reason.JOB_DIGEST_MISMATCH
    other = seal_job("job-1", "another-check", "x")
    outcome = scenario.run("b", job=other)
    assert outcome.reason is Reason.JOB_CHECK_MISMATCH
    assert outcome.metadata.execution.producer is None


def test_input_missing_or_escaping_at_run_time_blocks(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, inputs=("data/x.txt",))
    entry = scenario.entry()
    (scenario.repo / "data" / "x.txt").unlink()
    assert scenario.run("a", entry=entry).reason is Reason.INPUT_MISSING
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    (scenario.repo / "data" / "x.txt").symlink_to(outside)
    assert scenario.run("b", entry=entry).reason is Reason.INPUT_ESCAPES_ROOT


# --- evidence: exact list, regular files only ---------------------------------------

_WRITE = (
    "import os, json, sys\n"
    "request = json.load(open(sys.argv[1]))\n"
    "E = request['paths']['evidence']\n"
)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("pass", Reason.ARTIFACT_MISSING),
        ("os.symlink('/etc/hostname', os.path.join(E, 'proof.txt'))", Reason.ARTIFACT_SYMLINK),
        (
            "open(os.path.join(E, 'real.txt'), 'w').write('x')\n"
            "os.symlink('real.txt', os.path.join(E, 'proof.txt'))",
            Reason.ARTIFACT_SYMLINK,
        ),
        ("os.mkdir(os.path.join(E, 'proof.txt'))", Reason.ARTIFACT_NOT_REGULAR),
        ("os.mkfifo(os.path.join(E, 'proof.txt'))", Reason.ARTIFACT_NOT_REGULAR),
        (
            "open(os.path.join(E, 'proof.txt'), 'w').write('x')\n"
            "open(os.path.join(E, 'extra.txt'), 'w').write('x')",
            Reason.ARTIFACT_UNDECLARED,
        ),
        (
            "open(os.path.join(E, 'proof.txt'), 'w').write('x')\n"
            "os.mkdir(os.path.join(E, 'empty'))",
            Reason.ARTIFACT_UNDECLARED,
        ),
        (
            "open(os.path.join(E, 'proof.txt'), 'w').write('x')\n"
            "os.symlink('/', os.path.join(E, 'root'))",
            Reason.ARTIFACT_UNDECLARED,
        ),
    ],
    ids=[
        "missing",
        "symlink-escape",
        "symlink-inside",
        "directory",
        "fifo",
        "extra-file",
        "extra-dir",
        "extra-symlink",
    ],
)
def test_evidence_must_be_exactly_the_declared_regular_files(
    tmp_path: Path, body: str, reason: Reason
) -> None:
    scenario = Scenario(tmp_path, producer=_WRITE + body + "\n")
    outcome = scenario.run()
    assert outcome.status is Status.BLOCKED and outcome.reason is reason
    assert outcome.metadata.execution.checker is None


def test_a_symlinked_parent_directory_escaping_evidence_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    body = (
        f"open(os.path.join({str(outside)!r}, 'proof.txt'), 'w').write('x')\n"
        f"os.symlink({str(outside)!r}, os.path.join(E, 'sub'))\n"
    )
    scenario = Scenario(
        tmp_path,
        max_containment=BELOW_SANDBOX,
        producer=_WRITE + body,
        artifacts=("sub/proof.txt",),
    )
    assert scenario.run().reason is Reason.ARTIFACT_SYMLINK


def test_evidence_directory_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "proof.txt").write_text("x")
    body = f"os.rmdir(E)\nos.symlink({str(outside)!r}, E)\n"
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=_WRITE + body)
    assert scenario.run().reason is Reason.ARTIFACT_SYMLINK


def test_snapshot_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    body = (
        "import shutil\n"
        "S = request['paths']['snapshot']\n"
        f"shutil.copytree(S, {str(copy)!r})\n"
        "shutil.rmtree(S)\n"
        f"os.symlink({str(copy)!r}, S)\n"
        "open(os.path.join(E, 'proof.txt'), 'w').write('x')\n"
    )
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=_WRITE + body)
    assert scenario.run().reason is Reason.SNAPSHOT_CHANGED


def test_producer_receipt_is_ignored(tmp_path: Path) -> None:
    # The producer forges an accepting receipt at its own {{receipt}} path;
    # the checker then writes nothing: the run must not pass.
    producer = HONEST_PRODUCER + (
        "import os\n"
        "open(os.path.join(request['paths']['run_dir'], 'producer', 'receipt.json'), 'w')"
        ".write('{}')\n"
    )
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer, checker_custom="WRITE = False"
    )
    document = scenario.document()
    document["checks"][0]["producer"]["argv"].append("{{receipt}}")
    scenario.write_manifest(document)
    outcome = scenario.run()
    assert outcome.reason is Reason.RECEIPT_MISSING
    assert Path(outcome.attempt_dir, "producer", "receipt.json").exists()


def test_producer_preparing_the_checker_directory_is_tampering(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + (
        "os.makedirs(os.path.join(request['paths']['run_dir'], 'checker'))\n"
    )
    scenario = Scenario(tmp_path, max_containment=BELOW_SANDBOX, producer=producer)
    assert scenario.run().reason is Reason.RUN_DIR_TAMPERED


def test_producer_changing_its_snapshot_blocks(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + "open('spec/claim.txt', 'a').write('weakened')\n"
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer
    )
    assert scenario.run().reason is Reason.SNAPSHOT_CHANGED
    # original repository untouched
    assert (tmp_path / "repo" / "spec" / "claim.txt").read_text() == "claim: 1 + 1 = 2\n"


def test_producer_adding_a_file_to_its_snapshot_blocks(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + "open('scratch.txt', 'w').write('x')\n"
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, producer=producer
    )
    assert scenario.run().reason is Reason.SNAPSHOT_CHANGED


def test_checker_changing_the_evidence_blocks(tmp_path: Path) -> None:
    custom = (
        "import os\n"
        "open(os.path.join(request['paths']['evidence'], 'proof.txt'), 'a').write('more')"
    )
    scenario = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, checker_custom=custom
    )
    assert scenario.run().reason is Reason.EVIDENCE_CHANGED


def test_failing_producer_blocks_without_running_the_checker(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path, producer="import sys\nsys.exit(3)\n").run()
    assert outcome.reason is Reason.PRODUCER_FAILED
    assert outcome.metadata.execution.producer is not None
    assert outcome.metadata.execution.producer.returncode == 3
    assert outcome.metadata.execution.checker is None


def test_unlaunchable_executable_blocks(tmp_path: Path) -> None:
    not_executable = tmp_path / "not-executable"
    not_executable.write_text("plain data\n")
    outcome = Scenario(tmp_path, executable=str(not_executable)).run()
    assert outcome.reason is Reason.LAUNCH_FAILED


def test_checker_exit_zero_without_receipt_blocks(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path, checker_custom="WRITE = False").run()
    assert outcome.reason is Reason.RECEIPT_MISSING
    checker = outcome.metadata.execution.checker
    assert checker is not None and checker.returncode == 0


def test_checker_exit_nonzero_with_an_accepting_receipt_blocks(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path, checker_custom="EXIT = 1").run()
    assert outcome.reason is Reason.CHECKER_FAILED
    assert outcome.metadata.decision.verdict is None
    receipt = Path(outcome.attempt_dir, "checker", "receipt.json")
    assert json.loads(receipt.read_bytes())["verdict"] == "accepted"
    # retained for the record, never validated as a result
    assert outcome.metadata.execution.receipt_sha256 == sha256_file(receipt)


def test_receipt_that_is_a_symlink_blocks(tmp_path: Path) -> None:
    custom = (
        "import os\n"
        "real = receipt_path + '.real'\n"
        "open(real, 'w').write(json.dumps(receipt))\n"
        "os.symlink(real, receipt_path)\n"
        "WRITE = False"
    )
    assert Scenario(tmp_path, checker_custom=custom).run().reason is Reason.RECEIPT_NOT_REGULAR


def test_stdout_and_stderr_are_captured_up_to_the_cap(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + (
        "sys.stdout.write('x' * (3 * 1024 * 1024)); sys.stderr.write('warn\\n')\n"
    )
    outcome = Scenario(tmp_path, producer=producer).run()
    assert outcome.status is Status.PASS
    log = Path(outcome.attempt_dir, "producer", "stdout.log")
    assert log.stat().st_size == 1024 * 1024
    assert outcome.metadata.execution.producer is not None
    assert outcome.metadata.execution.producer.stdout_truncated
    assert not outcome.metadata.execution.producer.stderr_truncated
    assert Path(outcome.attempt_dir, "producer", "stderr.log").read_text() == "warn\n"


def test_metadata_is_written_for_every_blocked_run(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path, producer="import sys\nsys.exit(1)\n").run()
    meta = _metadata(outcome.attempt_dir)
    assert meta["status"] == "BLOCKED" and meta["reason"] == "producer_failed"
    assert stat.S_ISREG(os.lstat(Path(outcome.attempt_dir, "metadata.json")).st_mode)


@pytest.mark.parametrize(
    ("custom", "reason", "verdict"),
    [
        (
            "receipt['verdict'] = 'rejected'\nreceipt['obligations'][1]['result'] = 'rejected'",
            Reason.CHECKER_REJECTED,
            Verdict.REJECTED,
        ),
        (
            "receipt['verdict'] = 'unknown'\n"
            "for o in receipt['obligations']: o['result'] = 'unknown'",
            Reason.CHECKER_UNKNOWN,
            Verdict.UNKNOWN,
        ),
        (
            "receipt['verdict'] = 'rejected'\n"
            "receipt['obligations'][0]['result'] = 'unknown'\n"
            "receipt['obligations'][1]['result'] = 'rejected'",
            Reason.CHECKER_REJECTED,
            Verdict.REJECTED,
        ),
    ],
)
def test_rejected_and_unknown_are_inconclusive_blocked(
    tmp_path: Path, custom: str, reason: Reason, verdict: Verdict
) -> None:
    lines = "".join(f"    {line}\n" for line in custom.splitlines())
    mutate = f"def mutate(receipt):\n{lines}    return receipt\n"
    outcome = Scenario(tmp_path, checker_custom=mutate).run()
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is reason
    assert outcome.metadata.decision.verdict is verdict
