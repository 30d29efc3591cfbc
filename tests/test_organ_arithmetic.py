"""The reference arithmetic organ: contract rules, proof rules, manifest, replay.

Identities are recomputed with the tests' own code (``tests/support/reference.py`` and
``_proof_outcome_id`` below), never with the package's payloads.
"""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kernel.organs as organs
from kernel.frames import Binding, ProblemFrame, Relation, SourceSpan, Target
from kernel.organs.arithmetic import (
    MAX_OPERAND_BITS,
    Hazard,
    assess,
    prove_evidence_grounded,
    prove_target_determined,
    stated_quantities,
)
from kernel.replay import (
    ContractAuthority,
    ProofAuthority,
    ProofContext,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayRequest,
    build_replay_input,
    replay_attempt,
)
from kernel.upstream import CandidateDraft, SearchChain, build_chain
from tests.support import reference

CANDIDATE = "ab" * 32

# --- helpers -------------------------------------------------------------------


def _span(text: str, phrase: str, occurrence: int = 0) -> SourceSpan:
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(phrase, start + 1)
    return SourceSpan(start, start + len(phrase))


def frame(
    bindings: tuple[tuple[str, int, str], ...] = (),
    relations: tuple[tuple[str, str, tuple[str, ...]], ...] = (),
    targets: tuple[str, ...] = ("t",),
    *,
    role: str = "answer",
    source: str = "numbers 0 1 2 3 4 5 6 7 8 9 10 12",
) -> ProblemFrame:
    """A frame whose bindings point at a span of ``source`` (not necessarily grounded)."""
    return ProblemFrame(
        source,
        tuple(Binding(n, v, u, SourceSpan(0, len(source))) for n, v, u in bindings),
        tuple(Relation(r, op, ops) for r, op, ops in relations),
        tuple(Target(t, role) for t in targets),
        (SourceSpan(0, 1),),
    )


def codes(f: ProblemFrame) -> tuple[tuple[str, ...], tuple[str, ...]]:
    a = assess(f)
    return a.missing_bindings, a.unresolved_hazards


def context(f: ProblemFrame, ref: str) -> ProofContext:
    return ProofContext(ref, CANDIDATE, f, assess(f))


def grounded(f: ProblemFrame) -> ProofOutcome:
    return prove_evidence_grounded(context(f, organs.EVIDENCE_GROUNDED))


def determined(f: ProblemFrame) -> ProofOutcome:
    return prove_target_determined(context(f, organs.TARGET_DETERMINED))


# --- public surface and manifest ----------------------------------------------------


def test_public_surface_is_exact_and_sorted() -> None:
    assert organs.__all__ == sorted(organs.__all__)
    assert organs.__all__ == [
        "ARITHMETIC_ORGAN",
        "BUILTIN_MANIFEST",
        "BUILTIN_MANIFEST_VERSION",
        "CERTIFICATION_BACKEND",
        "CERTIFICATION_MEDIA_TYPE",
        "CERTIFICATION_OPERATION",
        "CERTIFIED_MANIFEST",
        "CERTIFIED_MANIFEST_VERSION",
        "CERTIFIED_PREFIX",
        "CHECK_CONTENT_SETTING",
        "CHECK_DIGEST_SETTING",
        "CONTRACT_AUTHORITY",
        "CertificationEvidence",
        "EVIDENCE_GROUNDED",
        "EVIDENCE_GROUNDED_AUTHORITY",
        "PROOF_OBLIGATIONS",
        "TARGET_CERTIFIED",
        "TARGET_CERTIFIED_AUTHORITY",
        "TARGET_DETERMINED",
        "TARGET_DETERMINED_AUTHORITY",
        "assess",
        "builtin_manifest",
        "certification_digest",
        "certification_problem",
        "certification_spec",
        "certified_manifest",
        "problem_digest",
        "prove_evidence_grounded",
        "prove_target_certified",
        "prove_target_determined",
    ]
    for name in organs.__all__:
        assert hasattr(organs, name)


