"""The step syscall filter (issue 34, deliverable 3), with real processes under bubblewrap.

``kernel.external._seccomp.step_filter_bpf`` is written to a file and handed to
``bwrap --seccomp FD``; a Python snippet inside the sandbox tries each denied
call family and each ordinary operation a solver needs, and reports the errno
of each as JSON (0: the call succeeded). The same snippet run without
``--seccomp`` shows that the filter, not the machine, is what denies.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernel.external._seccomp import SeccompUnavailableError, step_filter_bpf

BWRAP = Path("/usr/bin/bwrap")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

_SYSCALLS = (
    "keyctl", "add_key", "unshare", "clone", "clone3", "mount", "fsopen", "ptrace",
    "process_vm_readv", "perf_event_open", "bpf", "userfaultfd", "io_uring_setup",
    "personality", "ioctl", "socket",
)

SNIPPET = r"""
import ctypes, fcntl, json, os, socket, subprocess, sys, termios, threading
NR = json.loads(sys.argv[1])
ONLY = set(json.loads(sys.argv[2]))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(name, *args):
    ctypes.set_errno(0)
    conv = [ctypes.c_ulong(a & (2**64 - 1)) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(NR[name]), *conv)
    return r, (ctypes.get_errno() if r < 0 else 0)

def raw(name, *args):
    return call(name, *args)[1]

