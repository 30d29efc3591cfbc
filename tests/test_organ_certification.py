"""``arithmetic.target_certified``: the SMT problem, the assurance spec, the authority.

The SMT problems are decided by the real solvers the orchestrator runs (the
``z3`` binary next to the interpreter, and cvc5 through its Python API).
Receipts are built with the real ``plan_verification``/``seal_verification``
as an independent Test Engineer. Identities are recomputed with the tests' own
hashlib/json code (``tests/support/reference.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import cvc5
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import kernel.organs as organs
from kernel.frames import Binding, ProblemFrame, Relation, SourceSpan, Target
from kernel.organs import (
    CERTIFICATION_BACKEND,
    CERTIFICATION_MEDIA_TYPE,
    CERTIFICATION_OPERATION,
    CERTIFIED_MANIFEST,
    TARGET_CERTIFIED,
    CertificationEvidence,
    assess,
    certification_problem,
    certification_spec,
    problem_digest,
    prove_target_certified,
)
from kernel.organs.certification import CERTIFICATION_STATEMENT, CertificationReason
from kernel.replay import (
    ProofContext,
    ProofEvidence,
    ProofObligations,
    ProofOutcome,
    ProofStatus,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayRequest,
    build_replay_input,
    replay_attempt,
)
from kernel.serde import dumps
from kernel.upstream import CandidateDraft, SearchChain, build_chain
from kernel.verification import (
    BACKEND_CATALOG,
    Activation,
    Authority,
    Candidate,
    Claim,
    ClaimLevel,
    CommandConfiguration,
    OperationKind,
    Producer,
    Rejection,
    RejectionCode,
    Role,
    Setting,
    Stage,
    Status,
    VerificationPlan,
    VerificationReceipt,
    VerificationRequest,
    VerificationSpec,
    plan_verification,
    seal_verification,
)
from tests.support import reference
from tests.support.reference import canonical, sha
from tests.verification_strategies import (
    receipt_json_without_id,
    request_json_without_id,
    resealed_receipt,
)

CANDIDATE = "ab" * 32
OTHER_CANDIDATE = "cd" * 32
AUTHOR = "session-author"
TESTER = "session-tester"
CHECK = hashlib.sha256(b"vkit-smt: z3 produces, cvc5 re-decides").hexdigest()
CONTENT = hashlib.sha256(b"the same check, its pins by content").hexdigest()
TESTER_RUN = Producer(Role.TEST_ENGINEER, TESTER)

# --- the tests' own hasher (shared with the verification tests) ------------------


def _request_json(r: VerificationRequest) -> dict[str, Any]:
    return {"request_id": r.request_id, **request_json_without_id(r)}


def _receipt_json(r: VerificationReceipt) -> dict[str, Any]:
    return {"receipt_id": r.receipt_id, **receipt_json_without_id(r)}


def _request_id(r: VerificationRequest) -> str:
    return sha(request_json_without_id(r))


def _receipt_id(r: VerificationReceipt) -> str:
    return sha(receipt_json_without_id(r))


_resealed = resealed_receipt


# --- the real solvers ---------------------------------------------------------------


def _z3_binary() -> str:
    beside = Path(sys.executable).parent / "z3"
    found = str(beside) if beside.exists() else shutil.which("z3")
    assert found, "the z3 binary (z3-solver) must be installed"
    return found


def z3_answer(text: str) -> str:
    run = subprocess.run(
        [_z3_binary(), "-in", "-smt2"],
        input=text.encode("ascii"),
        capture_output=True,
        timeout=120,
        check=False,
    )
    return run.stdout.decode().strip()


def cvc5_answer(text: str) -> str:
    terms = cvc5.TermManager()
    solver = cvc5.Solver(terms)
    symbols = cvc5.SymbolManager(terms)
    parser = cvc5.InputParser(solver, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "certification")
    answers = []
    while True:
        command = parser.nextCommand()
        if command.isNull():
            break
        answers.append(command.invoke(solver, symbols).strip())
    return " ".join(a for a in answers if a)


def answers(text: str) -> tuple[str, str]:
    return z3_answer(text), cvc5_answer(text)


# --- frames -------------------------------------------------------------------------

STORY = "Ann has 3 apples. Ben gives her five more apples. How many apples does Ann have?"


def _span(text: str, phrase: str) -> SourceSpan:
    start = text.index(phrase)
    return SourceSpan(start, start + len(phrase))


def story() -> ProblemFrame:
    """The arithmetic organ's closing candidate (as in its replay tests)."""
    bindings = (
        Binding("ann", 3, "apples", _span(STORY, "3 apples")),
        Binding("given", 5, "apples", _span(STORY, "five more apples")),
    )
    return ProblemFrame(
        STORY,
        bindings,
        (Relation("total", "add", ("ann", "given")),),
        (Target("total", "answer"),),
        tuple(b.span for b in bindings),
    )


