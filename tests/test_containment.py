"""Containment of every step (ADR 0009): attacks by a malicious producer, with real processes.

Each attack ran successfully against the kernel before containment (a
producer's daemon forged the checker's PASS; ``kernel`` killed with SIGKILL
left its steps running; a swapped pinned script ran and passed; an edited
``metadata.json`` chose the manifest replay used). Every test runs at both
levels where the level matters, and a census of the process table before and
after each test finds nothing left.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.external import (
    ContainmentLevel,
    Reason,
    RunLimits,
    RunOutcome,
    Status,
    available_level,
    default_environment,
    identity_object,
    replay_run,
)
from tests.support.cli import KERNEL_MAIN
from tests.support.processes import (
    census,
    described,
    kill_all,
    new_processes,
    processes_mentioning,
    seen_by_some_process,
)
from tests.support.reference import canonical, sha256_file
from tests.test_external_helpers import HONEST_PRODUCER, PYTHON, Scenario

pytestmark = pytest.mark.slow

_NO_NAMESPACES = pytest.mark.skipif(
    available_level(ContainmentLevel.NAMESPACE) is not ContainmentLevel.NAMESPACE,
    reason="this machine refuses unprivileged user+PID namespaces (the subreaper case still runs)",
)
# The sandbox is never skipped: `make test` installs bubblewrap (ADR 0018), so a
# machine without it fails these tests instead of passing them weaker.
LEVELS = [
    pytest.param(ContainmentLevel.SANDBOX, id="sandbox"),
    pytest.param(ContainmentLevel.NAMESPACE, id="namespace", marks=_NO_NAMESPACES),
    pytest.param(ContainmentLevel.SUBREAPER, id="subreaper"),
]

REJECTING = (
    "def mutate(r):\n"
    "    r['verdict'] = 'rejected'\n"
    "    r['obligations'][0]['result'] = 'rejected'\n"
    "    return r\n"
)


# --- the census: every process, before and after -------------------------------------


@pytest.fixture(autouse=True)
def _nothing_left(tmp_path: Path) -> Iterator[None]:
    before = census()
    yield
    deadline = time.monotonic() + 5.0
    while (left := new_processes(before, str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_all(left)  # never leave them running, even when the test fails
    assert not left, f"processes left behind: {left}"


def test_the_census_sees_a_leftover_daemon(tmp_path: Path) -> None:
    # The census must be able to fail: a setsid daemon started here is found.
    before = census()
    daemon = subprocess.Popen(
        [PYTHON, "-c", "import time; time.sleep(30)", str(tmp_path)], start_new_session=True
    )
    try:
        assert new_processes(before, str(tmp_path)) == [daemon.pid]
    finally:
        daemon.kill()
        daemon.wait()
    assert new_processes(before, str(tmp_path)) == []


# --- a daemon from the producer that forges the checker's receipt ---------------------

_FORGER = """
import time
def forge(run_dir, started):
    open(started, "w").write(str(os.getpid()))
    receipt = os.path.join(run_dir, "checker", "receipt.json")
    request_path = os.path.join(run_dir, "checker", "request.json")
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with open(request_path) as handle:
                req = json.load(handle)
            break
        except (OSError, ValueError):
            time.sleep(0.001)
    else:
        os._exit(0)
    forged = {
        "schema_version": 1, "job_id": req["job_id"], "run_id": req["run_id"],
        "check_id": req["check_id"], "check_digest": req["check_digest"],
        "specification_digest": req["specification_digest"], "identity": req["identity"],
        "evidence_digest": req["evidence_digest"], "verdict": "accepted",
        "obligations": [
            {"name": n, "result": "accepted", "evidence": [req["evidence_artifacts"][0]]}
            for n in req["claim"]["obligations"]
        ],
    }
    data = json.dumps(forged).encode()
    while time.time() < deadline:
        try:
            with open(receipt, "rb") as handle:
                current = handle.read()
        except OSError:
            current = None
        if current is not None and current != data:
            with open(receipt + ".forged", "wb") as handle:
                handle.write(data)
            os.replace(receipt + ".forged", receipt)
        time.sleep(0.0005)
    os._exit(0)
