"""`kernel bundle`: a search draft with no ids becomes a valid, sealed replay bundle."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernel.cli import app
from kernel.drafts import DraftCandidate, SearchDraft
from kernel.replay import ReplayBundle
from kernel.serde import loads
from tests import reference as ref

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
runner = CliRunner()


def draft_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DRAFT.read_text(encoding="utf-8"))
    return doc


def write(tmp_path: Path, doc: object, name: str = "draft.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_the_shipped_draft_carries_no_ids() -> None:
    text = DRAFT.read_text(encoding="utf-8")
    assert "digest" not in text
    assert re.search(r"[0-9a-f]{64}", text) is None


@pytest.mark.parametrize("manifest", ["builtin.v1", "certified.v1"])
def test_a_draft_seals_into_a_bundle_whose_ids_all_reproduce(tmp_path: Path,
                                                              manifest: str) -> None:
    out = tmp_path / "bundle.json"
    result = runner.invoke(app, ["bundle", str(DRAFT), "--manifest", manifest,
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    bundle = loads(out.read_bytes(), ReplayBundle)
    chain = bundle.chain
    assert chain.assessment.assessment_id == ref.assessment_id(chain.assessment)
    assert chain.run.run_id == ref.run_id(chain.run)
    for replay_input, rec in zip(bundle.inputs, chain.reconstructions, strict=True):
        assert replay_input.input_digest == ref.replay_input_digest(replay_input)
        assert rec.candidate_reconstruction_digest == ref.reconstruction_digest(rec)
    expected = 3 if manifest == "certified.v1" else 2
    assert all(len(i.proof_obligation_refs) == expected for i in bundle.inputs)
    digest = runner.invoke(app, ["digest", str(out)])
    assert digest.exit_code == 0 and "MISMATCH" not in digest.stdout


def test_a_sealed_draft_replays_to_each_semantic_disposition(tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    assert runner.invoke(app, ["bundle", str(DRAFT), "--out", str(out)]).exit_code == 0
    replay = runner.invoke(app, ["replay", str(out), "--quiet", "--format", "jsonl"])
    assert replay.exit_code == 0
    lines = replay.stdout.splitlines()
    assert [json.loads(line)["outcome"]["replay_disposition"] for line in lines] == [
        "contract_and_proof_closed", "contract_refused", "contract_closed_but_proof_refused",
        "contract_and_proof_closed",
    ]


def test_bundling_is_deterministic() -> None:
    first = runner.invoke(app, ["bundle", str(DRAFT)])
    second = runner.invoke(app, ["bundle", str(DRAFT)])
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout


def test_a_frame_the_contract_accepts_has_nothing_to_replay(tmp_path: Path) -> None:
    doc = draft_doc()
    doc["problem_frame"] = doc["candidates"][0]["frame"]  # the closing candidate
    result = runner.invoke(app, ["bundle", str(write(tmp_path, doc))])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: original_frame_not_refused: ")
    assert result.stdout == ""


def test_an_organ_outside_the_manifest_is_refused(tmp_path: Path) -> None:
    doc = draft_doc()
    doc["candidate_organ"] = "geometry"
    result = runner.invoke(app, ["bundle", str(write(tmp_path, doc))])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: organ_not_in_manifest: ")


def test_a_delta_that_does_not_apply_is_refused(tmp_path: Path) -> None:
    doc = draft_doc()
    delta = next(c["delta"] for c in doc["candidates"] if c["delta"] is not None)
    delta["removed_bindings"] = ["ghost"]
    result = runner.invoke(app, ["bundle", str(write(tmp_path, doc))])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: candidate_does_not_reconstruct: ")


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda d: d.update(candidates=[]), "schema_mismatch"),
        (lambda d: d["candidates"][0].update(delta=d["candidates"][3]["delta"]),
         "schema_mismatch"),
        (lambda d: d.update(extra=1), "schema_mismatch"),
        (lambda d: d["problem_frame"].update(source_text=1.5), "float_forbidden"),
    ],
    ids=["no-candidates", "frame-and-delta", "extra-field", "float"],
)
def test_malformed_drafts_are_refused_at_the_boundary(tmp_path: Path, mutate: Any,
                                                      code: str) -> None:
    doc = draft_doc()
    mutate(doc)
    result = runner.invoke(app, ["bundle", str(write(tmp_path, doc))])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {code}: ")


def test_draft_records_enforce_exactly_one_candidate_form() -> None:
    doc = draft_doc()
    draft = loads(json.dumps(doc).encode(), SearchDraft)
    candidate = draft.candidates[0]
    with pytest.raises(ValueError):
        DraftCandidate(candidate.operator_id, candidate.operator_version, None, None)


def test_the_python_snippets_in_the_integration_guide_run(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    guide = (ROOT / "docs" / "integrating.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    assert len(snippets) == 2
    bundle = tmp_path / "bundle.json"
    assert runner.invoke(app, ["bundle", str(DRAFT), "--out", str(bundle)]).exit_code == 0
    replay = runner.invoke(app, ["replay", str(ROOT / "examples" / "replay" / "bundle.json"),
                                 "--quiet", "--out", str(tmp_path / "outcomes.jsonl")])
    assert replay.exit_code == 3  # the example's tampered attempt: integrity
    monkeypatch.chdir(tmp_path)
    for snippet in snippets:
        exec(compile(snippet, "docs/integrating.md", "exec"), {})
