"""Replay closer to its floor: less work per attempt, the same outcomes (issue 22, ADR 0011).

Replay does less around the authorities than it did; these tests hold both
halves of that claim:

1. The work is counted (never timed): each record a batch shares is digested
   once per batch however many attempts it has; each outcome record is
   constructed once; the arithmetic organ analyses a candidate once per
   attempt (the contract and the ``target_determined`` proof share it).
   Each of these counts grew with the attempts (or was doubled) before.
2. The faster paths give the reference's bytes (ADR 0007's rule for a fast
   path): a batch with shared facts against every attempt examined alone; the
   shared candidate derivation against none; one encoding of an authority's
   output against ``check_domain`` plus its id function (bytes and errors);
   proof contexts built from validated values against the constructor; and
   every outcome id recomputed here from the record's fields with
   the reference recipe (``tests.support.reference``), on the shipped bundle and on hostile
   variants of it.
3. The contract must bind to the candidate as validated: an authority (or a
   caller) that alters the candidate frame behind attrs' back is refused
   (``contract_outcome_not_bound``) instead of closing a frame the chain
   never described.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel.identity as identity
import kernel.organs.arithmetic as arithmetic
from kernel.frames import ProblemFrame
from kernel.identity import IdentityError, check_domain
from kernel.organs import builtin_manifest
from kernel.replay import (
    ContractAuthority,
    ContractClosed,
    ProofAuthority,
    ProofContext,
    ProofOutcome,
    ProofStatus,
    ReasonCode,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    Validated,
    _outputs,
    candidate_derived,
    examine_run,
    finish_attempt,
    proof_outcome_id_of,
    replay_attempt,
    replay_attempts,
    replay_bundle_attempts,
    replay_bundle_document,
    replay_contract,
    requests_from_bundle,
    seal_proof_outcome,
    validate,
)
from kernel.replay._authority import CandidateMemo, candidate_scope
from kernel.serde import SerdeError, dumps, loads
from kernel.upstream import ContractAssessment, SearchChain, assessment_id_of, seal_assessment
from tests.replay_fixtures import CLOSING, CallLog, bundle_for, toy_chain, toy_manifest
from tests.support import reference

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "replay" / "bundle.json"
DATA = BUNDLE.read_bytes()
MANIFEST = builtin_manifest()


# --- 1. the work, counted ---------------------------------------------------------


@pytest.fixture
def digested(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every payload canonicalised, in order (kernel.identity and its importers)."""
    log: list[object] = []
    original = identity.canonical_json

    def recording(value: Any) -> bytes:
        log.append(value)
        return original(value)

    import sys

    for name, module in list(sys.modules.items()):
        if (name == "kernel" or name.startswith("kernel.")) and getattr(
            module, "canonical_json", None
        ) is original:
            monkeypatch.setattr(module, "canonical_json", recording)
    yield log


def _shared_payloads(chain: SearchChain) -> dict[str, object]:
    return {
        "run input": chain.run.run_input.payload(),
        "problem frame": chain.problem_frame.payload(),
        "assessment": chain.assessment.payload(),
        "gate": chain.gate.payload(),
        "budget": chain.budget.payload(),
        **{f"residual {r.ordinal}": r.payload() for r in chain.residuals},
    }


def _digests_of_shared(attempts: int, digested: list[object]) -> Counter[str]:
    manifest = toy_manifest(CallLog())
    chain = toy_chain(*[CLOSING] * attempts)
    shared = _shared_payloads(chain)
    bundle = bundle_for(chain, manifest)
    del digested[:]
    outcomes = list(replay_bundle_attempts(bundle, manifest))
    assert len(outcomes) == attempts
    assert all(type(o) is ReplayAdapterResult for o in outcomes)
    return Counter(
        label for payload in digested for label, known in shared.items() if payload == known
    )


def test_each_shared_record_is_digested_once_per_batch(digested: list[object]) -> None:
    one, four = _digests_of_shared(1, digested), _digests_of_shared(4, digested)
    assert set(one) == set(_shared_payloads(toy_chain(CLOSING)))
    # Independent of the number of attempts: the batch's facts hold each id.
    assert four == one, f"1 attempt: {dict(one)}; 4 attempts: {dict(four)}"


