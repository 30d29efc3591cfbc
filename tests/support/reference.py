"""The one independent reference hasher and the identities it recomputes (ADR-0229 §17).

Written from adr/0001-records-and-identities.md, not from the package: it uses
its own JSON encoding and its own payload shapes, and never calls
``kernel.identity`` or a record's ``payload()``. If the package's payloads or
hashing drift from the documented identities, the tests comparing against
this module fail.

Every test that recomputes a digest uses ``canonical``/``sha`` (or
``sha256_file``) from here rather than a copy of its own: the standard
library's ``json`` and ``hashlib`` only, so the check stays independent of
``kernel.identity``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kernel.frames import Binding, FrameDelta, ProblemFrame, Relation, SourceSpan, Target
from kernel.upstream import (
    CandidateAttempt,
    CandidateReconstruction,
    ComputeBudgetDecision,
    ContractAssessment,
    ContractResidual,
    GeometricSearchRun,
    SearchGateDecision,
    SearchRunInput,
)


def canonical(value: Any) -> bytes:
    """Canonical JSON as ADR 0001 defines it, written out with the stdlib."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text.encode("utf-8")


def sha(value: Any) -> str:
    """Lowercase hex SHA-256 of ``canonical(value)``."""
    return hashlib.sha256(canonical(value)).hexdigest()


