"""Shared values for the orchestrator tests (no tests of its own).

Digests are recomputed with ``tests.support.reference`` and processes are
watched with ``tests.support.processes``, independently of the kernel.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from kernel.external import CheckEntry, RunLimits, default_environment
from kernel.orchestrate import ExternalCertifier, certification_entry, discover_tools
from kernel.replay import ReplayBundle
from kernel.serde import loads
from tests.support.cli import kernel

__all__ = [
    "E2E_BUNDLE",
    "ROOT",
    "certifier",
    "e2e_bundle",
    "shipped_entry",
    "stored_main_job",
]

ROOT = Path(__file__).resolve().parents[1]
E2E_BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"


@functools.cache
def e2e_bundle() -> ReplayBundle:
    return loads(E2E_BUNDLE.read_bytes(), ReplayBundle)


@functools.cache
def shipped_entry() -> CheckEntry:
    """The pinned entry for the package's own scripts on this machine."""
    return certification_entry(discover_tools(Path(sys.executable)))


def certifier(
    work_dir: Path, entry: CheckEntry | None = None, *, producer_seconds: float = 60.0
) -> ExternalCertifier:
    return ExternalCertifier(
        work_dir,
        entry or shipped_entry(),
        RunLimits(producer_seconds, 60.0),
        default_environment(),
    )


def stored_main_job(base: Path) -> tuple[Path, Path]:
    """``kernel run`` of the shipped e2e bundle under ``base``: (work directory, outcomes file)."""
    work, out = base / "work", base / "outcomes.jsonl"
    done = kernel("run", E2E_BUNDLE, "--work-dir", work, "--out", out, "--quiet")
    # The bundle holds one tampered attempt on purpose: the verdict is
    # integrity, exit 3 (README "Exit codes"); the store is complete.
    assert done.returncode == 3, done.stderr
    return work, out


def repeating_bundle_run(base: Path, problems: tuple[int, ...]) -> tuple[Path, bytes]:
    """A bundle posing ``problems`` (``bench._store.repeating_bundle``: equal items pose
    the same certification problem) under ``base``, and the outcome bytes of ``kernel run``
    on it without an evidence store (the bytes every other way of running it must give)."""
    from bench._store import repeating_bundle
    from kernel.bundles import bundle_document

    bundle = base / "bundle.json"
    bundle.write_bytes(bundle_document(repeating_bundle(problems)))
    plain = base / "plain.jsonl"
    done = kernel("run", bundle, "--work-dir", base / "plain", "--out", plain, "-q")
    assert done.returncode == 0, done.stderr
    return bundle, plain.read_bytes()
