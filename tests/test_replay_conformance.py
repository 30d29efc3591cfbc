"""Replay conformance at the edges (issue 9, deliverable 5): what the core must refuse.

Each test names the defect an attacker (or a careless producer) can hand the
adapter and states the typed outcome it must get instead.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import TypeVar

import attrs
import pytest

from kernel.frames import (
    Binding,
    FrameDelta,
    ProblemFrame,
    SourceSpan,
    apply_delta,
    delta_digest,
    frame_digest,
)
from kernel.replay import (
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    ReplayDisposition,
    ReplayRequest,
    examine_run,
    refuse_malformed_attempt,
    replay_attempt,
    replay_attempts,
    replay_bundle_attempts,
    requests_from_bundle,
)
from kernel.serde import SerdeError, dumps, loads
from kernel.upstream import (
    CandidateDraft,
    CandidateReconstruction,
    ContractAssessment,
    SearchChain,
    build_chain,
    candidate_digest_of,
    reconstruction_digest_of,
    seal_run,
)
from tests import reference
from tests.replay_fixtures import (
    CLOSING,
    CONTRACT_REFUSING,
    ORIGINAL,
    SOURCE,
    CallLog,
    bundle_for,
    request_for,
    toy_assessment,
    toy_chain,
    toy_manifest,
)

D = ReplayDisposition
T = TypeVar("T")


def test_a_malformed_attempt_is_its_own_invalid_replay_input_refusal() -> None:
    refusal = refuse_malformed_attempt(3, "schema_mismatch at $.inputs[3]: bad")
    assert refusal.replay_disposition is D.INVALID_REPLAY_INPUT
    assert refusal.reason_codes == ("attempt_malformed",)
    # §7.2: nothing of the attempt was validated, so no identity is reported.
    assert (refusal.input_digest, refusal.run_id, refusal.attempt_id) == (None, None, None)
    assert refusal.candidate_digest is None
    assert "attempt 3" in refusal.explanation
    assert refusal.replay_refusal_id == reference.refusal_id(refusal)


def test_a_malformed_attempt_refusal_serializes_even_when_its_detail_is_hostile() -> None:
    refusal = refuse_malformed_attempt(0, "key '\ud800' is not canonical")
    assert b"\\ud800" in dumps(refusal)


@pytest.mark.parametrize("index", [-1, True, 1.0])
def test_a_malformed_attempt_refusal_needs_a_real_index(index: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        refuse_malformed_attempt(index, "x")  # type: ignore[arg-type]  # misuse on purpose


# --- helpers: forge a request the way an attacker would (bypassing validators, resealing) --


def _copy(value: T) -> T:
    """A copy that skips attrs validators, as ``object.__setattr__`` forgeries do."""
    return copy.copy(value)


def _set(record: object, **fields: object) -> None:
    for name, value in fields.items():
        object.__setattr__(record, name, value)


def _resealed(chain: SearchChain, rec: CandidateReconstruction) -> ReplayRequest:
    """Reseal every identity around a forged reconstruction (digests, run, attempt, input)."""
    _set(rec, candidate_digest=candidate_digest_of(rec))
    attempt = chain.run.candidate_attempts[0]
    run = seal_run(
        chain.run.run_input,
        [(rec.candidate_digest, attempt.operator_id, attempt.operator_version)],
        run_policy_version=chain.run.run_policy_version,
    )
    _set(rec, run_id=run.run_id, attempt_id=run.candidate_attempts[0].attempt_id)
    _set(rec, candidate_reconstruction_digest=reconstruction_digest_of(rec))
    forged = SearchChain(
        chain.problem_frame, chain.assessment, chain.residuals, chain.gate, chain.budget, run,
        (rec,),
    )
    return request_for(forged, MANIFEST)


def _delta_chain() -> SearchChain:
    """A valid chain whose one candidate is a frame delta that binds ``total``."""
    delta = FrameDelta(
        base_frame_digest=frame_digest(ORIGINAL),
        removed_bindings=(),
        added_bindings=(Binding("total", 7, "fruit", SourceSpan(0, 3)),),
        removed_relations=(),
        added_relations=(),
        removed_targets=(),
        added_targets=(),
        evidence_spans=(SourceSpan(8, 9), SourceSpan(21, 22)),
    )
    return build_chain(
        ORIGINAL, toy_assessment(ORIGINAL), [CandidateDraft(delta, "op.rewrite", "v1")],
        operator_set_id="toy.ops", operator_set_version="v1",
    )


MANIFEST = toy_manifest(CallLog())


def _refused(outcome: object, disposition: ReplayDisposition, code: str) -> None:
    assert isinstance(outcome, ReplayAdapterRefusal), outcome
    assert (outcome.replay_disposition, outcome.reason_codes) == (disposition, (code,))
    dumps(outcome)  # every outcome serializes


def test_the_forgery_helpers_reseal_an_honest_candidate_to_a_closure() -> None:
    # Control for the forgeries below: resealing alone changes nothing.
    chain = toy_chain(CLOSING)
    outcome = replay_attempt(_resealed(chain, _copy(chain.reconstructions[0])), MANIFEST)
    assert isinstance(outcome, ReplayAdapterResult)
    assert outcome.replay_disposition is D.CONTRACT_AND_PROOF_CLOSED


# --- no cache keyed by value equality over untrusted input ----------------------


def test_a_run_equal_by_value_to_an_honest_run_is_not_served_its_facts() -> None:
    """``True == 1`` and ``hash(True) == hash(1)``: a run whose second attempt holds
    ``attempt_index=True`` compares equal to the honest run, so a value-keyed
    memo served it the honest run's facts once the honest run had been seen."""
    honest = toy_chain(CLOSING, CLOSING)
    tampered = loads(dumps(honest), SearchChain)  # an equal, independent copy
    _set(tampered.run.candidate_attempts[1], attempt_index=True)
    assert tampered.run == honest.run and hash(tampered.run) == hash(honest.run)
    first = replay_attempt(request_for(honest, MANIFEST), MANIFEST)
    assert isinstance(first, ReplayAdapterResult)
    outcome = replay_attempt(request_for(tampered, MANIFEST), MANIFEST)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


