"""The checker receipt table, rule by rule, with the exact detail of each refusal.

``validate_receipt`` is called in-process on receipt bytes this test writes
(the other receipt tests go through real checker scripts and check the
reason only). Mutation testing (issue 12.6, RELIABILITY.md) showed that a
refusal's detail line, the first-failure order and the verdict aggregation
could change without any test noticing; each case here pins the reason, the
detail an operator reads, and that no verdict comes with a refusal.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from kernel.external import (
    RECEIPT_FIELDS,
    Reason,
    ReceiptCheck,
    ReceiptExpectation,
    Verdict,
    validate_receipt,
)

IDENTITY: dict[str, Any] = {"checker": {"sha256": "e" * 64}, "producer": {"name": "z3"}}
EXPECTED = ReceiptExpectation(
    job_id="job-1",
    run_id="run-1",
    check_id="smt-abs",
    check_digest="1" * 64,
    specification_digest="2" * 64,
    # Canonical JSON of IDENTITY, written out by hand: keys sorted, no spaces.
    identity_canonical=b'{"checker":{"sha256":"' + b"e" * 64 + b'"},"producer":{"name":"z3"}}',
    evidence_digest="3" * 64,
    obligations=("no-overflow", "abs-nonneg"),
    artifacts=("proof.smt2", "model.txt"),
)
MAX = 4096


def honest() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "job_id": "job-1",
        "run_id": "run-1",
        "check_id": "smt-abs",
        "check_digest": "1" * 64,
        "specification_digest": "2" * 64,
        "identity": json.loads(json.dumps(IDENTITY)),
        "evidence_digest": "3" * 64,
        "verdict": "accepted",
        "obligations": [
            {"name": "no-overflow", "result": "accepted", "evidence": ["proof.smt2"]},
            {"name": "abs-nonneg", "result": "accepted", "evidence": ["proof.smt2", "model.txt"]},
        ],
    }


def judge(receipt: dict[str, Any] | bytes) -> tuple[Verdict | None, Reason | None, str]:
    data = receipt if isinstance(receipt, bytes) else json.dumps(receipt).encode()
    check = validate_receipt(data, EXPECTED, max_bytes=MAX)
    assert (check.verdict is None) != (check.reason is None)
    return check.verdict, check.reason, check.detail


def test_the_honest_receipt_is_accepted() -> None:
    assert judge(honest()) == (Verdict.ACCEPTED, None, "valid receipt, verdict accepted")


def _with(**changes: Any) -> dict[str, Any]:
    receipt = honest()
    receipt.update(changes)
    return receipt


def _obligation(index: int, **changes: Any) -> dict[str, Any]:
    receipt = honest()
    receipt["obligations"][index].update(changes)
    return receipt


def _results(*results: str, verdict: str) -> dict[str, Any]:
    receipt = honest()
    for item, result in zip(receipt["obligations"], results, strict=True):
        item["result"] = result
    receipt["verdict"] = verdict
    return receipt


@pytest.mark.parametrize(
    ("results", "verdict"),
    [
        (("accepted", "accepted"), Verdict.ACCEPTED),
        (("accepted", "unknown"), Verdict.UNKNOWN),
        (("unknown", "accepted"), Verdict.UNKNOWN),
        (("unknown", "unknown"), Verdict.UNKNOWN),
        (("accepted", "rejected"), Verdict.REJECTED),
        (("rejected", "unknown"), Verdict.REJECTED),
        (("unknown", "rejected"), Verdict.REJECTED),
    ],
)
def test_the_verdict_must_be_the_aggregate_of_the_obligations(
    results: tuple[str, str], verdict: Verdict
) -> None:
    # accepted iff all accepted; else rejected if any rejected; else unknown.
    for claimed in Verdict:
        outcome = judge(_results(*results, verdict=claimed.value))
        if claimed is verdict:
            assert outcome == (verdict, None, f"valid receipt, verdict {verdict.value}")
        else:
            assert outcome == (
                None,
                Reason.RECEIPT_VERDICT_DISAGREES,
                f"verdict {claimed.value!r} disagrees with the obligation results",
            )


def _drop(name: str) -> dict[str, Any]:
    receipt = honest()
    del receipt[name]
    return receipt


OBLIGATION_SHAPE = "is not an object with exactly name, result, evidence"

REFUSALS: dict[str, tuple[Callable[[], dict[str, Any] | bytes], Reason, str]] = {
    "not_object": (lambda: b"[1]", Reason.RECEIPT_NOT_OBJECT, "the receipt is not a JSON object"),
    "missing_two": (
        lambda: {k: v for k, v in honest().items() if k not in ("run_id", "verdict")},
        Reason.RECEIPT_MISSING_FIELD,
        "missing field(s): run_id, verdict",
    ),
    "missing_one": (
        lambda: _drop("obligations"),
        Reason.RECEIPT_MISSING_FIELD,
        "missing field(s): obligations",
    ),
    "extra_two": (
        lambda: _with(zeta=1, alpha=2),
        Reason.RECEIPT_EXTRA_FIELD,
        "extra field(s): alpha, zeta",
    ),
    "schema_version": (
        lambda: _with(schema_version=True),
        Reason.RECEIPT_SCHEMA_VERSION,
        "schema_version True is not the current 1",
    ),
    "job_id": (
        lambda: _with(job_id="job-2"),
        Reason.RECEIPT_JOB_MISMATCH,
        "job_id 'job-2' is not the current 'job-1'",
    ),
    "run_id": (
        lambda: _with(run_id=1),
        Reason.RECEIPT_RUN_MISMATCH,
        "run_id 1 is not the current 'run-1'",
    ),
    "check_id": (
        lambda: _with(check_id="smt"),
        Reason.RECEIPT_CHECK_ID_MISMATCH,
        "check_id 'smt' is not the current 'smt-abs'",
    ),
    "check_digest": (
        lambda: _with(check_digest="4" * 64),
        Reason.RECEIPT_CHECK_DIGEST_MISMATCH,
        f"check_digest {'4' * 64!r} is not the current {'1' * 64!r}",
    ),
    "specification_digest": (
        lambda: _with(specification_digest="4" * 64),
        Reason.RECEIPT_SPECIFICATION_MISMATCH,
        f"specification_digest {'4' * 64!r} is not the current {'2' * 64!r}",
    ),
    "identity_abbreviated": (
        lambda: _with(identity={"checker": IDENTITY["checker"]}),
        Reason.RECEIPT_IDENTITY_MISMATCH,
        "identity is not the complete current identity(check)",
    ),
    "identity_as_text": (
        lambda: _with(identity=json.dumps(IDENTITY)),
        Reason.RECEIPT_IDENTITY_MISMATCH,
        "identity is not the complete current identity(check)",
    ),
    "evidence_digest": (
        lambda: _with(evidence_digest="5" * 64),
        Reason.RECEIPT_EVIDENCE_DIGEST_MISMATCH,
        f"evidence_digest {'5' * 64!r} is not the current {'3' * 64!r}",
    ),
    "verdict_word": (
        lambda: _with(verdict="ACCEPTED"),
        Reason.RECEIPT_VERDICT_INVALID,
        "verdict 'ACCEPTED' is not accepted, rejected or unknown",
    ),
    "verdict_type": (
        lambda: _with(verdict=["accepted"]),
        Reason.RECEIPT_VERDICT_INVALID,
        "verdict ['accepted'] is not accepted, rejected or unknown",
    ),
    "obligations_object": (
        lambda: _with(obligations={"no-overflow": "accepted"}),
        Reason.RECEIPT_OBLIGATION_INVALID,
        "obligations is not a list",
    ),
    "obligation_not_object": (
        lambda: _with(obligations=[honest()["obligations"][0], "abs-nonneg"]),
        Reason.RECEIPT_OBLIGATION_INVALID,
        f"obligations[1] {OBLIGATION_SHAPE}",
    ),
    "obligation_extra_key": (
        lambda: _obligation(0, note="x"),
        Reason.RECEIPT_OBLIGATION_INVALID,
        f"obligations[0] {OBLIGATION_SHAPE}",
    ),
    "obligation_name_type": (
        lambda: _obligation(1, name=2),
        Reason.RECEIPT_OBLIGATION_INVALID,
        "obligations[1].name is not a string",
    ),
    "obligation_result": (
        lambda: _obligation(1, result="proved"),
        Reason.RECEIPT_OBLIGATION_INVALID,
        "obligations[1].result 'proved' is not accepted, rejected or unknown",
    ),
    "evidence_empty": (
        lambda: _obligation(1, evidence=[]),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
        "obligations[1].evidence is not a non-empty list",
    ),
    "evidence_text": (
        lambda: _obligation(0, evidence="proof.smt2"),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
        "obligations[0].evidence is not a non-empty list",
    ),
    "evidence_undeclared": (
        lambda: _obligation(1, evidence=["proof.smt2", "../secret"]),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
        "obligations[1].evidence cites '../secret', not a declared artifact",
    ),
    "evidence_not_text": (
        lambda: _obligation(0, evidence=[7]),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
        "obligations[0].evidence cites 7, not a declared artifact",
    ),
    "evidence_twice": (
        lambda: _obligation(1, evidence=["model.txt", "model.txt"]),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
        "obligations[1].evidence cites an artifact twice",
    ),
    "obligations_order": (
        lambda: _with(obligations=honest()["obligations"][::-1]),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
        "obligations ['abs-nonneg', 'no-overflow'] are not exactly "
        "['no-overflow', 'abs-nonneg'] in order",
    ),
    "obligations_short": (
        lambda: _with(obligations=honest()["obligations"][:1]),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
        "obligations ['no-overflow'] are not exactly ['no-overflow', 'abs-nonneg'] in order",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_carries_its_reason_and_detail(case: str) -> None:
    build, reason, detail = REFUSALS[case]
    assert judge(build()) == (None, reason, detail)


def test_the_first_failing_rule_wins() -> None:
    # Every field wrong at once: the table's order decides which is reported.
    receipt = {name: "wrong" for name in RECEIPT_FIELDS}
    order = [
        ("schema_version", 1, Reason.RECEIPT_SCHEMA_VERSION),
        ("job_id", "job-1", Reason.RECEIPT_JOB_MISMATCH),
        ("run_id", "run-1", Reason.RECEIPT_RUN_MISMATCH),
        ("check_id", "smt-abs", Reason.RECEIPT_CHECK_ID_MISMATCH),
        ("check_digest", "1" * 64, Reason.RECEIPT_CHECK_DIGEST_MISMATCH),
        ("specification_digest", "2" * 64, Reason.RECEIPT_SPECIFICATION_MISMATCH),
        ("identity", IDENTITY, Reason.RECEIPT_IDENTITY_MISMATCH),
        ("evidence_digest", "3" * 64, Reason.RECEIPT_EVIDENCE_DIGEST_MISMATCH),
        ("verdict", "unknown", Reason.RECEIPT_VERDICT_INVALID),
        ("obligations", honest()["obligations"], Reason.RECEIPT_OBLIGATION_INVALID),
    ]
    for name, good, reason in order:
        assert judge(receipt)[1] is reason, name
        receipt[name] = good
    assert judge(receipt) == (
        None,
        Reason.RECEIPT_VERDICT_DISAGREES,
        "verdict 'unknown' disagrees with the obligation results",
    )


@pytest.mark.parametrize(
    ("data", "reason", "code"),
    [
        (b"{" + b" " * MAX + b"}", Reason.RECEIPT_TOO_LARGE, "document_too_large"),
        (b'{"a": "\xff"}', Reason.RECEIPT_NOT_UTF8, "invalid_utf8"),
        (b'{"a": 1, "a": 2}', Reason.RECEIPT_MALFORMED, "duplicate_key"),
        (b'{"a": 1.5}', Reason.RECEIPT_MALFORMED, None),
    ],
)
def test_unparsable_receipts_name_the_parser_code(
    data: bytes, reason: Reason, code: str | None
) -> None:
    verdict, refused, detail = judge(data)
    assert (verdict, refused) == (None, reason)
    # The detail is the strict parser's own code and message on one line.
    head, _, message = detail.partition(": ")
    assert message and "\n" not in detail
    if code is not None:
        assert head == code


@pytest.mark.parametrize(
    ("verdict", "reason"),
    [(None, None), (Verdict.ACCEPTED, Reason.RECEIPT_MALFORMED)],
)
def test_a_receipt_check_carries_exactly_one_of_verdict_and_reason(
    verdict: Verdict | None, reason: Reason | None
) -> None:
    with pytest.raises(ValueError) as raised:
        ReceiptCheck(verdict, reason, "detail")
    assert str(raised.value) == "exactly one of verdict and reason is set"
    assert ReceiptCheck(Verdict.REJECTED, None, "d").verdict is Verdict.REJECTED
    assert ReceiptCheck(None, Reason.RECEIPT_MALFORMED, "d").reason is Reason.RECEIPT_MALFORMED