def quiet():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
"""

_DETACH = {
    # double fork + setsid: a new session, not a child of the producer
    "setsid": (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        quiet(); forge(request['paths']['run_dir'], STARTED)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    ),
    # a new process group in the producer's session, orphaned when it exits
    "setpgid": (
        "if os.fork() == 0:\n"
        "    os.setpgid(0, 0)\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    quiet(); forge(request['paths']['run_dir'], STARTED)\n"
    ),
}


def _forging_producer(how: str) -> str:
    # The daemon says it started in evidence/ (the one place a sandboxed step
    # can write); the producer then moves its pid into the declared artifact.
    return (
        HONEST_PRODUCER
        + _FORGER
        + "import signal\nSTARTED = os.path.join(evidence, 'daemon-started')\n"
        + _DETACH[how]
        + "while not os.path.exists(STARTED): time.sleep(0.005)\n"
        + "time.sleep(0.05)\n"
        + "os.replace(STARTED, os.path.join(evidence, 'proof.txt'))\n"
    )


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("how", ["setsid", "setpgid"])
def test_a_producer_daemon_cannot_forge_the_checkers_receipt(
    tmp_path: Path, how: str, level: ContainmentLevel
) -> None:
    scenario = Scenario(tmp_path, producer=_forging_producer(how), checker_custom=REJECTING)
    outcome = scenario.run(max_containment=level)
    started = Path(outcome.attempt_dir, "evidence", "proof.txt").read_text()
    assert started.isdigit(), "the attack never started"
    assert outcome.metadata.containment is level
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.CHECKER_REJECTED, outcome.metadata.decision.detail
    receipt = json.loads(Path(outcome.attempt_dir, "checker", "receipt.json").read_bytes())
    assert receipt["verdict"] == "rejected"  # the checker's own words, untouched
    assert processes_mentioning(str(tmp_path)) == []


# --- the kernel itself killed with SIGKILL mid-step ----------------------------------

_STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "# a child that ignores SIGTERM, and a double-forked setsid daemon\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)', {tag!r}])\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(120)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "open(os.path.join(evidence, 'ready'), 'w').write('ready')\n"
    "time.sleep(120)\n"
)


@pytest.mark.parametrize("level", LEVELS)
def test_sigkill_to_kernel_mid_step_leaves_no_process_of_the_step(
    tmp_path: Path, level: ContainmentLevel
) -> None:
    producer = HONEST_PRODUCER + _STUBBORN.format(tag=str(tmp_path))
    scenario = Scenario(tmp_path, producer=producer)
    ready = scenario.run_root / "r1" / "evidence" / "ready"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({
        "schema_version": 1, "job_id": scenario.job.job_id, "check_id": scenario.job.check_id,
        "description": scenario.job.description, "job_digest": scenario.job.job_digest,
    }))  # fmt: skip
    kernel = subprocess.Popen(
        [PYTHON, "-c", KERNEL_MAIN, "check", "run", str(scenario.manifest_path), "demo",
         "--job", str(job), "--run-root", str(scenario.run_root), "--repo", str(scenario.repo),
         "--run-id", "r1", "--max-containment", level.value],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        # In the sandbox the evidence is the step's bounded tmpfs: seen in its namespace.
        while not seen_by_some_process(ready) and time.monotonic() < deadline \
                and kernel.poll() is None:
            time.sleep(0.02)
        assert seen_by_some_process(ready), "the producer never got going"
        assert len(processes_mentioning(str(tmp_path))) >= 3
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(10)
        deadline = time.monotonic() + 5
        while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_mentioning(str(tmp_path)) == []
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()


# --- exact bytes: a pinned script swapped in a tight loop -----------------------------

_SWAPPER = """
import os, sys, time
path, honest, evil, stop = sys.argv[1:5]
honest, evil = open(honest, "rb").read(), open(evil, "rb").read()
flip = 0
while not os.path.exists(stop):
    flip += 1
    if flip % 2:
        # a new inode renamed over the pinned path ...
        for data in (evil, honest):
            with open(path + ".swap", "wb") as handle:
                handle.write(data)
            os.replace(path + ".swap", path)
    else:
        # ... and the same inode rewritten in place
        for data in (evil, honest):
            with open(path, "r+b") as handle:
                handle.write(data)
                handle.truncate()
