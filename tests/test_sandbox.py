"""The step sandbox (ADR 0018, issue 18): every attack a producer made, with real processes.

Each test is an attack that succeeded against the kernel before the sandbox:
the producer (the untrusted party) plants code the checker then runs, writes
outside ``evidence/`` (the operator's repository, an earlier run, its own
run's records), reaches the network, or uses unbounded resources. A producer
reports what it tried in a declared artifact, ``witness.json``, the only
place it can write; the test then checks the targets themselves, never only
the producer's word. No process may be left behind by any of them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.external import (
    DEFAULT_STEP_LIMITS,
    ContainmentLevel,
    Reason,
    RunOutcome,
    Status,
    available_level,
)
from kernel.serde import dumps
from tests.support.cli import KERNEL_MAIN, kernel
from tests.support.processes import census, kill_all, new_processes
from tests.test_external_helpers import HONEST_PRODUCER, Scenario, operator_config

pytestmark = pytest.mark.slow

SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples" / "external"

REJECTING = (
    "def mutate(r):\n"
    "    r['verdict'] = 'rejected'\n"
    "    for o in r['obligations']:\n"
    "        o['result'] = 'rejected'\n"
    "    return r\n"
)

# Appended to a producer: ``attempt(name, action)`` runs one write and records
# whether the filesystem let it through; ``report()`` writes witness.json.
WITNESS = """
WITNESS = {}
def attempt(name, action):
    try:
        action()
    except OSError as exc:
        WITNESS[name] = "refused: " + (exc.strerror or str(exc))
    else:
        WITNESS[name] = "written"
def write_bytes(path, data):
    def action():
        with open(path, "wb") as handle:
            handle.write(data)
    return action
def report():
    with open(os.path.join(evidence, "witness.json"), "w") as handle:
        json.dump(WITNESS, handle)
"""

# Code planted for the checker: where it runs inside the checker of *this*
# test (its command line names the test's directory), it writes an accepting
# receipt copied from the checker's own request and exits 0 before the pinned
# checker starts. It removes itself first, as the attacker's did.
_PLANTED = """
import json, os
def _plant_fires():
    try:
        args = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    except OSError:
        return
    mine = any(TAG in a for a in args)
    if not mine or not any(a.endswith(b"checker/request.json") for a in args):
        return
    for path in CLEANUP:
        try:
            os.remove(path)
        except OSError:
            pass
    texts = [a.decode() for a in args if a]
    request = json.load(open(texts[-2]))
    receipt = {
        "schema_version": 1, "job_id": request["job_id"], "run_id": request["run_id"],
        "check_id": request["check_id"], "check_digest": request["check_digest"],
        "specification_digest": request["specification_digest"],
        "identity": request["identity"], "evidence_digest": request["evidence_digest"],
        "verdict": "accepted",
        "obligations": [
            {"name": n, "result": "accepted", "evidence": [request["evidence_artifacts"][0]]}
            for n in request["claim"]["obligations"]
        ],
    }
    with open(texts[-1], "w") as handle:
        json.dump(receipt, handle)
    os._exit(0)