class _HashRaises(str):
    def __hash__(self) -> int:
        raise RuntimeError("hash refused")


def test_an_input_whose_hash_raises_is_a_refusal_not_an_exception() -> None:
    request = request_for(loads(dumps(toy_chain(CLOSING)), SearchChain), MANIFEST)
    _set(request.run, run_policy_version=_HashRaises("geometric_search_run.v1"))
    outcome = replay_attempt(request, MANIFEST)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_facts_of_another_run_object_are_ignored() -> None:
    honest = toy_chain(CLOSING, CLOSING)
    tampered = loads(dumps(honest), SearchChain)
    _set(tampered.run.candidate_attempts[1], attempt_index=True)
    facts = examine_run(honest.run)  # honest facts, offered for an equal-valued run
    outcome = replay_attempt(request_for(tampered, MANIFEST), MANIFEST, facts=facts)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_shared_record_facts_apply_only_to_the_very_object_examined() -> None:
    honest = toy_chain(CLOSING)
    request = _copy(request_for(honest, MANIFEST))
    facts = examine_run(
        honest.run,
        shared=(honest.problem_frame, honest.assessment, honest.gate, honest.budget,
                honest.residuals),
    )
    tampered = loads(dumps(honest.problem_frame), ProblemFrame)
    _set(tampered.bindings[0], value=True)  # an equal-looking frame, not the one examined
    _set(request, problem_frame=tampered)
    outcome = replay_attempt(request, MANIFEST, facts=facts)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_batch_outcomes_equal_one_by_one_outcomes() -> None:
    chain = toy_chain(CLOSING, CONTRACT_REFUSING, CLOSING)
    bundle = bundle_for(chain, MANIFEST)
    requests = requests_from_bundle(bundle)
    alone = [dumps(replay_attempt(r, MANIFEST)) for r in requests]
    assert [dumps(o) for o in replay_attempts(requests, MANIFEST)] == alone
    assert [dumps(o) for o in replay_bundle_attempts(bundle, MANIFEST)] == alone


# --- type-exact checks ----------------------------------------------------------