"""


@pytest.mark.parametrize("role", ["producer", "checker"])
def test_a_pinned_script_swapped_in_a_tight_loop_never_passes(tmp_path: Path, role: str) -> None:
    # Honest bytes never PASS (the honest checker rejects; the honest producer
    # writes "honest" evidence); the evil bytes would: evil checker accepts,
    # evil producer writes "EVIL" evidence. Zero PASS from swapped bytes.
    honest_producer = HONEST_PRODUCER
    evil_producer = HONEST_PRODUCER.replace('"evidence for "', '"EVIL "')
    scenario = Scenario(
        tmp_path,
        producer=honest_producer,
        checker_custom=REJECTING if role == "checker" else "",
    )
    target = scenario.checker_script if role == "checker" else scenario.producer_script
    honest = tmp_path / "honest.py"
    honest.write_bytes(target.read_bytes())
    evil = tmp_path / "evil.py"
    if role == "checker":
        evil.write_text(target.read_text().replace(REJECTING, "# accept everything\n"))
    else:
        evil.write_text(target.read_text().replace(honest_producer.strip(), evil_producer.strip()))
    assert evil.read_bytes() != honest.read_bytes()
    swapper_script = tmp_path / "swapper.py"
    swapper_script.write_text(_SWAPPER)
    stop = tmp_path / "stop"
    swapper = subprocess.Popen(
        [PYTHON, str(swapper_script), str(target), str(honest), str(evil), str(stop)]
    )
    outcomes: list[RunOutcome] = []
    try:
        entry = scenario.entry()
        for index in range(16):
            outcomes.append(scenario.run(f"run-{index}", entry=entry))
    finally:
        stop.write_text("stop")
        swapper.wait(10)
    swapped = [
        o
        for o in outcomes
        if o.status is Status.PASS
        and (
            role == "checker" or "EVIL" in Path(o.attempt_dir, "evidence", "proof.txt").read_text()
        )
    ]
    assert swapped == [], [o.metadata.decision.detail for o in swapped]
    if role == "producer":  # honest producer bytes still pass: the test can see a PASS
        target.write_bytes(honest.read_bytes())
        assert scenario.run("after", entry=entry).status is Status.PASS


# --- replay takes no configuration from the run directory ----------------------------


def _permissive_elsewhere(tmp_path: Path) -> Scenario:
    """Another manifest, repository and an accepting checker, for the same check id."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return Scenario(elsewhere)


