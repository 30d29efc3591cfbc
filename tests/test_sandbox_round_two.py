"""Sandbox round two (issue 34): a step is never host root and sees only what it was given.

Each test is one finding of issue 34, tried as its attacker did: a real
producer under ``run_check`` at the strongest level, whatever user runs the
suite (CI runs it as root, which is where every one of these findings was
seen). Each asserts the attack left nothing: no host setting changed, no
secret under the run root, no setuid file or world-writable mode kept, no
uid-wide quota taken from the kernel's user. The tests restore any host
setting they touch and use a benign sysctl, never ``core_pattern``.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from kernel.external import Reason, RunOutcome, Status
from tests.support.processes import seen_by_some_process
from tests.test_external_helpers import HONEST_PRODUCER, Scenario
from tests.test_sandbox import WITNESS, witness

pytestmark = pytest.mark.slow

#: A benign, host-wide sysctl that only root may write (never core_pattern).
SYSCTL = Path("/proc/sys/kernel/printk_ratelimit")


def _producer(body: str) -> str:
    return HONEST_PRODUCER + WITNESS + body + "report()\n"


def _run(
    tmp_path: Path, body: str, expect: Status = Status.PASS
) -> tuple[Scenario, dict[str, str]]:
    scenario = Scenario(tmp_path, producer=_producer(body),
                        artifacts=("proof.txt", "witness.json"))
    outcome = scenario.run()
    assert outcome.status is expect, outcome.metadata.decision.detail
    return scenario, witness(outcome)


def test_no_host_wide_proc_knob_is_writable_from_a_step(tmp_path: Path) -> None:
    # Finding 1: as root, 769 entries under /proc were writable and a producer
    # changed kernel.printk_ratelimit on the host. The producer writes back the
    # value it read, so the host is unchanged even if the write went through.
    before = SYSCTL.read_bytes()
    try:
        _, seen = _run(tmp_path, (
            "import os\n"
            "writable = []\n"
            "for top in ('/proc/sys', '/proc/sysrq-trigger', '/sys'):\n"
            "    for folder, dirs, files in os.walk(top):\n"
            "        for name in files:\n"
            "            path = os.path.join(folder, name)\n"
            "            if os.access(path, os.W_OK):\n"
            "                writable.append(path)\n"
            "    if os.path.isfile(top) and os.access(top, os.W_OK):\n"
            "        writable.append(top)\n"
            "WITNESS['writable'] = json.dumps(writable)\n"
            f"value = open({str(SYSCTL)!r}, 'rb').read()\n"
            f"attempt('sysctl', write_bytes({str(SYSCTL)!r}, value))\n"
        ))
    finally:
        assert SYSCTL.read_bytes() == before  # restored if it ever changed
    assert json.loads(seen["writable"]) == []
    assert seen["sysctl"].startswith("refused"), seen["sysctl"]


def test_a_setuid_copy_and_a_world_writable_evidence_directory_are_not_kept(
    tmp_path: Path,
) -> None:
    # Finding 2: a producer copied /usr/bin/id into evidence/, made it 4755 and
    # evidence/ 0777; both stayed on disk, owned by root.
    scenario, seen = _run(tmp_path, (
        "import shutil, stat\n"
        "copy = os.path.join(evidence, 'id')\n"
        "def plant():\n"
        "    shutil.copyfile('/usr/bin/id', copy)\n"
        "    os.chmod(copy, 0o6755)\n"
        "    os.chmod(evidence, 0o777)\n"
        "    os.mkdir(os.path.join(evidence, 'drop'))\n"
        "    os.chmod(os.path.join(evidence, 'drop'), 0o1777)\n"
        "attempt('plant', plant)\n"
    ), expect=Status.BLOCKED)  # artifact_undeclared, as before
    assert seen["plant"] == "written"  # the producer may do it inside; nothing is kept
    kernel = (os.geteuid(), os.getegid())
    for folder, dirs, files in os.walk(scenario.run_root):
        for name in (folder, *(os.path.join(folder, n) for n in dirs + files)):
            info = os.lstat(name)
            if stat.S_ISLNK(info.st_mode):
                continue
            assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), name
            assert not info.st_mode & 0o022, (name, oct(info.st_mode))
            assert (info.st_uid, info.st_gid) == kernel, name


def _secret_places(tmp_path: Path) -> list[Path]:
    tag = tmp_path.name
    places = [tmp_path / "operator" / "id_test"]
    for top in ("/root", "/home", "/run", "/var/tmp", "/srv"):
        if os.path.isdir(top) and os.access(top, os.W_OK):
            places.append(Path(top) / f".kernel-secret-{tag}")
    return places


def test_no_secret_outside_the_view_reaches_the_run_store(tmp_path: Path) -> None:
    # Finding 4: the producer read a 0600 key under /root, /etc/shadow, other
    # runs and the operator's repository, and copied them into its evidence and
    # its stdout. A fake secret in each place must appear nowhere under the run root.
    places = _secret_places(tmp_path)
    marker = f"KERNEL-FAKE-SECRET-{os.getpid()}-{time.monotonic_ns()}"
    other_run = tmp_path / "runs" / "earlier" / "evidence"
    other_run.mkdir(parents=True)
    places.append(other_run / "proof.txt")
    try:
        for place in places:
            place.parent.mkdir(parents=True, exist_ok=True)
            place.write_text(marker)
            os.chmod(place, 0o600)
        targets = [str(p) for p in places] + ["/etc/shadow", "/etc/gshadow"]
        scenario, seen = _run(tmp_path, (
            f"for path in {targets!r}:\n"
            "    def steal(path=path):\n"
            "        data = open(path, 'rb').read()\n"
            "        sys.stdout.write(data.decode('latin-1'))\n"
            "        open(os.path.join(evidence, 'loot'), 'ab').write(data)\n"
            "    attempt(path, steal)\n"
        ))
        for target in targets:
            assert seen[target].startswith("refused"), (target, seen[target])
        for folder, _, files in os.walk(scenario.run_root):
            for name in files:
                path = Path(folder, name)
                if path.parent == other_run:
                    continue
                assert marker.encode() not in path.read_bytes(), path
    finally:
        for place in places:
            place.unlink(missing_ok=True)


def test_a_step_takes_no_uid_wide_inotify_quota_from_the_kernel(tmp_path: Path) -> None:
    # Finding 6: a producer held every inotify instance of uid 0 (128), and
    # inotify_init failed with EMFILE in every root process outside.
    limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    body = (
        "import ctypes, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"held = [fd for fd in (libc.inotify_init() for _ in range({limit} + 8)) if fd >= 0]\n"
        "WITNESS['held'] = str(len(held))\n"
        "open(os.path.join(evidence, 'holding'), 'w').close()\n"
        "time.sleep(3)\n"
        "os.remove(os.path.join(evidence, 'holding'))\n"
    )
    scenario = Scenario(tmp_path, producer=_producer(body),
                        artifacts=("proof.txt", "witness.json"))
    outcomes: list[RunOutcome] = []
    runner = threading.Thread(target=lambda: outcomes.append(scenario.run()))
    runner.start()
    holding = scenario.run_root / "run-1" / "evidence" / "holding"
    deadline = time.monotonic() + 30
    while not seen_by_some_process(holding):
        assert runner.is_alive() and time.monotonic() < deadline, "the producer never held"
        time.sleep(0.02)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    error = ctypes.get_errno()
    if fd >= 0:
        os.close(fd)
    runner.join(60)
    if os.geteuid() == 0:
        assert fd >= 0, os.strerror(error)  # the step's uid is not the kernel's
    else:
        # An ordinary kernel's step is its own uid in a user namespace (issue 34,
        # deliverable 1): a uid-wide quota is that user's own, shared while the
        # step runs (THREAT_MODEL.md), and whole again once it ended.
        assert fd < 0, "the ordinary user's quota was not shared: update THREAT_MODEL.md"
        after = libc.inotify_init()
        assert after >= 0, os.strerror(ctypes.get_errno())
        os.close(after)
    assert [outcome.status for outcome in outcomes] == [Status.PASS]
    assert int(witness(outcomes[0])["held"]) >= min(limit, 100)


def test_the_process_limit_holds_for_a_root_kernel_too(tmp_path: Path) -> None:
    # Finding 7: 600 forks succeeded against processes=256, since Linux does not
    # enforce RLIMIT_NPROC for uid 0. A step's uid is never 0 now.
    body = (
        "import signal, time\n"
        "children = []\n"
        "for _ in range(600):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "WITNESS['forked'] = str(len(children))\n"
        "for pid in children:\n"
        "    os.kill(pid, signal.SIGKILL)\n"
        "for pid in children:\n"
        "    os.waitpid(pid, 0)\n"
    )
    scenario, seen = _run(tmp_path, body)
    assert int(seen["forked"]) < 256, seen
    assert scenario.entry().step_limits().processes == 256


def test_no_unix_socket_outside_is_reachable_from_a_step(tmp_path: Path) -> None:
    # Finding 3: connect() through the read-only bind reached listeners at
    # /root/x.sock and /run/x.sock, which saw SO_PEERCRED uid=0. Listeners here:
    # one in a directory the step does see (the interpreter's prefix, bound
    # read-only into every step), one hidden (the test's own directory), one
    # abstract; the step may not even make an AF_UNIX socket (the filter).
    tag = f"kernel-test-{os.getpid()}-{tmp_path.name}"
    visible = Path(sys.prefix) / f".{tag}.sock"
    hidden = tmp_path / "x.sock"
    listeners = []
    # The visible listener needs a directory the test may write in and every
    # step sees: the interpreter's prefix, writable by a root suite only. The
    # step's own AF_UNIX socket is refused either way (below).
    addresses = ([str(visible)] if os.access(sys.prefix, os.W_OK) else []) + [
        str(hidden), "\0" + tag]
    try:
        for address in addresses:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            listener.listen(4)
            listener.settimeout(0)
            listeners.append(listener)
        _, seen = _run(tmp_path, (
            "import socket\n"
            "attempt('unix socket', lambda: socket.socket(socket.AF_UNIX).close())\n"
            f"for address in {addresses!r}:\n"
            "    def reach(address=address):\n"
            "        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "        client.connect(address)\n"
            "    attempt(repr(address), reach)\n"
            "def pair():\n"
            "    a, b = socket.socketpair()\n"
            "    a.sendall(b'x')\n"
            "    assert b.recv(1) == b'x'\n"
            "attempt('socketpair', pair)\n"
        ))
        assert seen["unix socket"].startswith("refused: Permission denied"), seen
        for address in addresses:
            assert seen[repr(address)].startswith("refused"), (address, seen)
        assert seen["socketpair"] == "written"  # a well-behaved solver's pipe still works
        for listener in listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()
        visible.unlink(missing_ok=True)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long
_SESSION_KEYRING = -3
_ADD_KEY, _KEYCTL = 248, 250  # x86-64 syscall numbers
_KEYCTL_READ, _KEYCTL_UNLINK = 11, 9


def _session_keys() -> set[int]:
    buffer = ctypes.create_string_buffer(4096)
    size = _LIBC.syscall(_KEYCTL, _KEYCTL_READ, _SESSION_KEYRING, buffer, 4096)
    assert size >= 0, os.strerror(ctypes.get_errno())
    raw = buffer.raw[:size]
    return {int.from_bytes(raw[i:i + 4], "little", signed=True) for i in range(0, size, 4)}


def test_a_step_neither_reads_nor_changes_the_kernel_s_session_keyring(
    tmp_path: Path,
) -> None:
    # Finding 5: a producer read a key planted outside, added its own and
    # unlinked another; the change outlived the step.
    marker = f"kernel-secret-{os.getpid()}".encode()
    planted = _LIBC.syscall(_ADD_KEY, b"user", b"kernel-test-planted", marker, len(marker),
                            _SESSION_KEYRING)
    assert planted > 0, os.strerror(ctypes.get_errno())
    try:
        before = _session_keys()
        _, seen = _run(tmp_path, (
            "import ctypes\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\n"
            "def call(*args):\n"
            "    def action():\n"
            "        if libc.syscall(*args) < 0:\n"
            "            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
            "    return action\n"
            "buffer = ctypes.create_string_buffer(4096)\n"
            f"attempt('read', call({_KEYCTL}, {_KEYCTL_READ}, {planted}, buffer, 4096))\n"
            f"attempt('list', call({_KEYCTL}, {_KEYCTL_READ}, {_SESSION_KEYRING}, buffer, 4096))\n"
            f"attempt('add', call({_ADD_KEY}, b'user', b'planted-by-step', b'x', 1, "
            f"{_SESSION_KEYRING}))\n"
            f"attempt('unlink', call({_KEYCTL}, {_KEYCTL_UNLINK}, {planted}, "
            f"{_SESSION_KEYRING}))\n"
        ))
        assert all(result.startswith("refused") for result in seen.values()), seen
        assert _session_keys() == before
    finally:
        _LIBC.syscall(_KEYCTL, _KEYCTL_UNLINK, planted, _SESSION_KEYRING)


# From inside a step: every mount and whether it is writable, what the root and
# /etc hold, and every filesystem socket it can find and connect to.
_CENSUS = """
import socket, stat
mounts = []
for line in open('/proc/self/mountinfo'):
    fields = line.split()
    options = fields[5].split(',')
    mounts.append([fields[4], 'rw' in options])