def test_builtin_manifest_wires_exactly_the_arithmetic_authorities() -> None:
    m = organs.builtin_manifest()
    assert m is organs.BUILTIN_MANIFEST
    assert m.manifest_version == "builtin.v1"
    assert organs.ARITHMETIC_ORGAN == "arithmetic"
    assert dict(m.contract_authorities) == {
        "arithmetic": ContractAuthority("arithmetic.contract", "v1", assess)
    }
    assert m.contract_authorities["arithmetic"].assess is assess
    assert m.contract_authorities["arithmetic"].target == "arithmetic.contract@v1"
    assert dict(m.proof_policies) == {
        "arithmetic": ProofObligations(
            ("arithmetic.evidence_grounded", "arithmetic.target_determined")
        )
    }
    assert set(m.proof_authorities) == {
        "arithmetic.evidence_grounded",
        "arithmetic.target_determined",
    }
    grounded_auth = m.proof_authorities["arithmetic.evidence_grounded"]
    determined_auth = m.proof_authorities["arithmetic.target_determined"]
    assert grounded_auth == ProofAuthority(
        "arithmetic.evidence_grounded", "v1", grounded_auth.prove
    )
    assert grounded_auth.prove is prove_evidence_grounded
    assert determined_auth == ProofAuthority(
        "arithmetic.target_determined", "v1", determined_auth.prove
    )
    assert determined_auth.prove is prove_target_determined


# --- contract: runnable and binding ---------------------------------------------------


def test_a_well_formed_frame_is_runnable_and_the_assessment_binds_it() -> None:
    f = frame((("a", 3, "apples"), ("b", 5, "apples")), (("t", "add", ("a", "b")),))
    a = assess(f)
    assert a.runnable
    assert (a.missing_bindings, a.unresolved_hazards) == ((), ())
    assert a.candidate_organ == "arithmetic"
    assert a.problem_frame_digest == reference.frame_digest(f)
    assert a.assessment_id == reference.assessment_id(a)
    assert a.evidence_spans == f.evidence_spans
    assert "8" not in a.explanation


def test_assessment_evidence_spans_are_the_frames_in_order_with_duplicates() -> None:
    spans = (SourceSpan(3, 4), SourceSpan(0, 1), SourceSpan(3, 4))
    f = attrs.evolve(frame((("t", 1, "x"),)), evidence_spans=spans)
    assert assess(f).evidence_spans == spans


# --- contract: missing bindings ------------------------------------------------------------


def test_a_relation_operand_that_names_nothing_is_a_missing_binding() -> None:
    f = frame((("a", 3, "x"),), (("t", "add", ("a", "b")),))
    assert codes(f) == (("b",), ())
    assert not assess(f).runnable


def test_a_target_that_names_nothing_is_a_missing_binding() -> None:
    assert codes(frame((("a", 3, "x"),), (), ("t",))) == (("t",), ())


def test_missing_bindings_follow_first_reference_operands_then_targets_each_once() -> None:
    f = frame(
        (),
        (("r2", "add", ("z", "y", "z")), ("r1", "sub", ("y", "x"))),
        ("w", "x", "r1"),
    )
    assert codes(f)[0] == ("z", "y", "x", "w")


def test_a_relation_result_defined_later_in_the_frame_is_not_missing() -> None:
    f = frame((("a", 1, "x"),), (("t", "add", ("r", "a")), ("r", "add", ("a", "a"))))
    assert codes(f) == ((), ())


# --- contract: hazards, one rule each -------------------------------------------------------


def test_same_name_bound_with_different_values_is_a_conflict() -> None:
    f = frame((("t", 3, "x"), ("t", 4, "x")))
    assert codes(f)[1] == ("conflicting_binding:t",)


def test_same_name_bound_with_different_units_is_a_conflict() -> None:
    f = frame((("t", 3, "x"), ("t", 3, "y")))
    assert codes(f)[1] == ("conflicting_binding:t",)