def test_attempts_the_run_examined_are_not_digested_again(digested: list[object]) -> None:
    manifest = toy_manifest(CallLog())
    chain = toy_chain(*[CLOSING] * 4)
    bundle = bundle_for(chain, manifest)
    payloads = [a.payload() for a in chain.run.candidate_attempts]
    del digested[:]
    list(replay_bundle_attempts(bundle, manifest))
    assert [sum(p == a for p in digested) for a in payloads] == [1, 1, 1, 1]


@pytest.fixture
def constructions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each outcome record's constructor ran."""
    counts: Counter[str] = Counter()
    for kind in (ReplayAdapterResult, ReplayAdapterRefusal, ProofOutcome):
        original = kind.__init__

        def counting(self: object, *args: Any, _o: Any = original, **kwargs: Any) -> None:
            counts[type(self).__name__] += 1
            _o(self, *args, **kwargs)

        monkeypatch.setattr(kind, "__init__", counting)
    return counts


def test_each_outcome_record_is_constructed_once(constructions: Counter[str]) -> None:
    outcomes = list(replay_bundle_document(DATA, MANIFEST))
    kinds = Counter(type(o).__name__ for o in outcomes)
    assert constructions["ReplayAdapterResult"] == kinds["ReplayAdapterResult"] == 4
    assert constructions["ReplayAdapterRefusal"] == kinds["ReplayAdapterRefusal"] == 4
    # Two obligations for each of the three contract-closed attempts.
    assert constructions["ProofOutcome"] == 6


def test_the_organ_analyses_each_candidate_once_per_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    analysed: list[ProblemFrame] = []
    original = arithmetic._analyse

    def counting(frame: ProblemFrame) -> object:
        analysed.append(frame)
        return original(frame)

    monkeypatch.setattr(arithmetic, "_analyse", counting)
    outcomes = list(replay_bundle_document(DATA, MANIFEST))
    contracts = [o for o in outcomes if type(o) is ReplayAdapterResult]
    assert len(contracts) == 4  # one refused by its contract, three closed
    # Once per contract replay; the target_determined proof reads the same analysis.
    assert len(analysed) == 4
    assert len({id(frame) for frame in analysed}) == 4


def test_outside_replay_each_authority_still_analyses_its_frame() -> None:
    # Called directly (no replay, so no candidate scope), nothing is shared:
    # the organ's public functions behave exactly as before.
    chain = loads(DATA, ReplayBundle).chain
    frame = chain.reconstructions[0].candidate_problem_frame
    assert frame is not None
    calls: list[object] = []
    original = arithmetic._analyse

    def counting(value: ProblemFrame) -> object:
        calls.append(value)
        return original(value)

    arithmetic._analyse = counting  # type: ignore[assignment]  # restored below
    try:
        arithmetic.assess(frame)
        arithmetic.assess(frame)
    finally:
        arithmetic._analyse = original
    assert len(calls) == 2


# --- 2. the faster paths give the reference's bytes ---------------------------------


