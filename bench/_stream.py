"""Runs of any size through the command line: `kernel bundle`, then `kernel replay`.

For each size N, a search draft stream of N candidates (the shipped draft's
four, repeated) is sealed into a bundle stream by ``kernel bundle --layout stream``
and classified by ``kernel replay``, each a fresh process. Reported per
step: wall time, CPU (user + system, from ``wait4``) and peak RSS of that
process, and the ratio of CPU between consecutive sizes (linear: the size
ratio). Figures go to BENCHMARKS.md ("Runs of any size").

    python -m bench._stream 1000 10000 100000     # make scale
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
KERNEL = Path(sys.executable).with_name("kernel")


def _draft(directory: Path, attempts: int) -> Path:
    """A draft stream (one candidate a line: a 100k draft is larger than one document may be)."""
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    shipped = [json.dumps(c, sort_keys=True) for c in doc.pop("candidates")]
    path = directory / f"draft-{attempts}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "replay-kernel.draft-stream.v1", "header": doc}) + "\n")
        for i in range(attempts):
            out.write(shipped[i % len(shipped)] + "\n")
    return path


# Linux keeps a process's peak RSS across exec, and a child forked (or
# vforked) from this benchmark starts with this process's pages mapped: its
# ru_maxrss could never be below this process's own peak (about 100 MiB after
# the parallel target). So each ``kernel`` is started by a small launcher
# interpreter, and its usage is the launcher's wait4 of it: the floor is then
# the launcher's few MiB, not this process.
_LAUNCHER: Final = """
import os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.posix_spawn(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as handle:
    handle.write(f"{usage.ru_utime + usage.ru_stime} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _measured(*args: str | Path) -> tuple[float, float, int, int]:
    """(wall s, CPU s, peak RSS KiB, exit code) of one ``kernel`` process."""
    with tempfile.NamedTemporaryFile(prefix="kernel-usage-") as usage_file:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _LAUNCHER, usage_file.name, str(KERNEL),
             *map(str, args)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )  # fmt: skip
        wall = time.perf_counter() - started
        if done.returncode != 0:
            errors = done.stderr.decode(errors="replace")
            raise SystemExit(f"kernel {' '.join(map(str, args))}: exit {done.returncode}\n{errors}")
        cpu, rss = Path(usage_file.name).read_text(encoding="utf-8").split()
    return wall, float(cpu), int(rss), done.returncode


@dataclass(frozen=True)
class Step:
    """One ``kernel`` process of the comparison: what it did and what it cost."""

    attempts: int
    step: str  # "bundle" or "replay"
    wall_s: float
    cpu_s: float
    peak_rss_kib: int


def measure(
    sizes: list[int], say: Callable[[str], None] = print, *, again: int = 0,
    replay_options: tuple[str, ...] = (),
) -> list[Step]:
    """Bundle, then replay, each size in turn; every outcome stream is checked for N lines.

    ``again``: replay every size but the largest that many more times, after
    the largest, so a ratio can take the median of samples taken before and
    after it (one 10 s sample swings by 15% with the load; the 100k replay
    is too long to repeat).
    """
    say(f"python {sys.version.split()[0]}, nproc {os.cpu_count()}; sizes {sizes}")
    say(
        f"{'attempts':>9} {'step':>7} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} "
        f"{'cpu/attempt ms':>15} {'cpu ratio':>10}"
    )
    previous: dict[str, float] = {}
    found: list[Step] = []

    def replay(size: int, bundle: Path, outcomes: Path, step: str) -> None:
        timed(size, step, ("replay", bundle, "--quiet", "--out", outcomes, *replay_options))
        lines = sum(1 for _ in outcomes.open("rb"))
        outcomes.unlink()
        if lines != size:  # the run did not replay end to end: no figure stands
            raise SystemExit(f"kernel replay wrote {lines} outcome lines for {size} attempts")

    def timed(size: int, step: str, args: tuple[str | Path, ...]) -> None:
        wall, cpu, rss, _ = _measured(*args)
        kind = step.split()[0]
        ratio = f"{cpu / previous[kind]:.1f}x" if kind in previous and step == kind else "-"
        if step == kind:
            previous[kind] = cpu
        found.append(Step(size, kind, wall, cpu, rss))
        say(
            f"{size:>9} {step:>7} {wall:>8.1f} {cpu:>8.1f} {rss / 1024:>9.0f} "
            f"{cpu / size * 1000:>15.2f} {ratio:>10}"
        )

    with tempfile.TemporaryDirectory(prefix="kernel-scale-") as tmp:
        directory = Path(tmp)
        bundles: dict[int, Path] = {}
        for size in sizes:
            draft = _draft(directory, size)
            bundle = directory / f"bundle-{size}.jsonl"
            timed(size, "bundle", ("bundle", draft, "--layout", "stream", "--out", bundle))
            draft.unlink()
            replay(size, bundle, directory / f"outcomes-{size}.jsonl", "replay")
            bundles[size] = bundle
        for round_index in range(again):
            for size in sizes[:-1]:
                out = directory / f"outcomes-{size}.jsonl"
                replay(size, bundles[size], out, f"replay #{round_index + 2}")
    return found


def main(argv: list[str]) -> int:
    """``[--workers N] SIZE...``: with ``--workers``, ``kernel replay --workers N`` (issue 22)."""
    options: tuple[str, ...] = ()
    if argv[:1] == ["--workers"]:
        options, argv = ("--workers", argv[1]), argv[2:]

    def say(line: str) -> None:
        print(line, flush=True)

    say(f"load average {os.getloadavg()}; kernel replay {' '.join(options) or '(serial)'}")
    measure([int(a) for a in argv] or [1000, 4000], say=say, replay_options=options)
    say(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