def test_same_quantity_stated_twice_is_not_a_conflict() -> None:
    assert codes(frame((("t", 3, "x"), ("t", 3, "x")))) == ((), ())


def test_a_relation_result_that_is_also_a_binding_is_a_conflict() -> None:
    f = frame((("a", 1, "x"), ("t", 2, "x")), (("t", "add", ("a", "a")),))
    assert codes(f)[1] == ("conflicting_binding:t",)


def test_two_different_relations_for_one_result_are_a_conflict() -> None:
    f = frame((("a", 1, "x"),), (("t", "add", ("a", "a")), ("t", "sub", ("a", "a"))))
    assert codes(f)[1] == ("conflicting_binding:t",)
    identical = frame((("a", 1, "x"),), (("t", "add", ("a", "a")), ("t", "add", ("a", "a"))))
    assert codes(identical) == ((), ())


def test_conflicts_are_ordered_by_first_definition() -> None:
    f = frame(
        (("b", 1, "x"), ("a", 1, "x"), ("a", 2, "x"), ("b", 2, "x"), ("t", 1, "x")),
        (("c", "add", ("t", "t")), ("t", "add", ("c", "t")), ("c", "mul", ("t", "t"))),
        ("a",),
    )
    assert [h for h in codes(f)[1] if h.startswith("conflicting")] == [
        "conflicting_binding:b",
        "conflicting_binding:a",
        "conflicting_binding:t",
        "conflicting_binding:c",
    ]


def test_an_unknown_operator_is_a_hazard() -> None:
    f = frame((("a", 2, "x"),), (("t", "pow", ("a", "a")),))
    assert codes(f)[1] == ("unknown_operator:t",)


@pytest.mark.parametrize(
    ("operator", "operands"),
    [("add", ("a",)), ("mul", ("a",)), ("sub", ("a", "a", "a")), ("div", ("a",)), ("sub", ())],
)
def test_a_wrong_operand_count_is_a_hazard(operator: str, operands: tuple[str, ...]) -> None:
    f = frame((("a", 2, "x"),), (("t", operator, operands),))
    assert codes(f)[1] == ("wrong_arity:t",)


def test_add_and_mul_take_two_or_more_operands() -> None:
    f = frame((("a", 2, "1"),), (("m", "mul", ("a", "a", "a")), ("t", "add", ("m", "a", "a"))))
    assert codes(f) == ((), ())


def test_relations_on_a_cycle_are_hazards_and_their_dependents_are_not() -> None:
    f = frame(
        (("a", 1, "x"),),
        (("t", "add", ("p", "a")), ("p", "add", ("q", "a")), ("q", "add", ("p", "a"))),
    )
    assert codes(f)[1] == ("cycle:p", "cycle:q")


def test_a_relation_that_uses_its_own_result_is_a_cycle() -> None:
    f = frame((("a", 1, "x"),), (("t", "add", ("t", "a")),))
    assert codes(f)[1] == ("cycle:t",)


def test_adding_different_units_is_a_unit_mismatch() -> None:
    f = frame((("a", 1, "apples"), ("b", 2, "pears")), (("t", "add", ("a", "b")),))
    assert codes(f)[1] == ("unit_mismatch:t",)
    g = frame((("a", 1, "apples"), ("b", 2, "pears")), (("t", "sub", ("a", "b")),))
    assert codes(g)[1] == ("unit_mismatch:t",)


def test_mul_by_a_count_keeps_the_unit_and_units_otherwise_compose() -> None:
    # 3 (count) * 4 apples is in apples, so it adds to apples.
    f = frame(
        (("n", 3, "1"), ("a", 4, "apples")),
        (("m", "mul", ("n", "a")), ("t", "add", ("m", "a"))),
    )
    assert codes(f) == ((), ())
    # apples * pears is "apples*pears", which does not add to apples.
    g = frame(
        (("p", 3, "pears"), ("a", 4, "apples")),
        (("m", "mul", ("a", "p")), ("t", "add", ("m", "a"))),
    )
    assert codes(g)[1] == ("unit_mismatch:t",)
    h = frame(
        (("p", 3, "pears"), ("a", 4, "apples"), ("c", 12, "apples*pears")),
        (("m", "mul", ("a", "p")), ("t", "add", ("m", "c"))),
    )
    assert codes(h) == ((), ())