def _value(value: object) -> Any:
    """A record field as JSON, from its fields alone (no payload method, no kernel helper)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_value(item) for item in value]
    if attrs.has(type(value)):
        record_kind = cast("type[attrs.AttrsInstance]", type(value))  # attrs.has just held
        names = [a.name for a in attrs.fields(record_kind)]
        return {name: _value(getattr(value, name)) for name in names}
    return value


def _recomputed_id(outcome: ReplayAdapterOutcome | ProofOutcome | ContractAssessment) -> str:
    """ADR-0229 §13.3: sha256 of json.dumps of the record, id blanked, explanation excluded."""
    fields = _value(outcome)
    del fields["explanation"]
    id_field = next(iter(fields))  # every self-sealing record names its id first
    fields[id_field] = ""
    return reference.sha(fields)


def _own_id(outcome: ReplayAdapterOutcome | ProofOutcome) -> str:
    if isinstance(outcome, ReplayAdapterResult):
        return outcome.replay_result_id
    if isinstance(outcome, ReplayAdapterRefusal):
        return outcome.replay_refusal_id
    return outcome.proof_outcome_id


def test_every_outcome_id_of_the_shipped_bundle_recomputes_independently() -> None:
    outcomes = list(replay_bundle_document(DATA, MANIFEST))
    assert len(outcomes) == 8
    for outcome in outcomes:
        assert _own_id(outcome) == _recomputed_id(outcome)
        attrs.validate(outcome)  # the record built once is as valid as a constructed one


def _reference_outcomes(data: bytes) -> list[bytes] | tuple[str, str | None, str]:
    """Every attempt alone: no batch facts (each record examined and digested per
    attempt) and no candidate scope (each authority derives everything itself)."""
    try:
        bundle = loads(data, ReplayBundle)
        requests = requests_from_bundle(bundle)
    except (SerdeError, ValueError) as exc:
        return (type(exc).__name__, getattr(exc, "code", None), str(exc))
    out = []
    for request in requests:
        validated = validate(request, MANIFEST)
        if not isinstance(validated, Validated):
            out.append(dumps(validated))
            continue
        # A Validated built by hand: no digest recomputed by validation, so the
        # contract's frame is digested after the authority, as before.
        by_hand = Validated(
            validated.request,
            validated.candidate_frame,
            validated.contract_authority,
            validated.proof_policy,
            validated.proof_authorities,
        )
        contract = replay_contract(by_hand)
        if isinstance(contract, ContractClosed):
            by_hand_closed = ContractClosed(contract.validated, contract.contract_replay)
            out.append(dumps(finish_attempt(by_hand_closed)))
        else:
            out.append(dumps(contract))
    return out


def _fast_outcomes(data: bytes) -> list[bytes] | tuple[str, str | None, str]:
    try:
        return [dumps(o) for o in replay_bundle_document(data, MANIFEST)]
    except (SerdeError, ValueError) as exc:
        return (type(exc).__name__, getattr(exc, "code", None), str(exc))


def _no_candidate_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        arithmetic, "candidate_derived", lambda frame, compute: compute(frame)
    )


def test_the_shipped_bundle_gives_the_reference_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _fast_outcomes(DATA)
    assert isinstance(fast, list) and len(fast) == 8
    with monkeypatch.context() as patched:
        _no_candidate_scope(patched)
        assert _reference_outcomes(DATA) == fast


def _leaves(value: Any, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _get(value: Any, path: tuple[object, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


DOCUMENT = json.loads(DATA)
LEAVES = _leaves(DOCUMENT)
STRINGS = sorted({v for v in (_get(DOCUMENT, p) for p in LEAVES) if isinstance(v, str)})


def _replacement(original: object) -> st.SearchStrategy[object]:
    """Mostly a value of the leaf's own type (the document still structures), else foreign."""
    own: st.SearchStrategy[object]
    if type(original) is bool:
        own = st.booleans()
    elif type(original) is int:
        own = st.integers(0, 120)
    elif type(original) is str:
        own = st.sampled_from(STRINGS) | st.text(min_size=1, max_size=6)
    else:
        own = st.none()
    foreign = st.sampled_from(["a\ud800", "", 2**64, None, True])
    return st.one_of(own, own, own, foreign)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3), st.data())
def test_hostile_variants_give_the_reference_bytes_and_ids(
    paths: list[tuple[object, ...]], data_: st.DataObject
) -> None:
    document = json.loads(DATA)
    for path in paths:
        holder: Any = _get(document, path[:-1])
        holder[path[-1]] = data_.draw(_replacement(holder[path[-1]]))
    data = json.dumps(document).encode()  # lone surrogates as \\u escapes
    fast = _fast_outcomes(data)
    with pytest.MonkeyPatch.context() as patched:
        _no_candidate_scope(patched)
        reference = _reference_outcomes(data)
    assert fast == reference
    if isinstance(fast, list):
        for line in fast:
            outcome: ReplayAdapterOutcome
            if "replay_result_id" in json.loads(line):
                outcome = loads(line, ReplayAdapterResult)
            else:
                outcome = loads(line, ReplayAdapterRefusal)
            assert _own_id(outcome) == _recomputed_id(outcome)


