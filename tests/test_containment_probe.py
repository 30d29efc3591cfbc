"""The containment probes run their chain as a step runs it: under the kernel's guard.

Issue 35, item 11: once in a loop of interrupted parallel runs, a bubblewrap
process outlived ``kernel run``. Each pool worker probes the sandbox once
(``_sandbox_works``) as its first certification starts; the probe ran the
chain with a bare ``subprocess.run``. A worker stopped during that probe
killed the outer bubblewrap, and bubblewrap's own child, orphaned before it
armed its parent-death signal, blocks for good (bubblewrap issue 633). A
step is always started under the guard (a child subreaper that kills and
reaps everything below it when its caller goes); the probes now are too.

The probes are made to last here: the probed program is ``yes`` (visible in
every view: it is in /usr), so the chain is seen while it runs. Then the
caller is SIGKILLed, and nothing of the chain may be left.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernel.external import ContainmentLevel, available_level
from tests.support.processes import cmdline, descendants, kill_all, stat

_PROBE = textwrap.dedent("""
    import sys
    from kernel.external import _contain
    real = _contain.system_tool
    _contain.system_tool = lambda name: real("yes" if name == "true" else name)
    print(getattr(_contain, sys.argv[1])(), flush=True)
""")


def _chain_under(caller: int, program: bytes, within: float = 60.0) -> list[int]:
    """The processes from ``program`` (first) up to ``caller``'s child, once it runs."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for pid in descendants(caller):
            if cmdline(pid).split(b"\0")[0] == program:
                chain = [pid]
                while (info := stat(chain[-1])) is not None and info.parent != caller:
                    chain.append(info.parent)
                return chain
        time.sleep(0.01)
    raise AssertionError(f"{program!r} never ran under {caller}")


@pytest.mark.parametrize(("probe", "level", "wrapper"), [
    ("_sandbox_works", ContainmentLevel.SANDBOX, b"bwrap"),
    ("_namespaces_work", ContainmentLevel.NAMESPACE, b"unshare"),
])
def test_a_probe_runs_under_the_guard_and_leaves_nothing_when_its_caller_is_killed(
    tmp_path: Path, probe: str, level: ContainmentLevel, wrapper: bytes
) -> None:
    found = available_level(level)
    if found is None or found.rank < level.rank:
        pytest.skip(f"this machine gives no {level.value} containment")
    caller = subprocess.Popen([sys.executable, "-c", _PROBE, probe], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        chain = _chain_under(caller.pid, b"/usr/bin/yes")
        lines = [cmdline(pid) for pid in chain]
        assert any(wrapper in line for line in lines), lines
        # The caller's own child is the kernel's launcher in its guard mode.
        assert b"\0guard\0" in lines[-1], lines
        below = descendants(caller.pid)
        caller.kill()
        caller.wait(timeout=10)
        deadline = time.monotonic() + 5
        while (left := sorted(pid for pid in below
                              if (info := stat(pid)) is not None and info.alive)):
            assert time.monotonic() < deadline, {pid: cmdline(pid)[:120] for pid in left}
            time.sleep(0.02)
    finally:
        if caller.poll() is None:
            caller.kill()
        kill_all(sorted(descendants(caller.pid)))
