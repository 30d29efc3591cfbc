"""Shared by the example builders: spans by quotation, resealing, write-or-check.

The shipped example files are generated, never hand-typed; each builder
script computes its files and this module either writes them or, with
``--check``, fails when the shipped bytes differ.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kernel.frames import SourceSpan
from kernel.replay import ReplayAdapterInput, input_digest_of
from kernel.upstream import CandidateReconstruction


def span_of(source: str, text: str, occurrence: int | None = None) -> SourceSpan:
    """The span of ``text`` in ``source``: its only appearance, or the given one."""
    start = source.index(text)
    if occurrence is None:
        assert source.find(text, start + 1) == -1, f"{text!r} appears more than once"
    else:
        for _ in range(occurrence):
            start = source.index(text, start + 1)
    return SourceSpan(start, start + len(text))


def reseal(replay_input: ReplayAdapterInput, **changes: Any) -> ReplayAdapterInput:
    """``replay_input`` with ``changes`` and its input digest recomputed."""
    changed = attrs.evolve(replay_input, **changes)
    return attrs.evolve(changed, input_digest=input_digest_of(changed))


def with_first_spans_swapped(rec: CandidateReconstruction) -> CandidateReconstruction:
    """``rec`` with its first two evidence spans reordered after sealing (a forgery)."""
    spans = rec.evidence_spans
    return attrs.evolve(rec, evidence_spans=(spans[1], spans[0], *spans[2:]))


def write_or_check(description: str, out_dir: Path,
                   build: Callable[[Path], dict[Path, bytes]]) -> int:
    """The builders' command line: write the files, or ``--check`` them byte for byte."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help="compare with the shipped files instead of writing them")
    parser.add_argument("--out-dir", type=Path, default=out_dir)
    args = parser.parse_args()
    files = build(args.out_dir)
    if args.check:
        stale = [str(p) for p, data in files.items() if not p.exists() or p.read_bytes() != data]
        if stale:
            print("stale example files (rerun without --check):", *stale, file=sys.stderr)
            return 1
        print(f"example files reproduce byte for byte: {', '.join(map(str, files))}")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")
    return 0
