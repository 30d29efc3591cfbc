"""`kernel bundle` never writes a bundle that replays as an integrity failure (issue 20, finding 4).

A draft candidate whose ``source_text`` had one extra character was sealed
(exit 0, every id reproducing), and ``kernel replay`` then reported
``candidate_identity_mismatch`` (exit 3): a bug of the search process
reported as tampering. Sealing now runs replay's own validation on every
attempt and refuses such a draft (exit 1, ``candidate_does_not_replay``,
naming the candidate and replay's reason), writing nothing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import kernel.bundles as bundles_module
from kernel.bundles import BundleSealError, bundle_document, seal_bundle
from kernel.drafts import SearchDraft
from kernel.organs import BUILTIN_MANIFEST, CERTIFIED_MANIFEST
from kernel.replay import (
    AuthorityManifest,
    ReplayAdapterRefusal,
    ReplayBundle,
    ReplayDisposition,
    replay_bundle_attempts,
)
from kernel.serde import loads
from tests.orchestrate_helpers import ROOT
from tests.strategies import search_drafts
from tests.support.cli import kernel

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
INTEGRITY = {ReplayDisposition.CANDIDATE_IDENTITY_MISMATCH, ReplayDisposition.INVALID_REPLAY_INPUT}
MANIFESTS = (BUILTIN_MANIFEST, CERTIFIED_MANIFEST)


def _draft_with_source_text_longer_by_one(tmp_path: Path, index: int = 1) -> Path:
    doc: dict[str, Any] = json.loads(DRAFT.read_text(encoding="utf-8"))
    frame = doc["candidates"][index]["frame"]
    assert frame is not None, "the shipped draft's candidate is a whole frame"
    frame["source_text"] += "!"
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _whole_frame_index() -> int:
    doc = json.loads(DRAFT.read_text(encoding="utf-8"))
    return next(i for i, c in enumerate(doc["candidates"]) if c["frame"] is not None)


@pytest.mark.parametrize("manifest", ["builtin.v1", "certified.v1"])
def test_a_candidate_whose_source_text_differs_by_one_character_is_not_sealed(
    tmp_path: Path, manifest: str
) -> None:
    index = _whole_frame_index()
    draft = _draft_with_source_text_longer_by_one(tmp_path, index)
    out = tmp_path / "bundle.json"
    done = kernel("bundle", draft, "--manifest", manifest, "-o", out)
    # Before: exit 0, and `kernel replay` said candidate_identity_mismatch (exit 3).
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: candidate_does_not_replay: "), done.stderr
    assert f"candidate {index} (operator " in done.stderr
    assert "candidate_source_text_altered" in done.stderr
    assert "candidate_identity_mismatch" in done.stderr
    assert not out.exists() and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft.json"]


def test_the_same_draft_on_stdout_writes_nothing_either(tmp_path: Path) -> None:
    draft = _draft_with_source_text_longer_by_one(tmp_path, _whole_frame_index())
    done = kernel("bundle", draft, "--layout", "stream")
    assert done.returncode == 1 and done.stdout == ""


def test_the_shipped_draft_still_seals_and_replays_without_an_integrity_refusal(
    tmp_path: Path,
) -> None:
    out = tmp_path / "bundle.json"
    assert kernel("bundle", DRAFT, "-o", out).returncode == 0
    done = kernel("replay", out, "-q")
    assert done.returncode == 0, done.stderr


def _replayed(data: bytes, manifest: AuthorityManifest) -> list[ReplayDisposition]:
    """The dispositions of the written bytes, read back as `kernel replay` reads them."""
    bundle = loads(data, ReplayBundle)
    return [o.replay_disposition for o in replay_bundle_attempts(bundle, manifest)]


@given(search_drafts())
def test_whatever_seal_bundle_writes_never_replays_as_an_integrity_failure(
    draft: SearchDraft,
) -> None:
    for manifest in MANIFESTS:
        try:
            bundle = seal_bundle(draft, manifest)
        except BundleSealError:
            continue
        dispositions = _replayed(bundle_document(bundle), manifest)
        assert not INTEGRITY & set(dispositions), dispositions


@given(search_drafts())
def test_a_draft_is_refused_only_when_replay_would_refuse_it_as_integrity(
    draft: SearchDraft,
) -> None:
    # The check is not over-eager: sealed without it, exactly the refused
    # drafts replay with an integrity refusal, at the candidate it named.
    unchecked = pytest.MonkeyPatch()
    for manifest in MANIFESTS:
        try:
            seal_bundle(draft, manifest)
            refused: BundleSealError | None = None
        except BundleSealError as exc:
            refused = exc
        if refused is not None and refused.code != "candidate_does_not_replay":
            continue
        with unchecked.context() as patch:
            patch.setattr(bundles_module, "_refuse_unreplayable", lambda *args: None)
            bundle = seal_bundle(draft, manifest)
        outcomes = list(replay_bundle_attempts(bundle, manifest))
        integrity = [i for i, o in enumerate(outcomes)
                     if isinstance(o, ReplayAdapterRefusal) and o.replay_disposition in INTEGRITY]
        if refused is None:
            assert integrity == []
        else:
            assert integrity, refused.message
            assert refused.message.startswith(f"candidate {integrity[0]} ")


def test_the_replay_command_agrees_on_a_bundle_sealed_without_the_check(tmp_path: Path) -> None:
    # What the refused draft would have been: a bundle replay calls tampered.
    index = _whole_frame_index()
    doc = json.loads(_draft_with_source_text_longer_by_one(tmp_path, index).read_bytes())
    draft = loads(json.dumps(doc).encode(), SearchDraft)
    with pytest.MonkeyPatch().context() as patch:
        patch.setattr(bundles_module, "_refuse_unreplayable", lambda *args: None)
        bundle = seal_bundle(draft, BUILTIN_MANIFEST)
    path = tmp_path / "unchecked.json"
    path.write_bytes(bundle_document(bundle))
    done: subprocess.CompletedProcess[str] = kernel("replay", path, "-q")
    assert done.returncode == 3
