"""``kernel run``'s pure steps sharded: inline against ``--workers 2`` (issue 22, deliverable 1).

One bundle stream of N attempts (certified.v1), nearly all contract-refused
(the shipped draft's second candidate), every ``--every``-th one certifying
(its first: a real z3 -> cvc5 certification), is written once; then ``kernel
run`` inline and ``kernel run --executor process --workers 2`` each run it in
a fresh work directory, fresh processes, wall and CPU of the whole process
tree (``wait4``), load average before and after. The outcome files are
compared byte for byte (cmp); a difference voids the figures.

    python -m bench._run_sharded 10000 --every 1000
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import sys
import tempfile
from pathlib import Path

from bench._stream import DRAFT, _measured

VARIANTS: dict[str, tuple[str, ...]] = {
    "inline": (),
    "workers 2": ("--executor", "process", "--workers", "2"),
}


def bundle(directory: Path, attempts: int, every: int) -> Path:
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    shipped = [json.dumps(c, sort_keys=True) for c in doc.pop("candidates")]
    draft = directory / "draft.jsonl"
    with draft.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "replay-kernel.draft-stream.v1", "header": doc}) + "\n")
        for i in range(attempts):
            certifying = every > 0 and i % every == every - 1
            out.write(shipped[0 if certifying else 1] + "\n")
    path = directory / f"bundle-{attempts}.jsonl"
    _measured("bundle", draft, "--layout", "stream", "--manifest", "certified.v1", "--out", path)
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._run_sharded")
    parser.add_argument("attempts", type=int)
    parser.add_argument("--every", type=int, default=1000)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-run-sharded-") as name:
        directory = Path(name)
        path = bundle(directory, options.attempts, options.every)
        outputs: dict[str, Path] = {}
        walls: dict[str, float] = {}
        for variant, flags in VARIANTS.items():
            out = directory / f"{variant.replace(' ', '-')}.jsonl"
            before = os.getloadavg()[0]
            wall, cpu, rss, _ = _measured("run", path, "--work-dir", directory / f"w-{variant}",
                                          "--quiet", "--out", out, *flags)
            after = os.getloadavg()[0]
            outputs[variant], walls[variant] = out, wall
            print(f"{variant:>10}: wall {wall:7.1f} s  CPU {cpu:7.1f} s  "
                  f"peak RSS {rss // 1024} MiB  load {before:.1f}-{after:.1f}", flush=True)
        same = filecmp.cmp(outputs["inline"], outputs["workers 2"], shallow=False)
        print(f"inline / workers 2 (wall): {walls['inline'] / walls['workers 2']:.2f}x; "
              f"outputs {'cmp equal' if same else 'DIFFER'}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