def test_div_units_ratio_and_per_unit_rules() -> None:
    # apples / count = apples; apples / apples = 1; apples / box = apples/box.
    f = frame(
        (("a", 12, "apples"), ("n", 3, "1"), ("b", 2, "box"), ("k", 6, "apples/box")),
        (
            ("per", "div", ("a", "n")),
            ("ratio", "div", ("a", "a")),
            ("rate", "div", ("a", "b")),
            ("u", "add", ("per", "a")),
            ("v", "add", ("ratio", "n")),
            ("t", "add", ("rate", "k")),
        ),
    )
    assert codes(f) == ((), ())


def test_composite_units_are_parenthesised() -> None:
    f = frame(
        (("a", 4, "m"), ("s", 2, "s"), ("k", 1, "(m/s)*s")),
        (("v", "div", ("a", "s")), ("d", "mul", ("v", "s")), ("t", "add", ("d", "k"))),
    )
    assert codes(f) == ((), ())


def test_division_by_zero_is_a_hazard() -> None:
    f = frame((("a", 4, "x"), ("z", 0, "1")), (("t", "div", ("a", "z")),))
    assert codes(f)[1] == ("division_by_zero:t",)


def test_division_by_a_computed_zero_is_a_hazard() -> None:
    f = frame(
        (("a", 4, "x"), ("b", 3, "1")),
        (("z", "sub", ("b", "b")), ("t", "div", ("a", "z"))),
    )
    assert codes(f)[1] == ("division_by_zero:t",)


def test_inexact_division_is_a_hazard_and_exact_division_is_not() -> None:
    f = frame((("a", 7, "x"), ("b", 2, "1")), (("t", "div", ("a", "b")),))
    assert codes(f)[1] == ("inexact_division:t",)
    g = frame((("a", 8, "x"), ("b", 2, "1")), (("t", "div", ("a", "b")),))
    assert codes(g) == ((), ())


def test_evaluation_is_exact_rational_arithmetic() -> None:
    # (1/3 + 2/3) is exactly 1: an inexact step is reported, the sum is exact.
    f = frame(
        (("a", 1, "x"), ("b", 2, "x"), ("c", 3, "1")),
        (
            ("p", "div", ("a", "c")),
            ("q", "div", ("b", "c")),
            ("s", "add", ("p", "q")),
            ("t", "div", ("s", "a")),
        ),
    )
    assert codes(f)[1] == ("inexact_division:p", "inexact_division:q")


def test_an_oversized_operation_is_a_hazard_not_a_computation() -> None:
    relations: list[tuple[str, str, tuple[str, ...]]] = [("r0", "mul", ("a", "a"))]
    relations += [(f"r{i}", "mul", (f"r{i - 1}", f"r{i - 1}")) for i in range(1, 40)]
    relations.append(("t", "add", ("r39", "r39")))
    f = frame((("a", 3, "1"),), tuple(relations))
    hazards = codes(f)[1]
    assert hazards[0].startswith("magnitude_exceeded:")
    assert len(hazards) == 1
    assert MAX_OPERAND_BITS == 1 << 17


def test_a_frame_without_targets_is_a_hazard() -> None:
    assert codes(frame((("a", 1, "x"),), (), ())) == ((), ("no_target",))


def test_a_target_role_other_than_answer_is_a_hazard() -> None:
    f = frame((("t", 1, "x"),), role="hint")
    assert codes(f)[1] == ("unsupported_target_role:t",)