def test_a_source_text_of_a_str_subclass_is_refused() -> None:
    class Text(str):
        pass

    request = request_for(loads(dumps(toy_chain(CLOSING)), SearchChain), MANIFEST)
    _set(request.problem_frame, source_text=Text(request.problem_frame.source_text))
    outcome = replay_attempt(request, MANIFEST)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_a_bool_is_never_an_attempt_index() -> None:
    request = request_for(toy_chain(CLOSING), MANIFEST)
    _set(request.replay_input, attempt_index=False)
    _refused(replay_attempt(request, MANIFEST), D.INVALID_REPLAY_INPUT, "record_structure_invalid")


# --- every record invariant rechecked on validation -----------------------------


def test_a_reconstruction_with_neither_frame_nor_delta_is_a_typed_refusal() -> None:
    chain = toy_chain(CLOSING)
    rec = _copy(chain.reconstructions[0])
    _set(rec, candidate_problem_frame=None, candidate_problem_frame_digest=None)
    request = _copy(request_for(chain, MANIFEST))
    _set(request, reconstruction=rec)
    _refused(replay_attempt(request, MANIFEST), D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_a_reconstruction_with_both_frame_and_delta_resealed_is_refused() -> None:
    chain = _delta_chain()
    rec = _copy(chain.reconstructions[0])
    assert rec.frame_delta is not None
    frame = apply_delta(ORIGINAL, rec.frame_delta)
    assert isinstance(frame, ProblemFrame)
    _set(rec, candidate_problem_frame=frame, candidate_problem_frame_digest=frame_digest(frame))
    outcome = replay_attempt(_resealed(chain, rec), MANIFEST)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


# --- spans bound to their source text (code points) -----------------------------


@pytest.mark.parametrize("bad", [(0, len(SOURCE) + 1), (5, 4)], ids=["past-end", "reversed"])
def test_a_candidate_frame_span_outside_its_source_text_is_refused(bad: tuple[int, int]) -> None:
    chain = toy_chain(CLOSING)
    rec = _copy(chain.reconstructions[0])
    assert rec.candidate_problem_frame is not None
    frame = _copy(rec.candidate_problem_frame)
    span = _copy(SourceSpan(0, 0))
    _set(span, start=bad[0], end=bad[1])
    spans = (*frame.evidence_spans, span)
    _set(frame, evidence_spans=spans)
    _set(rec, candidate_problem_frame=frame, candidate_problem_frame_digest=frame_digest(frame),
         evidence_spans=spans)
    outcome = replay_attempt(_resealed(chain, rec), MANIFEST)
    _refused(outcome, D.INVALID_REPLAY_INPUT, "record_structure_invalid")


def test_a_delta_span_past_the_end_of_the_source_does_not_reconstruct() -> None:
    chain = _delta_chain()
    rec = _copy(chain.reconstructions[0])
    assert rec.frame_delta is not None
    delta = _copy(rec.frame_delta)
    spans = (SourceSpan(8, 9), SourceSpan(0, len(SOURCE) + 1))
    _set(delta, evidence_spans=spans)
    _set(rec, frame_delta=delta, frame_delta_digest=delta_digest(delta), evidence_spans=spans)
    outcome = replay_attempt(_resealed(chain, rec), MANIFEST)
    _refused(outcome, D.CANDIDATE_IDENTITY_MISMATCH, "frame_delta_does_not_reconstruct")


def test_spans_count_code_points_not_utf16_units() -> None:
    text = "\U0001f34e 3 apples"  # one astral code point, two UTF-16 units
    ProblemFrame(text, (), (), (), (SourceSpan(0, len(text)),))
    with pytest.raises(ValueError, match="not inside"):
        ProblemFrame(text, (), (), (), (SourceSpan(0, len(text.encode("utf-16-le")) // 2),))


# --- authority output validated before it is sealed -----------------------------


def test_an_authority_explanation_with_a_lone_surrogate_is_a_typed_refusal() -> None:
    def contract(frame: ProblemFrame) -> ContractAssessment:
        return attrs.evolve(toy_assessment(frame), explanation="bad \ud800 text")

    manifest = toy_manifest(CallLog(), contract=contract)
    outcome = replay_attempt(request_for(toy_chain(CONTRACT_REFUSING), manifest), manifest)
    _refused(outcome, D.CONTRACT_REPLAY_UNAVAILABLE, "contract_outcome_malformed")


# --- every field required on input ----------------------------------------------


@pytest.mark.parametrize(
    ("path", "field"),
    [(("chain", "assessment"), "explanation"), (("inputs", 0), "schema_versions")],
)
def test_a_field_with_a_default_may_not_be_left_out_of_a_document(
    path: tuple[str | int, ...], field: str
) -> None:
    document = json.loads(dumps(bundle_for(toy_chain(CLOSING), MANIFEST)))
    holder = document
    for step in path:
        holder = holder[step]
    del holder[field]
    with pytest.raises(SerdeError) as caught:
        loads(json.dumps(document).encode(), ReplayBundle)
    dotted = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)
    assert caught.value.code == "schema_mismatch"
    assert caught.value.path == f"${dotted}.{field}"
    assert "required field missing" in caught.value.message


def test_a_structuring_error_names_path_expected_type_and_what_was_found() -> None:
    document = json.loads(dumps(bundle_for(toy_chain(CLOSING), MANIFEST)))
    document["inputs"][0]["attempt_index"] = True
    with pytest.raises(SerdeError) as caught:
        loads(json.dumps(document).encode(), ReplayBundle)
    assert caught.value.path == "$.inputs[0].attempt_index"
    assert "expected int, found boolean true" in caught.value.message


# --- the kernel's own integer limit, whatever PYTHONINTMAXSTRDIGITS says -------

_PROBE = """
import json, sys
from kernel.identity import canonical_json, digest, set_fast_path
from kernel.organs.arithmetic import stated_quantities
from kernel.serde import SerdeError, parse_json
out = []
for digits in (20, 700, 1000, 4300, 4301, 9000):
    doc = ("[" + "7" * digits + "]").encode()
    try:
        value = parse_json(doc)
        out.append(["ok", digits, digest(value)])
    except SerdeError as exc:
        out.append([exc.code, digits])
for fast in (True, False):
    set_fast_path(fast)
    out.append(canonical_json({"n": -(10 ** 2000) - 3, "m": [10 ** 4299]}).decode()[-20:])
out.append(len(stated_quantities("Ann has " + "9" * 3000 + " apples.")))
print(json.dumps(out))
"""


def test_integer_limits_do_not_depend_on_the_interpreters_setting() -> None:
    outputs = set()
    for setting in ("640", "0", None, "100000"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONINTMAXSTRDIGITS"}
        if setting is not None:
            env["PYTHONINTMAXSTRDIGITS"] = setting
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
    results = json.loads(outputs.pop())
    codes = {row[1]: row[0] for row in results[:6]}
    assert codes == {20: "ok", 700: "ok", 1000: "ok", 4300: "ok", 4301: "integer_too_large",
                     9000: "integer_too_large"}
    assert results[6] == results[7]  # fast path and reference agree
    assert results[8] == 1


# --- distinct ids for distinct early refusals (issue 11.4) ----------------------


def test_early_refusals_of_different_attempts_have_different_ids() -> None:
    chain = toy_chain(CLOSING, CLOSING, CLOSING)
    requests = requests_from_bundle(bundle_for(chain, MANIFEST))
    refusals: list[ReplayAdapterRefusal] = []
    for request in requests:
        forged = _copy(request)
        _set(forged, reconstruction=_copy(request.reconstruction))
        _set(forged.reconstruction, operator_id="op.other")  # same early defect for each
        refusal = replay_attempt(forged, MANIFEST)
        _refused(refusal, D.CANDIDATE_IDENTITY_MISMATCH, "reconstruction_digest_mismatch")
        assert isinstance(refusal, ReplayAdapterRefusal)
        refusals.append(refusal)
    for index, refusal in enumerate(refusals):
        assert (refusal.attempt_id, refusal.attempt_index) == (None, index)
        assert refusal.replay_refusal_id == reference.refusal_id(refusal)
    assert len({r.replay_refusal_id for r in refusals}) == len(refusals)


def test_malformed_attempts_at_different_positions_have_different_ids() -> None:
    first, second = refuse_malformed_attempt(0, "x"), refuse_malformed_attempt(1, "x")
    assert (first.attempt_index, second.attempt_index) == (0, 1)
    assert first.replay_refusal_id != second.replay_refusal_id