def test_an_edited_metadata_cannot_choose_the_manifest_replay_uses(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path, checker_custom=REJECTING)
    run = scenario.run()
    assert run.reason is Reason.CHECKER_REJECTED
    other = _permissive_elsewhere(tmp_path)
    meta_path = Path(run.attempt_dir, "metadata.json")
    meta = json.loads(meta_path.read_bytes())
    meta["manifest_path"] = str(other.manifest_path)
    meta["repository_root"] = str(other.repo)
    meta_path.write_text(json.dumps(meta))
    # The CLI never falls back to what the run recorded: no manifest, no replay.
    bare = subprocess.run(
        [PYTHON, "-c", KERNEL_MAIN, "check", "replay", run.attempt_dir, "--replay-id", "bare"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bare.returncode == 2 and bare.stdout == "", bare.stdout
    assert not Path(run.attempt_dir, "replays", "bare").exists()
    # With the operator's manifest and repository, the operator's checker judges.
    done = subprocess.run(
        [PYTHON, "-c", KERNEL_MAIN, "check", "replay", run.attempt_dir, "--replay-id", "audit",
         "--manifest", str(scenario.manifest_path), "--repo", str(scenario.repo)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    replayed = json.loads(done.stdout)["metadata"]
    assert replayed["reason"] == "checker_rejected"
    assert replayed["manifest_path"] == os.path.abspath(scenario.manifest_path)
    # and the permissive pair was never run
    assert not (other.run_root).exists()


def test_replay_records_the_operators_configuration_not_the_runs(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    meta_path = Path(run.attempt_dir, "metadata.json")
    meta = json.loads(meta_path.read_bytes())
    meta["manifest_path"] = "/nonexistent/manifest.json"
    meta["repository_root"] = "/nonexistent"
    meta_path.write_text(json.dumps(meta))
    replay = replay_run(
        Path(run.attempt_dir),
        manifest_path=scenario.manifest_path,
        repository_root=scenario.repo,
        replay_id="r",
        limits=RunLimits(30.0, 30.0),
        environment=default_environment(),
    )
    assert replay.status is Status.PASS
    assert replay.metadata.run.repository_root == os.path.abspath(scenario.repo)


# --- the level: required, recorded, bound into the requests --------------------------


def _requiring(tmp_path: Path, level: str) -> Scenario:
    counter = tmp_path / "producer-ran"
    scenario = Scenario(
        tmp_path, producer=HONEST_PRODUCER + f"open({str(counter)!r}, 'w').write('x')\n"
    )
    document = scenario.document()
    document["checks"][0]["required_containment"] = level
    scenario.write_manifest(document)
    return scenario


def test_a_check_requiring_namespaces_is_blocked_where_only_a_subreaper_is_available(
    tmp_path: Path,
) -> None:
    scenario = _requiring(tmp_path, "namespace")
    outcome = scenario.run(max_containment=ContainmentLevel.SUBREAPER)
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is Reason.CONTAINMENT_UNAVAILABLE
    assert "namespace" in outcome.metadata.decision.detail
    execution = outcome.metadata.execution
    assert execution.producer is None and execution.checker is None
    assert not (tmp_path / "producer-ran").exists()
    assert Path(outcome.attempt_dir, "metadata.json").is_file()


def test_a_required_level_enters_the_check_identity(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = identity_object(Scenario(tmp_path / "a").entry())
    strict = identity_object(_requiring(tmp_path / "b", "subreaper").entry())
    assert isinstance(plain, dict) and isinstance(strict, dict)
    assert "required_containment" not in plain  # an entry without it is identified as before
    assert strict["required_containment"] == "subreaper"


@pytest.mark.parametrize("level", LEVELS)
def test_the_level_used_is_recorded_and_bound_into_both_requests(
    tmp_path: Path, level: ContainmentLevel
) -> None:
    outcome = Scenario(tmp_path).run(max_containment=level)
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    assert outcome.metadata.containment is level
    stored = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    assert stored["containment"] == level.value
    for role in ("producer", "checker"):
        request = json.loads(Path(outcome.attempt_dir, role, "request.json").read_bytes())
        assert request["containment"] == level.value


def test_a_run_uses_the_sandbox_where_the_machine_gives_it(tmp_path: Path) -> None:
    # Never silently weaker: with no cap, a run takes the strongest level.
    assert available_level(ContainmentLevel.SUBREAPER) is ContainmentLevel.SUBREAPER
    assert Scenario(tmp_path).run().metadata.containment is ContainmentLevel.SANDBOX


def test_a_consistently_rewritten_run_store_is_caught_by_the_operators_digest(
    tmp_path: Path,
) -> None:
    # The attacker rewrites the evidence and every digest the metadata records
    # for it (recomputed here with hashlib, as an attacker would).
    scenario = Scenario(tmp_path)
    run = scenario.run()
    assert run.status is Status.PASS and run.metadata.checked.evidence_digest is not None
    kept = run.metadata.checked.evidence_digest  # what the operator saw printed
    proof = Path(run.attempt_dir, "evidence", "proof.txt")
    proof.write_text("other evidence\n")
    meta_path = Path(run.attempt_dir, "metadata.json")
    meta = json.loads(meta_path.read_bytes())
    meta["artifacts"] = [{"path": "proof.txt", "sha256": sha256_file(proof)}]
    meta["evidence_digest"] = hashlib.sha256(
        canonical([["proof.txt", sha256_file(proof)]])
    ).hexdigest()
    meta_path.write_text(json.dumps(meta))

    def replay(replay_id: str, expected: str | None) -> RunOutcome:
        return replay_run(
            Path(run.attempt_dir),
            manifest_path=scenario.manifest_path,
            repository_root=scenario.repo,
            replay_id=replay_id,
            limits=RunLimits(30.0, 30.0),
            environment=default_environment(),
            expected_evidence_digest=expected,
        )

    # Without the operator's digest the checker judges the substituted evidence
    # (this checker accepts anything): the digests agree with each other.
    assert replay("unanchored", None).status is Status.PASS
    anchored = replay("anchored", kept)
    assert anchored.status is Status.BLOCKED
    assert anchored.reason is Reason.EVIDENCE_CHANGED
    assert anchored.metadata.execution.checker is None


def test_metadata_whose_evidence_digest_disagrees_with_its_artifacts_is_blocked(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    run = scenario.run()
    meta_path = Path(run.attempt_dir, "metadata.json")
    meta = json.loads(meta_path.read_bytes())
    meta["evidence_digest"] = "0" * 63 + "1"
    meta_path.write_text(json.dumps(meta))
    replay = replay_run(
        Path(run.attempt_dir),
        manifest_path=scenario.manifest_path,
        repository_root=scenario.repo,
        replay_id="r",
        limits=RunLimits(30.0, 30.0),
        environment=default_environment(),
    )
    assert replay.reason is Reason.EVIDENCE_CHANGED


# --- a kernel killed at any moment of a launch ---------------------------------------

# A stand-in for the kernel: it launches one contained step (which would sleep
# for a minute) as soon as it reads a line, so the test can SIGKILL it a chosen
# time after the launch began. The step names the test's directory.
_LAUNCHING_KERNEL = """
import os, sys, threading
from pathlib import Path
from kernel.external import ContainmentLevel, StepView, run_process
from kernel.external._contain import seal_copy
level, work, python = ContainmentLevel(sys.argv[1]), sys.argv[2], sys.argv[3]
sealed = seal_copy(python)
view = StepView(output=work, read_only=(), needed=(), workdir=work)
print("ready", flush=True)
sys.stdin.readline()
run_process(
    [python, "-c", "import time; time.sleep(60)", work], cwd=Path(work),
    env={"PATH": "/usr/bin:/bin"}, timeout_seconds=120, cancel=threading.Event(),
    stdout_limit=1024, stderr_limit=1024, containment=level, executable_fd=sealed.fd,
    view=view,
)
"""
# Across the first 40 ms of a launch: the moments between the kernel's fork and
# each wrapper arming its parent-death signal (bubblewrap's own child arms it
# only after its parent wrote its user-namespace maps). CI kills at 50 moments
# (every 0.8 ms); ``make interrupts`` at KERNEL_LAUNCH_KILLS=200 (every 0.2 ms).
_KILLS = int(os.environ.get("KERNEL_LAUNCH_KILLS", "0") or 0) or 50
_KILL_DELAYS = [index * 0.040 / _KILLS for index in range(_KILLS)]


@pytest.mark.parametrize("level", LEVELS)
def test_a_kernel_killed_at_any_moment_of_a_launch_leaves_no_process(
    tmp_path: Path, level: ContainmentLevel
) -> None:
    left: list[str] = []
    for index, delay in enumerate(_KILL_DELAYS):
        work = tmp_path / f"try{index}"
        work.mkdir()
        kernel = subprocess.Popen(
            [PYTHON, "-c", _LAUNCHING_KERNEL, level.value, str(work), PYTHON],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert kernel.stdin is not None and kernel.stdout is not None
        try:
            assert kernel.stdout.readline() == b"ready\n", "the stand-in kernel did not start"
            kernel.stdin.write(b"go\n")
            kernel.stdin.flush()
            time.sleep(delay)
        finally:
            kernel.kill()
            kernel.wait(10)
        deadline = time.monotonic() + 5.0
        while (alive := processes_mentioning(str(work))) and time.monotonic() < deadline:
            time.sleep(0.02)
        if alive:
            left += [f"try {index} ({delay * 1000:.1f} ms): {described(pid)}" for pid in alive]
            kill_all(alive)
    assert not left, "processes left behind by a killed kernel:\n" + "\n".join(left)