def numbers(
    names: tuple[str, str, str, str, str, str] = ("a", "b", "c", "t", "u", "w"),
) -> ProblemFrame:
    """Every operator, a negative value, n-ary add/mul, two targets and a duplicate."""
    a, b, c, t, u, w = names
    source = "12 and 3 and -4"
    return ProblemFrame(
        source,
        (
            Binding(a, 12, "1", SourceSpan(0, 2)),
            Binding(b, 3, "1", SourceSpan(7, 8)),
            Binding(c, -4, "1", SourceSpan(13, 15)),
        ),
        (
            Relation(t, "div", (a, c)),
            Relation(u, "mul", (t, b, b)),
            Relation(w, "add", (u, t, a)),
            Relation(w, "add", (u, t, a)),
            Relation(t + t, "sub", (w, b)),
        ),
        (Target(w, "answer"), Target(u, "answer"), Target(w, "answer")),
        (SourceSpan(0, 2),),
    )


HOSTILE = ("a b", "|x|", "πλ", "(check-sat)", "assert", ";\nq0_1")


def context(frame: ProblemFrame, *items: ProofEvidence, candidate: str = CANDIDATE) -> ProofContext:
    return ProofContext(TARGET_CERTIFIED, candidate, frame, assess(frame), items)


def prove(frame: ProblemFrame, *items: ProofEvidence) -> ProofOutcome:
    return prove_target_certified(context(frame, *items))


# --- evidence -------------------------------------------------------------------------


def plan_for(
    frame: ProblemFrame,
    *,
    candidate: str = CANDIDATE,
    problem: str | None = None,
    check: str = CHECK,
    **changes: Any,
) -> VerificationPlan:
    text = certification_problem(frame) if problem is None else problem
    assert text is not None
    spec = certification_spec(
        candidate_digest=candidate,
        author_session=AUTHOR,
        problem=text,
        check_digest=check,
        check_content_digest=CONTENT,
    )
    plan = plan_verification(attrs.evolve(spec, **changes))
    assert isinstance(plan, VerificationPlan), plan
    return plan


def output_for(
    plan: VerificationPlan, *, verdict: str = "verified", tier: str = "observed", version: str = ""
) -> dict[str, Any]:
    request = plan.request
    settings = {s.name: s.value for s in request.command_configuration.settings}
    return {
        "backend": request.backend,
        "backend_version": version or settings.get("check-digest", CHECK),
        "candidate": request.candidate.digest,
        "claim_id": request.claim.claim_id,
        "detail": "z3: unsat; cvc5: unsat",
        "evidence": {"receipt_sha256": "e" * 64, "artifacts": ["f" * 64]},
        "evidence_tier": tier,
        "verdict": verdict,
    }


def sealed(
    plan: VerificationPlan, producer: Producer = TESTER_RUN, **output: Any
) -> VerificationReceipt:
    receipt = seal_verification(plan, output_for(plan, **output), producer)
    assert isinstance(receipt, VerificationReceipt), receipt
    return receipt


def item(
    request: VerificationRequest,
    receipt: VerificationReceipt,
    media_type: str = CERTIFICATION_MEDIA_TYPE,
) -> ProofEvidence:
    return ProofEvidence(
        TARGET_CERTIFIED, media_type, dumps(CertificationEvidence(request, receipt))
    )


def raw(document: bytes) -> ProofEvidence:
    return ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, document)


def valid_item(frame: ProblemFrame, **output: Any) -> tuple[ProofEvidence, VerificationReceipt]:
    plan = plan_for(frame)
    receipt = sealed(plan, **output)
    return item(plan.request, receipt), receipt


def refused_with(outcome: ProofOutcome, *codes: str) -> None:
    assert outcome.status is ProofStatus.REFUSED
    assert outcome.reason_codes == codes
    assert outcome.proof_outcome_id == reference.proof_outcome_id(outcome)


# --- the SMT problem ------------------------------------------------------------------


def test_problem_is_deterministic_ascii_with_lf_lines_ending_in_check_sat() -> None:
    for frame in (story(), numbers(), numbers(HOSTILE)):
        text = certification_problem(frame)
        assert text is not None
        assert text == certification_problem(frame)
        assert text.isascii()
        assert "\r" not in text
        assert text.endswith("\n(check-sat)\n")
        assert text.count("(check-sat)") == 1
        assert "(set-logic QF_NIA)" in text.splitlines()


