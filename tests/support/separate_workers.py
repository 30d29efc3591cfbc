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

__all__ = ["START_SECONDS", "can_unshare", "separate_workers"]

DASK = Path(sys.executable).parent / "dask"
START_SECONDS = 60.0


def can_unshare() -> bool:
    """Root, with ``unshare -m``: a mount namespace of a worker's own can be made."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


@contextlib.contextmanager
def separate_workers(
    root: Path, hidden: Path, preload: Path | None = None, *, python: Path | None = None,
    also_hidden: tuple[Path, ...] = (), env: dict[str, str] | None = None,
) -> Iterator[str]:
    """The scheduler's address, while it and two workers run; all stopped on the way out.

    ``python``: the interpreter the workers run (another install); ``also_hidden``:
    directories each worker sees as an empty tmpfs besides ``hidden`` (the
    driver's own install, to show a worker never uses its paths).
    """
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(argv: list[str], name: str) -> None:
        with (root / f"{name}.log").open("wb") as log:
            processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, cwd=root,
                                              start_new_session=True, env=env))

    scheduler_file = root / "scheduler.json"
    spawn([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
           "--scheduler-file", str(scheduler_file)], "scheduler")
    try:
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
            worker = (f"{mounts} && exec {command} "
                      f"--scheduler-file {scheduler_file} --nthreads 1 --no-nanny "
                      f"--no-dashboard --host 127.0.0.1 --name w{index} "
                      f"--local-directory {root / f'w{index}'}{extra}")
            spawn(["unshare", "-m", "--propagation", "private", "sh", "-c", worker],
                  f"worker-{index}")
        from distributed import Client

        with Client(address, timeout=START_SECONDS,  # type: ignore[no-untyped-call]
                    set_as_default=False) as client:
            client.wait_for_workers(2, timeout=START_SECONDS)
        yield address
    finally:
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