def _judged_reference(outcome: ContractAssessment | ProofOutcome) -> str | tuple[str, str, str]:
    """What the machine did before: check_domain of [payload, explanation], then the id."""
    try:
        check_domain([outcome.payload(), outcome.explanation])
    except IdentityError as exc:
        return (exc.code, exc.path, exc.message)
    if isinstance(outcome, ContractAssessment):
        return assessment_id_of(outcome)
    return proof_outcome_id_of(outcome)


def _judged_fast(outcome: ContractAssessment | ProofOutcome) -> str | tuple[str, str, str]:
    try:
        return _outputs._judged_id(outcome)
    except IdentityError as exc:
        return (exc.code, exc.path, exc.message)


hostile_text = st.sampled_from(
    ["", "ok", "a\ud800", "\udfff", "é", "𝄞", "\u2028", "line\nbreak", "x" * 70]
)
hostile_name = st.sampled_from(["ok", "a\ud800", "\udfff", "é", "𝄞"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(hostile_name, max_size=3),
    st.lists(hostile_name, max_size=3),
    hostile_text,
    st.sampled_from(["arithmetic", "a\ud800"]),
    st.sampled_from(list(ProofStatus)),
)
def test_one_encoding_judges_an_authority_output_like_the_two_part_check(
    names: list[str], codes: list[str], explanation: str, organ: str, status: ProofStatus
) -> None:
    assessment = seal_assessment(
        problem_frame_digest="a" * 64,
        candidate_organ="arithmetic",
        runnable=False,
        missing_bindings=("ok",),
        explanation="",
    )
    # Altered behind attrs' back, as a hostile authority could: validators
    # still hold (exact str), the identity domain may not.
    object.__setattr__(assessment, "missing_bindings", tuple(names))
    object.__setattr__(assessment, "unresolved_hazards", tuple(codes))
    object.__setattr__(assessment, "candidate_organ", organ)
    object.__setattr__(assessment, "explanation", explanation)
    assert _judged_fast(assessment) == _judged_reference(assessment)
    frame = loads(DATA, ReplayBundle).chain.problem_frame
    context = ProofContext("p", "b" * 64, frame, assessment)
    outcome = seal_proof_outcome(
        context=context, authority_id="a", authority_version="v1", status=status
    )
    object.__setattr__(outcome, "reason_codes", tuple(codes))
    object.__setattr__(outcome, "explanation", explanation)
    object.__setattr__(outcome, "obligation_ref", names[0] if names else "p")
    assert _judged_fast(outcome) == _judged_reference(outcome)


def _spying_manifest(seen: list[ProofContext]) -> Any:
    def spy(authority: ProofAuthority) -> ProofAuthority:
        def prove(context: ProofContext) -> ProofOutcome:
            seen.append(context)
            return authority.prove(context)

        return ProofAuthority(authority.authority_id, authority.authority_version, prove)

    return attrs.evolve(
        MANIFEST,
        proof_authorities={ref: spy(a) for ref, a in MANIFEST.proof_authorities.items()},
    )


def test_proof_contexts_replay_builds_equal_the_constructors() -> None:
    seen: list[ProofContext] = []
    manifest = _spying_manifest(seen)
    bundle = loads(DATA, ReplayBundle)
    outcomes = [dumps(o) for o in replay_bundle_attempts(bundle, manifest)]
    assert outcomes == [dumps(o) for o in replay_bundle_attempts(bundle, MANIFEST)]
    assert len(seen) == 6
    for context in seen:
        attrs.validate(context)
        fields = {a.name: getattr(context, a.name) for a in attrs.fields(ProofContext)}
        rebuilt = ProofContext(**fields)
        assert rebuilt == context and hash(rebuilt) == hash(context)
        assert type(context) is ProofContext


# --- 3. the contract binds to the candidate as validated ----------------------------


def _altering(alter: Callable[[ProblemFrame], None]) -> Any:
    """The builtin manifest with a contract authority that alters its frame first."""
    original = MANIFEST.contract_authorities["arithmetic"]

    def assess(frame: ProblemFrame) -> ContractAssessment:
        alter(frame)
        return original.assess(frame)

    altered = ContractAuthority(original.authority_id, original.authority_version, assess)
    return attrs.evolve(MANIFEST, contract_authorities={"arithmetic": altered})


def _closing_request() -> Any:
    bundle = loads(DATA, ReplayBundle)
    requests = requests_from_bundle(bundle)
    facts = examine_run(bundle.chain.run)
    closing = [
        r
        for r in requests
        if type(replay_attempt(r, MANIFEST, facts=facts)) is ReplayAdapterResult
        and replay_attempt(r, MANIFEST, facts=facts).replay_disposition.value
        == "contract_and_proof_closed"
    ]
    assert closing
    return closing[0]


def _drop_last_binding(frame: ProblemFrame) -> None:
    object.__setattr__(frame, "bindings", frame.bindings[:-1])


def test_a_contract_authority_that_alters_the_candidate_is_not_bound() -> None:
    request = _closing_request()
    outcome = replay_attempt(request, _altering(_drop_last_binding))
    assert type(outcome) is ReplayAdapterRefusal
    assert outcome.reason_codes == (ReasonCode.CONTRACT_OUTCOME_NOT_BOUND.value,)
    assert outcome.replay_disposition.value == "contract_replay_unavailable"


def test_a_candidate_altered_between_validate_and_contract_is_not_bound() -> None:
    request = _closing_request()
    state = validate(request, MANIFEST)
    assert isinstance(state, Validated)
    _drop_last_binding(state.candidate_frame)
    outcome = replay_contract(state)
    assert type(outcome) is ReplayAdapterRefusal
    assert outcome.reason_codes == (ReasonCode.CONTRACT_OUTCOME_NOT_BOUND.value,)


# --- the memos never serve one record's or one attempt's values to another ------------


def test_a_batch_memo_is_never_served_for_an_equal_copy() -> None:
    manifest = toy_manifest(CallLog())
    chain = toy_chain(CLOSING, CLOSING)
    first, second = requests_from_bundle(bundle_for(chain, manifest))
    # An equal copy first, then the same copy altered behind attrs' back: the
    # batch memo holds the shared frame's digest, never the copy's.
    copy = attrs.evolve(chain.problem_frame)
    assert copy == chain.problem_frame and copy is not chain.problem_frame
    object.__setattr__(copy, "source_text", copy.source_text + " ")
    altered = attrs.evolve(second, problem_frame=copy)
    outcomes = list(replay_attempts([first, altered], manifest))
    assert type(outcomes[0]) is ReplayAdapterResult
    assert type(outcomes[1]) is ReplayAdapterRefusal
    assert outcomes[1].reason_codes == (ReasonCode.ORIGINAL_FRAME_MISMATCH.value,)


def test_candidate_derived_shares_only_within_its_scope_and_for_the_very_frame() -> None:
    frame = loads(DATA, ReplayBundle).chain.problem_frame
    calls: list[ProblemFrame] = []

    def derive(value: ProblemFrame) -> int:
        calls.append(value)
        return len(calls)

    assert candidate_derived(frame, derive) == 1  # no scope: computed
    assert candidate_derived(frame, derive) == 2
    with candidate_scope(CandidateMemo(frame)):
        assert candidate_derived(frame, derive) == 3
        assert candidate_derived(frame, derive) == 3  # shared within the scope
        equal = attrs.evolve(frame)
        assert candidate_derived(equal, derive) == 4  # an equal copy is another frame
        seen: list[int] = []
        thread = threading.Thread(target=lambda: seen.append(candidate_derived(frame, derive)))
        thread.start()
        thread.join()
        assert seen == [5]  # another thread is outside this scope
    with candidate_scope(CandidateMemo(frame)):
        assert candidate_derived(frame, derive) == 6  # a new attempt derives afresh
    assert candidate_derived(frame, derive) == 7
