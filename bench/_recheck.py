"""What ``--recheck-returned`` costs: the driver's checker-only replay of each returned PASS.

``python -m bench._recheck [ROUNDS] [PROBLEMS]`` (``make bench-recheck``):
``kernel run`` of a bundle posing PROBLEMS distinct certification problems
(``bench._store.repeating_bundle``) on a process pool of two workers, with
and without ``--recheck-returned``, interleaved ROUNDS times in one process
(the machine is shared: only the ratio measured side by side means much).
Reports the median wall time of each and their ratio, and checks that both
give the same outcome bytes.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._store import repeating_bundle
from kernel.bundles import bundle_document

KERNEL = Path(sys.executable).parent / "kernel"


def _timed(bundle: Path, work: Path, out: Path, *extra: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(KERNEL), "run", str(bundle), "--work-dir", str(work), "-q",
                           "-o", str(out), "--executor", "process", "--workers", "2", *extra],
                          capture_output=True, check=False)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"kernel run failed ({done.returncode}): {done.stderr.decode()}")
    return took


def main(rounds: int = 3, problems: int = 20) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-recheck-") as scratch:
        base = Path(scratch)
        bundle = base / "bundle.json"
        bundle.write_bytes(bundle_document(repeating_bundle(tuple(range(problems)))))
        plain: list[float] = []
        rechecked: list[float] = []
        for index in range(rounds):
            plain.append(_timed(bundle, base / f"p{index}", base / f"p{index}.jsonl"))
            rechecked.append(_timed(bundle, base / f"r{index}", base / f"r{index}.jsonl",
                                    "--recheck-returned"))
            if (base / f"p{index}.jsonl").read_bytes() != (base / f"r{index}.jsonl").read_bytes():
                raise SystemExit("the outcome bytes differ with --recheck-returned")
        certified = sum(1 for _ in (base / "r0").glob("*/run/replays/driver-recheck"))
        p, r = statistics.median(plain), statistics.median(rechecked)
        print(f"kernel run, {problems} attempts ({certified} certifications re-checked), "
              f"process pool of 2, {rounds} interleaved rounds")
        for label, median, runs in (("without", p, plain), ("with   ", r, rechecked)):
            each = ", ".join(f"{t:.2f}" for t in runs)
            print(f"  {label} --recheck-returned: median {median:.2f} s  (runs {each})")
        print(f"  ratio with/without: {r / p:.2f}x; per re-checked certification: "
              f"+{(r - p) / max(certified, 1) * 1000:.0f} ms on the driver")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
