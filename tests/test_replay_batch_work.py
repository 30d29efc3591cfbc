"""A batch examines its run and shared records once: the work is counted (ADR 0011).

``examine_run`` exists so that classifying the n attempts of one run costs
O(run + n) instead of O(run x n). That promise is about work, so it is
checked by counting work, never by timing it: every call of
``validate_deep`` (the walk that re-runs a record's validators) is logged by
the object it walks, and each path that takes facts must walk the run and
each record the batch shares exactly once, whatever the number of attempts.
Facts that do not apply (forged, of another run) must make the run be walked
again, and the per-class validation plan must be computed once per class.

The last tests hold the walk itself on record shapes the kernel's records
happen not to have (one field, no field), since the walk is generic over
attrs records.

Outcomes are not in question here (tests/test_mutants_replay.py holds that a
forged or foreign fact never changes one); these tests fail when the
optimisation is silently lost, which no outcome test can see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from kernel.identity import MAX_INT_DIGITS
from kernel.replay import (
    ReasonCode,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
    _facts,
    begin_attempt,
    examine_run,
    replay_attempt,
    replay_attempts,
    replay_bundle_attempts,
    replay_bundle_document,
    requests_from_bundle,
    validate,
)
from kernel.replay._facts import RunFacts, facts_for, validate_deep
from kernel.serde import dumps, loads
from kernel.upstream import CandidateAttempt, GeometricSearchRun, SearchChain
from tests.replay_fixtures import CLOSING, CallLog, bundle_for, toy_chain, toy_manifest


class Walks:
    """How often ``validate_deep`` was entered with each object (by identity)."""

    def __init__(self) -> None:
        self.by_id: Counter[int] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.kept: list[object] = []  # keeps every walked object alive, so ids stay unique

    def of(self, value: object) -> int:
        return self.by_id[id(value)]


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Walks]:
    log = Walks()
    original = _facts.validate_deep

    def counting(value: object) -> None:
        log.by_id[id(value)] += 1
        log.by_kind[type(value).__name__] += 1
        log.kept.append(value)
        original(value)

    # The walk recurses through the module's global name, so every record it
    # enters (the run, each attempt inside it, each shared record) is logged.
    monkeypatch.setattr(_facts, "validate_deep", counting)
    yield log


def _chain(attempts: int) -> SearchChain:
    return toy_chain(*[CLOSING] * attempts)


def _shared(chain: SearchChain) -> tuple[object, ...]:
    return (chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals)


def _assert_walked_once(walks: Walks, chain: SearchChain) -> None:
    assert walks.of(chain.run) == 1, "the run must be examined once for the whole batch"
    for attempt in chain.run.candidate_attempts:
        # Once inside the run's walk; never again as the attempt's own record.
        assert walks.of(attempt) == 1, "an attempt of the examined run was walked again"
    for shared in _shared(chain):
        # A tuple of records (the residuals) is walked item by item.
        for record in shared if type(shared) is tuple else (shared,):
            count = walks.of(record)
            assert count == 1, f"shared {type(record).__name__} walked {count}x"


def _facts_paths() -> dict[str, Callable[[SearchChain], list[object]]]:
    manifest = toy_manifest(CallLog())

    def batch(chain: SearchChain) -> list[object]:
        return list(replay_attempts(requests_from_bundle(bundle_for(chain, manifest)), manifest))

    def bundle(chain: SearchChain) -> list[object]:
        return list(replay_bundle_attempts(bundle_for(chain, manifest), manifest))

    def one_by_one(chain: SearchChain) -> list[object]:
        requests = requests_from_bundle(bundle_for(chain, manifest))
        facts = examine_run(chain.run, shared=_shared(chain))
        return [replay_attempt(r, manifest, facts=facts) for r in requests]

    def begun(chain: SearchChain) -> list[object]:
        requests = requests_from_bundle(bundle_for(chain, manifest))
        facts = facts_for(requests[0])
        return [begin_attempt(r, manifest, facts=facts) for r in requests]

    def validated(chain: SearchChain) -> list[object]:
        requests = requests_from_bundle(bundle_for(chain, manifest))
        facts = None
        out: list[object] = []
        for request in requests:
            facts = facts_for(request, facts)
            out.append(validate(request, manifest, facts=facts))
        return out

    return {
        "replay_attempts": batch,
        "replay_bundle_attempts": bundle,
        "replay_attempt(facts=)": one_by_one,
        "begin_attempt(facts=)": begun,
        "validate(facts=)": validated,
    }


PATHS = _facts_paths()


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("attempts", [1, 4])
def test_each_path_with_facts_walks_the_run_and_shared_records_once(
    path: str, attempts: int, walks: Walks
) -> None:
    chain = _chain(attempts)
    outcomes = PATHS[path](chain)
    assert len(outcomes) == attempts
    _assert_walked_once(walks, chain)


def test_the_batch_really_classifies_every_attempt() -> None:
    # The counts above are only meaningful if the batch did its work: every
    # attempt of the closing chain is closed, not refused early.
    chain = _chain(3)
    outcomes = PATHS["replay_attempts"](chain)
    assert [type(o) for o in outcomes] == [ReplayAdapterResult] * 3


def test_without_facts_each_attempt_examines_the_run_again(walks: Walks) -> None:
    # The other side of the count: with no facts, replay_attempt examines the
    # run for itself, so the count above is the optimisation, not an accident.
    manifest = toy_manifest(CallLog())
    chain = _chain(3)
    for request in requests_from_bundle(bundle_for(chain, manifest)):
        replay_attempt(request, manifest)
    assert walks.of(chain.run) == 3


def test_facts_that_do_not_apply_are_not_used(walks: Walks) -> None:
    manifest = toy_manifest(CallLog())
    chain = _chain(2)
    request = requests_from_bundle(bundle_for(chain, manifest))[0]
    foreign = examine_run(_chain(2).run)
    forged = RunFacts(chain.run, None, None, chain.run.run_id, True)
    walked = walks.of(chain.run)
    replay_attempt(request, manifest, facts=foreign)
    replay_attempt(request, manifest, facts=forged)
    assert walks.of(chain.run) == walked + 2
    # facts_for gives known facts back only for the run they examined.
    assert facts_for(request, foreign) is not foreign
    genuine = examine_run(chain.run)
    assert facts_for(request, genuine) is genuine


def test_a_batch_whose_run_changes_examines_each_run_once(walks: Walks) -> None:
    manifest = toy_manifest(CallLog())
    first, second = _chain(2), _chain(3)
    requests = [
        *requests_from_bundle(bundle_for(first, manifest)),
        *requests_from_bundle(bundle_for(second, manifest)),
    ]
    assert len(list(replay_attempts(requests, manifest))) == 5
    assert (walks.of(first.run), walks.of(second.run)) == (1, 1)


def test_the_validation_plan_of_a_record_class_is_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain = _chain(2)
    validate_deep(chain.run)  # every class the run holds now has its plan
    calls: list[type] = []
    fields = attrs.fields

    def counting(kind: type) -> Any:
        calls.append(kind)
        return fields(kind)

    monkeypatch.setattr(attrs, "fields", counting)
    validate_deep(chain.run)
    validate_deep(_chain(3).run)
    assert calls == [], f"plans recomputed for {sorted({k.__name__ for k in calls})}"


def test_records_the_kernel_just_built_from_bytes_are_not_walked(walks: Walks) -> None:
    # replay_bundle_document structures every record itself with the strict
    # converter (validators on), so it vouches for them instead of walking
    # them again; the outcomes are the examined path's (test_replay_built.py).
    manifest = toy_manifest(CallLog())
    data = dumps(bundle_for(_chain(4), manifest))
    walks.by_kind.clear()
    outcomes = list(replay_bundle_document(data, manifest))
    assert [type(o) for o in outcomes] == [ReplayAdapterResult] * 4
    # Only the outcomes the kernel emits are re-validated on the way out.
    assert not INPUT_RECORDS & set(walks.by_kind), walks.by_kind
    # The same bytes through the examining path walk each input record kind.
    walks.by_kind.clear()
    assert len(list(replay_bundle_attempts(loads(data, ReplayBundle), manifest))) == 4
    assert set(walks.by_kind) >= INPUT_RECORDS, walks.by_kind


INPUT_RECORDS = frozenset({
    "GeometricSearchRun", "CandidateAttempt", "CandidateReconstruction", "ProblemFrame",
    "ContractAssessment", "ContractResidual", "SearchGateDecision", "ComputeBudgetDecision",
    "ReplayAdapterInput",
})


def test_with_validators_off_the_document_path_does_the_examining_work(walks: Walks) -> None:
    # The converter did not validate, so nothing is vouched for: every record
    # is walked, and exactly as often as the examining path walks it (the run
    # and each shared record once for the batch, not once per attempt).
    manifest = toy_manifest(CallLog())
    data = dumps(bundle_for(_chain(4), manifest))
    with attrs.validators.disabled():
        walks.by_kind.clear()
        assert len(list(replay_bundle_document(data, manifest))) == 4
        document = Counter(walks.by_kind)
        walks.by_kind.clear()
        assert len(list(replay_bundle_attempts(loads(data, ReplayBundle), manifest))) == 4
    assert document == walks.by_kind
    assert document["GeometricSearchRun"] == 1
    assert document["CandidateAttempt"] == 4


def _run_outside_the_domain(run: GeometricSearchRun) -> GeometricSearchRun:
    # Each attempt's index one digit past the identity domain, set past the
    # validators: the records are sound, their digests cannot be computed.
    attempts = [attrs.evolve(a) for a in run.candidate_attempts]
    for attempt in attempts:
        object.__setattr__(attempt, "attempt_index", 10**MAX_INT_DIGITS)
    altered = attrs.evolve(run)
    object.__setattr__(altered, "candidate_attempts", tuple(attempts))
    return altered


def _run_not_valid(run: GeometricSearchRun) -> GeometricSearchRun:
    altered = attrs.evolve(run)
    object.__setattr__(altered, "run_policy_version", 5)
    return altered


@pytest.mark.parametrize(
    ("defect", "reason"),
    [
        (_run_outside_the_domain, ReasonCode.RECORD_NOT_CANONICAL),
        (_run_not_valid, ReasonCode.RECORD_STRUCTURE_INVALID),
    ],
    ids=["outside_the_domain", "not_valid"],
)
def test_a_defective_run_is_examined_once_for_the_batch_that_shares_it(
    defect: Callable[[GeometricSearchRun], GeometricSearchRun], reason: ReasonCode, walks: Walks
) -> None:
    # A run that fails examination is refused for every attempt; the defect is
    # found once and recorded in the batch's facts, not found again per attempt.
    manifest = toy_manifest(CallLog())
    chain = _chain(4)
    run = defect(chain.run)
    requests = [
        attrs.evolve(r, run=run) for r in requests_from_bundle(bundle_for(chain, manifest))
    ]
    walks.by_id.clear()
    outcomes = list(replay_attempts(requests, manifest))
    refused = [o.reason_codes for o in outcomes if isinstance(o, ReplayAdapterRefusal)]
    assert refused == [(reason.value,)] * 4
    assert walks.of(run) == 1
    for shared in _shared(chain):
        for record in shared if type(shared) is tuple else (shared,):
            assert walks.of(record) <= 1, f"shared {type(record).__name__} walked again"


# --- the walk itself, on record shapes the kernel's records do not have ------


def _refuse_negative(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


@attrs.frozen
class _One:
    count: int = attrs.field(validator=_refuse_negative)


@attrs.frozen
class _Holder:
    one: _One
    nothing: _Nothing


@attrs.frozen
class _Nothing:
    pass


def test_the_walk_re_runs_the_validator_of_a_one_field_record() -> None:
    # attrgetter of one name returns the value, not a 1-tuple: the walk must
    # still hand the validator the field's value, and reach records inside.
    validate_deep(_Holder(_One(3), _Nothing()))
    broken = _One(3)
    object.__setattr__(broken, "count", -1)
    with pytest.raises(ValueError, match=r"^count must not be negative, got -1$"):
        validate_deep(broken)
    with pytest.raises(ValueError, match=r"^count must not be negative, got -1$"):
        validate_deep(_Holder(broken, _Nothing()))


def test_the_walk_accepts_a_record_with_no_fields() -> None:
    validate_deep(_Nothing())
    validate_deep((_Nothing(), _One(0)))


# --- an attempt is spared its walk only if it is the run's own, at its index --


def _attempt_claiming(chain: SearchChain, index: int, **fields: object) -> CandidateAttempt:
    """A copy of attempt 0 (a new object) claiming ``index``, ``fields`` set past validators."""
    attempt = attrs.evolve(chain.run.candidate_attempts[0], attempt_index=index)
    for name, value in fields.items():
        object.__setattr__(attempt, name, value)
    return attempt


@pytest.mark.parametrize(
    "altered",
    [
        pytest.param({"index": 2}, id="index_one_past_the_last"),
        pytest.param({"index": 50}, id="index_far_past_the_last"),
        pytest.param({"index": 0, "operator_id": 5}, id="own_index_but_not_the_run_s_object"),
        pytest.param({"index": 1, "operator_id": 5}, id="sibling_index_not_the_run_s_object"),
    ],
)
def test_an_attempt_that_is_not_the_run_s_own_object_is_examined_with_or_without_facts(
    altered: dict[str, Any], walks: Walks
) -> None:
    # RunFacts.record spares the walk only for the very object the run holds
    # at the index it claims. Any other attempt (an index past the run's end,
    # or a copy, possibly altered behind attrs' back) is examined: the outcome
    # with the batch's facts is the outcome without them, and never a raise.
    manifest = toy_manifest(CallLog())
    chain = _chain(2)
    fields = dict(altered)
    index = fields.pop("index")
    request = requests_from_bundle(bundle_for(chain, manifest))[0]
    forged = attrs.evolve(request, attempt=_attempt_claiming(chain, index, **fields))
    alone = replay_attempt(forged, manifest)
    assert isinstance(alone, ReplayAdapterRefusal)
    facts = examine_run(chain.run, shared=_shared(chain))
    assert replay_attempt(forged, manifest, facts=facts) == alone
    assert walks.of(forged.attempt) == 2  # examined each time, facts or not


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (5, ReasonCode.RECORD_STRUCTURE_INVALID),
        (10**MAX_INT_DIGITS, ReasonCode.RECORD_NOT_CANONICAL),
    ],
    ids=["not_valid", "outside_the_domain"],
)
def test_a_defective_shared_record_is_examined_once_for_the_batch(
    value: object, reason: ReasonCode, walks: Walks
) -> None:
    # The batch's residual, altered behind attrs' back (a str field holding an
    # int, or an ordinal past the identity domain): every attempt is refused,
    # and the defect is found once, with the batch's facts.
    manifest = toy_manifest(CallLog())
    chain = _chain(3)
    residual = attrs.evolve(chain.residuals[0])
    object.__setattr__(residual, "code" if value == 5 else "ordinal", value)
    residuals = (residual,)
    requests = [
        attrs.evolve(r, residuals=residuals)
        for r in requests_from_bundle(bundle_for(chain, manifest))
    ]
    facts = examine_run(
        chain.run,
        shared=(chain.problem_frame, chain.assessment, chain.gate, chain.budget, residuals),
    )
    walks.by_id.clear()
    outcomes = [replay_attempt(r, manifest, facts=facts) for r in requests]
    refused = [o.reason_codes for o in outcomes if isinstance(o, ReplayAdapterRefusal)]
    assert refused == [(reason.value,)] * 3
    assert walks.of(residual) == 0, "examined with the batch, not again per attempt"