def clone_newuser():
    r, e = call("clone", 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
    return e

def persona(value):
    r, e = call("personality", value)
    if r >= 0:
        call("personality", 0)
    return e

def on_controlling_tty(request):
    # TIOCSTI is refused by the kernel on a tty that is not the caller's
    # controlling tty, so the probe makes a pty its controlling tty first.
    master, slave = os.openpty()
    name = os.ttyname(slave)
    os.close(slave)
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        fd = os.open(name, os.O_RDWR)
        os.write(wr, str(raw("ioctl", fd, request, ctypes.c_char_p(b"x"))).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    return int(os.read(rd, 16))

def tioclinux():
    master, slave = os.openpty()
    return raw("ioctl", slave, termios.TIOCLINUX, ctypes.c_char_p(b"\x00"))

def unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    return 0

def unix_socket_high_bits():
    r, e = call("socket", (1 << 32) | socket.AF_UNIX, socket.SOCK_STREAM, 0)
    if r >= 0:
        os.close(r)
    return e

def ok(fn):
    fn()
    return 0

def socketpair():
    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"

def fork_and_wait():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7

def threads():
    out = []
    t = threading.Thread(target=lambda: out.append(1))
    t.start()
    t.join()
    assert out == [1]

def pipe():
    r, w = os.pipe()
    os.write(w, b"x")
    assert os.read(r, 1) == b"x"

def read_file():
    with open("/etc/passwd", "rb") as f:
        assert f.read(1)

def winsize():
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8)

PROBES = {
    "keyctl": lambda: raw("keyctl", 0, -3, 1),  # KEYCTL_GET_KEYRING_ID, session
    "add_key": lambda: raw("add_key", b"user", b"probe", b"v", 1, -2),  # process keyring
    "unshare": lambda: raw("unshare", 0x10000000),  # CLONE_NEWUSER
    "clone_newuser": clone_newuser,
    "clone3": lambda: raw("clone3", 0, 0),
    "mount": lambda: raw("mount", b"none", b"/tmp", b"tmpfs", 0, 0),
    "fsopen": lambda: raw("fsopen", b"tmpfs", 0),
    "ptrace": lambda: raw("ptrace", 0, 0, 0, 0),  # PTRACE_TRACEME
    "process_vm_readv": lambda: raw("process_vm_readv", os.getpid(), 0, 0, 0, 0, 0),
    "perf_event_open": lambda: raw("perf_event_open", 0, 0, -1, -1, 0),
    "bpf": lambda: raw("bpf", 0, 0, 0),
    "userfaultfd": lambda: raw("userfaultfd", 0),
    "io_uring_setup": lambda: raw("io_uring_setup", 1, 0),
    "personality_linux32": lambda: persona(8),
    "personality_high_bits": lambda: persona((1 << 32) | 8),
    "personality_query": lambda: persona(0xFFFFFFFF),
    "personality_linux": lambda: persona(0),
    "tiocsti": lambda: on_controlling_tty(termios.TIOCSTI),
    "tiocsti_high_bits": lambda: on_controlling_tty((1 << 32) | termios.TIOCSTI),
    "tioclinux": tioclinux,
    "unix_socket": unix_socket,
    "unix_socket_high_bits": unix_socket_high_bits,
    "socketpair": lambda: ok(socketpair),
    "fork_and_wait": lambda: ok(fork_and_wait),
    "subprocess_true": lambda: subprocess.run(["/bin/true"], check=False).returncode,
    "threads": lambda: ok(threads),
    "pipe": lambda: ok(pipe),
    "read_file": lambda: ok(read_file),
    "inet_socket": lambda: ok(lambda: socket.socket(socket.AF_INET).close()),
    "netlink_socket": lambda: ok(
        lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()),
    "tty_winsize": lambda: ok(winsize),
}
out = {}
for name, probe in PROBES.items():
    if name in ONLY:
        try:
            out[name] = probe()
        except OSError as exc:
            out[name] = exc.errno
print(json.dumps(out))
"""

DENIED = {
    "keyctl": errno.EPERM,
    "add_key": errno.EPERM,
    "unshare": errno.EPERM,
    "clone_newuser": errno.EPERM,
    "clone3": errno.ENOSYS,
    "mount": errno.EPERM,
    "fsopen": errno.ENOSYS,
    "ptrace": errno.EPERM,
    "process_vm_readv": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "bpf": errno.EPERM,
    "userfaultfd": errno.EPERM,
    "io_uring_setup": errno.EPERM,
    "personality_linux32": errno.EPERM,
    "personality_high_bits": errno.EPERM,
    "tiocsti": errno.EPERM,
    "tiocsti_high_bits": errno.EPERM,
    "tioclinux": errno.EPERM,
    "unix_socket": errno.EACCES,
    "unix_socket_high_bits": errno.EACCES,
}
ALLOWED = (
    "personality_query", "personality_linux", "socketpair", "fork_and_wait", "subprocess_true",
    "threads", "pipe", "read_file", "inet_socket", "netlink_socket", "tty_winsize",
)
# Calls that succeed (or fail otherwise) without the filter: the filter is what denies them.
UNFILTERED = ("keyctl", "add_key", "clone3", "process_vm_readv", "tiocsti", "tioclinux",
              "unix_socket", "unix_socket_high_bits")


def _filter_or_skip() -> bytes:
    """The compiled filter, or skip the test where libseccomp or bwrap is missing."""
    if not os.access(BWRAP, os.X_OK):
        pytest.skip("bubblewrap is not installed at /usr/bin/bwrap")
    try:
        return step_filter_bpf()
    except SeccompUnavailableError as exc:
        pytest.skip(f"seccomp filter unavailable: {exc}")


@functools.cache
def _probe(seccomp: bool) -> dict[str, int]:
    """Run every probe in one bubblewrap sandbox, with or without the filter."""
    import pyseccomp

    program = _filter_or_skip()
    numbers = {n: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, n) for n in _SYSCALLS}
    only = [*DENIED, *ALLOWED] if seccomp else list(UNFILTERED)
    argv = [str(BWRAP), "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc", "--die-with-parent"]
    with tempfile.TemporaryFile() as bpf:
        bpf.write(program)
        bpf.seek(0)
        fd = bpf.fileno()
        if seccomp:
            argv += ["--seccomp", str(fd)]
        argv += ["--", PYTHON, "-I", "-c", SNIPPET, json.dumps(numbers), json.dumps(only)]
        proc = subprocess.run(argv, pass_fds=(fd,), capture_output=True, text=True,
                              timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, int] = json.loads(proc.stdout)
    assert sorted(result) == sorted(only), proc.stderr
    return result


def test_the_filter_is_whole_bpf_instructions_and_stable_across_compilations() -> None:
    program = _filter_or_skip()
    assert len(program) % 8 == 0
    assert 0 < len(program) // 8 <= 4096  # BPF_MAXINSNS
    assert step_filter_bpf() is program
    assert step_filter_bpf.__wrapped__() == program  # a fresh compilation, same bytes
    assert program[-8:-6] == b"\x06\x00"  # ends in BPF_RET | BPF_K


@pytest.mark.parametrize("probe", sorted(DENIED))
def test_each_denied_call_fails_with_its_errno_under_the_filter(probe: str) -> None:
    assert _probe(True)[probe] == DENIED[probe]


@pytest.mark.parametrize("probe", ALLOWED)
def test_ordinary_work_of_a_solver_still_succeeds_under_the_filter(probe: str) -> None:
    assert _probe(True)[probe] == 0


@pytest.mark.parametrize("probe", UNFILTERED)
def test_without_the_filter_the_same_calls_are_not_denied_the_same_way(probe: str) -> None:
    assert _probe(False)[probe] != DENIED[probe]


def test_a_missing_binding_is_a_typed_error_not_an_import_crash() -> None:
    code = (
        "import sys; sys.modules['pyseccomp'] = None\n"
        "import kernel.external._seccomp as s\n"
        "try:\n    s.step_filter_bpf()\nexcept s.SeccompUnavailableError as e:\n"
        "    print(isinstance(e, OSError), e.errno)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", str(errno.ENOSYS)]