_plant_fires()
"""


def planted_module(tag: str, cleanup: list[Path]) -> str:
    """The planted code, armed for the test directory ``tag``."""
    header = f"TAG = {tag.encode()!r}\nCLEANUP = {[str(p) for p in cleanup]!r}\n"
    return header + _PLANTED


@pytest.fixture(autouse=True)
def _nothing_left(tmp_path: Path) -> Iterator[None]:
    before = census()
    yield
    deadline = time.monotonic() + 5.0
    while (left := new_processes(before, str(tmp_path))) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_all(left)
    assert not left, f"processes left behind: {left}"


def witness(outcome: RunOutcome) -> dict[str, str]:
    value = json.loads(Path(outcome.attempt_dir, "evidence", "witness.json").read_bytes())
    assert isinstance(value, dict) and value, value
    return value


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's SHA-256, a directory, or a symlink's target."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            relative = str(path.relative_to(root))
            if path.is_symlink():
                found[relative] = "symlink:" + os.readlink(path)
            elif path.is_dir():
                found[relative] = "dir"
            else:
                found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def test_the_strongest_level_here_is_the_sandbox() -> None:
    # `make test` installs bubblewrap; a machine without it fails here instead
    # of passing every test below at a weaker level.
    assert available_level() is ContainmentLevel.SANDBOX


# --- 1. code a producer plants runs inside the checker ----------------------------------


def _plant_producer(targets: dict[str, Path], code: str) -> str:
    lines = [HONEST_PRODUCER, WITNESS, f"CODE = {code!r}\n"]
    module = targets.get("module")
    for name, path in targets.items():
        text = f"import {module.stem}\n" if path.suffix == ".pth" and module else "CODE"
        body = repr(text) if text != "CODE" else "CODE"
        lines.append(
            f"def plant_{name}():\n"
            f"    os.makedirs({str(path.parent)!r}, exist_ok=True)\n"
            f"    write_bytes({str(path)!r}, ({body}).encode())()\n"
            f"attempt({name!r}, plant_{name})\n"
        )
    lines.append("report()\n")
    return "".join(lines)


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_file():
            path.unlink()
    for path in paths:
        if path.parent.name == "checkerlib" and path.parent.is_dir():
            shutil.rmtree(path.parent)


@pytest.mark.parametrize("plant", ["pth", "sitecustomize", "package"])
def test_code_a_producer_plants_never_runs_in_the_checker(tmp_path: Path, plant: str) -> None:
    tag = tmp_path.name.replace("-", "_")
    module = SITE_PACKAGES / f"kernel_plant_{tag}.py"
    lib = tmp_path / "lib"
    targets = {
        "pth": {"module": module, "pth": SITE_PACKAGES / f"kernel_plant_{tag}.pth"},
        "sitecustomize": {"sitecustomize": SITE_PACKAGES / "sitecustomize.py"},
        "package": {"package": lib / "checkerlib" / "__init__.py"},
    }[plant]
    written = list(targets.values())
    assert not any(path.exists() for path in written), "a plant of an earlier run is left"
    code = planted_module(str(tmp_path), written)
    # The checker imports a pinned module beside it: a package directory of the
    # same name, which did not exist when the pin was taken, would win.
    checker_custom = REJECTING + (
        f"sys.path.insert(0, {str(lib)!r})\nimport checkerlib\nreceipt = checkerlib.note(receipt)\n"
    )
    lib.mkdir()
    library = lib / "checkerlib.py"
    library.write_text("def note(receipt):\n    return receipt\n")
    try:
        scenario = Scenario(
            tmp_path,
            producer=_plant_producer(targets, code),
            checker_custom=checker_custom,
            artifacts=("proof.txt", "witness.json"),
            checker_deps=(library,),
        )
        outcome = scenario.run()
        planted_after = [str(path) for path in written if path.exists()]
    finally:
        _remove(written)
    assert outcome.status is Status.BLOCKED, "the planted receipt passed"
    assert outcome.reason is Reason.CHECKER_REJECTED, outcome.metadata.decision.detail
    assert planted_after == []
    assert outcome.metadata.containment is ContainmentLevel.SANDBOX
    assert all(v.startswith("refused") for v in witness(outcome).values()), witness(outcome)


def _smt_manifest(tmp_path: Path, producer: Path) -> Path:
    out = tmp_path / "manifest"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_manifest.py"), str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads((out / "manifest.json").read_text())
    (entry,) = [c for c in document["checks"] if c["check_id"] == "smt-abs-false"]
    digest = hashlib.sha256(producer.read_bytes()).hexdigest()
    entry["producer"]["argv"] = ["{{python}}", str(producer), "{{request}}"]
    entry["producer"]["dependencies"] = [{"path": str(producer), "sha256": digest}]
    (out / "manifest.json").write_text(json.dumps(document))
    return out / "manifest.json"


def test_the_shipped_smt_pair_with_a_pth_plant_stays_blocked(tmp_path: Path) -> None:
    # smt-abs-false claims |x| < 100: false. A lying producer says "unsat" and
    # plants a .pth that would make the shipped cvc5 checker accept.
    tag = tmp_path.name.replace("-", "_")
    module = SITE_PACKAGES / f"kernel_plant_{tag}.py"
    pth = SITE_PACKAGES / f"kernel_plant_{tag}.pth"
    producer = tmp_path / "lying_producer.py"
    producer.write_text(
        "import json, os, sys\n"
        "request = json.load(open(sys.argv[1]))\n"
        "evidence = request['paths']['evidence']\n"
        f"for path, text in (({str(module)!r}, {planted_module(str(tmp_path), [module, pth])!r}),"
        f" ({str(pth)!r}, 'import {module.stem}\\n')):\n"
        "    try:\n"
        "        open(path, 'w').write(text)\n"
        "    except OSError:\n"
        "        pass\n"
        "spec = open(os.path.join(request['paths']['snapshot'],\n"
        "            request['claim']['specification'])).read()\n"
        "with open(os.path.join(evidence, 'abs_below_100.smt2'), 'w') as handle:\n"
        "    handle.write(spec + '(assert (not abs_below_100))\\n')\n"
        "open(os.path.join(evidence, 'z3-answers.txt'), 'w').write('abs_below_100 unsat\\n')\n"
    )
    manifest = _smt_manifest(tmp_path, producer)
    try:
        done = kernel(
            "check", "run", manifest, "smt-abs-false",
            "--job", EXAMPLES / "jobs" / "smt-abs-false.json", "--run-root", tmp_path / "runs",
            "--repo", EXAMPLES, "--run-id", "planted",
        )  # fmt: skip
        left = [str(p) for p in (module, pth) if p.exists()]
    finally:
        _remove([module, pth])
    printed = json.loads(done.stdout)
    metadata = printed["metadata"]
    assert done.returncode == 1, metadata
    assert (metadata["status"], metadata["reason"]) == ("BLOCKED", "checker_rejected"), metadata
    assert metadata["containment"] == "sandbox"
    assert left == []


# --- a census of what a checker step opens ----------------------------------------------


def _strace_opened(log: Path, marker: str) -> set[str]:
    """Paths the checker step opened or tried to open, from ``strace -f``.

    The step is the first process to execute a command naming ``marker`` (the
    checker's request: the sandbox's wrapper) and every process first seen after it: strace names
    each by its pid outside the namespace, while a clone inside it returns
    the namespace's pid, so the tree cannot be followed through clone. The
    kernel waits meanwhile; what it opens after the step only adds paths. A
    path that did not exist counts too: a plant is a file created where a step
    looks for one.
    """
    seen: set[int] = set()
    step: set[int] = set()
    paths: set[str] = set()
    started = False
    for line in log.read_text(errors="replace").splitlines():
        pid_text, _, call = line.partition(" ")
        if not pid_text.isdigit():
            continue
        pid = int(pid_text)
        call = call.strip()
        if not started and call.startswith("execve(") and marker in call:
            started = True
            step.add(pid)
        elif started and pid not in seen:
            step.add(pid)
        seen.add(pid)
        if started and pid in step and call.startswith("openat(") and '"' in call:
            paths.add(call.split('"')[1])
    assert started, "no checker sandbox in the trace"
    return {path for path in paths if path.startswith("/")}


def test_no_file_a_checker_step_opens_is_writable_by_the_producer(tmp_path: Path) -> None:
    strace = "/usr/bin/strace"
    assert os.access(strace, os.X_OK), "make test installs strace (Debian's strace package)"
    census_dir = tmp_path / "census"
    census_dir.mkdir()
    scenario = Scenario(census_dir, checker_custom=REJECTING)
    log = tmp_path / "strace.log"
    job = tmp_path / "job.json"
    job.write_bytes(dumps(scenario.job))
    done = subprocess.run(
        [strace, "-f", "-qq", "-s", "4096", "-o", str(log), "-e", "trace=openat,execve",
         sys.executable, "-c", KERNEL_MAIN,
         "check", "run", str(scenario.manifest_path), "demo", "--job", str(job),
         "--run-root", str(scenario.run_root), "--repo", str(scenario.repo), "--run-id", "seen"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    attempt = scenario.run_root / "seen"
    opened = _strace_opened(log, str(attempt / "checker" / "request.json"))
    # What a step may legitimately write is not code anyone loads: the evidence
    # (the producer's output, hashed before the checker runs and after it), the
    # checker's own receipt directory, each step's private /tmp and devices.
    mine = (str(attempt / "evidence") + "/", str(attempt / "checker") + "/")
    probed = sorted(
        os.path.normpath(p) for p in opened
        if not p.startswith(("/proc/", "/dev/", *mine))
        and not (p.startswith("/tmp/") and not p.startswith(str(tmp_path)))
    )  # fmt: skip
    existing = [p for p in probed if os.path.exists(p)]
    assert len(existing) > 20, probed  # the interpreter, its standard library, libc, ...
    assert any(p.endswith((".py", ".pyc")) for p in existing), probed
    assert any(not os.path.exists(p) for p in probed), probed  # e.g. a module looked for
    # Now the producer of another run tries, for each: to open it for writing
    # (no truncation, nothing written) or to create it where it was missing,
    # and to create a file beside it (inside it, for a directory).
    # The list goes into the producer's source: a file of the test's is outside
    # the producer's view (issue 34: a step sees only what it was given).
    prober = HONEST_PRODUCER + WITNESS + (
        "def create(path):\n"
        "    def action():\n"
        "        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))\n"
        "        os.unlink(path)\n"
        "    return action\n"
        f"for path in json.loads({json.dumps(probed)!r}):\n"
        "    if os.path.isdir(path):\n"
        "        attempt(path + ' (inside)', create(os.path.join(path, '.kernel-census')))\n"
        "    elif os.path.exists(path):\n"
        "        attempt(path, lambda: os.close(os.open(path, os.O_WRONLY)))\n"
        "    else:\n"
        "        attempt(path, create(path))\n"
        "    beside = os.path.join(os.path.dirname(path), '.kernel-census')\n"
        "    attempt(path + ' (beside)', create(beside))\n"
        "report()\n"
    )
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    outcome = Scenario(probe_dir, producer=prober, artifacts=("proof.txt", "witness.json")).run()
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    results = witness(outcome)
    assert len(results) == 2 * len(probed)
    writable = sorted(name for name, result in results.items() if not result.startswith("refused"))
    assert writable == [], writable


# --- 2. a producer writes outside evidence/ ---------------------------------------------


def test_a_producer_cannot_rewrite_the_operators_repository(tmp_path: Path) -> None:
    spec = tmp_path / "repo" / "spec" / "claim.txt"
    producer = HONEST_PRODUCER + WITNESS + (
        f"attempt('spec', write_bytes({str(spec)!r}, b'claim: rewritten\\n'))\n"
        f"attempt('new', write_bytes({str(spec.parent / 'new.txt')!r}, b'x'))\n"
        "report()\n"
    )
    scenario = Scenario(
        tmp_path, producer=producer, checker_custom=REJECTING,
        artifacts=("proof.txt", "witness.json"),
    )  # fmt: skip
    before = tree_digest(scenario.repo)
    first = scenario.run("r1")
    assert first.reason is Reason.CHECKER_REJECTED, first.metadata.decision.detail
    assert tree_digest(scenario.repo) == before
    assert all(v.startswith("refused") for v in witness(first).values())
    # The next run snapshots the operator's file, not a rewritten one.
    second = scenario.run("r2")
    inputs = {d.path: d.sha256 for d in second.metadata.checked.inputs}
    assert inputs["spec/claim.txt"] == hashlib.sha256(b"claim: 1 + 1 = 2\n").hexdigest()


def _forge_run(run_dir: Path) -> str:
    """Producer code that rewrites the BLOCKED run ``run_dir`` into a consistent PASS."""
    return (
        "import hashlib\n"
        "def forge():\n"
        f"    run = {str(run_dir)!r}\n"
        "    receipt_path = os.path.join(run, 'checker', 'receipt.json')\n"
        "    receipt = json.load(open(receipt_path))\n"
        "    receipt['verdict'] = 'accepted'\n"
        "    for o in receipt['obligations']:\n"
        "        o['result'] = 'accepted'\n"
        "    data = json.dumps(receipt).encode()\n"
        "    with open(receipt_path, 'wb') as handle:\n"
        "        handle.write(data)\n"
        "    meta_path = os.path.join(run, 'metadata.json')\n"
        "    meta = json.load(open(meta_path))\n"
        "    meta.update(verdict='accepted', status='PASS', reason=None,\n"
        "                detail='accepted by a valid receipt',\n"
        "                receipt_sha256=hashlib.sha256(data).hexdigest())\n"
        "    with open(meta_path, 'w') as handle:\n"
        "        json.dump(meta, handle)\n"
        "attempt('earlier run', forge)\n"
    )


def test_a_producer_cannot_rewrite_an_earlier_run(tmp_path: Path) -> None:
    honest = Scenario(tmp_path, checker_custom=REJECTING)
    first = honest.run("r1")
    assert first.reason is Reason.CHECKER_REJECTED
    before = tree_digest(Path(first.attempt_dir))
    attacker_dir = tmp_path / "attacker"
    attacker_dir.mkdir()
    attacker = Scenario(
        attacker_dir,
        producer=HONEST_PRODUCER + WITNESS + _forge_run(Path(first.attempt_dir)) + "report()\n",
        artifacts=("proof.txt", "witness.json"),
    )
    attacker.run_root = honest.run_root  # the same run root
    second = attacker.run("r2")
    assert witness(second)["earlier run"].startswith("refused"), witness(second)
    assert tree_digest(Path(first.attempt_dir)) == before
    audit = kernel("audit", first.attempt_dir, "--format", "json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    stored = json.loads(Path(first.attempt_dir, "metadata.json").read_bytes())
    assert stored["status"] == "BLOCKED" and stored["reason"] == "checker_rejected"


def test_a_producer_cannot_touch_its_own_runs_records(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + WITNESS + (
        "run = request['paths']['run_dir']\n"
        "for name in ('identity.json', 'job.json'):\n"
        "    attempt(name, write_bytes(os.path.join(run, name), b'{}'))\n"
        "attempt('metadata.json', lambda: os.mkdir(os.path.join(run, 'metadata.json')))\n"
        "attempt('checker/', lambda: os.mkdir(os.path.join(run, 'checker')))\n"
        "replays = os.path.join(os.path.dirname(run), 'replays')\n"
        "attempt('replays/', lambda: os.makedirs(os.path.join(replays, 'p1')))\n"
        "report()\n"
    )
    scenario = Scenario(tmp_path, producer=producer, artifacts=("proof.txt", "witness.json"))
    outcome = scenario.run()
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    assert all(v.startswith("refused") for v in witness(outcome).values()), witness(outcome)
    audit = kernel("audit", outcome.attempt_dir)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    replay = kernel(
        "check", "replay", outcome.attempt_dir, "--replay-id", "p1",
        "--manifest", operator_config(Path(outcome.attempt_dir))["manifest_path"],
        "--repo", scenario.repo,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    replayed = json.loads(replay.stdout)
    assert replayed["metadata"]["status"] == "PASS"
    assert kernel("audit", replayed["attempt_dir"]).returncode == 0


# --- 3. a concurrent run ----------------------------------------------------------------


def test_a_concurrent_runs_producer_cannot_rewrite_this_runs_receipt(tmp_path: Path) -> None:
    # This run's checker rejects, then lingers, so the other producer has a
    # window between the receipt being written and the kernel reading it.
    linger = "import atexit, time\natexit.register(time.sleep, 1.5)\n"
    victim = Scenario(tmp_path, checker_custom=REJECTING + linger)
    receipt = victim.run_root / "victim" / "checker" / "receipt.json"
    attacker_dir = tmp_path / "attacker"
    attacker_dir.mkdir()
    rewriter = HONEST_PRODUCER + WITNESS + (
        "import time\n"
        f"target = {str(receipt)!r}\n"
        "deadline = time.time() + 20\n"
        "while not os.path.exists(target) and time.time() < deadline:\n"
        "    time.sleep(0.001)\n"
        "def rewrite():\n"
        "    while True:  # the receipt may be seen half written: read it whole\n"
        "        try:\n"
        "            r = json.load(open(target))\n"
        "            break\n"
        "        except ValueError:\n"
        "            if time.time() > deadline:\n"
        "                raise\n"
        "            time.sleep(0.001)\n"
        "    r['verdict'] = 'accepted'\n"
        "    for o in r['obligations']:\n"
        "        o['result'] = 'accepted'\n"
        "    open(target, 'w').write(json.dumps(r))\n"
        "attempt('receipt', rewrite)\n"
        "attempt('beside', write_bytes(target + '.new', b'{}'))\n"
        "report()\n"
    )
    attacker = Scenario(attacker_dir, producer=rewriter, artifacts=("proof.txt", "witness.json"))
    results: dict[str, RunOutcome] = {}
    thread = threading.Thread(target=lambda: results.setdefault("a", attacker.run("attacker")))
    thread.start()
    try:
        victim_outcome = victim.run("victim")
    finally:
        thread.join(60)
    assert victim_outcome.reason is Reason.CHECKER_REJECTED, victim_outcome.metadata.decision
    seen = witness(results["a"])
    assert set(seen) == {"receipt", "beside"}
    assert all(v.startswith("refused") for v in seen.values()), seen
    assert json.loads(receipt.read_bytes())["verdict"] == "rejected"


# --- 4. no network ----------------------------------------------------------------------


def test_a_producer_reaches_no_listener_on_loopback(tmp_path: Path) -> None:
    received: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.2)
        port = server.getsockname()[1]
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    continue
                with connection:
                    received.append(connection.recv(100))

        listener = threading.Thread(target=accept)
        listener.start()
        producer = HONEST_PRODUCER + WITNESS + (
            "import socket\n"
            "def connect():\n"
            f"    with socket.create_connection(('127.0.0.1', {port}), timeout=2) as s:\n"
            "        s.sendall(b'exfiltrated')\n"
            "attempt('loopback', connect)\n"
            "report()\n"
        )
        try:
            outcome = Scenario(
                tmp_path, producer=producer, artifacts=("proof.txt", "witness.json")
            ).run()
        finally:
            stop.set()
            listener.join(5)
    assert received == []
    assert witness(outcome)["loopback"].startswith("refused"), witness(outcome)


# --- 5. bounded resources ---------------------------------------------------------------


def test_a_one_terabyte_sparse_artifact_is_refused_quickly(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + (
        "with open(os.path.join(evidence, 'proof.txt'), 'r+b') as handle:\n"
        "    handle.truncate(1 << 40)\n"
    )
    started = time.monotonic()
    outcome = Scenario(tmp_path, producer=producer).run()
    elapsed = time.monotonic() - started
    assert outcome.status is Status.BLOCKED
    # The file-size limit stops the producer itself (EFBIG): it never exists.
    assert outcome.reason is Reason.PRODUCER_FAILED, outcome.metadata.decision.detail
    assert os.stat(Path(outcome.attempt_dir, "evidence", "proof.txt")).st_size < 1 << 40
    assert "File too large" in Path(outcome.attempt_dir, "producer", "stderr.log").read_text()
    assert elapsed < 20, elapsed  # not a benchmark: before, it was still hashing after 25 s


def test_a_two_gibibyte_allocation_fails_in_the_step(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + "block = bytearray(2 * 1024 ** 3)\n"
    outcome = Scenario(tmp_path, producer=producer).run()
    assert outcome.reason is Reason.PRODUCER_FAILED, outcome.metadata.decision.detail
    assert "MemoryError" in Path(outcome.attempt_dir, "producer", "stderr.log").read_text()
    assert outcome.metadata.limits is not None
    assert outcome.metadata.limits.memory_bytes < 2 * 1024**3


def test_a_manifest_can_lower_a_limit_and_the_metadata_records_it(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + "block = bytearray(300 * 1024 ** 2)\n"
    scenario = Scenario(tmp_path, producer=producer)
    document: dict[str, Any] = scenario.document()
    limits = {
        "memory_bytes": 256 * 1024**2, "processes": 64, "open_files": 64,
        "file_size_bytes": 1024**2, "cpu_seconds": 30, "tmpfs_bytes": 1024**2,
        "artifact_bytes": 1024**2, "evidence_bytes": 2 * 1024**2,
    }  # fmt: skip
    document["checks"][0]["limits"] = limits
    scenario.write_manifest(document)
    outcome = scenario.run()
    assert outcome.reason is Reason.PRODUCER_FAILED, outcome.metadata.decision.detail
    stored = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    # ``entries`` left out of the manifest: its default is what the steps ran under.
    assert stored["limits"] == {**limits, "entries": DEFAULT_STEP_LIMITS.entries}
    identity = json.loads(Path(outcome.attempt_dir, "identity.json").read_bytes())
    # The limits are part of what was approved, a left-out ``entries`` at its default.
    assert identity["limits"] == {**limits, "entries": DEFAULT_STEP_LIMITS.entries}


def test_the_private_tmp_is_empty_bounded_and_not_shared(tmp_path: Path) -> None:
    producer = HONEST_PRODUCER + WITNESS + (
        "WITNESS['listing'] = 'refused: ' + ','.join(sorted(os.listdir('/tmp')))\n"
        "WITNESS['home'] = 'refused: ' + os.environ['HOME']\n"
        "attempt('fill', write_bytes('/tmp/fill', b'x' * (128 * 1024 * 1024)))\n"
        "attempt('shm', write_bytes('/dev/shm/fill', b'x' * (128 * 1024 * 1024)))\n"
        "WITNESS['python'] = 'refused: ' + ','.join(sorted(\n"
        "    k for k in os.environ if k.startswith(('PYTHON', 'LD_'))))\n"
        "report()\n"
    )
    scenario = Scenario(tmp_path, producer=producer, artifacts=("proof.txt", "witness.json"))
    seen = witness(scenario.run())
    assert seen["home"] == "refused: /tmp"
    # Only what the step needs from the real /tmp is bound back (read-only): the
    # test's directory (attempt, scripts) and the interpreter, where it lives there.
    needed = (tmp_path, Path(sys.executable), Path(os.path.realpath(sys.executable)))
    tops = sorted({p.relative_to("/tmp").parts[0] for p in needed if p.is_relative_to("/tmp")})
    assert seen["listing"] == "refused: " + ",".join(tops)
    assert seen["fill"].startswith("refused") and seen["shm"].startswith("refused"), seen
    assert seen["python"] == "refused: PYTHONDONTWRITEBYTECODE,PYTHONNOUSERSITE,PYTHONSAFEPATH"


def test_a_check_requiring_the_sandbox_is_blocked_below_it(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    document = scenario.document()
    document["checks"][0]["required_containment"] = "sandbox"
    scenario.write_manifest(document)
    outcome = scenario.run(max_containment=ContainmentLevel.NAMESPACE)
    assert outcome.reason is Reason.CONTAINMENT_UNAVAILABLE
    assert "sandbox" in outcome.metadata.decision.detail
    assert outcome.metadata.execution.producer is None
    assert scenario.run("r2").status is Status.PASS


def test_a_manifests_evidence_bounds_replace_the_callers(tmp_path: Path) -> None:
    # The step may write a 3 MiB file (its file-size limit is 4 MiB), but the
    # check approved at most 2 MiB per artifact: the kernel refuses it before
    # hashing, even though the caller's own bound (the default) is larger.
    producer = HONEST_PRODUCER + (
        "with open(os.path.join(evidence, 'proof.txt'), 'wb') as handle:\n"
        "    handle.write(b'x' * (3 * 1024 * 1024))\n"
    )
    scenario = Scenario(tmp_path, producer=producer)
    document: dict[str, Any] = scenario.document()
    limits = {
        "memory_bytes": 1024**3, "processes": 64, "open_files": 64,
        "file_size_bytes": 4 * 1024**2, "cpu_seconds": 30, "tmpfs_bytes": 1024**2,
        "artifact_bytes": 2 * 1024**2, "evidence_bytes": 8 * 1024**2,
    }  # fmt: skip
    document["checks"][0]["limits"] = limits
    scenario.write_manifest(document)
    outcome = scenario.run()
    assert outcome.reason is Reason.ARTIFACT_TOO_LARGE, outcome.metadata.decision.detail
    assert outcome.metadata.limits is not None
    assert outcome.metadata.limits.artifact_bytes == 2 * 1024**2


def test_resolved_paths_are_realpath_s_for_links_dots_fifos_and_absent_paths(
    tmp_path: Path,
) -> None:
    # StepView.visible resolves every needed path of every launch through an O_PATH
    # descriptor; it must name exactly what os.path.realpath names, or a path under
    # /tmp reached through a link would not be bound into the step.
    from kernel.external._sandbox import _resolved

    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "real" / "file").write_bytes(b"x")
    os.mkfifo(tmp_path / "real" / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "relative").symlink_to("real/inner")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "absent")
    for name in ("real", "link/inner", "link/file", "link/fifo", "relative/..", "link/../link",
                 "loop", "dangling", "absent/deeper", "link/absent", "real/./inner/"):
        path = str(tmp_path / name)
        assert _resolved(path) == os.path.realpath(path), name