def test_hazards_are_grouped_by_kind_then_frame_order() -> None:
    f = frame(
        (("a", 7, "x"), ("b", 2, "y"), ("z", 0, "1"), ("c", 1, "x"), ("c", 2, "x")),
        (
            ("d2", "div", ("a", "z")),
            ("u", "add", ("a", "b")),
            ("d1", "div", ("a", "b")),
            ("k", "pow", ("a",)),
            ("w", "sub", ("a",)),
            ("cy", "add", ("cy", "a")),
        ),
        ("u",),
        role="hint",
    )
    assert codes(f)[1] == (
        "conflicting_binding:c",
        "unknown_operator:k",
        "wrong_arity:w",
        "cycle:cy",
        "unit_mismatch:u",
        "division_by_zero:d2",
        "inexact_division:d1",
        "unsupported_target_role:u",
    )
    kinds = [h.split(":")[0] for h in codes(f)[1]]
    order = [k.value for k in Hazard]
    assert kinds == sorted(kinds, key=order.index)


def test_missing_or_conflicting_inputs_do_not_cascade_into_unit_hazards() -> None:
    f = frame(
        (("a", 1, "x"), ("a", 1, "y")),
        (("p", "add", ("a", "b")), ("t", "add", ("p", "a"))),
    )
    assert codes(f) == (("b",), ("conflicting_binding:a",))


# --- proof: arithmetic.evidence_grounded ------------------------------------------------

TEXT = "Ann has 3 apples. Ben gives her five more apples and 1,200 pears. How many now?"


def grounded_frame(*bindings: tuple[str, int, SourceSpan]) -> ProblemFrame:
    return ProblemFrame(
        TEXT,
        tuple(Binding(n, v, "apples", s) for n, v, s in bindings),
        (),
        (Target("t", "answer"),),
        (),
    )


def test_a_span_stating_its_value_in_digits_is_grounded() -> None:
    f = grounded_frame(("a", 3, _span(TEXT, "3 apples")), ("p", 1200, _span(TEXT, "1,200 pears")))
    o = grounded(f)
    assert (o.status, o.reason_codes) == (ProofStatus.CLOSED, ())
    assert o.evidence_spans == (_span(TEXT, "3 apples"), _span(TEXT, "1,200 pears"))


def test_a_span_stating_its_value_as_a_number_word_is_grounded() -> None:
    f = grounded_frame(("b", 5, _span(TEXT, "five more")))
    assert grounded(f).status is ProofStatus.CLOSED


def test_a_span_that_states_another_number_is_ungrounded() -> None:
    f = grounded_frame(("a", 3, _span(TEXT, "3 apples")), ("b", 6, _span(TEXT, "five more")))
    o = grounded(f)
    assert (o.status, o.reason_codes) == (ProofStatus.REFUSED, ("ungrounded:b",))
    assert o.evidence_spans == (_span(TEXT, "3 apples"), _span(TEXT, "five more"))


def test_a_span_without_any_number_is_ungrounded() -> None:
    f = grounded_frame(("a", 3, _span(TEXT, "Ann has")), ("e", 0, SourceSpan(4, 4)))
    assert grounded(f).reason_codes == ("ungrounded:a", "ungrounded:e")


def test_a_span_past_the_end_of_the_source_never_reaches_the_organ() -> None:
    # Frames bind their spans to their source text (kernel.frames): such a
    # frame cannot be built, so the organ's own span_out_of_source check is
    # a second line only.
    with pytest.raises(ValueError, match="not inside"):
        grounded_frame(("a", 3, SourceSpan(5, len(TEXT) + 1)), ("b", 5, _span(TEXT, "five")))


def test_a_span_cut_out_of_a_longer_number_is_ungrounded() -> None:
    s = "Ann has 13 apples and twenty-five pears."
    f = ProblemFrame(
        s,
        (
            Binding("a", 3, "apples", _span(s, "3 apples")),
            Binding("p", 5, "pears", _span(s, "five pears")),
            Binding("q", 25, "pears", _span(s, "twenty-five")),
        ),
        (),
        (),
        (),
    )
    assert grounded(f).reason_codes == ("ungrounded:a", "ungrounded:p")


