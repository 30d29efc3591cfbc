"""`kernel verify plan|seal|gate`: canonical JSON in and out, documented exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from kernel.cli import app
from tests.support import reference as ref

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verify"
EXAMPLE_CANDIDATE = "7d804c3ddcc0032bf84c354bbe947bde13084008355fce6f155d7d4e5bdfcb6f"
EXAMPLE_AUTHOR = "impl-session-41"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, ["verify", *(str(a) for a in args)])


def canonical_stdout(result: Result) -> Any:
    text = result.stdout
    assert text.endswith("\n") and text.count("\n") == 1
    doc = json.loads(text)
    assert ref.canonical(doc) == text[:-1].encode("utf-8")  # strict canonical JSON out
    return doc


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def _plan(tmp_path: Path) -> Path:
    result = run("plan", EXAMPLES / "spec.json")
    assert result.exit_code == 0, result.stderr
    return write(tmp_path, "plan.json", json.loads(result.stdout))


def _seal(tmp_path: Path, output: str = "output.json", session: str = "te-session-07") -> Path:
    plan = _plan(tmp_path)
    result = run(
        "seal", plan, EXAMPLES / output, "--produced-by", "test_engineer", "--session", session
    )
    assert result.exit_code == 0, result.stderr
    return write(tmp_path, "receipt.json", json.loads(result.stdout))


def test_help_documents_the_exit_codes() -> None:
    for args in ((), ("plan",), ("seal",), ("gate",)):
        result = run(*args, "--help")
        assert result.exit_code == 0
        text = " ".join(result.stdout.split())
        assert "Exit codes: 0" in text and "1 " in text and "2 " in text


def test_plan_prints_the_plan_and_exits_0() -> None:
    result = run("plan", EXAMPLES / "spec.json")
    assert result.exit_code == 0
    doc = canonical_stdout(result)
    assert doc["argv"][:2] == ["reverify", "verify-claim"]
    request = doc["request"]
    request_id = request.pop("request_id")
    assert request_id == ref.sha(request)


def test_plan_rejection_is_json_on_stdout_and_exits_1() -> None:
    result = run("plan", EXAMPLES / "spec-generative.json")
    assert result.exit_code == 1
    assert canonical_stdout(result)["code"] == "generative_backend_operation_denied"


def test_plan_missing_binding_is_refused_at_the_boundary_with_exit_2() -> None:
    result = run("plan", EXAMPLES / "spec-missing-authority.json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: schema_mismatch: ")
    assert "authority" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"{not json", "malformed_json"),
        (b'{"a": 1.5}', "float_forbidden"),
        (b'{"a": 1, "a": 2}', "duplicate_key"),
        (b"\xff\xfe", "invalid_utf8"),
        (b"[" * 100 + b"]" * 100, "too_deep"),
        (b'{"candidate": 1}', "schema_mismatch"),
    ],
)
def test_malformed_input_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path, content: bytes, code: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = run("plan", path)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {code}: ")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    for path, code in ((tmp_path / "missing.json", "unreadable_file"),
                       (tmp_path, "not_a_regular_file")):
        result = run("plan", path)
        assert result.exit_code == 2
        assert result.stderr.startswith(f"error: {code}: ")


def test_seal_prints_the_receipt_and_exits_0(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    result = run(
        "seal",
        plan,
        EXAMPLES / "output.json",
        "--produced-by",
        "test_engineer",
        "--session",
        "te-session-07",
    )
    assert result.exit_code == 0, result.stderr
    receipt = canonical_stdout(result)
    output = json.loads((EXAMPLES / "output.json").read_bytes())
    assert receipt["evidence_digest"] == ref.sha(output)
    assert receipt["backend_version"] == output["backend_version"]
    assert (
        receipt["command_configuration"]
        == json.loads(plan.read_bytes())["request"]["command_configuration"]
    )
    receipt_id = receipt.pop("receipt_id")
    assert receipt_id == ref.sha(receipt)


def test_seal_is_byte_for_byte_deterministic(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    args = ("--produced-by", "test_engineer", "--session", "te-session-07")
    first = run("seal", plan, EXAMPLES / "output.json", *args)
    second = run("seal", plan, EXAMPLES / "output.json", *args)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout


@pytest.mark.parametrize(
    ("output", "role", "session", "code"),
    [
        ("output-claim-malformed.json", "test_engineer", "te", "claim_malformed"),
        ("output.json", "implementer", "te", "authority_producer_mismatch"),
        ("output.json", "test_engineer", EXAMPLE_AUTHOR, "assurance_not_independent"),
        ("output.json", "orchestrator", "o", "producer_role_cannot_execute"),
    ],
)
def test_seal_rejections_exit_1(
    tmp_path: Path, output: str, role: str, session: str, code: str
) -> None:
    plan = _plan(tmp_path)
    result = run("seal", plan, EXAMPLES / output, "--produced-by", role, "--session", session)
    assert result.exit_code == 1
    assert canonical_stdout(result)["code"] == code


def test_seal_non_object_output_is_a_typed_rejection(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    out = write(tmp_path, "out.json", ["verified"])
    result = run("seal", plan, out, "--produced-by", "test_engineer", "--session", "te")
    assert result.exit_code == 1
    assert canonical_stdout(result)["code"] == "backend_output_malformed"


@pytest.mark.parametrize(
    "extra",
    [
        ("--produced-by", "robot", "--session", "s"),
        ("--produced-by", "test_engineer", "--session", ""),
        ("--produced-by", "test_engineer"),
    ],
)
def test_seal_usage_errors_exit_2(tmp_path: Path, extra: tuple[str, ...]) -> None:
    plan = _plan(tmp_path)
    result = run("seal", plan, EXAMPLES / "output.json", *extra)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_seal_refuses_a_plan_with_a_changed_field_at_the_boundary(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    doc = json.loads(plan.read_bytes())
    doc["request"]["authority"] = "supreme"
    write(tmp_path, "plan.json", doc)
    result = run(
        "seal", plan, EXAMPLES / "output.json", "--produced-by", "test_engineer", "--session", "te"
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: schema_mismatch: ")


def test_seal_rejects_a_tampered_plan(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    doc = json.loads(plan.read_bytes())
    doc["request"]["expected_result"] = "REFUTED"
    write(tmp_path, "plan.json", doc)
    result = run(
        "seal", plan, EXAMPLES / "output.json", "--produced-by", "test_engineer", "--session", "te"
    )
    assert result.exit_code == 1
    assert canonical_stdout(result)["code"] == "plan_tampered"


def test_gate_eligible_exits_0(tmp_path: Path) -> None:
    receipt = _seal(tmp_path)
    result = run(
        "gate",
        tmp_path / "plan.json",
        receipt,
        "--candidate",
        EXAMPLE_CANDIDATE,
        "--author-session",
        EXAMPLE_AUTHOR,
    )
    assert result.exit_code == 0, result.stderr
    decision = canonical_stdout(result)
    assert decision["gate_eligible"] is True
    assert decision["reason"] is None


def test_gate_inconclusive_exits_1(tmp_path: Path) -> None:
    receipt = _seal(tmp_path, "output-derived.json")
    result = run(
        "gate",
        tmp_path / "plan.json",
        receipt,
        "--candidate",
        EXAMPLE_CANDIDATE,
        "--author-session",
        EXAMPLE_AUTHOR,
    )
    assert result.exit_code == 1
    assert canonical_stdout(result)["reason"] == "status_inconclusive"


def test_gate_stale_evidence_exits_1(tmp_path: Path) -> None:
    receipt = _seal(tmp_path)
    digest = json.loads(receipt.read_bytes())["evidence_digest"]
    result = run(
        "gate",
        tmp_path / "plan.json",
        receipt,
        "--candidate",
        EXAMPLE_CANDIDATE,
        "--author-session",
        EXAMPLE_AUTHOR,
        "--pre-repair-evidence",
        digest,
    )
    assert result.exit_code == 1
    assert canonical_stdout(result)["reason"] == "stale_pre_repair_evidence"


def test_gate_candidate_mismatch_exits_1(tmp_path: Path) -> None:
    receipt = _seal(tmp_path)
    result = run(
        "gate",
        tmp_path / "plan.json",
        receipt,
        "--candidate",
        "e" * 64,
        "--author-session",
        EXAMPLE_AUTHOR,
    )
    assert result.exit_code == 1
    assert canonical_stdout(result)["reason"] == "candidate_mismatch"


@pytest.mark.parametrize("digest", ["not-a-digest", "E" * 64, "e" * 63])
def test_gate_bad_digest_option_exits_2(tmp_path: Path, digest: str) -> None:
    receipt = _seal(tmp_path)
    result = run(
        "gate",
        tmp_path / "plan.json",
        receipt,
        "--candidate",
        EXAMPLE_CANDIDATE,
        "--author-session",
        EXAMPLE_AUTHOR,
        "--prior-candidate",
        digest,
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: usage_error: ")
    assert "Traceback" not in result.stderr


def test_shipped_examples_match_what_the_cli_prints(tmp_path: Path) -> None:
    plan = run("plan", EXAMPLES / "spec.json")
    assert plan.stdout.encode("utf-8") == (EXAMPLES / "plan.json").read_bytes()
    receipt = run(
        "seal",
        EXAMPLES / "plan.json",
        EXAMPLES / "output.json",
        "--produced-by",
        "test_engineer",
        "--session",
        "te-session-07",
    )
    assert receipt.stdout.encode("utf-8") == (EXAMPLES / "receipt.json").read_bytes()
    derived = run(
        "seal",
        EXAMPLES / "plan.json",
        EXAMPLES / "output-derived.json",
        "--produced-by",
        "test_engineer",
        "--session",
        "te-session-07",
    )
    assert derived.stdout.encode("utf-8") == (EXAMPLES / "receipt-derived.json").read_bytes()


def test_docs_show_every_subcommand_with_its_real_output() -> None:
    docs = (EXAMPLES.parents[1] / "docs" / "verify.md").read_text(encoding="utf-8")
    for sub in ("plan", "seal", "gate"):
        assert f"$ kernel verify {sub} " in docs
    for name in ("plan.json", "receipt.json", "receipt-derived.json"):
        assert (EXAMPLES / name).read_text(encoding="utf-8").strip() in docs


def test_record_invariants_are_refused_at_the_boundary_with_their_reason(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "receipt.json").read_bytes())
    doc["evidence_tier"] = "derived"  # VERIFIED from derived evidence cannot be built
    receipt = write(tmp_path, "receipt.json", doc)
    result = run(
        "gate",
        EXAMPLES / "plan.json",
        receipt,
        "--candidate",
        EXAMPLE_CANDIDATE,
        "--author-session",
        EXAMPLE_AUTHOR,
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: schema_mismatch: ")
    assert "contradicts verdict" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_device_is_refused_without_reading_it() -> None:
    result = CliRunner().invoke(app, ["verify", "plan", "/dev/zero"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: not_a_regular_file: ")