def test_problem_digest_is_the_sha256_of_the_utf8_bytes() -> None:
    for text in ("", "(check-sat)\n", "π"):
        assert problem_digest(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", problem_digest("x"))


def test_problem_layout_is_exactly_the_documented_encoding() -> None:
    source = "6 and -2"
    frame = ProblemFrame(
        source,
        (Binding("n", 6, "1", SourceSpan(0, 1)), Binding("d", -2, "1", SourceSpan(6, 8))),
        (Relation("q", "div", ("n", "d")), Relation("r", "sub", ("q", "d"))),
        (Target("r", "answer"),),
        (),
    )
    copy = [
        "(declare-const q0_{k} Int)",
        "(declare-const q1_{k} Int)",
        "(declare-const q2_{k} Int)",
        "(declare-const q3_{k} Int)",
        "(assert (= q0_{k} 6))",
        "(assert (= q1_{k} (- 2)))",
        "(assert (distinct q1_{k} 0))",
        "(assert (= (* q2_{k} q1_{k}) q0_{k}))",
        "(assert (= q3_{k} (- q2_{k} q1_{k})))",
    ]
    expected = [
        "; replay-kernel arithmetic.target_certified v1",
        "(set-logic QF_NIA)",
        *(line.format(k=1) for line in copy),
        *(line.format(k=2) for line in copy),
        "(assert (distinct q3_1 q3_2))",
        "(check-sat)",
    ]
    assert certification_problem(frame) == "\n".join(expected) + "\n"


def test_several_targets_are_asked_once_each_in_one_disjunction() -> None:
    text = certification_problem(numbers())
    assert text is not None
    # Quantities by first appearance: a b c t u w tt -> q0..q6; targets w, u (w once).
    assert text.splitlines()[-2] == "(assert (or (distinct q5_1 q5_2) (distinct q4_1 q4_2)))"


def test_frame_names_never_reach_the_problem_text() -> None:
    plain, hostile = numbers(), numbers(HOSTILE)
    assert assess(hostile).runnable
    assert certification_problem(hostile) == certification_problem(plain)
    text = certification_problem(hostile)
    assert text is not None
    for name in ("a b", "|", "π", ";\n", "(check-sat)\n(", "-sat))"):
        assert name not in text


def test_symbols_are_injective_over_names_a_naive_sanitiser_would_merge() -> None:
    names = ("a b", "a_b", "a-b", "A b", "a  b")
    source = "1 2 3 4 5"
    frame = ProblemFrame(
        source,
        tuple(Binding(n, i + 1, "1", SourceSpan(2 * i, 2 * i + 1)) for i, n in enumerate(names)),
        (Relation("sum", "add", names),),
        (Target("sum", "answer"),),
        (),
    )
    text = certification_problem(frame)
    assert text is not None
    declared = re.findall(r"\(declare-const (\S+) Int\)", text)
    assert len(declared) == len(set(declared)) == 2 * (len(names) + 1)
    assert all(re.fullmatch(r"q[0-9]+_[12]", symbol) for symbol in declared)
    assert answers(text) == ("unsat", "unsat")


@pytest.mark.parametrize(
    "frame",
    [
        ProblemFrame("x", (), (Relation("t", "add", ("a", "b")),), (Target("t", "answer"),), ()),
        ProblemFrame(
            "7 2",
            (Binding("a", 7, "1", SourceSpan(0, 1)), Binding("b", 2, "1", SourceSpan(2, 3))),
            (Relation("t", "div", ("a", "b")),),
            (Target("t", "answer"),),
            (),
        ),
        ProblemFrame(
            "7 0",
            (Binding("a", 7, "1", SourceSpan(0, 1)), Binding("b", 0, "1", SourceSpan(2, 3))),
            (Relation("t", "div", ("a", "b")),),
            (Target("t", "answer"),),
            (),
        ),
        ProblemFrame("3", (Binding("a", 3, "1", SourceSpan(0, 1)),), (), (), ()),
        ProblemFrame(
            "3", (Binding("a", 3, "1", SourceSpan(0, 1)),), (), (Target("a", "hint"),), ()
        ),
        ProblemFrame(
            "\ud800", (Binding("a", 3, "1", SourceSpan(0, 1)),), (), (Target("a", "answer"),), ()
        ),
    ],
    ids=["missing", "inexact", "zero-division", "no-target", "hint-role", "not-canonical"],
)
def test_a_frame_the_contract_does_not_run_has_no_problem(frame: ProblemFrame) -> None:
    assert certification_problem(frame) is None


@pytest.mark.parametrize(
    "frame", [story(), numbers(), numbers(HOSTILE)], ids=["story", "numbers", "hostile"]
)
def test_z3_and_cvc5_both_answer_unsat_for_runnable_frames(frame: ProblemFrame) -> None:
    text = certification_problem(frame)
    assert text is not None
    assert answers(text) == ("unsat", "unsat")


OPERANDS = st.integers(-6, 12) | st.sampled_from((10**30, -(2**70)))


@st.composite
def runnable_frames(draw: st.DrawFn) -> ProblemFrame:
    count = draw(st.integers(1, 4))
    names = [f"b{i}" for i in range(count)]
    bindings = tuple(Binding(name, draw(OPERANDS), "1", SourceSpan(0, 1)) for name in names)
    relations = []
    for i in range(draw(st.integers(0, 5))):
        operator = draw(st.sampled_from(("add", "sub", "mul", "div")))
        arity = 2 if operator in ("sub", "div") else draw(st.integers(2, 3))
        operands = tuple(draw(st.sampled_from(names)) for _ in range(arity))
        relations.append(Relation(f"r{i}", operator, operands))
        names.append(f"r{i}")
    targets = tuple(
        Target(draw(st.sampled_from(names)), "answer") for _ in range(draw(st.integers(1, 3)))
    )
    frame = ProblemFrame("0", bindings, tuple(relations), targets, ())
    assume(assess(frame).runnable)
    return frame


@given(runnable_frames())
def test_every_runnable_frame_certifies_unsat_with_both_solvers(frame: ProblemFrame) -> None:
    text = certification_problem(frame)
    assert text is not None
    assert answers(text) == ("unsat", "unsat")


def _without_binding_of(text: str, symbol: str) -> str:
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"\(assert \(= {symbol}_[12] ")
    kept = [line for line in lines if not pattern.match(line)]
    assert len(kept) == len(lines) - 2
    return "".join(kept)