def test_grounding_reasons_follow_binding_order_each_once() -> None:
    bad = _span(TEXT, "How many")
    f = grounded_frame(("z", 1, bad), ("a", 1, bad), ("z", 1, bad))
    o = grounded(f)
    assert o.reason_codes == ("ungrounded:z", "ungrounded:a")
    assert o.evidence_spans == (bad, bad, bad)


def test_a_frame_without_bindings_has_nothing_to_ground() -> None:
    o = grounded(grounded_frame())
    assert (o.status, o.reason_codes, o.evidence_spans) == (ProofStatus.CLOSED, (), ())


@pytest.mark.parametrize(
    ("text", "stated"),
    [
        ("3 apples", (3,)),
        ("12kg and 7", (12, 7)),
        ("1,234 or 1234", (1234, 1234)),
        ("3.5 kg", ()),
        ("12,34", ()),
        ("-4 degrees", (-4,)),
        ("5-3", (5, 3)),
        ("Three, twenty-one and a dozen", (3, 21, 12)),
        ("someone", ()),
        ("twenty five", (20, 5)),
        ("ten 4 dozen 6", (10, 4, 12, 6)),
    ],
)
def test_stated_quantities_reads_numerals_and_number_words_by_position(
    text: str, stated: tuple[int, ...]
) -> None:
    assert stated_quantities(text) == stated


def test_overlong_numerals_are_not_read() -> None:
    assert stated_quantities("9" * 4001) == ()
    assert stated_quantities("9" * 4000) == (int("9" * 4000),)


# --- proof: arithmetic.target_determined ------------------------------------------------


def test_a_target_with_one_exact_value_is_determined() -> None:
    f = frame((("a", 2121, "x"), ("b", 2121, "x")), (("t", "add", ("a", "b")),))
    o = determined(f)
    assert (o.status, o.reason_codes) == (ProofStatus.CLOSED, ())
    # The value (4242) appears nowhere: not in codes, not in prose.
    assert "4242" not in json.dumps([*o.reason_codes, o.explanation, o.proof_outcome_id])


def test_a_target_that_names_nothing_is_unbound() -> None:
    f = frame((("a", 1, "x"),), (), ("a", "nope"))
    assert determined(f).reason_codes == ("unbound_target:nope",)


@pytest.mark.parametrize(
    "relations",
    [
        (("t", "div", ("a", "z")),),
        (("t", "add", ("t", "a")),),
        (("t", "pow", ("a", "a")),),
        (("t", "add", ("a", "missing")),),
        (("t", "add", ("a", "z")), ("t", "sub", ("a", "z"))),
    ],
    ids=["zero_division", "cycle", "unknown_operator", "missing_operand", "conflict"],
)
def test_a_target_without_one_exact_value_is_undetermined(
    relations: tuple[tuple[str, str, tuple[str, ...]], ...],
) -> None:
    f = frame((("a", 1, "x"), ("z", 0, "x")), relations)
    o = determined(f)
    assert (o.status, o.reason_codes) == (ProofStatus.REFUSED, ("undetermined_target:t",))


def test_an_inexact_quotient_is_still_one_exact_value() -> None:
    f = frame((("a", 7, "x"), ("b", 2, "1")), (("t", "div", ("a", "b")),))
    assert determined(f).status is ProofStatus.CLOSED


def test_a_frame_without_targets_determines_nothing() -> None:
    assert determined(frame((("a", 1, "x"),), (), ())).reason_codes == ("no_target",)


def test_determination_evidence_is_the_spans_the_targets_depend_on() -> None:
    s = "a 1 b 2 c 3 d 4"
    f = ProblemFrame(
        s,
        (
            Binding("d", 4, "x", _span(s, "d 4")),
            Binding("a", 1, "x", _span(s, "a 1")),
            Binding("c", 3, "x", _span(s, "c 3")),
            Binding("b", 2, "x", _span(s, "b 2")),
        ),
        (Relation("p", "add", ("b", "a")), Relation("t", "add", ("p", "b"))),
        (Target("t", "answer"),),
        (),
    )
    assert determined(f).evidence_spans == (_span(s, "a 1"), _span(s, "b 2"))