def sha256_file(path: Path | str) -> str:
    """SHA-256 of a file's bytes, following symlinks (as pins do)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def span(s: SourceSpan) -> dict[str, Any]:
    return {"start": s.start, "end": s.end}


def spans(items: tuple[SourceSpan, ...]) -> list[Any]:
    return [span(s) for s in items]


def binding(b: Binding) -> dict[str, Any]:
    return {"name": b.name, "value": b.value, "unit": b.unit, "span": span(b.span)}


def relation(r: Relation) -> dict[str, Any]:
    return {"result": r.result, "operator": r.operator, "operands": list(r.operands)}


def target(t: Target) -> dict[str, Any]:
    return {"name": t.name, "role": t.role}


def frame_digest(f: ProblemFrame) -> str:
    return sha(
        {
            "source_text": f.source_text,
            "bindings": [binding(b) for b in f.bindings],
            "relations": [relation(r) for r in f.relations],
            "targets": [target(t) for t in f.targets],
            "evidence_spans": spans(f.evidence_spans),
        }
    )


def delta_digest(d: FrameDelta) -> str:
    return sha(
        {
            "base_frame_digest": d.base_frame_digest,
            "removed_bindings": list(d.removed_bindings),
            "added_bindings": [binding(b) for b in d.added_bindings],
            "removed_relations": list(d.removed_relations),
            "added_relations": [relation(r) for r in d.added_relations],
            "removed_targets": list(d.removed_targets),
            "added_targets": [target(t) for t in d.added_targets],
            "evidence_spans": spans(d.evidence_spans),
        }
    )


def assessment_id(a: ContractAssessment) -> str:
    return sha(
        {
            "assessment_id": "",
            "problem_frame_digest": a.problem_frame_digest,
            "candidate_organ": a.candidate_organ,
            "runnable": a.runnable,
            "missing_bindings": list(a.missing_bindings),
            "unresolved_hazards": list(a.unresolved_hazards),
            "evidence_spans": spans(a.evidence_spans),
        }
    )


def residual_id(r: ContractResidual) -> str:
    return sha(
        {
            "residual_id": "",
            "assessment_id": r.assessment_id,
            "kind": r.kind.value,
            "code": r.code,
            "ordinal": r.ordinal,
        }
    )


def gate_decision_id(g: SearchGateDecision) -> str:
    return sha(
        {
            "gate_decision_id": "",
            "gate_policy_version": g.gate_policy_version,
            "assessment_id": g.assessment_id,
            "residual_ids": list(g.residual_ids),
            "search_permitted": g.search_permitted,
        }
    )


def budget_id(b: ComputeBudgetDecision) -> str:
    return sha(
        {
            "budget_id": "",
            "budget_policy_version": b.budget_policy_version,
            "gate_decision_id": b.gate_decision_id,
            "max_attempts": b.max_attempts,
        }
    )


def run_input(ri: SearchRunInput) -> dict[str, Any]:
    return {
        "problem_frame_digest": ri.problem_frame_digest,
        "original_contract_assessment_id": ri.original_contract_assessment_id,
        "residual_ids": list(ri.residual_ids),
        "gate_decision_id": ri.gate_decision_id,
        "budget_id": ri.budget_id,
        "operator_set_id": ri.operator_set_id,
        "operator_set_version": ri.operator_set_version,
    }


def run_input_digest(ri: SearchRunInput) -> str:
    return sha(run_input(ri))


def run_id(run: GeometricSearchRun) -> str:
    return sha(
        {
            "run_id": "",
            "run_policy_version": run.run_policy_version,
            "run_input": run_input(run.run_input),
            "input_digest": run.input_digest,
            "candidate_attempts": [
                {
                    "attempt_index": a.attempt_index,
                    "input_digest": a.input_digest,
                    "candidate_digest": a.candidate_digest,
                    "operator_id": a.operator_id,
                    "operator_version": a.operator_version,
                    "replay_status": a.replay_status.value,
                }
                for a in run.candidate_attempts
            ],
        }
    )


def attempt_id(a: CandidateAttempt) -> str:
    return sha(
        {
            "attempt_id": "",
            "run_id": a.run_id,
            "attempt_index": a.attempt_index,
            "input_digest": a.input_digest,
            "candidate_digest": a.candidate_digest,
            "operator_id": a.operator_id,
            "operator_version": a.operator_version,
        }
    )


def candidate_content(c: CandidateReconstruction) -> dict[str, Any]:
    return {
        "original_problem_frame_digest": c.original_problem_frame_digest,
        "candidate_problem_frame_digest": c.candidate_problem_frame_digest,
        "frame_delta_digest": c.frame_delta_digest,
        "bindings": [binding(b) for b in c.candidate_bindings],
        "relations": [relation(r) for r in c.candidate_relations],
        "targets": [target(t) for t in c.candidate_targets],
        "evidence_spans": spans(c.evidence_spans),
    }


def candidate_digest(c: CandidateReconstruction) -> str:
    return sha(candidate_content(c))


def reconstruction_digest(c: CandidateReconstruction) -> str:
    return sha(
        {
            "candidate_reconstruction_digest": "",
            "candidate_digest": c.candidate_digest,
            "candidate": candidate_content(c),
            "run_id": c.run_id,
            "attempt_id": c.attempt_id,
            "operator_set_id": c.operator_set_id,
            "operator_set_version": c.operator_set_version,
            "operator_id": c.operator_id,
            "operator_version": c.operator_version,
        }
    )


def replay_input_digest(i: Any) -> str:
    """ADR-0229 §13.2, from the documented field list."""
    fields = [
        "replay_policy_version", "run_id", "run_policy_version", "attempt_id", "attempt_index",
        "candidate_digest", "candidate_reconstruction_digest", "problem_frame_digest",
        "original_contract_assessment_id", "candidate_organ", "gate_decision_id", "budget_id",
        "operator_set_id", "operator_set_version", "contract_replay_target",
    ]
    payload: dict[str, Any] = {name: getattr(i, name) for name in fields}
    payload["residual_ids"] = list(i.residual_ids)
    payload["proof_obligation_refs"] = list(i.proof_obligation_refs)
    payload["schema_versions"] = [[n, v] for n, v in i.schema_versions]
    return sha(payload)


def result_id(r: Any) -> str:
    """ADR-0229 §13.3 result id: structural fields, id blanked, no explanation."""
    return sha({
        "replay_result_id": "",
        "replay_policy_version": r.replay_policy_version,
        "input_digest": r.input_digest,
        "run_id": r.run_id,
        "attempt_id": r.attempt_id,
        "candidate_digest": r.candidate_digest,
        "contract_replay_assessment_id": r.contract_replay_assessment_id,
        "proof_obligation_refs": list(r.proof_obligation_refs),
        "proof_replay_refs": list(r.proof_replay_refs),
        "replay_disposition": r.replay_disposition.value,
        "reason_codes": list(r.reason_codes),
        "evidence_spans": spans(r.evidence_spans),
    })


def refusal_id(r: Any) -> str:
    """ADR-0229 §13.3 refusal id."""
    return sha({
        "replay_refusal_id": "",
        "replay_policy_version": r.replay_policy_version,
        "input_digest": r.input_digest,
        "run_id": r.run_id,
        "attempt_id": r.attempt_id,
        "attempt_index": r.attempt_index,
        "candidate_digest": r.candidate_digest,
        "replay_disposition": r.replay_disposition.value,
        "reason_codes": list(r.reason_codes),
    })


def proof_outcome_id(o: Any) -> str:
    return sha({
        "proof_outcome_id": "",
        "obligation_ref": o.obligation_ref,
        "authority_id": o.authority_id,
        "authority_version": o.authority_version,
        "candidate_digest": o.candidate_digest,
        "status": o.status.value,
        "reason_codes": list(o.reason_codes),
        "evidence_spans": spans(o.evidence_spans),
    })


def certification_digest(candidate: str, problem_sha256: str, check_content_digest: str) -> str:
    """The digest a closed certification's reason names (ADR-0019), written out here."""
    return sha({
        "candidate": candidate,
        "certification_version": 1,
        "check_content_digest": check_content_digest,
        "claim_id": "arithmetic.target_certified",
        "problem_digest": problem_sha256,
        "status": "verified",
    })


def _content_command(command: dict[str, Any]) -> dict[str, Any]:
    pins = [command["executable"], *command["dependencies"], *command["trusted_tool_dependencies"]]
    by_path = {p["path"]: p["sha256"] for p in pins}
    return {
        "argv": ["{{pin:" + by_path[t] + "}}" if t in by_path else t for t in command["argv"]],
        "dependencies": [p["sha256"] for p in command["dependencies"]],
        "executable": command["executable"]["sha256"],
        "trusted_tool_dependencies": sorted(
            p["sha256"] for p in command["trusted_tool_dependencies"]
        ),
    }


def check_content_digest(entry: dict[str, Any]) -> str:
    """A manifest entry's content digest (ADR-0019) from its JSON: pins by SHA-256, no path."""
    body = {k: v for k, v in entry.items() if v is not None}
    body["producer"] = _content_command(entry["producer"])
    body["checker"] = _content_command(entry["checker"])
    return sha({"content_identity_version": 1, **body})
