"""docs/main-job.md's install-independent figures are this commit's (issue 35, finding 9).

The page labels its outputs verbatim. Most of its digests depend on where the
interpreter and the solvers are installed (it says so), but the outcome
files do not (ADR 0019): the outcome id the summary prints for each attempt
and the SHA-256 of the outcome file are the same in any clone of one
commit, with the pinned solver releases. This test runs the main job on the
page's bundle and checks every such figure the page quotes, so a change
that moves an id fails here until the page says the new one. (Outcome ids
also move with the pinned releases of z3 and cvc5: their evidence differs.)
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import kernel

pytestmark = pytest.mark.slow

PAGE = ROOT / "docs" / "main-job.md"
BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"
_FENCE = re.compile(r"^```console\n(.*?)^```$", re.M | re.S)
_ATTEMPT_THEN_OUTCOME = re.compile(r"attempt ([0-9a-f]{64})\n\s+outcome ([0-9a-f]{64})")
_FILE_DIGEST = re.compile(r"^([0-9a-f]{64})  out/e2e-[a-z]+\.jsonl$", re.M)


def _e2e_blocks() -> list[str]:
    """The console blocks whose commands run the main job on the e2e bundle."""
    return [block for block in _FENCE.findall(PAGE.read_text(encoding="utf-8"))
            if ("$ make demo" in block or "examples/e2e/bundle.json" in block)
            and "--deadline" not in block]


def _outcome_ids(outcomes: bytes) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in outcomes.splitlines():
        record = json.loads(line)
        outcome = record["outcome"]
        # A result or a refusal: its id is the one the summary prints.
        found[record["attempt_id"]] = outcome.get("replay_result_id") or outcome[
            "replay_refusal_id"]
    return found


def test_the_pages_outcome_ids_and_file_digests_are_this_commits(tmp_path: Path) -> None:
    out = tmp_path / "e2e.jsonl"
    done = kernel("run", BUNDLE, "--work-dir", tmp_path / "W", "-o", out, "-q")
    assert done.returncode == 3, done.stderr  # the page's tampered attempt, caught
    produced = _outcome_ids(out.read_bytes())
    quoted = [pair for block in _e2e_blocks() for pair in _ATTEMPT_THEN_OUTCOME.findall(block)]
    digests = [d for block in _e2e_blocks() for d in _FILE_DIGEST.findall(block)]
    assert quoted and digests, "the page no longer quotes the figures this test checks"
    wrong = [(attempt, shown, produced.get(attempt)) for attempt, shown in quoted
             if produced.get(attempt) != shown]
    assert wrong == [], "docs/main-job.md quotes outcome ids this commit does not give"
    assert set(digests) == {hashlib.sha256(out.read_bytes()).hexdigest()}
