"""Start-up cost of the command line against a bare interpreter (issue 10, deliverable 7).

Each comparison times, side by side in interleaved rounds, one process of
the installed ``kernel`` console script and one bare ``python -c pass`` of
the same interpreter (same virtual environment, same ``site``). The ratio
printed by ``python -m bench`` is baseline / variant, i.e. how many bare
start-ups one ``kernel`` invocation costs; the target for ``kernel
--version`` is <= 2 (BENCHMARKS.md).

    python -m bench._startup          # these comparisons alone, a quick look
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from bench._harness import Comparison, Variant, measure

KERNEL = Path(sys.executable).with_name("kernel")


def _process(*argv: str) -> Variant:
    command = [str(a) for a in argv]

    def run() -> None:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    label = " ".join(
        ["kernel", *command[1:]] if command[0] == str(KERNEL) else ["python", *command[1:]]
    )
    return Variant(label, run)


def comparisons() -> tuple[Comparison, ...]:
    """``kernel --version``, ``--help`` and ``replay --help``, each against a bare interpreter."""
    bare = _process(sys.executable, "-c", "pass")
    return tuple(
        Comparison("g: start-up", " ".join(args), _process(str(KERNEL), *args), (bare,))
        for args in (("--version",), ("--help",), ("replay", "--help"))
    )


def main() -> int:
    for item in comparisons():
        (ratio,) = measure(item, rounds=21, target_s=0.04)
        print(
            f"{item.case:>16}: {ratio.median:.2f}x a bare interpreter "
            f"(kernel {statistics.median(ratio.baseline_us) / 1000:.1f} ms, "
            f"bare {statistics.median(ratio.variant_us) / 1000:.1f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
