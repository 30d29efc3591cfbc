"""Model-vs-machine stateful test of the replay adapter (STYLE.md §11).

The machine builds a valid chain, then tampers with any identity-bearing
field, reorders/drops/duplicates evidence spans, and swaps in raising,
malformed, wrong-organ or non-binding authorities. After every step it
checks, against a small model:

- a tampered chain never yields a result, and no authority is called for it;
- proof authorities are never called after ``contract_refused``;
- equal inputs give byte-equal outputs;
- nothing passed in is mutated;
- an untampered chain with honest authorities gets the disposition its
  candidate was built for.

``BrokenAdapterMachine`` runs the same rules against an adapter that skips
validation; the test asserts Hypothesis catches it, proving the invariants
can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from kernel.frames import ProblemFrame
from kernel.replay import (
    AuthorityManifest,
    ContractClosed,
    ProofObligations,
    ProofStatus,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayDisposition,
    ReplayRequest,
    Validated,
    dispose,
    replay_attempt,
    replay_contract,
    replay_proofs,
    seal_proof_outcome,
)
from kernel.serde import dumps
from tests.replay_fixtures import (
    CLOSING,
    CONTRACT_REFUSING,
    ORIGINAL,
    PROOF_REFUSING,
    PROOF_UNAVAILABLE,
    CallLog,
    request_for,
    toy_assessment,
    toy_chain,
    toy_manifest,
)
from tests.test_records import _leaves, _perturb, _replace

D = ReplayDisposition
EXPECTED = {
    "closing": (CLOSING, D.CONTRACT_AND_PROOF_CLOSED),
    "contract_refusing": (CONTRACT_REFUSING, D.CONTRACT_REFUSED),
    "proof_refusing": (PROOF_REFUSING, D.CONTRACT_CLOSED_BUT_PROOF_REFUSED),
    "proof_unavailable": (PROOF_UNAVAILABLE, D.CONTRACT_CLOSED_BUT_PROOF_REFUSED),
}


def _raise(*_: object) -> Any:
    raise RuntimeError("authority failure")


CONTRACT_FAULTS: dict[str, Callable[[ProblemFrame], Any]] = {
    "raises": _raise,
    "malformed": lambda frame: ("runnable", True),
    "wrong_organ": lambda frame: toy_assessment(frame, organ="not_toy"),
    "not_binding": lambda frame: toy_assessment(ORIGINAL),
}
PROOF_FAULTS: dict[str, Callable[[Any], Any]] = {
    "raises": _raise,
    "malformed": lambda ctx: {"status": "closed"},
    "not_binding": lambda ctx: seal_proof_outcome(
        context=attrs.evolve(ctx, candidate_digest="0" * 64), authority_id="toy.p1",
        authority_version="v1", status=ProofStatus.CLOSED),
}

Adapter = Callable[[object, AuthorityManifest], ReplayAdapterOutcome]


class ReplayMachine(RuleBasedStateMachine):
    adapter: Adapter = staticmethod(replay_attempt)

    def __init__(self) -> None:
        super().__init__()
        self.log = CallLog()
        self.request: ReplayRequest | None = None
        self.kind = "closing"
        self.honest = b""
        self.contract_fault: str | None = None
        self.proof_fault: str | None = None

    def manifest(self) -> AuthorityManifest:
        contract = CONTRACT_FAULTS[self.contract_fault] if self.contract_fault else None
        proofs = {"toy.p1": PROOF_FAULTS[self.proof_fault]} if self.proof_fault else None
        return toy_manifest(self.log, contract=contract, proofs=proofs)

    @initialize(kinds=st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=3),
                data=st.data())
    def build(self, kinds: list[str], data: st.DataObject) -> None:
        chain = toy_chain(*(EXPECTED[k][0] for k in kinds))
        index = data.draw(st.integers(0, len(kinds) - 1))
        self.kind = kinds[index]
        self.request = request_for(chain, toy_manifest(CallLog()), index)
        self.honest = dumps(self.request)

    @property
    def tampered(self) -> bool:
        # Compared by bytes, so two reorders that cancel out are not tampering.
        return self.request is not None and dumps(self.request) != self.honest

    @rule(data=st.data())
    def tamper_a_field(self, data: st.DataObject) -> None:
        assert self.request is not None
        leaves = [
            (path, leaf) for path, leaf in _leaves(self.request)
            if path[-1] != "explanation" and _perturb(leaf) != leaf
        ]
        path, leaf = data.draw(st.sampled_from(leaves))
        try:
            tampered = _replace(self.request, path, _perturb(leaf))
        except (TypeError, ValueError):
            return  # structurally impossible value; nothing changed
        self.request = tampered

    @rule(how=st.sampled_from(["reorder", "drop", "duplicate"]))
    def tamper_spans(self, how: str) -> None:
        assert self.request is not None
        spans = self.request.reconstruction.evidence_spans
        if how == "reorder" and len(spans) > 1 and spans[0] != spans[1]:
            new = (spans[1], spans[0], *spans[2:])
        elif how == "drop" and spans:
            new = spans[:-1]
        elif how == "duplicate" and spans:
            new = (*spans, spans[0])
        else:
            return
        rec = attrs.evolve(self.request.reconstruction, evidence_spans=new)
        self.request = attrs.evolve(self.request, reconstruction=rec)

    @rule(fault=st.sampled_from(sorted(CONTRACT_FAULTS)))
    def break_the_contract_authority(self, fault: str) -> None:
        self.contract_fault = fault

    @rule(fault=st.sampled_from(sorted(PROOF_FAULTS)))
    def break_a_proof_authority(self, fault: str) -> None:
        self.proof_fault = fault

    @rule()
    def repair_authorities(self) -> None:
        self.contract_fault = self.proof_fault = None

    @invariant()
    def outcome_matches_the_model(self) -> None:
        if self.request is None:
            return
        before = dumps(self.request)
        self.log.calls.clear()
        outcome = type(self).adapter(self.request, self.manifest())
        calls = list(self.log.calls)
        again = type(self).adapter(self.request, self.manifest())
        assert dumps(again) == dumps(outcome), "equal inputs must give equal bytes"
        assert dumps(self.request) == before, "the adapter mutated its input"
        if self.tampered:
            assert isinstance(outcome, ReplayAdapterRefusal), "a tampered chain yielded a result"
            assert calls == [], "an authority ran for a tampered chain"
            return
        if isinstance(outcome, ReplayAdapterResult) and (
            outcome.replay_disposition is D.CONTRACT_REFUSED
        ):
            assert not [c for c in calls if c.startswith("proof")], "proofs ran after refusal"
        expected = EXPECTED[self.kind][1]
        if self.contract_fault:
            assert isinstance(outcome, ReplayAdapterRefusal)
            assert outcome.replay_disposition is D.CONTRACT_REPLAY_UNAVAILABLE
        elif self.proof_fault and expected is not D.CONTRACT_REFUSED:
            assert isinstance(outcome, ReplayAdapterRefusal)
            assert outcome.replay_disposition is D.PROOF_REPLAY_UNAVAILABLE
        else:
            assert isinstance(outcome, ReplayAdapterResult)
            assert outcome.replay_disposition is expected


def skip_validation(request: object, manifest: AuthorityManifest) -> ReplayAdapterOutcome:
    """A deliberately broken adapter: trusts the reconstruction without validating it."""
    assert isinstance(request, ReplayRequest)
    organ = request.replay_input.candidate_organ
    policy = manifest.proof_policies.get(organ, ProofObligations(("toy.p1",)))
    refs = policy.refs if isinstance(policy, ProofObligations) else ()
    frame = request.reconstruction.candidate_problem_frame or ORIGINAL
    contract = manifest.contract_authorities.get(organ) or manifest.contract_authorities["toy"]
    state = Validated(request, frame, contract, policy,
                      tuple(manifest.proof_authorities[r] for r in refs))
    step = replay_contract(state)
    if not isinstance(step, ContractClosed):
        return step
    proofs = replay_proofs(step)
    return proofs if isinstance(proofs, ReplayAdapterRefusal) else dispose(proofs)


class BrokenAdapterMachine(ReplayMachine):
    adapter: Adapter = staticmethod(skip_validation)


# max_examples comes from the loaded profile (ci or deep, see conftest.py).
STATEFUL = settings(stateful_step_count=10, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

TestReplayMachine = ReplayMachine.TestCase
TestReplayMachine.settings = STATEFUL


def test_the_known_bad_adapter_is_caught() -> None:
    # Generation only (no shrinking) keeps this quick; one failure suffices.
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            BrokenAdapterMachine,
            settings=settings(STATEFUL, max_examples=200, print_blob=False,
                              phases=[Phase.generate], report_multiple_bugs=False),
        )