def test_an_underdetermined_problem_is_sat_for_both_solvers() -> None:
    # The story with Ben's five apples left unbound: the total has many values.
    text = certification_problem(story())
    assert text is not None
    assert answers(_without_binding_of(text, "q1")) == ("sat", "sat")


def test_a_zero_factor_still_determines_the_target_so_the_encoding_is_semantic() -> None:
    source = "x 0"
    frame = ProblemFrame(
        source,
        (Binding("x", 4, "1", SourceSpan(0, 1)), Binding("z", 0, "1", SourceSpan(2, 3))),
        (Relation("t", "mul", ("x", "z")),),
        (Target("t", "answer"),),
        (),
    )
    text = certification_problem(frame)
    assert text is not None
    assert answers(_without_binding_of(text, "q0")) == ("unsat", "unsat")
    assert answers(_without_binding_of(text, "q1")) == ("sat", "sat")


# --- the assurance spec and the catalog -------------------------------------------------


def test_constants_are_the_published_names() -> None:
    assert TARGET_CERTIFIED == "arithmetic.target_certified"
    assert CERTIFICATION_MEDIA_TYPE == "application/vnd.replay-kernel.certification+json"
    assert CERTIFICATION_BACKEND == "vkit-smt"
    assert CERTIFICATION_OPERATION == "check-smt"
    authority = organs.TARGET_CERTIFIED_AUTHORITY
    assert (authority.authority_id, authority.authority_version) == (TARGET_CERTIFIED, "v1")
    assert authority.prove is prove_target_certified


def test_certification_spec_binds_every_field_and_defaults_nothing() -> None:
    text = certification_problem(story())
    assert text is not None
    spec = certification_spec(
        candidate_digest=CANDIDATE,
        author_session=AUTHOR,
        problem=text,
        check_digest=CHECK,
        check_content_digest=CONTENT,
    )
    assert spec == VerificationSpec(
        candidate=Candidate(CANDIDATE, AUTHOR),
        claim=Claim(TARGET_CERTIFIED, ClaimLevel.SOURCE, CERTIFICATION_STATEMENT),
        backend="vkit-smt",
        stage=Stage.ASSURANCE,
        authority=Authority.ASSURANCE,
        expected_result=Status.VERIFIED,
        command_configuration=CommandConfiguration(
            "check-smt",
            (
                Setting("check-content-digest", CONTENT),
                Setting("check-digest", CHECK),
                Setting("problem-digest", hashlib.sha256(text.encode()).hexdigest()),
            ),
            (),
        ),
        activation=Activation.REQUIRED,
        requested_by=Role.TEST_ENGINEER,
    )
    with pytest.raises(TypeError):
        certification_spec(candidate_digest=CANDIDATE, author_session=AUTHOR, problem=text)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        certification_spec(  # type: ignore[call-arg]
            candidate_digest=CANDIDATE, author_session=AUTHOR, problem=text, check_digest=CHECK
        )
    with pytest.raises(ValueError, match="check_digest"):
        certification_spec(
            candidate_digest=CANDIDATE,
            author_session=AUTHOR,
            problem=text,
            check_digest="v1.2",
            check_content_digest=CONTENT,
        )
    with pytest.raises(ValueError, match="check_content_digest"):
        certification_spec(
            candidate_digest=CANDIDATE,
            author_session=AUTHOR,
            problem=text,
            check_digest=CHECK,
            check_content_digest="/usr/bin/python3",
        )


def test_the_catalog_lists_vkit_smt_with_one_checking_operation() -> None:
    entry = BACKEND_CATALOG.entry("vkit-smt")
    assert entry is not None
    assert (entry.backend, entry.program) == ("vkit-smt", "vkit-smt")
    assert [(op.name, op.kind) for op in entry.operations] == [("check-smt", OperationKind.CHECK)]