def test_proof_outcomes_are_sealed_and_bound_to_their_context() -> None:
    f = frame((("t", 1, "x"),))
    for ref, prove in (
        (organs.EVIDENCE_GROUNDED, prove_evidence_grounded),
        (organs.TARGET_DETERMINED, prove_target_determined),
    ):
        o = prove(context(f, ref))
        assert (o.obligation_ref, o.authority_id, o.authority_version) == (ref, ref, "v1")
        assert o.candidate_digest == CANDIDATE
        assert o.proof_outcome_id == reference.proof_outcome_id(o)


def test_a_frame_outside_the_identity_domain_is_refused_not_raised() -> None:
    f = frame((("\ud800", 1, "x"),), (), ("\ud800",))
    for ref, prove in (
        (organs.EVIDENCE_GROUNDED, prove_evidence_grounded),
        (organs.TARGET_DETERMINED, prove_target_determined),
    ):
        o = prove(ProofContext(ref, CANDIDATE, f, assess(frame())))
        assert (o.status, o.reason_codes, o.evidence_spans) == (
            ProofStatus.REFUSED,
            ("frame_not_canonical",),
            (),
        )
        assert o.proof_outcome_id == reference.proof_outcome_id(o)


# --- properties ---------------------------------------------------------------------------

NAMES = st.sampled_from(("a", "b", "c", "t", "r"))
WORDS = ("3", "five", "apples", "12", "-2", "1,000", "dozen", "x", "0", "3.5", "ten-ish")


@st.composite
def frames(draw: st.DrawFn) -> ProblemFrame:
    source = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=8)))
    limit = len(source)  # frames bind spans to their text (kernel.frames)
    starts = st.integers(0, limit)

    def span() -> SourceSpan:
        start = draw(starts)
        return SourceSpan(start, draw(st.integers(start, limit)))

    bindings = tuple(
        Binding(
            draw(NAMES),
            draw(st.integers(-3, 12) | st.sampled_from((1000, 2**200))),
            draw(st.sampled_from(("1", "apples", "pears"))),
            span(),
        )
        for _ in range(draw(st.integers(0, 5)))
    )
    relations = tuple(
        Relation(
            draw(NAMES),
            draw(st.sampled_from(("add", "sub", "mul", "div", "pow"))),
            tuple(draw(st.lists(NAMES, max_size=3))),
        )
        for _ in range(draw(st.integers(0, 4)))
    )
    targets = tuple(
        Target(draw(NAMES), draw(st.sampled_from(("answer", "answer", "hint"))))
        for _ in range(draw(st.integers(0, 2)))
    )
    return ProblemFrame(source, bindings, relations, targets, tuple(span() for _ in range(2)))


@given(frames())
def test_assess_is_deterministic_and_binds_the_frame_it_was_given(f: ProblemFrame) -> None:
    a = assess(f)
    assert a == assess(f)
    assert a.explanation == assess(f).explanation
    assert a.problem_frame_digest == reference.frame_digest(f)
    assert a.assessment_id == reference.assessment_id(a)
    assert a.candidate_organ == "arithmetic"
    assert a.evidence_spans == f.evidence_spans
    assert a.runnable == (not a.missing_bindings and not a.unresolved_hazards)


@given(frames())
def test_codes_are_unique_grouped_and_missing_bindings_are_exactly_the_unbound(
    f: ProblemFrame,
) -> None:
    a = assess(f)
    assert len(set(a.missing_bindings)) == len(a.missing_bindings)
    assert len(set(a.unresolved_hazards)) == len(a.unresolved_hazards)
    order = [k.value for k in Hazard]
    kinds = [h.split(":")[0] for h in a.unresolved_hazards]
    assert kinds == sorted(kinds, key=order.index)
    defined = {b.name for b in f.bindings} | {r.result for r in f.relations}
    referenced = [o for r in f.relations for o in r.operands] + [t.name for t in f.targets]
    assert a.missing_bindings == tuple(dict.fromkeys(n for n in referenced if n not in defined))


