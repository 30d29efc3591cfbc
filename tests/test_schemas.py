"""JSON Schemas (ADR 0014): committed bytes, examples, real outputs, and refusals.

The schemas are generated from the attrs records; these tests check that the
committed ``schemas/`` are exactly what the generator makes, that every
shipped example and every document a real command writes validates, and that
the schemas are not vacuous (documents the kernel refuses for their shape are
refused by the schema too).
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from jsonschema import Draft202012Validator

from kernel.commands.schema import schema_bytes, schema_names
from kernel.serde import unstructure
from kernel.upstream import SearchChain
from tests.strategies import chains

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
EXAMPLES = ROOT / "examples"
KERNEL = Path(sys.executable).with_name("kernel")

# Every shipped example document and the schema it must satisfy. A new
# example file fails test_every_example_is_classified until it is listed.
EXAMPLE_SCHEMAS: dict[str, str] = {
    "drafts/marbles.json": "search-draft",
    "e2e/bundle.json": "replay-bundle",
    "external/jobs/sat-php.json": "external-job",
    "external/jobs/smt-abs-false.json": "external-job",
    "external/jobs/smt-abs.json": "external-job",
    "replay/bundle.json": "replay-bundle",
    "replay/chain.json": "search-chain",
    "verify/output-claim-malformed.json": "verification-output",
    "verify/output-derived.json": "verification-output",
    "verify/output.json": "verification-output",
    "verify/plan.json": "verification-plan",
    "verify/receipt-derived.json": "verification-receipt",
    "verify/receipt.json": "verification-receipt",
    "verify/spec-diagnostic.json": "verification-spec",
    "verify/spec-generative.json": "verification-spec",
    "verify/spec.json": "verification-spec",
}
# Shipped on purpose with a shape the kernel refuses at the boundary.
EXAMPLES_REFUSED: dict[str, str] = {
    "verify/spec-missing-authority.json": "verification-spec",
}


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_bytes())
    return Draft202012Validator(schema)


def errors(name: str, document: Any) -> list[str]:
    return [error.message for error in validator(name).iter_errors(document)]


def test_committed_schemas_are_the_generated_bytes() -> None:
    committed = sorted(path.name for path in SCHEMAS.glob("*.schema.json"))
    assert committed == sorted(f"{name}.schema.json" for name in schema_names())
    for name in schema_names():
        assert (SCHEMAS / f"{name}.schema.json").read_bytes() == schema_bytes(name), (
            f"schemas/{name}.schema.json is stale: run `kernel schema --write schemas`"
        )


@pytest.mark.parametrize("name", schema_names())
def test_every_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_bytes())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_example_is_classified() -> None:
    shipped = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.json")}
    assert shipped == set(EXAMPLE_SCHEMAS) | set(EXAMPLES_REFUSED)


@pytest.mark.parametrize(("example", "name"), sorted(EXAMPLE_SCHEMAS.items()))
def test_shipped_example_validates(example: str, name: str) -> None:
    assert errors(name, json.loads((EXAMPLES / example).read_bytes())) == []


@pytest.mark.parametrize(("example", "name"), sorted(EXAMPLES_REFUSED.items()))
def test_example_the_kernel_refuses_fails_its_schema(example: str, name: str) -> None:
    assert errors(name, json.loads((EXAMPLES / example).read_bytes())) != []
    plan = subprocess.run(
        [str(KERNEL), "verify", "plan", str(EXAMPLES / example)],
        capture_output=True, text=True, check=False,
    )
    assert plan.returncode == 2 and plan.stderr.startswith("error: schema_mismatch")


@given(chains())
def test_every_chain_the_kernel_builds_validates(chain: SearchChain) -> None:
    assert errors("search-chain", unstructure(chain)) == []


def test_schema_refuses_extra_and_missing_fields_and_bad_digests() -> None:
    bundle = json.loads((EXAMPLES / "replay/bundle.json").read_bytes())
    extra = copy.deepcopy(bundle)
    extra["chain"]["run"]["unexpected"] = 1
    assert errors("replay-bundle", extra) != []
    missing = copy.deepcopy(bundle)
    del missing["inputs"][0]["input_digest"]
    assert errors("replay-bundle", missing) != []
    upper = copy.deepcopy(bundle)
    upper["chain"]["run"]["run_id"] = upper["chain"]["run"]["run_id"].upper()
    assert errors("replay-bundle", upper) != []
    wrong_type = copy.deepcopy(bundle)
    wrong_type["chain"]["budget"]["max_attempts"] = "8"
    assert errors("replay-bundle", wrong_type) != []


def run_kernel(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(KERNEL), *args], capture_output=True, check=False, cwd=cwd)


def test_kernel_schema_prints_the_committed_bytes() -> None:
    listed = run_kernel("schema", "--list")
    assert listed.returncode == 0
    assert tuple(listed.stdout.decode().split()) == schema_names()
    for name in ("replay-bundle", "replay-outcome", "external-receipt"):
        printed = run_kernel("schema", name)
        assert printed.returncode == 0
        assert printed.stdout == (SCHEMAS / f"{name}.schema.json").read_bytes()


def test_kernel_schema_refuses_an_unknown_name_in_one_line() -> None:
    result = run_kernel("schema", "no-such-schema")
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown_schema: ")


def test_kernel_schema_write_regenerates_the_committed_tree(tmp_path: Path) -> None:
    assert run_kernel("schema", "--write", str(tmp_path)).returncode == 0
    for name in schema_names():
        written = (tmp_path / f"{name}.schema.json").read_bytes()
        assert written == (SCHEMAS / f"{name}.schema.json").read_bytes()


def test_outcome_lines_of_a_real_replay_validate(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.jsonl"
    result = run_kernel("replay", str(EXAMPLES / "replay/bundle.json"), "--out", str(out))
    # 3: the shipped scenario carries one forged attempt (integrity); every
    # outcome line is still written.
    assert result.returncode in (0, 1, 3), result.stderr
    lines = out.read_bytes().splitlines()
    assert lines
    outcomes = []
    for index, line in enumerate(lines):
        envelope = json.loads(line)  # ADR 0013: the outcome with its attempt
        assert sorted(envelope) == ["attempt_id", "attempt_index", "outcome"]
        assert envelope["attempt_index"] == index
        outcomes.append(envelope["outcome"])
    for outcome in outcomes:
        assert errors("replay-outcome", outcome) == []
    # Both arms of the union are exercised by the shipped scenario.
    kinds = {"replay_result_id" in outcome for outcome in outcomes}
    assert kinds == {True, False}


def test_bundle_written_by_kernel_bundle_validates(tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    result = run_kernel("bundle", str(EXAMPLES / "drafts/marbles.json"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert errors("replay-bundle", json.loads(out.read_bytes())) == []


def test_external_run_documents_validate(tmp_path: Path) -> None:
    # A real pinned z3 -> cvc5 run: manifest, job copy, metadata and receipt.
    build = tmp_path / "build"
    made = subprocess.run(
        [sys.executable, str(EXAMPLES / "external/make_manifest.py"), str(build)],
        capture_output=True, check=False,
    )
    assert made.returncode == 0, made.stderr
    result = run_kernel(
        "check", "run", str(build / "manifest.json"), "smt-abs",
        "--repo", str(EXAMPLES / "external"),
        "--job", str(EXAMPLES / "external/jobs/smt-abs.json"),
        "--run-root", str(tmp_path / "runs"),
    )
    assert result.returncode == 0, result.stderr
    assert errors("external-manifest", json.loads((build / "manifest.json").read_bytes())) == []
    (run_dir,) = (tmp_path / "runs").iterdir()
    documents = {
        "external-job": run_dir / "job.json",
        "external-run-metadata": run_dir / "metadata.json",
        "external-receipt": run_dir / "checker" / "receipt.json",
    }
    for name, path in documents.items():
        assert errors(name, json.loads(path.read_bytes())) == [], path
    receipt = json.loads(documents["external-receipt"].read_bytes())
    receipt["verdict"] = "maybe"
    assert errors("external-receipt", receipt) != []
    # The same run, audited and attested: the external arm of the predicate.
    made = run_kernel("attest-keygen", str(tmp_path / "k.pem"), str(tmp_path / "k.pub"))
    assert made.returncode == 0, made.stderr
    envelope_path = tmp_path / "external.dsse.json"
    attested = run_kernel("attest", str(run_dir), "--key", str(tmp_path / "k.pem"),
                          "--out", str(envelope_path))
    assert attested.returncode == 0, attested.stderr
    envelope = json.loads(envelope_path.read_bytes())
    assert errors("attestation-envelope", envelope) == []
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["layout"] == "external_run"
    assert errors("attestation-statement", statement) == []
    statement["predicate"]["run"]["extra"] = "x"
    assert errors("attestation-statement", statement) != []
    audited = run_kernel("audit", str(run_dir), "--format", "json",
                         "--verify-key", str(tmp_path / "k.pub"),
                         "--attestation", str(envelope_path))
    assert audited.returncode == 0, audited.stderr
    assert errors("audit-report", json.loads(audited.stdout)) == []


# --- the formats added since: outcome lines, streams, audit, attestation, run state ------


def lines_of(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.splitlines()]


def test_outcome_lines_of_kernel_replay_jsonl_validate_and_a_bad_one_fails() -> None:
    result = run_kernel(
        "replay", str(EXAMPLES / "replay/bundle.json"), "--format", "jsonl", "--out", "-"
    )
    assert result.returncode in (0, 1, 3), result.stderr
    envelopes = lines_of(result.stdout)
    assert envelopes
    for envelope in envelopes:
        assert errors("outcome-line", envelope) == []
    bad_index = dict(envelopes[0], attempt_index=-1)
    assert errors("outcome-line", bad_index) != []
    bad_id = dict(envelopes[0], attempt_id=envelopes[0]["attempt_id"].upper())
    assert errors("outcome-line", bad_id) != []
    null_id = dict(envelopes[0], attempt_id=None)  # a run without an id for the attempt
    assert errors("outcome-line", null_id) == []
    bad_outcome = copy.deepcopy(envelopes[0])
    bad_outcome["outcome"]["unexpected"] = 1
    assert errors("outcome-line", bad_outcome) != []


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real `kernel run` work directory of the shipped e2e bundle and its outcomes."""
    base = tmp_path_factory.mktemp("run")
    work, out = base / "work", base / "outcomes.jsonl"
    done = run_kernel(
        "run", str(EXAMPLES / "e2e/bundle.json"), "--work-dir", str(work), "--out", str(out),
        "--quiet",
    )
    assert done.returncode == 3, done.stderr  # one tampered attempt on purpose
    return work, out