def test_the_certification_spec_plans_to_the_documented_argv() -> None:
    text = certification_problem(story())
    assert text is not None
    plan = plan_for(story())
    assert plan.argv == (
        "vkit-smt",
        "check-smt",
        f"--candidate={CANDIDATE}",
        "--claim-id=arithmetic.target_certified",
        "--claim-level=source",
        f"--claim={CERTIFICATION_STATEMENT}",
        f"--check-content-digest={CONTENT}",
        f"--check-digest={CHECK}",
        f"--problem-digest={hashlib.sha256(text.encode()).hexdigest()}",
        "--",
    )
    assert plan.request.request_id == _request_id(plan.request)
    spec = certification_spec(
        candidate_digest=CANDIDATE,
        author_session=AUTHOR,
        problem=text,
        check_digest=CHECK,
        check_content_digest=CONTENT,
    )
    other = attrs.evolve(
        spec,
        command_configuration=attrs.evolve(spec.command_configuration, operation="prove-smt"),
    )
    refused = plan_verification(other)
    assert isinstance(refused, Rejection)
    assert refused.code is RejectionCode.BACKEND_OPERATION_UNSUPPORTED


def test_the_evidence_document_is_the_canonical_json_of_request_and_receipt() -> None:
    plan = plan_for(story())
    receipt = sealed(plan)
    document = dumps(CertificationEvidence(plan.request, receipt))
    assert document == canonical(
        {"request": _request_json(plan.request), "receipt": _receipt_json(receipt)}
    )
    assert receipt.receipt_id == _receipt_id(receipt)
    assert receipt.backend_version == CHECK
    assert receipt.evidence_digest == sha(output_for(plan))


# --- the authority ------------------------------------------------------------------------


def certified(frame: ProblemFrame, candidate: str = CANDIDATE) -> str:
    """The closing reason code, recomputed independently (ADR-0019)."""
    text = certification_problem(frame)
    assert text is not None
    problem_sha = hashlib.sha256(text.encode()).hexdigest()
    return "certified:" + reference.certification_digest(candidate, problem_sha, CONTENT)


def test_eligible_evidence_closes_with_the_certification_digest() -> None:
    frame = story()
    evidence, receipt = valid_item(frame)
    outcome = prove(frame, evidence)
    assert outcome.status is ProofStatus.CLOSED
    assert outcome.reason_codes == (certified(frame),)
    # The receipt (which binds the path-bearing check digest) is not named.
    assert _receipt_id(receipt) not in outcome.reason_codes[0]
    assert (outcome.obligation_ref, outcome.authority_id, outcome.authority_version) == (
        TARGET_CERTIFIED,
        TARGET_CERTIFIED,
        "v1",
    )
    assert outcome.candidate_digest == CANDIDATE
    assert outcome.evidence_spans == tuple(b.span for b in frame.bindings)
    assert outcome.proof_outcome_id == reference.proof_outcome_id(outcome)
    assert outcome == prove(frame, evidence)


def test_without_certification_evidence_the_obligation_is_unavailable() -> None:
    frame = story()
    evidence, _ = valid_item(frame)
    for items in ((), (attrs.evolve(evidence, media_type="application/json"),)):
        outcome = prove(frame, *items)
        assert outcome.status is ProofStatus.UNAVAILABLE
        assert outcome.reason_codes == ("no_certification_evidence",)
        assert outcome.evidence_spans == tuple(b.span for b in frame.bindings)
        assert outcome.proof_outcome_id == reference.proof_outcome_id(outcome)
    # Called directly with an item routed to another obligation: not ours either.
    misrouted = attrs.evolve(evidence, obligation_ref=organs.TARGET_DETERMINED)
    assert prove(frame, misrouted).reason_codes == ("no_certification_evidence",)


@pytest.mark.parametrize(
    "document",
    [
        b"",
        b"not json",
        b"[]",
        b'{"request": {}, "receipt": {}}',
        '{"request": 1, "receipt": "\u00e9"}'.encode(),
        b"\xff\xfe",
    ],
)
def test_a_document_that_does_not_structure_is_malformed(document: bytes) -> None:
    refused_with(prove(story(), raw(document)), "certification_evidence_malformed")


def test_extra_keys_missing_keys_and_invalid_field_values_are_malformed() -> None:
    plan = plan_for(story())
    receipt = sealed(plan)
    good = {"request": _request_json(plan.request), "receipt": _receipt_json(receipt)}
    assert prove(story(), raw(canonical(good))).status is ProofStatus.CLOSED
    extra = {**good, "note": "x"}
    missing = {"request": good["request"]}
    bad_digest = {**good, "receipt": {**good["receipt"], "evidence_digest": "E" * 64}}
    inconsistent = {**good, "receipt": {**good["receipt"], "status": "REFUTED"}}
    enum_by_name = {**good, "request": {**good["request"], "stage": "ASSURANCE"}}
    for document in (extra, missing, bad_digest, inconsistent, enum_by_name):
        refused_with(prove(story(), raw(canonical(document))), "certification_evidence_malformed")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.binary(max_size=64) | JSON.map(canonical))
