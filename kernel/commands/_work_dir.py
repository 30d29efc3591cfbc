"""``kernel run``'s check of its output path before anything is written (the work
directory's own checks are the main job's: ``kernel.job``)."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.commands._io import is_stdio, refuse

__all__ = [
    "refuse_output_in_work_dir",
]


def refuse_output_in_work_dir(out: Path | None, work_dir: Path) -> None:
    """Refuse (exit 2, ``output_in_work_dir``) an ``-o`` anywhere inside the work directory,
    before anything is written there (issue 35, finding 3).

    The work directory holds exactly the run's own records, which ``kernel
    audit`` checks entry by entry: an output there was reported as an
    undeclared entry (exit 3), and ``-o W/bundle.json`` or ``-o
    W/run-state.json`` overwrote the bundle copy or the run state. Both paths
    are compared resolved (symlinks, ``..``), whether they exist yet or not.
    """
    if out is None or is_stdio(out):
        return
    where = Path(os.path.realpath(work_dir))
    target = Path(os.path.realpath(out))
    if target == where or target.is_relative_to(where):
        refuse("output_in_work_dir",
               f"--out {out}: is inside the work directory {work_dir}, whose entries are "
               "the run's own records (kernel audit checks each); nothing was written: "
               "write the outcomes elsewhere (the run keeps its own copy there as "
               "outcomes.jsonl)")