def test_kernel_run_outcomes_run_state_and_certifications_validate(
    stored_run: tuple[Path, Path],
) -> None:
    work, out = stored_run
    for envelope in lines_of(out.read_bytes()):
        assert errors("outcome-line", envelope) == []
    state = json.loads((work / "run-state.json").read_bytes())
    assert errors("run-state", state) == []
    assert errors("run-state", dict(state, format="replay-kernel.run-state.v2")) != []
    assert errors("run-state", {k: v for k, v in state.items() if k != "run_id"}) != []
    records = sorted(work.glob("*/certification.json"))
    assert records
    for record in records:
        assert errors("certification-evidence", json.loads(record.read_bytes())) == []


def test_bundle_stream_lines_validate_one_schema_per_line_kind(tmp_path: Path) -> None:
    out = tmp_path / "bundle.jsonl"
    result = run_kernel(
        "bundle", str(EXAMPLES / "drafts/marbles.json"), "--layout", "stream", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    header, *rest = lines_of(out.read_bytes())
    count = header["header"]["run"]["attempt_count"]
    assert count > 0 and len(rest) == 2 * count
    assert errors("bundle-stream-header", header) == []
    for line in rest[:count]:
        assert errors("bundle-stream-run-line", line) == []
        assert errors("bundle-stream-attempt-line", line) != []
    for line in rest[count:]:
        assert errors("bundle-stream-attempt-line", line) == []
        assert errors("bundle-stream-run-line", line) != []
    assert errors("bundle-stream-header", dict(header, format="replay-kernel.bundle-stream.v0"))
    assert errors("bundle-stream-attempt-line", dict(rest[count], attempt_index="0"))

    # A malformed attempt line (wrong index) is that attempt's refusal; its
    # outcome line still names the run's attempt id (a digest, not null), as
    # both arms of outcome-line's attempt_id and the refusal's null ids allow.
    raw = out.read_bytes().splitlines(keepends=True)
    broken = dict(rest[count], attempt_index=count + 7)
    raw[1 + count] = json.dumps(broken, separators=(",", ":")).encode() + b"\n"
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join(raw))
    replayed = run_kernel("replay", str(damaged), "--format", "jsonl", "--out", "-")
    assert replayed.returncode != 0, replayed.stderr
    envelopes = lines_of(replayed.stdout)
    assert len(envelopes) == count
    refused = envelopes[0]["outcome"]
    assert refused["replay_disposition"] == "invalid_replay_input"
    assert refused["attempt_id"] is None  # the refusal record has no attempt id ...
    assert envelopes[0]["attempt_id"] == rest[0]["attempt_id"]  # ... its line does
    for envelope in envelopes:
        assert errors("outcome-line", envelope) == []