def test_arbitrary_documents_never_raise_and_refuse_as_malformed(document: bytes) -> None:
    refused_with(prove(story(), raw(document)), "certification_evidence_malformed")


def test_a_forged_receipt_or_request_id_refuses() -> None:
    plan = plan_for(story())
    receipt = sealed(plan)
    forged_receipt = attrs.evolve(receipt, evidence_digest="0" * 64)
    forged_request = attrs.evolve(plan.request, activation=Activation.SELECTED)
    for request, rec in ((plan.request, forged_receipt), (forged_request, receipt)):
        refused_with(prove(story(), item(request, rec)), "certification_id_mismatch")


def test_a_receipt_for_another_claim_refuses() -> None:
    for claim in (
        Claim("arithmetic.target_determined", ClaimLevel.SOURCE, CERTIFICATION_STATEMENT),
        Claim(TARGET_CERTIFIED, ClaimLevel.SYSTEM, CERTIFICATION_STATEMENT),
        Claim(TARGET_CERTIFIED, ClaimLevel.SOURCE, "every target is probably fine"),
    ):
        plan = plan_for(story(), claim=claim)
        refused_with(
            prove(story(), item(plan.request, sealed(plan))), "certification_not_for_this_claim"
        )


def _configured(
    frame: ProblemFrame, configuration: CommandConfiguration, **changes: Any
) -> VerificationPlan:
    return plan_for(frame, command_configuration=configuration, **changes)


def test_a_receipt_for_another_check_refuses() -> None:
    frame = story()
    text = certification_problem(frame)
    assert text is not None
    base = plan_for(frame).request.command_configuration
    problem_setting = Setting("problem-digest", problem_digest(text))
    plans = [
        # another catalogued backend and operation
        _configured(
            frame, CommandConfiguration("check-property", base.settings, ()), backend="cbmc"
        ),
        # an extra setting, a missing setting, trailing arguments
        _configured(frame, attrs.evolve(base, settings=(*base.settings, Setting("timeout", "9")))),
        _configured(frame, attrs.evolve(base, settings=(problem_setting,))),
        _configured(frame, attrs.evolve(base, arguments=("problem.smt2",))),
        # a check digest that is no digest
        _configured(
            frame,
            attrs.evolve(
                base,
                settings=(
                    Setting("check-content-digest", CONTENT),
                    Setting("check-digest", "z3"),
                    problem_setting,
                ),
            ),
        ),
        # a check content digest that is no digest, or none at all
        _configured(
            frame,
            attrs.evolve(
                base,
                settings=(
                    Setting("check-content-digest", "/opt/venv/bin/python"),
                    Setting("check-digest", CHECK),
                    problem_setting,
                ),
            ),
        ),
        _configured(
            frame,
            attrs.evolve(base, settings=(Setting("check-digest", CHECK), problem_setting)),
        ),
    ]
    for plan in plans:
        refused_with(
            prove(frame, item(plan.request, sealed(plan))), "certification_not_for_this_check"
        )
    # the run reports a checker other than the one planned
    plan = plan_for(frame)
    other_version = sealed(plan, version="f" * 64)
    refused_with(
        prove(frame, item(plan.request, other_version)), "certification_not_for_this_check"
    )


def test_a_receipt_for_another_problem_refuses() -> None:
    frame = story()
    text = certification_problem(frame)
    assert text is not None
    for problem in (
        text.replace("\n", "\r\n"),
        text + "(exit)\n",
        certification_problem(numbers()),
    ):
        plan = plan_for(frame, problem=problem)
        refused_with(
            prove(frame, item(plan.request, sealed(plan))), "certification_not_for_this_problem"
        )
    # a receipt certified for one frame does not certify a frame with another value
    changed = attrs.evolve(
        frame, bindings=(frame.bindings[0], attrs.evolve(frame.bindings[1], value=6))
    )
    evidence, _ = valid_item(frame)
    refused_with(prove(changed, evidence), "certification_not_for_this_problem")


def test_a_diagnostic_or_otherwise_differently_termed_request_refuses() -> None:
    frame = story()
    diagnostic = plan_for(
        frame,
        stage=Stage.IMPLEMENTATION,
        authority=Authority.DIAGNOSTIC,
        requested_by=Role.IMPLEMENTER,
    )
    by_implementer = sealed(diagnostic, Producer(Role.IMPLEMENTER, AUTHOR))
    assert by_implementer.authority is Authority.DIAGNOSTIC
    refuted = plan_for(frame, expected_result=Status.REFUTED)
    selected = plan_for(frame, activation=Activation.SELECTED)
    for request, receipt in (
        (diagnostic.request, by_implementer),
        (refuted.request, sealed(refuted, verdict="refuted")),
        (selected.request, sealed(selected)),
    ):
        refused_with(prove(frame, item(request, receipt)), "certification_terms_mismatch")


