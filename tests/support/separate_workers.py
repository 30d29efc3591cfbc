"""A real Dask scheduler and two real workers that share no file system with the driver.

Each ``dask worker`` runs in a mount namespace of its own, with a private
tmpfs over ``hidden`` (the parent of the driver's work directory), as a
second machine would have: nothing a worker writes there reaches the driver
(issue 36). ``preload`` is a Python file each worker runs as it starts
(``dask worker --preload``): how a test makes a worker compromised.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["START_SECONDS", "can_make_networks", "can_unshare", "separate_workers", "stop_all"]

DASK = Path(sys.executable).parent / "dask"
START_SECONDS = 60.0


def can_unshare() -> bool:
    """Root, with ``unshare -m``: a mount namespace of a worker's own can be made."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process's group (the last started first), then SIGKILL what lingers."""
    for process in reversed(processes):
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def can_make_networks() -> bool:
    """Root, with ``ip``, network namespaces and veth pairs: a network per worker can be made."""
    if not can_unshare() or shutil.which("ip") is None:
        return False
    probe = f"kvp{os.getpid() % 100000}"
    made = subprocess.run(["ip", "link", "add", probe, "type", "veth", "peer", "name",
                           probe + "x"], capture_output=True, check=False)
    if made.returncode != 0:
        return False
    subprocess.run(["ip", "link", "del", probe], capture_output=True, check=False)
    return subprocess.run(["unshare", "-n", "true"], capture_output=True,
                          check=False).returncode == 0


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ip {' '.join(argv)}: {done.stderr}"


@contextlib.contextmanager
def separate_workers(
    root: Path, hidden: Path, preload: Path | None = None, *, python: Path | None = None,
    also_hidden: tuple[Path, ...] = (), env: dict[str, str] | None = None,
    network: bool = False,
) -> Iterator[str]:
    """The scheduler's address, while it and two workers run; all stopped on the way out.

    ``python``: the interpreter the workers run (another install); ``also_hidden``:
    directories each worker sees as an empty tmpfs besides ``hidden`` (the
    driver's own install, to show a worker never uses its paths). ``network``:
    each worker also has a network namespace of its own, joined to the
    driver's by a veth pair on a bridge made here (the scheduler listens on
    the bridge's address): the workers reach the driver's machine, and each
    other, only over that link. The bridge and the host's veth ends are
    removed on the way out; no host setting is changed.
    """
    processes: list[subprocess.Popen[bytes]] = []
    links: list[str] = []
    tag = f"{os.getpid() % 10000}{time.monotonic_ns() % 1000}"
    subnet = f"10.{77 + os.getpid() % 100}.{time.monotonic_ns() % 250}"

    def spawn(argv: list[str], name: str) -> subprocess.Popen[bytes]:
        with (root / f"{name}.log").open("wb") as log:
            processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, cwd=root,
                                              start_new_session=True, env=env))
        return processes[-1]

    host = "127.0.0.1"
    if network:
        bridge = f"kvb{tag}"[:15]
        _ip("link", "add", bridge, "type", "bridge")
        links.append(bridge)
        _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        host = f"{subnet}.1"
    scheduler_file = root / "scheduler.json"
    try:
        spawn([str(DASK), "scheduler", "--host", host, "--port", "0", "--no-dashboard",
               "--scheduler-file", str(scheduler_file)], "scheduler")
        deadline = time.monotonic() + START_SECONDS
        while not scheduler_file.is_file() or not scheduler_file.stat().st_size:
            assert time.monotonic() < deadline and processes[0].poll() is None
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        extra = "" if preload is None else f" --preload {shlex.quote(str(preload))}"
        mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(str(path))}"
                             for path in (hidden, *also_hidden))
        command = (f"{DASK} worker" if python is None
                   else f"{shlex.quote(str(python))} -m distributed.cli.dask_worker")
        for index in range(2):
            ready = root / f"w{index}.ready"
            own = f"{subnet}.{2 + index}" if network else "127.0.0.1"
            link = ("" if not network else
                    f"while [ ! -e {shlex.quote(str(ready))} ]; do sleep 0.02; done && "
                    f"ip link set lo up && ip addr add {own}/24 dev eth0 && "
                    "ip link set eth0 up && ")
            worker = (f"{link}{mounts} && exec {command} {address} --nthreads 1 --no-nanny "
                      f"--no-dashboard --host {own} --name w{index} "
                      f"--local-directory {root / f'w{index}'}{extra}")
            namespaces = ["-m", "-n"] if network else ["-m"]
            started = spawn(["unshare", *namespaces, "--propagation", "private", "sh", "-c",
                             worker], f"worker-{index}")
            if network:
                # unshare(2) happens after the exec that Popen waits for: until it
                # has, the pid is still in this network namespace.
                ours = os.readlink("/proc/self/ns/net")
                while os.readlink(f"/proc/{started.pid}/ns/net") == ours:
                    assert time.monotonic() < deadline and started.poll() is None
                    time.sleep(0.005)
                end = f"kvh{index}{tag}"[:15]
                _ip("link", "add", end, "type", "veth", "peer", "name", "eth0", "netns",
                    str(started.pid))
                links.append(end)
                _ip("link", "set", end, "master", links[0])
                _ip("link", "set", end, "up")
                ready.touch()
        from distributed import Client

        with Client(address, timeout=START_SECONDS,  # type: ignore[no-untyped-call]
                    set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_SECONDS)
        yield address
    finally:
        stop_all(processes)
        for name in reversed(links):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