def test_draft_stream_lines_validate_and_kernel_bundle_reads_them(tmp_path: Path) -> None:
    # No command writes a draft stream; kernel.bundles.draft_stream_lines is
    # its writer, and `kernel bundle` (the reader) must accept what it wrote.
    stream = tmp_path / "draft.jsonl"
    script = (
        "import sys; from pathlib import Path; from kernel.bundles import draft_stream_lines; "
        "from kernel.drafts import SearchDraft; from kernel.serde import loads; "
        "draft = loads(Path(sys.argv[1]).read_bytes(), SearchDraft); "
        "Path(sys.argv[2]).write_bytes(b''.join(draft_stream_lines(draft)))"
    )
    made = subprocess.run(
        [sys.executable, "-c", script, str(EXAMPLES / "drafts/marbles.json"), str(stream)],
        capture_output=True, check=False,
    )
    assert made.returncode == 0, made.stderr
    read = run_kernel("bundle", str(stream), "--out", str(tmp_path / "bundle.json"))
    assert read.returncode == 0, read.stderr
    header, *candidates = lines_of(stream.read_bytes())
    assert candidates
    assert errors("draft-stream-header", header) == []
    for candidate in candidates:
        assert errors("draft-stream-candidate-line", candidate) == []
    assert errors("draft-stream-header", dict(header, format="replay-kernel.bundle-stream.v1"))
    assert errors("draft-stream-candidate-line", header)


