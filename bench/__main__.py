"""``python -m bench``: run every comparison interleaved and print a table of ratios.

python -m bench --targets        # make bench: issue 10's seven targets, one table (~15 min)
python -m bench --targets --only 6 --json out.json   # some of them, machine-readable too
python -m bench                  # the detailed groups a-g (make bench-groups)
python -m bench --rounds 7       # a quick look
python -m bench --markdown       # also print the tables as Markdown
python -m bench --scale 1000 10000 100000   # only: CPU of replay batches by size
python -m bench --scale 10000 100000 --frozen   # the same, bundle frozen from the GC
python -m bench --drat           # the DRAT checker against drat-trim and dratify (bench/_drat.py)
python -m bench --parallel       # serial against process pools and Dask (bench/_parallel.py)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

# Only the standard library at module level: a spawned pool or Dask worker of
# ``--parallel``/``--targets`` imports this module as ``__mp_main__``, and
# must not pay for rich and every comparison module before its first task.
if TYPE_CHECKING:
    from bench._harness import Ratio


def _us(values: tuple[float, ...]) -> str:
    median = statistics.median(values)
    return f"{median:,.1f}" if median < 1000 else f"{median:,.0f}"


def _row(ratio: Ratio) -> tuple[str, ...]:
    low, high = ratio.extremes
    q1, q3 = ratio.quartiles
    return (
        f"{ratio.baseline.label} / {ratio.variant.label}",
        _us(ratio.baseline_us),
        _us(ratio.variant_us),
        f"{ratio.median:.2f}x",
        f"{q1:.2f}-{q3:.2f}",
        f"{low:.2f}-{high:.2f}",
    )


HEADERS = (
    "group",
    "case",
    "baseline / variant",
    "baseline us/call",
    "variant us/call",
    "ratio (median)",
    "IQR",
    "min-max",
)


def _share(ratio: Ratio) -> str:
    share = [v / b for b, v in zip(ratio.baseline_us, ratio.variant_us, strict=True)]
    return (
        f"share of validate taken by {ratio.variant.label}: median "
        f"{statistics.median(share):.0%} (min {min(share):.0%}, max {max(share):.0%})"
    )


def _markdown(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=81, help="interleaved rounds (default 81)")
    parser.add_argument(
        "--target-ms", type=float, default=40.0, help="time per variant per round (default 40)"
    )
    parser.add_argument("--markdown", action="store_true", help="also print Markdown tables")
    parser.add_argument("--drat", action="store_true", help="run only the DRAT comparison")
    parser.add_argument(
        "--no-dratify", action="store_true", help="--drat: compare with drat-trim only"
    )
    parser.add_argument(
        "--scale",
        type=int,
        nargs="+",
        metavar="N",
        help="only measure CPU of replay batches of these sizes (linear: T ratio = size ratio)",
    )
    parser.add_argument(
        "--frozen", action="store_true", help="with --scale: gc.freeze() the built bundle first"
    )
    parser.add_argument(
        "--parallel", action="store_true", help="run only the parallel checks comparison"
    )
    parser.add_argument("--attempts", type=int, default=200, help="--parallel: attempts")
    parser.add_argument(
        "--targets", action="store_true", help="issue 10's seven targets, one summary table"
    )
    parser.add_argument(
        "--only", default="1,2,3,4,5,6,7,8,9", help="--targets: which (default 1,...,9)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="--targets: small sizes (wiring check, not targets)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="--targets: also write JSON")
    parser.add_argument(
        "--sharded-rounds", type=int, metavar="N",
        help="--targets: interleaved rounds of target 9 (default 3; --quick: 1)",
    )
    parser.add_argument(
        "--workers", default="1,2,4", help="--parallel: worker counts (default 1,2,4)"
    )
    args = parser.parse_args(argv)
    if args.targets:
        from bench._targets import QUICK, Settings
        from bench._targets import main as targets_main

        base = QUICK if args.quick else Settings()
        only = frozenset(int(n) for n in args.only.split(","))
        settings = Settings(**{**base.__dict__, "only": only})
        if args.sharded_rounds is not None:
            if args.sharded_rounds < 1:
                parser.error("--sharded-rounds must be at least 1")
            settings = Settings(**{**settings.__dict__, "sharded_rounds": args.sharded_rounds})
        return targets_main(settings, json_path=args.json, as_markdown=args.markdown)
    if args.drat:
        from bench._drat import main as drat_main

        rounds = args.rounds if args.rounds != 81 else 5
        return drat_main(rounds=rounds, with_dratify=not args.no_dratify)
    if args.scale:
        from bench._replay_split import scaling

        for line in scaling(tuple(args.scale), frozen=args.frozen):
            print(line)
        return 0
    if args.parallel:
        from bench._parallel import main as parallel_main

        return parallel_main(
            attempts=args.attempts,
            rounds=args.rounds if args.rounds != 81 else 3,
            workers=tuple(int(count) for count in args.workers.split(",")),
        )
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (quartiles need them)")
    return groups(args.rounds, args.target_ms, markdown=args.markdown)


def groups(rounds: int, target_ms: float, *, markdown: bool) -> int:
    """The detailed comparisons (groups a-g) and the external check report."""
    from rich.console import Console
    from rich.table import Table

    from bench._canonical import comparisons as canonical_comparisons
    from bench._cases import comparisons, load_corpus
    from bench._external import report as external_report
    from bench._harness import measure
    from bench._replay_split import comparison as split_comparison
    from bench._replay_split import hash_floor
    from bench._replay_split import summary as split_summary
    from bench._startup import comparisons as startup_comparisons
    from bench._validate import census
    from bench._validate import comparison as validate_comparison

    console = Console() if sys.stdout.isatty() else Console(width=170)
    started = time.perf_counter()
    facts = (
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, nproc {os.cpu_count()}, "
        f"orjson {version('orjson')}, rounds {rounds}, "
        f"~{target_ms:g} ms per variant per round"
    )
    console.print(f"[bold]replay-kernel benchmarks[/bold]: {facts}")
    corpus = load_corpus()
    found = census(corpus)
    floor = hash_floor(corpus)
    work = (
        *comparisons(corpus),
        *canonical_comparisons(),
        validate_comparison(corpus, found),
        split_comparison(corpus, floor),
        *startup_comparisons(),
    )

    table = Table(title="ratios: baseline time / variant time per round (> 1: variant faster)")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    rows: list[tuple[str, ...]] = []
    shares: list[Ratio] = []
    split: dict[str, float] = {}
    for item in work:
        console.print(f"  measuring {item.group}: {item.case} ...", style="dim")
        ratios = measure(item, rounds=rounds, target_s=target_ms / 1000)
        if item.group.startswith("d:"):
            shares.extend(ratios)
        if item.group.startswith("e:"):
            split[item.baseline.label] = statistics.median(ratios[0].baseline_us)
            split.update({r.variant.label: statistics.median(r.variant_us) for r in ratios})
        for ratio in ratios:
            row = (item.group, item.case, *_row(ratio))
            rows.append(row)
            table.add_row(*row)
    console.print(table)

    every, distinct, *_ = shares
    saving = [
        (a - d) / b
        for b, a, d in zip(every.baseline_us, every.variant_us, distinct.variant_us, strict=True)
    ]
    per_validate = len(found.payloads) / found.validates
    distinct_per = len(found.distinct) / found.validates
    callers = ", ".join(f"{name} {count}" for name, count in found.callers.most_common())
    census_lines = [
        f"digests per validate: {per_validate:.1f} (distinct {distinct_per:.1f})",
        f"callers over {found.validates} validates: {callers}",
        *(_share(ratio) for ratio in shares),
        "upper bound of the saving from digesting each payload once per validate: "
        f"median {statistics.median(saving):.1%} "
        f"(min {min(saving):.1%}, max {max(saving):.1%})",
    ]
    console.print("[bold]d: validate digest census[/bold]")
    for line in census_lines:
        console.print(f"  {line}")
    split_lines = split_summary(floor, split)
    console.print("[bold]e: replay split[/bold]")
    for line in split_lines:
        console.print(f"  {line}")
    if markdown:
        print()
        print(f"Machine: {facts}")
        print()
        print(_markdown(rows))
        print()
        for line in (*census_lines, *split_lines):
            print(f"- {line}")
    external_report(console, rounds=max(3, min(rounds, 7)))  # bench/_external.py
    console.print(f"done in {time.perf_counter() - started:.0f} s", style="dim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