@pytest.mark.parametrize(
    ("output", "gate"),
    [
        ({"verdict": "unknown"}, "status_inconclusive"),
        ({"verdict": "verified", "tier": "derived"}, "status_inconclusive"),
        ({"verdict": "error"}, "status_error"),
        ({"verdict": "refuted"}, "status_mismatch"),
    ],
)
def test_a_receipt_that_is_no_pass_refuses_with_the_gate_reason(
    output: dict[str, str], gate: str
) -> None:
    evidence, receipt = valid_item(story(), **output)
    assert receipt.status is not Status.VERIFIED
    refused_with(prove(story(), evidence), f"gate:{gate}")


def test_a_receipt_for_another_candidate_refuses() -> None:
    plan = plan_for(story(), candidate=OTHER_CANDIDATE)
    refused_with(prove(story(), item(plan.request, sealed(plan))), "gate:candidate_mismatch")


def test_a_resealed_diagnostic_or_self_produced_receipt_refuses_at_the_gate() -> None:
    plan = plan_for(story())
    receipt = sealed(plan)
    diagnostic = _resealed(receipt, authority=Authority.DIAGNOSTIC)
    own = _resealed(receipt, produced_by=Producer(Role.TEST_ENGINEER, AUTHOR))
    implementer = _resealed(receipt, produced_by=Producer(Role.IMPLEMENTER, TESTER))
    refused_with(prove(story(), item(plan.request, diagnostic)), "gate:diagnostic_authority")
    for forged in (own, implementer):
        refused_with(prove(story(), item(plan.request, forged)), "gate:producer_not_independent")


def test_evidence_for_a_frame_the_contract_does_not_run_refuses() -> None:
    evidence, _ = valid_item(story())
    unbound = attrs.evolve(story(), bindings=story().bindings[:1])
    refused_with(prove(unbound, evidence), "certification_frame_not_runnable")


def test_every_certification_item_must_be_eligible() -> None:
    frame = story()
    first, r1 = valid_item(frame)
    plan = plan_for(frame)
    second_receipt = seal_verification(
        plan,
        {**output_for(plan), "detail": "second run"},
        Producer(Role.TEST_ENGINEER, "session-3"),
    )
    assert isinstance(second_receipt, VerificationReceipt)
    second = item(plan.request, second_receipt)
    closed = prove(frame, first, second, first)
    assert closed.status is ProofStatus.CLOSED
    # Two receipts of one certification name it once: what was certified is the same.
    assert r1.receipt_id != second_receipt.receipt_id
    assert closed.reason_codes == (certified(frame),)
    inconclusive, _ = valid_item(frame, verdict="unknown")
    refused_with(
        prove(frame, first, raw(b"{}"), inconclusive, raw(b"")),
        "certification_evidence_malformed",
        "gate:status_inconclusive",
    )
    ignored = attrs.evolve(inconclusive, media_type="text/plain")
    assert prove(frame, ignored, first).reason_codes == (certified(frame),)


def test_reason_codes_are_the_documented_vocabulary() -> None:
    assert [r.value for r in CertificationReason] == [
        "no_certification_evidence",
        "certification_evidence_malformed",
        "certification_frame_not_runnable",
        "certification_id_mismatch",
        "certification_not_for_this_claim",
        "certification_not_for_this_check",
        "certification_not_for_this_problem",
        "certification_terms_mismatch",
    ]


# --- the certified manifest and replay end to end -------------------------------------------


def test_the_certified_manifest_adds_the_obligation_and_leaves_builtin_alone() -> None:
    m = organs.certified_manifest()
    assert m is CERTIFIED_MANIFEST
    assert m.manifest_version == organs.CERTIFIED_MANIFEST_VERSION == "certified.v1"
    assert dict(m.contract_authorities) == dict(organs.BUILTIN_MANIFEST.contract_authorities)
    assert dict(m.proof_policies) == {
        "arithmetic": ProofObligations(
            (
                "arithmetic.evidence_grounded",
                "arithmetic.target_determined",
                "arithmetic.target_certified",
            )
        )
    }
    assert dict(m.proof_authorities) == {
        **organs.BUILTIN_MANIFEST.proof_authorities,
        TARGET_CERTIFIED: organs.TARGET_CERTIFIED_AUTHORITY,
    }
    assert organs.BUILTIN_MANIFEST.manifest_version == "builtin.v1"
    assert TARGET_CERTIFIED not in organs.BUILTIN_MANIFEST.proof_authorities


def certified_chain() -> SearchChain:
    original = attrs.evolve(story(), bindings=story().bindings[:1])
    assert not assess(original).runnable
    return build_chain(
        original,
        assess(original),
        [CandidateDraft(story(), "fill_binding", "v1")],
        operator_set_id="arithmetic.repairs",
        operator_set_version="v1",
    )


