"""What each part of a step's sandbox costs per step (issue 34, deliverable 8).

``python -m bench._sandbox_parts [--rounds N]`` (``make bench-sandbox``) runs
``/bin/true`` through the step chain (``setpriv``, ``prlimit``, ``bwrap``)
built by ``kernel.external._sandbox.sandbox_prefix`` in four variants,
interleaved round by round so that the machine's drift falls on all alike:

- ``legacy``: the view of ADR 0018 before issue 34, ``--ro-bind / /`` in a
  user namespace (argv written out here, for the comparison only);
- ``view``: the allow-list view in a user namespace;
- ``view+filter``: with the compiled syscall filter (a fresh memfd a step);
- ``view+filter+uid``: a root kernel's chain, bubblewrap as root and
  ``setpriv`` to a step uid held by its lock (root only);

- ``...+bounded output``: the same chain started in a holder's namespace
  over a tmpfs output (``kernel.external._step_output``), the holder's
  start and end and the copy-out of two 4 KiB declared artifacts included;

and, apart, the kernel's own work around a step that the chain does not
show: holding a step uid, lending and reclaiming an output directory of 20
files; making and removing a step cgroup (where one can be made). It
prints the median wall per step of each and its ratio to ``legacy``. The
views are those of a real step of this checkout (its interpreter, its venv
and a pinned file are needed paths).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

from kernel.external._reclaim import lend, reclaim
from kernel.external._sandbox import StepView, sandbox_prefix, sandbox_tools
from kernel.external._seccomp import step_filter_bpf
from kernel.external._step_cgroup import StepCgroup, cgroup_available
from kernel.external._step_output import bounded_output, keep_declared
from kernel.external._step_uids import acquire_step_uid, step_uid_range


def _legacy_prefix(view: StepView) -> list[str]:
    tools = sandbox_tools()
    assert tools is not None
    setpriv, prlimit, bwrap = tools
    return [setpriv, "--pdeathsig", "KILL", "--", prlimit, "--as=1073741824", "--nproc=256",
            "--nofile=256", "--fsize=268435456", "--cpu=600", "--core=0", "--", bwrap,
            "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--disable-userns", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--size", "67108864", "--tmpfs", "/dev/shm", "--size",
            "67108864", "--tmpfs", "/tmp", "--bind", view.output, view.output,
            "--chdir", view.workdir, "--"]  # fmt: skip


def _time(argv: list[str], fds: tuple[int, ...] = ()) -> float:
    start = time.perf_counter()
    done = subprocess.run([*argv, "/bin/true"], pass_fds=fds, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]}...: exit {done.returncode}: {done.stderr.decode()[-300:]}")
    return elapsed


def _filter_fd() -> int:
    fd = os.memfd_create("bench-filter", os.MFD_CLOEXEC)
    os.write(fd, step_filter_bpf())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as scratch:
        output = Path(scratch, "out")
        output.mkdir()
        view = StepView(output=str(output), read_only=(), workdir=scratch,
                        needed=(sys.executable, sys.prefix, sys.base_prefix, __file__))
        step_filter_bpf()  # compiled once per process, as the kernel does
        samples: dict[str, list[float]] = {"legacy": [], "view": [], "view+filter": []}
        if root:
            samples["view+filter+uid"] = []
        full = "view+filter" + ("+uid" if root else "") + "+bounded output"
        samples[full] = []
        samples["uid lock + lend + reclaim (20 files)"] = []
        if cgroup_available():
            samples["cgroup create + remove"] = []
        for _ in range(rounds):
            samples["legacy"].append(_time(_legacy_prefix(view)))
            samples["view"].append(_time(list(sandbox_prefix(view))))
            with contextlib.ExitStack() as held:
                fd = _filter_fd()
                held.callback(os.close, fd)
                filtered = attrs.evolve(view, seccomp_fd=fd)
                samples["view+filter"].append(_time(list(sandbox_prefix(filtered)), (fd,)))
            if root:
                with acquire_step_uid(step_uid_range(os.environ)) as slot:
                    fd = _filter_fd()
                    try:
                        lend(output, slot.uid)
                        as_uid = attrs.evolve(view, seccomp_fd=fd, step_uid=slot.uid)
                        samples["view+filter+uid"].append(
                            _time(list(sandbox_prefix(as_uid)), (fd,)))
                        reclaim(output, slot.uid)
                    finally:
                        os.close(fd)
            samples[full].append(_bounded(view, output, root))
            samples["uid lock + lend + reclaim (20 files)"].append(
                _around_a_step(output, root))
            if "cgroup create + remove" in samples:
                start = time.perf_counter()
                StepCgroup.create(1024**3, 256).remove()
                samples["cgroup create + remove"].append(time.perf_counter() - start)
    base = statistics.median(samples["legacy"])
    print(f"sandbox parts, {rounds} interleaved rounds, /bin/true per step "
          f"({'root: step uids' if root else 'ordinary user'})")
    print(f"{'variant':<42} {'median ms':>10} {'vs legacy':>10}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<42} {median * 1000:>10.2f} {median / base:>9.2f}x")


def _bounded(view: StepView, output: Path, root: bool) -> float:
    """The full chain in a holder's namespace, and two declared artifacts copied out."""
    start = time.perf_counter()
    with contextlib.ExitStack() as held:
        uid = held.enter_context(acquire_step_uid(step_uid_range(os.environ))).uid if root \
            else None
        fd = _filter_fd()
        held.callback(os.close, fd)
        holder = held.enter_context(bounded_output(
            str(output), size_bytes=1024**3, entries=4097, owner_uid=uid))
        with tempfile.NamedTemporaryFile() as artifact:
            artifact.write(b"x" * 4096)
            artifact.flush()
            for name in ("a.txt", "b.txt"):
                holder.copy_in(Path(artifact.name), name)  # stands in for the step's writes
        step = attrs.evolve(view, seccomp_fd=fd, step_uid=uid, output_holder=holder.pid)
        done = subprocess.run([*sandbox_prefix(step), "/bin/true"], pass_fds=(fd,),
                              check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise SystemExit(f"bounded output chain: exit {done.returncode}: "
                             f"{done.stderr.decode()[-300:]}")
        keep_declared(holder, output, ("a.txt", "b.txt"), artifact_limit=1024**2,
                      total_limit=1024**3)
    elapsed = time.perf_counter() - start
    for path in output.iterdir():
        path.unlink()
    return elapsed


def _around_a_step(output: Path, root: bool) -> float:
    for index in range(20):
        Path(output, f"artifact-{index}.txt").write_bytes(b"x" * 512)
    start = time.perf_counter()
    if root:
        with acquire_step_uid(step_uid_range(os.environ)) as slot:
            lend(output, slot.uid)
            reclaim(output, slot.uid)
    else:
        reclaim(output, None)
    elapsed = time.perf_counter() - start
    for path in output.iterdir():
        path.unlink()
    return elapsed


if __name__ == "__main__":
    main()
