"""Forged receipts, each written by a real checker script (seed 003 receipt table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.external import (
    RECEIPT_FIELDS,
    Reason,
    ReceiptExpectation,
    Status,
    Verdict,
    validate_receipt,
)
from tests.support.reference import canonical
from tests.test_external_helpers import Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def mutation(*statements: str) -> str:
    """Checker-script code that applies ``statements`` to the honest receipt ``r``."""
    body = "".join(f"    {line}\n" for line in statements)
    return f"def mutate(r):\n{body}    return r\n"


def _flip_last_hex(expression: str) -> str:
    # off by one: the last hex digit of a sha256 moves to its neighbour
    return f"{expression} = {expression}[:-1] + ('0' if {expression}[-1] != '0' else '1')"


FORGERIES = {
    "schema_version_2": (mutation("r['schema_version'] = 2"), Reason.RECEIPT_SCHEMA_VERSION),
    "schema_version_true": (mutation("r['schema_version'] = True"), Reason.RECEIPT_SCHEMA_VERSION),
    "schema_version_str": (mutation("r['schema_version'] = '1'"), Reason.RECEIPT_SCHEMA_VERSION),
    "job_id": (mutation("r['job_id'] = 'job-2'"), Reason.RECEIPT_JOB_MISMATCH),
    "run_id": (mutation("r['run_id'] = 'run-0'"), Reason.RECEIPT_RUN_MISMATCH),
    "check_id": (mutation("r['check_id'] = 'other'"), Reason.RECEIPT_CHECK_ID_MISMATCH),
    "check_digest": (
        mutation(_flip_last_hex("r['check_digest']")),
        Reason.RECEIPT_CHECK_DIGEST_MISMATCH,
    ),
    "specification_digest": (
        mutation(_flip_last_hex("r['specification_digest']")),
        Reason.RECEIPT_SPECIFICATION_MISMATCH,
    ),
    "identity_abbreviated": (
        mutation("r['identity'] = '<complete identity(check) JSON object>'"),
        Reason.RECEIPT_IDENTITY_MISMATCH,
    ),
    "identity_producer_dependency_pin_off_by_one": (
        mutation(_flip_last_hex("r['identity']['producer']['dependencies'][0]['sha256']")),
        Reason.RECEIPT_IDENTITY_MISMATCH,
    ),
    "identity_checker_executable_pin_off_by_one": (
        mutation(_flip_last_hex("r['identity']['checker']['executable']['sha256']")),
        Reason.RECEIPT_IDENTITY_MISMATCH,
    ),
    "identity_missing_checker": (
        mutation("del r['identity']['checker']"),
        Reason.RECEIPT_IDENTITY_MISMATCH,
    ),
    "identity_version_true": (
        mutation("r['identity']['identity_version'] = True"),
        Reason.RECEIPT_IDENTITY_MISMATCH,
    ),
    "evidence_digest": (
        mutation(_flip_last_hex("r['evidence_digest']")),
        Reason.RECEIPT_EVIDENCE_DIGEST_MISMATCH,
    ),
    "verdict_uppercase": (mutation("r['verdict'] = 'ACCEPTED'"), Reason.RECEIPT_VERDICT_INVALID),
    "verdict_pass": (mutation("r['verdict'] = 'PASS'"), Reason.RECEIPT_VERDICT_INVALID),
    "extra_field": (mutation("r['note'] = 'trust me'"), Reason.RECEIPT_EXTRA_FIELD),
    "obligations_reordered": (
        mutation("r['obligations'].reverse()"),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
    ),
    "obligation_duplicated": (
        mutation("r['obligations'].append(dict(r['obligations'][0]))"),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
    ),
    "obligation_dropped": (
        mutation("r['obligations'].pop()"),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
    ),
    "obligation_renamed": (
        mutation("r['obligations'][1]['name'] = 'third'"),
        Reason.RECEIPT_OBLIGATIONS_MISMATCH,
    ),
    "obligations_not_a_list": (
        mutation("r['obligations'] = {}"),
        Reason.RECEIPT_OBLIGATION_INVALID,
    ),
    "obligation_extra_key": (
        mutation("r['obligations'][0]['why'] = 'x'"),
        Reason.RECEIPT_OBLIGATION_INVALID,
    ),
    "obligation_bad_result": (
        mutation("r['obligations'][0]['result'] = 'proved'"),
        Reason.RECEIPT_OBLIGATION_INVALID,
    ),
    "evidence_undeclared": (
        mutation("r['obligations'][0]['evidence'] = ['other.txt']"),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
    ),
    "evidence_traversal": (
        mutation("r['obligations'][0]['evidence'] = ['../proof.txt']"),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
    ),
    "evidence_empty": (
        mutation("r['obligations'][1]['evidence'] = []"),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
    ),
    "evidence_duplicated": (
        mutation("r['obligations'][1]['evidence'] = ['proof.txt', 'proof.txt']"),
        Reason.RECEIPT_OBLIGATION_EVIDENCE,
    ),
    "verdict_accepted_but_one_rejected": (
        mutation("r['obligations'][1]['result'] = 'rejected'"),
        Reason.RECEIPT_VERDICT_DISAGREES,
    ),
    "verdict_accepted_but_one_unknown": (
        mutation("r['obligations'][0]['result'] = 'unknown'"),
        Reason.RECEIPT_VERDICT_DISAGREES,
    ),
    "verdict_rejected_but_all_accepted": (
        mutation("r['verdict'] = 'rejected'"),
        Reason.RECEIPT_VERDICT_DISAGREES,
    ),
    "non_utf8": (
        "RAW = b'{\"schema_version\": 1, \"job_id\": \"\\xff\"}'",
        Reason.RECEIPT_NOT_UTF8,
    ),
    "oversized": (
        "RAW = json.dumps(receipt).encode()[:-1]"
        " + b',\"pad\":\"' + b'x' * (2 * 1024 * 1024) + b'\"}'",
        Reason.RECEIPT_TOO_LARGE,
    ),
    "duplicate_key": (
        "RAW = b'{\"verdict\": \"rejected\", ' + json.dumps(receipt).encode()[1:]",
        Reason.RECEIPT_MALFORMED,
    ),
    "float": (
        "RAW = json.dumps(receipt).encode()"
        ".replace(b'\"schema_version\": 1', b'\"schema_version\": 1.0')",
        Reason.RECEIPT_MALFORMED,
    ),
    "not_json": ("RAW = b'accepted'", Reason.RECEIPT_MALFORMED),
    "empty_file": ("RAW = b''", Reason.RECEIPT_MALFORMED),
    "array": ("RAW = json.dumps([receipt]).encode()", Reason.RECEIPT_NOT_OBJECT),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_receipt_is_blocked_with_its_reason(tmp_path: Path, name: str) -> None:
    custom, reason = FORGERIES[name]
    outcome = Scenario(tmp_path, checker_custom=custom).run()
    assert outcome.status is Status.BLOCKED
    assert outcome.reason is reason, outcome.metadata.decision.detail
    assert outcome.metadata.decision.verdict is None


@pytest.mark.parametrize("field", RECEIPT_FIELDS)
def test_receipt_missing_any_field_is_blocked(tmp_path: Path, field: str) -> None:
    outcome = Scenario(tmp_path, checker_custom=mutation(f"del r[{field!r}]")).run()
    assert outcome.reason is Reason.RECEIPT_MISSING_FIELD
    assert field in outcome.metadata.decision.detail


def test_honest_receipt_with_several_artifacts_per_obligation_passes(tmp_path: Path) -> None:
    custom = mutation("r['obligations'][1]['evidence'] = ['proof.txt', 'model.txt']")
    scenario = Scenario(tmp_path, artifacts=("proof.txt", "model.txt"), checker_custom=custom)
    assert scenario.run().status is Status.PASS


def test_receipt_from_an_earlier_run_is_not_accepted_for_a_new_run(tmp_path: Path) -> None:
    # replaying a receipt: the checker copies run-1's receipt into run-2
    scenario = Scenario(tmp_path)
    first = scenario.run("run-1")
    assert first.status is Status.PASS
    old = Path(first.attempt_dir, "checker", "receipt.json")
    # Its bytes go into the checker's source: another run is outside its view.
    custom = f"RAW = {old.read_bytes()!r}"
    scenario.checker_script.write_text(
        scenario.checker_script.read_text().replace("RAW = None", f"RAW = None\n{custom}")
    )
    scenario.write_manifest()
    assert scenario.run("run-2").reason is Reason.RECEIPT_RUN_MISMATCH


# --- the validator on its own: exact types, first failure wins -------------------------


def _expectation() -> ReceiptExpectation:
    return ReceiptExpectation(
        job_id="j", run_id="r", check_id="c", check_digest="a" * 64,
        specification_digest="b" * 64, identity_canonical=canonical({"x": 1}),
        evidence_digest="c" * 64, obligations=("o1", "o2"), artifacts=("p",),
    )  # fmt: skip


def _receipt(**changes: object) -> dict[str, object]:
    value: dict[str, object] = {
        "schema_version": 1, "job_id": "j", "run_id": "r", "check_id": "c",
        "check_digest": "a" * 64, "specification_digest": "b" * 64, "identity": {"x": 1},
        "evidence_digest": "c" * 64, "verdict": "accepted",
        "obligations": [
            {"name": "o1", "result": "accepted", "evidence": ["p"]},
            {"name": "o2", "result": "accepted", "evidence": ["p"]},
        ],
    }  # fmt: skip
    value.update(changes)
    return value


def test_validator_accepts_the_honest_receipt_and_compares_identity_canonically() -> None:
    checked = validate_receipt(canonical(_receipt()), _expectation(), max_bytes=4096)
    assert checked.verdict is Verdict.ACCEPTED and checked.reason is None
    # key order and whitespace do not matter; JSON types do
    loose = b'{"identity": {"x": 1}, ' + canonical(_receipt())[1:].replace(
        b'"identity":{"x":1},', b""
    )
    assert validate_receipt(loose, _expectation(), max_bytes=4096).verdict is Verdict.ACCEPTED
    wrong_type = canonical(_receipt(identity={"x": True}))
    assert validate_receipt(wrong_type, _expectation(), max_bytes=4096).reason is (
        Reason.RECEIPT_IDENTITY_MISMATCH
    )


def test_validator_size_limit_is_exact() -> None:
    data = canonical(_receipt())
    assert validate_receipt(data, _expectation(), max_bytes=len(data)).verdict is Verdict.ACCEPTED
    assert validate_receipt(data, _expectation(), max_bytes=len(data) - 1).reason is (
        Reason.RECEIPT_TOO_LARGE
    )
