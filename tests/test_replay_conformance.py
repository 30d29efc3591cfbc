"""Replay conformance at the edges (issue 9, deliverable 5): what the core must refuse.

Each test names the defect an attacker (or a careless producer) can hand the
adapter and states the typed outcome it must get instead.
"""

from __future__ import annotations

import pytest

from kernel.replay import ReplayDisposition, refuse_malformed_attempt
from kernel.serde import dumps
from tests import reference

D = ReplayDisposition


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