@given(frames())
def test_proof_authorities_never_raise_and_seal_bound_outcomes(f: ProblemFrame) -> None:
    for ref, prove in (
        (organs.EVIDENCE_GROUNDED, prove_evidence_grounded),
        (organs.TARGET_DETERMINED, prove_target_determined),
    ):
        o = prove(context(f, ref))
        assert o == prove(context(f, ref))
        assert (o.obligation_ref, o.authority_id, o.candidate_digest) == (ref, ref, CANDIDATE)
        assert o.proof_outcome_id == reference.proof_outcome_id(o)
        assert (o.status is ProofStatus.CLOSED) == (o.reason_codes == ())
    if assess(f).runnable:
        assert determined(f).status is ProofStatus.CLOSED


# --- replay through the built-in manifest -----------------------------------------------

STORY = "Ann has 3 apples. Ben gives her five more apples. How many apples does Ann have?"


def story(*bindings: Binding) -> ProblemFrame:
    return ProblemFrame(
        STORY,
        bindings,
        (Relation("total", "add", ("ann", "given")),),
        (Target("total", "answer"),),
        tuple(b.span for b in bindings),
    )


def replay_chain() -> SearchChain:
    ann = Binding("ann", 3, "apples", _span(STORY, "3 apples"))
    original = story(ann)  # "given" is missing: the contract refuses it
    assert not assess(original).runnable
    candidates = (
        story(ann, Binding("given", 5, "pears", _span(STORY, "five more apples"))),
        story(ann, Binding("given", 6, "apples", _span(STORY, "five more apples"))),
        story(ann, Binding("given", 5, "apples", _span(STORY, "five more apples"))),
    )
    return build_chain(
        original,
        assess(original),
        [CandidateDraft(c, "fill_binding", "v1") for c in candidates],
        operator_set_id="arithmetic.repairs",
        operator_set_version="v1",
    )


def replay(chain: SearchChain, index: int) -> ReplayAdapterResult:
    manifest = organs.builtin_manifest()
    request = ReplayRequest(
        build_replay_input(chain, index, manifest),
        chain.problem_frame,
        chain.assessment,
        chain.residuals,
        chain.gate,
        chain.budget,
        chain.run,
        chain.run.candidate_attempts[index],
        chain.reconstructions[index],
    )
    outcome = replay_attempt(request, manifest)
    assert isinstance(outcome, ReplayAdapterResult), outcome
    return outcome


def test_replay_with_the_builtin_manifest_yields_each_semantic_disposition() -> None:
    chain = replay_chain()
    refused, proof_refused, closed = (replay(chain, i) for i in range(3))

    assert refused.replay_disposition is ReplayDisposition.CONTRACT_REFUSED
    assert refused.reason_codes == ("hazard:unit_mismatch:total",)
    assert refused.proof_replay_refs == ()

    assert proof_refused.replay_disposition is ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert proof_refused.reason_codes == (
        "proof_refused:arithmetic.evidence_grounded",
        "arithmetic.evidence_grounded:ungrounded:given",
    )
    assert len(proof_refused.proof_replay_refs) == 2

    assert closed.replay_disposition is ReplayDisposition.CONTRACT_AND_PROOF_CLOSED
    assert closed.reason_codes == ()
    assert closed.proof_obligation_refs == (
        "arithmetic.evidence_grounded",
        "arithmetic.target_determined",
    )
    assert len(closed.proof_replay_refs) == 2
    # No value of the problem (3 + 5) is reported anywhere in the result.
    assert "8" not in json.dumps([*closed.reason_codes, closed.explanation])


def test_replay_through_the_builtin_manifest_is_byte_stable() -> None:
    first, second = replay_chain(), replay_chain()
    assert [replay(first, i) for i in range(3)] == [replay(second, i) for i in range(3)]
