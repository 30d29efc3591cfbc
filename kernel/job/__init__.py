"""The main job (impure): a bundle, a work directory, an executor, resume, the evidence store.

One public entry point for the command line and for Python integrators
alike (adr/0023-the-main-job.md):

    with MainJob(Path("bundle.json"), JobSettings(work_dir=Path("runs/1"))) as job:
        for recorded in job.outcomes():  # each once it is on disk, in run order
            ...

- ``MainJob`` / ``JobSettings`` / ``RecordedOutcome`` / ``JobReport``: the
  job, what it runs with, what it hands out, what it did;
- ``JobRefused`` (``RefusalKind``) before anything is written, ``JobStopped``
  when shard workers are lost, ``Terminated`` for SIGTERM raised as an
  interrupt (``kernel.job.errors``);
- the bundle readers both the job and the commands use: ``open_bundle``,
  ``open_sharded`` (``StreamShards``, ``DocumentShards``), ``BundleCopy``,
  ``open_input``, ``bounded_lines``;
- ``manifest_hint``: the likely cause of a refusal when a bundle was sealed
  for another manifest.

This layer sits above ``kernel.audit`` (a resumed run's recorded lines and a
worker's certifications are derived again through it) and below
``kernel.commands``. Names load lazily (PEP 562), as in ``kernel.orchestrate``:
``kernel.job.errors`` and ``kernel.job._input`` are imported at every
command's start-up, and load nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernel.job._bundle_input import (
        Attempt,
        BundleCopy,
        DocumentShards,
        StreamShards,
        open_bundle,
        open_sharded,
    )
    from kernel.job._hints import RUN_MANIFEST_ADVICE, manifest_hint, run_hint
    from kernel.job._input import STDIO, bounded_lines, is_stdio, is_stream, open_input
    from kernel.job._main_job import (
        MAX_SHARD_SIZE,
        JobReport,
        JobSettings,
        MainJob,
        RecordedOutcome,
    )
    from kernel.job.errors import JobRefused, JobStopped, RefusalKind, Terminated, signal_name

_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("Attempt", "BundleCopy", "DocumentShards", "StreamShards", "open_bundle",
         "open_sharded"),
        "kernel.job._bundle_input",
    ),
    **dict.fromkeys(("STDIO", "bounded_lines", "is_stdio", "is_stream", "open_input"),
                    "kernel.job._input"),
    **dict.fromkeys(("RUN_MANIFEST_ADVICE", "manifest_hint", "run_hint"), "kernel.job._hints"),
    **dict.fromkeys(
        ("MAX_SHARD_SIZE", "JobReport", "JobSettings", "MainJob", "RecordedOutcome"),
        "kernel.job._main_job",
    ),
    **dict.fromkeys(
        ("JobRefused", "JobStopped", "RefusalKind", "Terminated", "signal_name"),
        "kernel.job.errors",
    ),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Attempt",
    "BundleCopy",
    "DocumentShards",
    "JobRefused",
    "JobReport",
    "JobSettings",
    "JobStopped",
    "MAX_SHARD_SIZE",
    "MainJob",
    "RUN_MANIFEST_ADVICE",
    "RecordedOutcome",
    "RefusalKind",
    "STDIO",
    "StreamShards",
    "Terminated",
    "bounded_lines",
    "is_stdio",
    "is_stream",
    "manifest_hint",
    "open_bundle",
    "open_input",
    "open_sharded",
    "run_hint",
    "signal_name",
]