def test_audit_report_and_attestation_validate(
    stored_run: tuple[Path, Path], tmp_path: Path
) -> None:
    work, out = stored_run
    keys = tmp_path / "keys"
    keys.mkdir()
    made = run_kernel("attest-keygen", str(keys / "k.pem"), str(keys / "k.pub"))
    assert made.returncode == 0, made.stderr
    attested = run_kernel("attest", str(work), "--key", str(keys / "k.pem"),
                          "--outcomes", str(out), "--out", str(tmp_path / "att.dsse.json"))
    assert attested.returncode == 0, attested.stderr
    envelope = json.loads((tmp_path / "att.dsse.json").read_bytes())
    assert errors("attestation-envelope", envelope) == []
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert errors("attestation-statement", statement) == []
    assert errors("attestation-envelope", dict(envelope, signatures=[])) != []
    assert errors("attestation-statement", dict(statement, predicateType="urn:other")) != []
    wrong_layout = copy.deepcopy(statement)
    wrong_layout["predicate"]["layout"] = "external_run"
    assert errors("attestation-statement", wrong_layout) != []

    audited = run_kernel("audit", str(work), "--outcomes", str(out), "--format", "json",
                         "--verify-key", str(keys / "k.pub"),
                         "--attestation", str(tmp_path / "att.dsse.json"))
    assert audited.returncode == 0, audited.stderr
    report = json.loads(audited.stdout)
    assert "attestation" in report and errors("audit-report", report) == []
    # A tampered copy: the report lists findings, and still validates.
    tampered = tmp_path / "tampered"
    shutil.copytree(work, tampered, symlinks=True)
    record = sorted(tampered.glob("*/certification.json"))[0]
    record.write_bytes(record.read_bytes().replace(b'"VERIFIED"', b'"REJECTED"'))
    plain = run_kernel("audit", str(tampered), "--outcomes", str(out), "--format", "json")
    assert plain.returncode != 0, plain.stderr
    found = json.loads(plain.stdout)
    assert found["findings"] and errors("audit-report", found) == []
    bad = copy.deepcopy(report)
    bad["findings"] = [{"code": "no_such_code", "message": "", "path": "", "recomputed": None,
                        "recorded": None, "subject": ""}]
    assert errors("audit-report", bad) != []


def test_schemas_readme_lists_every_schema() -> None:
    readme = (SCHEMAS / "README.md").read_text(encoding="utf-8")
    listed = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    assert listed == set(schema_names())