connectable = []
for top, dirs, files in os.walk('/'):
    if top in ('/proc', '/sys', '/dev'):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(top, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode):
            try:
                client = socket.socket(socket.AF_UNIX)
                client.connect(path)
                connectable.append(path)
            except OSError as exc:
                WITNESS['socket ' + path] = 'refused: ' + (exc.strerror or str(exc))
WITNESS['census'] = json.dumps({
    'mounts': mounts, 'root': sorted(os.listdir('/')), 'etc': sorted(os.listdir('/etc')),
    'connectable': connectable, 'abstract': open('/proc/net/unix').read().count('@'),
})
"""


def test_a_census_from_inside_a_step_finds_nothing_writable_readable_or_connectable_beyond_its_view(
    tmp_path: Path,
) -> None:
    # Issue 34, deliverable 7: from inside the step, every path it can write,
    # every path it can read outside its view and every socket it can reach.
    from kernel.external._sandbox import ETC_ENTRIES, SYSTEM_DIRS

    scenario, seen = _run(tmp_path, _CENSUS)
    census = json.loads(seen["census"])
    evidence = str(scenario.run_root / "run-1" / "evidence")
    # Writable and the step's own: its output, its private tmpfs, its /proc, and
    # bubblewrap's device nodes (bound one by one; writing one stores nothing,
    # and /dev/tty is no terminal: the step leads a new session).
    devices = {f"/dev/{name}" for name in ("full", "null", "random", "tty", "urandom", "zero")}
    private = {"/tmp", "/dev/shm", "/proc", "/dev/pts", "/dev/mqueue", evidence, *devices}
    writable = sorted(point for point, rw in census["mounts"] if rw and point not in private)
    assert writable == [], writable
    # The root holds the system, /etc, /dev, /proc, /tmp and the first component of
    # what the step was given (its attempt, its pins, its interpreter) only.
    given = {str(scenario.run_root), sys.executable, sys.prefix, sys.base_prefix,
             str(scenario.producer_script), str(scenario.checker_script)}
    expected_root = {p.strip("/").split("/")[0] for p in (*SYSTEM_DIRS, "/etc", "/dev", "/proc",
                                                         "/tmp")}
    expected_root |= {os.path.realpath(p).strip("/").split("/")[0] for p in given}
    expected_root |= {p.strip("/").split("/")[0] for p in given}
    assert set(census["root"]) <= expected_root, set(census["root"]) - expected_root
    assert "root" not in census["root"] or os.path.realpath(sys.base_prefix).startswith("/root/")
    assert {"home", "run", "var", "srv", "opt", "mnt"}.isdisjoint(census["root"]), census["root"]
    assert set(census["etc"]) <= {os.path.basename(p) for p in ETC_ENTRIES}, census["etc"]
    assert "shadow" not in census["etc"]
    assert census["connectable"] == [] and census["abstract"] == 0, census


def _limited(tmp_path: Path, body: str, **lowered: int) -> RunOutcome:
    from kernel.external._step_cgroup import cgroup_available

    if not cgroup_available():
        # An ordinary user on a machine that delegates no cgroup to it (these
        # machines mount v1 with no delegation): the totals are not given there,
        # and the step keeps only its per-process rlimits (ADR 0021).
        pytest.skip("no cgroup can be made for a step by this user here")
    scenario = Scenario(tmp_path, producer=_producer(body),
                        artifacts=("proof.txt", "witness.json"))
    document = scenario.document()
    limits = {
        "memory_bytes": 1024**3, "processes": 256, "open_files": 256,
        "file_size_bytes": 256 * 1024**2, "cpu_seconds": 600, "tmpfs_bytes": 64 * 1024**2,
        "artifact_bytes": 256 * 1024**2, "evidence_bytes": 1024**3, **lowered,
    }  # fmt: skip
    document["checks"][0]["limits"] = limits
    scenario.write_manifest(document)
    return scenario.run()


def _stopped(outcome: RunOutcome, reason: Reason) -> str:
    """The detail of an outcome BLOCKED for ``reason``."""
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is reason, outcome.metadata.decision.detail
    return outcome.metadata.decision.detail


def test_memfds_beyond_the_memory_limit_stop_the_step_with_a_typed_reason(
    tmp_path: Path,
) -> None:
    # Finding 7: memfds took 3 GiB of host memory while the producer's own
    # VmSize showed 14 MB; the address-space limit never saw them. Here 512 MiB
    # of memfds against memory_bytes = 128 MiB for the step as a whole.
    body = (
        "fds = []\n"
        "for _ in range(64):\n"
        "    fd = os.memfd_create('hoard')\n"
        "    os.write(fd, b'x' * (8 * 1024 * 1024))\n"
        "    fds.append(fd)\n"
        "WITNESS['held'] = str(len(fds))\n"
    )
    detail = _stopped(_limited(tmp_path, body, memory_bytes=128 * 1024**2),
                      Reason.MEMORY_LIMIT_REACHED)
    assert "memory_bytes=134217728" in detail


def test_children_each_under_the_limit_are_bounded_together(tmp_path: Path) -> None:
    # Finding 7: five children of 800 MiB each allocated 4 GiB against a
    # per-process limit. Four children of 48 MiB against 128 MiB in total.
    body = (
        "import signal, time\n"
        "children = []\n"
        "for _ in range(4):\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(48 * 1024 * 1024)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        os.write(w, b'1')\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    children.append(pid)\n"
        "    os.close(w)\n"
        "    os.read(r, 1)  # b'' if the child died allocating\n"
        "time.sleep(0.5)\n"
        "dead = [pid for pid in children if os.waitpid(pid, os.WNOHANG)[0]]\n"
        "for pid in children:\n"
        "    os.kill(pid, signal.SIGKILL)\n"
        "if dead:  # the total held: some child was killed to keep it\n"
        "    sys.exit(1)\n"
    )
    _stopped(_limited(tmp_path, body, memory_bytes=128 * 1024**2), Reason.MEMORY_LIMIT_REACHED)


def test_forks_beyond_the_process_limit_stop_the_step_with_a_typed_reason(
    tmp_path: Path,
) -> None:
    body = (
        "import time\n"
        "for _ in range(100):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
    )
    _stopped(_limited(tmp_path, body, processes=32), Reason.PROCESS_LIMIT_REACHED)
