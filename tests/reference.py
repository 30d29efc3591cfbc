"""Independent reference identities (ADR-0229 §17).

Written from adr/0001-records-and-identities.md, not from the package: it uses
its own JSON encoding and its own payload shapes, and never calls
``kernel.identity`` or a record's ``payload()``. If the package's payloads or
hashing drift from the documented identities, the tests comparing against
this module fail.
"""

from __future__ import annotations

import hashlib
import json
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


def sha(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