def replay_request(chain: SearchChain) -> ReplayRequest:
    return ReplayRequest(
        build_replay_input(chain, 0, CERTIFIED_MANIFEST),
        chain.problem_frame,
        chain.assessment,
        chain.residuals,
        chain.gate,
        chain.budget,
        chain.run,
        chain.run.candidate_attempts[0],
        chain.reconstructions[0],
    )


def orchestrate(chain: SearchChain) -> tuple[ProofEvidence, VerificationReceipt]:
    """What the impure orchestrator does, in miniature, with the real solvers."""
    replay_input = build_replay_input(chain, 0, CERTIFIED_MANIFEST)
    text = certification_problem(story())
    assert text is not None
    z3, cvc = answers(text)
    spec = certification_spec(
        candidate_digest=replay_input.candidate_digest,
        author_session=AUTHOR,
        problem=text,
        check_digest=CHECK,
        check_content_digest=CONTENT,
    )
    plan = plan_verification(spec)
    assert isinstance(plan, VerificationPlan)
    output: dict[str, Any] = {
        "backend": "vkit-smt",
        "backend_version": CHECK,
        "candidate": replay_input.candidate_digest,
        "claim_id": TARGET_CERTIFIED,
        "detail": f"z3: {z3}; cvc5: {cvc}",
        "evidence": {"problem_sha256": problem_digest(text), "z3": z3, "cvc5": cvc},
        "evidence_tier": "observed",
        "verdict": "verified" if (z3, cvc) == ("unsat", "unsat") else "unknown",
    }
    receipt = seal_verification(plan, output, TESTER_RUN)
    assert isinstance(receipt, VerificationReceipt)
    return item(plan.request, receipt), receipt


def test_replay_with_certification_evidence_closes_contract_and_proof() -> None:
    chain = certified_chain()
    evidence, _ = orchestrate(chain)
    result = replay_attempt(replay_request(chain), CERTIFIED_MANIFEST, (evidence,))
    assert isinstance(result, ReplayAdapterResult), result
    assert result.replay_disposition is ReplayDisposition.CONTRACT_AND_PROOF_CLOSED
    assert result.reason_codes == ()
    assert result.proof_obligation_refs[-1] == TARGET_CERTIFIED
    assert len(result.proof_replay_refs) == 3
    # The result id binds the receipt through the certification outcome's id.
    frame = story()
    expected_outcome = {
        "proof_outcome_id": "",
        "obligation_ref": TARGET_CERTIFIED,
        "authority_id": TARGET_CERTIFIED,
        "authority_version": "v1",
        "candidate_digest": result.candidate_digest,
        "status": "closed",
        "reason_codes": [certified(frame, result.candidate_digest)],
        "evidence_spans": [{"start": b.span.start, "end": b.span.end} for b in frame.bindings],
    }
    assert result.proof_replay_refs[-1] == sha(expected_outcome)
    assert result.replay_result_id == reference.result_id(result)
    again = replay_attempt(replay_request(certified_chain()), CERTIFIED_MANIFEST, (evidence,))
    assert again == result


def test_replay_without_certification_evidence_refuses_the_proof() -> None:
    result = replay_attempt(replay_request(certified_chain()), CERTIFIED_MANIFEST)
    assert isinstance(result, ReplayAdapterResult), result
    assert result.replay_disposition is ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert result.reason_codes == (
        "proof_unavailable:arithmetic.target_certified",
        "arithmetic.target_certified:no_certification_evidence",
    )


def test_replay_with_forged_certification_evidence_refuses_the_proof() -> None:
    chain = certified_chain()
    evidence, receipt = orchestrate(chain)
    plan_request = json.loads(evidence.document)["request"]
    forged = attrs.evolve(receipt, backend_version="0" * 64)
    document = canonical({"request": plan_request, "receipt": _receipt_json(forged)})
    result = replay_attempt(replay_request(chain), CERTIFIED_MANIFEST, (raw(document),))
    assert isinstance(result, ReplayAdapterResult), result
    assert result.replay_disposition is ReplayDisposition.CONTRACT_CLOSED_BUT_PROOF_REFUSED
    assert result.reason_codes == (
        "proof_refused:arithmetic.target_certified",
        "arithmetic.target_certified:certification_id_mismatch",
    )


def test_certification_evidence_is_unexpected_under_the_builtin_manifest() -> None:
    chain = certified_chain()
    evidence, _ = orchestrate(chain)
    request = ReplayRequest(
        build_replay_input(chain, 0, organs.BUILTIN_MANIFEST),
        *attrs.astuple(replay_request(chain), recurse=False)[1:],
    )
    refused = replay_attempt(request, organs.BUILTIN_MANIFEST, (evidence,))
    assert isinstance(refused, ReplayAdapterRefusal)
    assert refused.reason_codes == ("proof_evidence_unexpected",)
