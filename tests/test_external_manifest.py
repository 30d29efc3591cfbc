"""Manifest loading, path rules, identity(check) and the public surface (seed 003)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kernel.external as external
from kernel.external import (
    ManifestError,
    PinMismatchError,
    check_identity,
    expand_argv,
    identity_object,
    job_digest_of,
    load_job,
    load_manifest,
    seal_job,
)
from tests.support.reference import canonical, sha256_file
from tests.test_external_helpers import Scenario

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_public_api_is_exact_and_alphabetical() -> None:
    assert external.__all__ == sorted(external.__all__)
    assert external.__all__ == [
        "Cancellation", "CheckEntry", "CheckIdentity", "CheckedDigests", "Claim", "ClosureError",
        "Command", "ContainmentLevel", "ContainmentPart", "DEFAULT_STEP_LIMITS", "Decision",
        "Execution",
        "ExternalError", "FileDigest", "Job", "JobError", "MAX_DEADLINE_SECONDS", "Manifest",
        "ManifestError",
        "PASS_DETAIL", "PLACEHOLDERS", "Pin", "PinCache", "PinClosure", "PinMismatchError",
        "ProcessResult", "ProcessStatus", "ProcessSummary",
        "RECEIPT_FIELDS", "Reason", "ReceiptCheck", "ReceiptExpectation",
        "RunDirectoryError", "RunIdentity", "RunKind", "RunLimits", "RunMetadata", "RunOutcome",
        "RunRecordError", "Stage", "Status", "StepLimits", "StepView", "Verdict",
        "available_level", "available_parts", "check_identity", "content_digest",
        "content_identity_object",
        "default_environment", "expand_argv", "identity_object", "job_digest_of", "load_job",
        "load_manifest", "parse_manifest", "pin_closure", "process_pin_cache", "read_job",
        "read_run_metadata",
        "reason_for", "recorded_expectation", "replay_run",
        "run_check", "run_process", "sandbox_shortfall", "seal_job", "validate_receipt",
    ]  # fmt: skip
    for name in external.__all__:
        assert hasattr(external, name)


def test_pure_layers_never_import_the_external_package() -> None:
    root = Path(__file__).resolve().parent.parent / "kernel"
    for module in ("identity.py", "serde.py"):
        assert "kernel.external" not in (root / module).read_text()


def _edit(scenario: Scenario, change: Callable[[dict[str, Any]], None]) -> None:
    document = copy.deepcopy(scenario.document())
    change(document)
    scenario.write_manifest(document)


def _entry(document: dict[str, Any]) -> dict[str, Any]:
    entry = document["checks"][0]
    assert isinstance(entry, dict)
    return entry


def _set_spec(value: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        _entry(document)["claim"]["specification"] = value

    return change


def _set_artifact(value: str) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        _entry(document)["evidence_artifacts"] = [value]

    return change


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (_set_spec("/etc/passwd"), "path_absolute"),
        (_set_spec("../outside.txt"), "path_traversal"),
        (_set_spec("spec/../../outside.txt"), "path_traversal"),
        (_set_spec("./spec/claim.txt"), "path_not_normalized"),
        (_set_spec("spec//claim.txt"), "path_not_normalized"),
        (_set_spec("spec/claim.txt/"), "path_not_normalized"),
        (_set_spec("spec\\claim.txt"), "path_invalid"),
        (_set_spec(""), "path_empty"),
        (_set_artifact("/tmp/proof.txt"), "path_absolute"),
        (_set_artifact("../proof.txt"), "path_traversal"),
        (_set_artifact("a/../../proof.txt"), "path_traversal"),
        (_set_artifact("./proof.txt"), "path_not_normalized"),
    ],
)
def test_bad_paths_are_refused_when_the_manifest_loads(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], code: str
) -> None:
    scenario = Scenario(tmp_path)
    _edit(scenario, change)
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == code


def test_a_specification_symlink_escaping_the_repository_is_refused_at_load(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not in the repository\n")
    (scenario.repo / "spec" / "claim.txt").unlink()
    (scenario.repo / "spec" / "claim.txt").symlink_to(outside)
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == "path_escapes_root"


def test_an_input_behind_a_symlinked_directory_escaping_the_repository_is_refused(
    tmp_path: Path,
) -> None:
    scenario = Scenario(tmp_path, inputs=("data/x.txt",))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.txt").write_text("x\n")
    (scenario.repo / "data" / "x.txt").unlink()
    (scenario.repo / "data").rmdir()
    (scenario.repo / "data").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == "path_escapes_root"


def _set_field(*keys: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        target: Any = _entry(document)
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (_set_field("producer", "argv", value=["{{python}}", "{{shell}}"]), "unknown_placeholder"),
        (
            _set_field("producer", "argv", value=["{{python}}", "{{request}"]),
            "malformed_placeholder",
        ),
        (
            _set_field("producer", "argv", value=["/bin/sh", "-c", "true"]),
            "argv_not_pinned_executable",
        ),
        (_set_field("producer", "argv", value=[]), "empty_argv"),
        (_set_field("producer", "executable", "path", value="python3"), "pin_path_not_absolute"),
        (
            _set_field("producer", "executable", "path", value="/usr/../bin/python3"),
            "pin_path_not_normalized",
        ),
        (_set_field("producer", "executable", "sha256", value="3.11.7"), "invalid_sha256"),
        (_set_field("claim", "obligations", value=["first", "first"]), "duplicate_entry"),
        (_set_field("claim", "obligations", value=[]), "no_obligations"),
        (_set_field("claim", "obligations", value=["has space"]), "invalid_identifier"),
        (_set_field("evidence_artifacts", value=[]), "no_evidence"),
        (_set_field("evidence_artifacts", value=["a", "a"]), "duplicate_entry"),
        (_set_field("evidence_artifacts", value=["a", "a/b"]), "artifact_path_conflict"),
        (_set_field("inputs", value=["spec/claim.txt"]), "duplicate_entry"),
        (_set_field("check_id", value="../x"), "invalid_identifier"),
        (_set_field("surprise", value=1), "manifest_schema"),
        (_set_field("assurance", value=7), "manifest_schema"),
        (_set_field("claim", "obligations", value="first"), "manifest_schema"),
    ],
)  # fmt: skip
def test_malformed_entries_are_refused_with_a_code(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], code: str
) -> None:
    scenario = Scenario(tmp_path)
    _edit(scenario, change)
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"schema_version": 1, "schema_version": 1, "checks": []}', "manifest_duplicate_key"),
        ('{"schema_version": 1.0, "checks": []}', "manifest_float_forbidden"),
        ("[", "manifest_malformed_json"),
        ('{"schema_version": 2, "checks": []}', "unsupported_schema_version"),
    ],
)
def test_non_strict_json_is_refused(tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path, repository_root=tmp_path)
    assert caught.value.code == code


def test_duplicate_check_ids_and_unknown_check_are_refused(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    document = scenario.document()
    document["checks"].append(copy.deepcopy(document["checks"][0]))
    scenario.write_manifest(document)
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == "duplicate_entry"
    scenario.write_manifest()
    with pytest.raises(ManifestError) as unknown:
        scenario.manifest().entry("nope")
    assert unknown.value.code == "unknown_check"


def test_identity_is_the_whole_entry_and_the_check_digest_its_sha256(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    built = check_identity(scenario.entry())
    expected = {"identity_version": 1, **scenario.document()["checks"][0]}
    assert built.identity == expected
    assert built.canonical == canonical(expected)
    assert built.check_digest == hashlib.sha256(canonical(expected)).hexdigest()
    # both executables and every pin are in it
    loaded = json.loads(built.canonical)
    assert loaded["producer"]["executable"]["sha256"] == sha256_file(Path(scenario.executable))
    assert loaded["checker"]["dependencies"][0]["sha256"] == sha256_file(scenario.checker_script)
    assert identity_object(scenario.entry()) == expected


def test_identity_refuses_a_pin_that_does_not_hold(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    entry = scenario.entry()
    scenario.checker_script.write_text(scenario.checker_script.read_text() + "# changed\n")
    with pytest.raises(PinMismatchError) as caught:
        check_identity(entry)
    assert caught.value.code == "pin_mismatch"
    assert str(scenario.checker_script) in caught.value.message


def test_identity_refuses_a_missing_or_non_regular_pinned_file(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    entry = scenario.entry()
    scenario.producer_script.unlink()
    scenario.producer_script.mkdir()
    with pytest.raises(PinMismatchError):
        check_identity(entry)


def test_placeholders_expand_inside_one_element_without_a_shell() -> None:
    values = {
        "python": "/py",
        "snapshot": "/s p",
        "run_dir": "/r",
        "request": "/r/req.json",
        "evidence": "/r/e",
        "receipt": "/r/{{python}}",
    }
    argv = ("{{python}}", "--out={{evidence}}/x", "{{snapshot}}", "$HOME;{{receipt}}")
    assert expand_argv(argv, values) == ("/py", "--out=/r/e/x", "/s p", "$HOME;/r/{{python}}")


def test_job_digest_is_self_sealing_and_load_job_is_strict(tmp_path: Path) -> None:
    job = seal_job("job-7", "demo", "seven")
    blank = {"schema_version": 1, "job_id": "job-7", "check_id": "demo",
             "description": "seven", "job_digest": ""}  # fmt: skip
    assert job.job_digest == hashlib.sha256(canonical(blank)).hexdigest()
    assert job_digest_of(job) == job.job_digest
    path = tmp_path / "job.json"
    path.write_text(json.dumps({**blank, "job_digest": job.job_digest}))
    assert load_job(path) == job
    path.write_text(json.dumps({**blank, "job_digest": job.job_digest, "extra": 1}))
    with pytest.raises(external.JobError):
        load_job(path)
    os.chmod(path, 0o000)
    if os.geteuid() != 0:
        with pytest.raises(external.JobError):
            load_job(path)
