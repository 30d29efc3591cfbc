"""metadata.json as four grouped records, written as one flat document (ADR 0017).

The document's keys, and which group owns each, are spelled out here
literally (not read from the package), so a key moved, renamed or lost in
either direction fails. Documents are encoded with the reference canonical
encoder of ``tests.support.reference``. The expected refusal messages were
taken from the flat record before it was grouped: grouping must not change
what is refused, nor how it is reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.external import (
    CheckedDigests,
    ContainmentLevel,
    ContainmentPart,
    Decision,
    Execution,
    FileDigest,
    ProcessStatus,
    ProcessSummary,
    Reason,
    RunIdentity,
    RunKind,
    RunMetadata,
    RunRecordError,
    Status,
    StepLimits,
    Verdict,
    read_run_metadata,
)
from kernel.schemas import record_schema
from kernel.serde import FLATTENED, SerdeError, dumps, loads, make_converter, structure, unstructure
from tests.support.reference import canonical
from tests.test_external_helpers import Scenario

# key -> the attribute of RunMetadata that holds it (None: RunMetadata itself)
GROUP_OF: dict[str, str | None] = {
    "metadata_schema_version": None,
    "kind": "run",
    "run_id": "run",
    "replay_of": "run",
    "check_id": "run",
    "manifest_path": "run",
    "repository_root": "run",
    "job_id": "run",
    "job_digest": "run",
    "containment": None,
    "containment_parts": None,
    "limits": None,
    "check_digest": "checked",
    "input_digest": "checked",
    "inputs": "checked",
    "specification_digest": "checked",
    "artifacts": "checked",
    "evidence_digest": "checked",
    "producer": "execution",
    "checker": "execution",
    "producer_request_sha256": "execution",
    "checker_request_sha256": "execution",
    "receipt_sha256": "execution",
    "verdict": "decision",
    "status": "decision",
    "reason": "decision",
    "detail": "decision",
}

# --- generated documents, built without the package's encoder -----------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_digest = st.text("0123456789abcdef", min_size=64, max_size=64)
_maybe_digest = st.none() | _digest
_file_digest = st.fixed_dictionaries({"path": _text, "sha256": _digest})
_positive = st.integers(min_value=1, max_value=2**40)
_LIMIT_KEYS = (
    "memory_bytes", "processes", "open_files", "file_size_bytes",
    "cpu_seconds", "tmpfs_bytes", "artifact_bytes", "evidence_bytes", "entries",
)  # fmt: skip
_limits_documents = st.fixed_dictionaries({key: _positive for key in _LIMIT_KEYS})
_process = st.none() | st.fixed_dictionaries(
    {
        "status": st.sampled_from(["exited", "timed_out", "cancelled", "launch_failed"]),
        "returncode": st.none() | st.integers(-(2**31), 2**31),
        "stdout_sha256": _digest,
        "stderr_sha256": _digest,
        "stdout_truncated": st.booleans(),
        "stderr_truncated": st.booleans(),
    }
)
_decision = st.one_of(
    st.fixed_dictionaries({"status": st.just("PASS"), "reason": st.none()}),
    st.fixed_dictionaries(
        {"status": st.just("BLOCKED"), "reason": st.sampled_from([r.value for r in Reason])}
    ),
)


@st.composite
def metadata_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid flat metadata document (a JSON object), drawn key by key."""
    doc: dict[str, Any] = {
        "metadata_schema_version": 4,
        "kind": draw(st.sampled_from(["run", "replay"])),
        "run_id": draw(_text),
        "replay_of": draw(st.none() | _text),
        "check_id": draw(_text),
        "manifest_path": draw(_text),
        "repository_root": draw(_text),
        "job_id": draw(_text),
        "job_digest": draw(_text),
        "containment": draw(st.sampled_from([None, "subreaper", "namespace", "sandbox"])),
        "containment_parts": draw(st.none() | st.lists(
            st.sampled_from([p.value for p in ContainmentPart]), unique=True).map(sorted)),
        "limits": draw(st.none() | _limits_documents),
        "check_digest": draw(_maybe_digest),
        "input_digest": draw(_maybe_digest),
        "inputs": draw(st.lists(_file_digest, max_size=3)),
        "specification_digest": draw(_maybe_digest),
        "artifacts": draw(st.lists(_file_digest, max_size=3)),
        "evidence_digest": draw(_maybe_digest),
        "producer": draw(_process),
        "checker": draw(_process),
        "producer_request_sha256": draw(_maybe_digest),
        "checker_request_sha256": draw(_maybe_digest),
        "receipt_sha256": draw(_maybe_digest),
        "verdict": draw(st.sampled_from([None, "accepted", "rejected", "unknown"])),
        "detail": draw(_text),
    }
    doc.update(draw(_decision))
    return doc


def _value_at(metadata: RunMetadata, key: str) -> object:
    group = GROUP_OF[key]
    holder = metadata if group is None else getattr(metadata, group)
    return unstructure(getattr(holder, key))


@given(metadata_documents())
def test_a_valid_document_round_trips_to_the_same_bytes(doc: dict[str, Any]) -> None:
    data = canonical(doc)
    metadata = loads(data, RunMetadata)
    assert dumps(metadata) == data
    for key, value in doc.items():  # each key landed in the group that owns it
        assert _value_at(metadata, key) == value, key


_summary = st.builds(
    ProcessSummary,
    st.sampled_from(ProcessStatus),
    st.none() | st.integers(-255, 255),
    _digest,
    _digest,
    st.booleans(),
    st.booleans(),
)
_files = st.lists(st.builds(FileDigest, _text, _digest), max_size=3).map(tuple)
_records = st.builds(
    RunMetadata,
    metadata_schema_version=st.just(4),
    run=st.builds(
        RunIdentity,
        kind=st.sampled_from(RunKind),
        run_id=_text,
        replay_of=st.none() | _text,
        check_id=_text,
        manifest_path=_text,
        repository_root=_text,
        job_id=_text,
        job_digest=_text,
    ),
    containment=st.none() | st.sampled_from(ContainmentLevel),
    limits=st.none() | st.builds(StepLimits, *[_positive] * 8),
    checked=st.builds(
        CheckedDigests,
        check_digest=_maybe_digest,
        input_digest=_maybe_digest,
        inputs=_files,
        specification_digest=_maybe_digest,
        artifacts=_files,
        evidence_digest=_maybe_digest,
    ),
    execution=st.builds(
        Execution,
        producer=st.none() | _summary,
        checker=st.none() | _summary,
        producer_request_sha256=_maybe_digest,
        checker_request_sha256=_maybe_digest,
        receipt_sha256=_maybe_digest,
    ),
    decision=st.one_of(
        st.builds(
            Decision,
            verdict=st.none() | st.sampled_from(Verdict),
            status=st.just(Status.PASS),
            reason=st.none(),
            detail=_text,
        ),
        st.builds(
            Decision,
            verdict=st.none() | st.sampled_from(Verdict),
            status=st.just(Status.BLOCKED),
            reason=st.sampled_from(Reason),
            detail=_text,
        ),
    ),
)


@given(_records)
def test_a_record_round_trips_through_one_flat_object(metadata: RunMetadata) -> None:
    document = unstructure(metadata)
    assert isinstance(document, dict)
    assert sorted(document) == sorted(GROUP_OF)  # flat: no group appears as a key
    assert structure(document, RunMetadata) == metadata
    assert loads(dumps(metadata), RunMetadata) == metadata


# --- refusals: missing, extra, wrong-typed keys, in every group ----------------------


@given(metadata_documents(), st.sampled_from(sorted(GROUP_OF)))
def test_any_missing_key_is_refused_at_its_path(doc: dict[str, Any], key: str) -> None:
    del doc[key]
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert (caught.value.code, caught.value.path) == ("schema_mismatch", f"$.{key}")
    assert caught.value.message.startswith("required field missing")


@given(metadata_documents(), _text.filter(lambda k: k not in GROUP_OF))
def test_any_extra_key_is_refused(doc: dict[str, Any], extra: str) -> None:
    doc[extra] = None
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert (caught.value.code, caught.value.path) == ("schema_mismatch", "$")
    assert caught.value.message == f"unexpected fields [{extra!r}] @ $"


def _sample() -> dict[str, Any]:
    """A BLOCKED run's document, every group filled."""
    digest = "ab" * 32
    summary = {
        "returncode": 0,
        "status": "exited",
        "stderr_sha256": digest,
        "stderr_truncated": False,
        "stdout_sha256": digest,
        "stdout_truncated": False,
    }
    return {
        "metadata_schema_version": 4,
        "kind": "run",
        "run_id": "run-1",
        "replay_of": None,
        "check_id": "check",
        "manifest_path": "/m/manifest.json",
        "repository_root": "/m",
        "job_id": "job-1",
        "job_digest": digest,
        "containment": "subreaper",
        "containment_parts": None,
        "limits": None,
        "check_digest": digest,
        "input_digest": digest,
        "inputs": [{"path": "spec.txt", "sha256": digest}],
        "specification_digest": digest,
        "artifacts": [{"path": "proof.bin", "sha256": digest}],
        "evidence_digest": digest,
        "producer": summary,
        "checker": dict(summary),
        "producer_request_sha256": digest,
        "checker_request_sha256": digest,
        "receipt_sha256": digest,
        "verdict": "rejected",
        "status": "BLOCKED",
        "reason": "checker_rejected",
        "detail": "the checker rejected",
    }


def test_the_sample_is_valid_and_exactly_the_documented_keys() -> None:
    doc = _sample()
    assert sorted(doc) == sorted(GROUP_OF)
    assert dumps(loads(canonical(doc), RunMetadata)) == canonical(doc)


# (key, value) -> the message the flat record gave (captured before grouping).
REFUSALS = [
    # the run's identity
    ("run_id", 5, "expected str, found integer 5 @ $.run_id"),
    ("kind", "x", "expected RunKind: 'x' is not a RunKind (one of 'run', 'replay') @ $.kind"),
    ("job_digest", None, "expected str, found null @ $.job_digest"),
    # the containment level, beside the groups
    (
        "containment",
        "x",
        "expected ContainmentLevel or null: 'x' is not a ContainmentLevel "
        "(one of 'subreaper', 'namespace', 'sandbox') @ $.containment",
    ),
    ("metadata_schema_version", 2, "expected a value: metadata_schema_version is not 4 @ $"),
    (
        "metadata_schema_version",
        True,
        "expected int, found boolean true @ $.metadata_schema_version",
    ),
    # the digests of what was checked
    ("inputs", "x", "expected array, found string 'x' @ $.inputs"),
    ("check_digest", "A" * 64, "expected a value: check_digest is not a lowercase SHA-256 @ $"),
    (
        "artifacts",
        [{"path": "proof.bin", "sha256": "bad"}],
        "expected a value: sha256 is not a lowercase SHA-256 @ $.artifacts[0]",
    ),
    # the two commands
    ("receipt_sha256", "0" * 63, "expected a value: receipt_sha256 is not a lowercase SHA-256 @ $"),
    (
        "producer",
        {**_sample()["producer"], "status": "bad"},
        "expected ProcessStatus: 'bad' is not a ProcessStatus "
        "(one of 'exited', 'timed_out', 'cancelled', 'launch_failed') @ $.producer.status",
    ),
    (
        "producer",
        {"status": "exited"},
        "required field missing, expected int or null @ $.producer.returncode; "
        "required field missing, expected str @ $.producer.stdout_sha256; "
        "required field missing, expected str @ $.producer.stderr_sha256; "
        "required field missing, expected bool @ $.producer.stdout_truncated; "
        "required field missing, expected bool @ $.producer.stderr_truncated",
    ),
    ("checker", [], "expected object ProcessSummary or null, found array of 0 @ $.checker"),
    # the decision
    (
        "status",
        "x",
        "expected Status: 'x' is not a Status (one of 'PASS', 'BLOCKED') @ $.status",
    ),
    ("status", "PASS", "expected a value: reason is None exactly when status is PASS @ $"),
    ("reason", None, "expected a value: reason is None exactly when status is PASS @ $"),
    ("detail", 7, "expected str, found integer 7 @ $.detail"),
]


@pytest.mark.parametrize(("key", "value", "message"), REFUSALS)
def test_a_wrong_value_in_each_group_is_refused_as_before(
    key: str, value: object, message: str, tmp_path: Path
) -> None:
    doc = _sample()
    doc[key] = value
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert caught.value.code == "schema_mismatch"
    assert caught.value.message == message
    # the replay's reader gives the same refusal its own code
    path = tmp_path / "metadata.json"
    path.write_bytes(canonical(doc) + b"\n")
    with pytest.raises(RunRecordError) as read:
        read_run_metadata(path)
    assert read.value.code == "metadata_schema_mismatch"


@pytest.mark.parametrize("key", ["job_id", "containment", "evidence_digest", "checker", "verdict"])
def test_a_missing_key_in_each_group_is_refused_as_before(key: str) -> None:
    doc = _sample()
    del doc[key]
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert caught.value.path == f"$.{key}"
    assert caught.value.message.startswith("required field missing, expected ")


def test_several_faults_are_all_named_in_the_documents_order() -> None:
    doc = _sample()
    doc["run_id"], doc["status"], doc["extra"] = 5, "nope", 1
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert caught.value.path == "$.run_id"
    assert caught.value.message == (
        "expected str, found integer 5 @ $.run_id; "
        "expected Status: 'nope' is not a Status (one of 'PASS', 'BLOCKED') @ $.status; "
        "unexpected fields ['extra'] @ $"
    )


def test_a_group_nested_as_an_object_is_refused() -> None:
    doc = {k: v for k, v in _sample().items() if GROUP_OF[k] != "decision"}
    doc["decision"] = {k: v for k, v in _sample().items() if GROUP_OF[k] == "decision"}
    with pytest.raises(SerdeError) as caught:
        loads(canonical(doc), RunMetadata)
    assert caught.value.path == "$.verdict"  # the flat keys are required; "decision" is not one


# --- each group keeps its own rules ---------------------------------------------------


def test_each_group_is_small_frozen_and_slotted() -> None:
    metadata = loads(canonical(_sample()), RunMetadata)
    for value in (metadata, metadata.run, metadata.checked, metadata.execution, metadata.decision):
        assert len(attrs.fields(type(value))) <= 8, type(value)
        assert not hasattr(value, "__dict__"), type(value)  # slotted
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, attrs.fields(type(value))[0].name, None)


def test_the_decision_holds_the_status_reason_rule() -> None:
    Decision(Verdict.ACCEPTED, Status.PASS, None, "accepted")
    Decision(None, Status.BLOCKED, Reason.CHECKER_FAILED, "exit 1")
    with pytest.raises(ValueError, match="reason is None exactly when status is PASS"):
        Decision(Verdict.ACCEPTED, Status.PASS, Reason.IO_ERROR, "x")
    with pytest.raises(ValueError, match="reason is None exactly when status is PASS"):
        Decision(None, Status.BLOCKED, None, "x")


def test_digest_groups_refuse_what_is_not_a_lowercase_sha256() -> None:
    good = "0" * 64
    CheckedDigests(good, None, (), None, (), None)
    with pytest.raises(ValueError, match="evidence_digest"):
        CheckedDigests(good, None, (), None, (), good.upper().replace("0", "A"))
    with pytest.raises(ValueError, match="checker_request_sha256"):
        Execution(None, None, None, "0" * 65, None)


def test_the_metadata_holds_its_schema_version() -> None:
    run = RunIdentity(RunKind.RUN, "r", None, "c", "/m", "/r", "j", "0" * 64)
    checked = CheckedDigests(None, None, (), None, (), None)
    execution = Execution(None, None, None, None, None)
    decision = Decision(None, Status.BLOCKED, Reason.PIN_MISMATCH, "x")
    RunMetadata(4, run, None, None, None, checked, execution, decision)
    with pytest.raises(ValueError, match="metadata_schema_version is not 4"):
        RunMetadata(3, run, None, None, None, checked, execution, decision)


# --- a real run writes the same flat document -------------------------------------


@pytest.mark.usefixtures("no_leftovers")
def test_a_real_runs_metadata_file_is_the_flat_document(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path).run()
    data = Path(outcome.attempt_dir, "metadata.json").read_bytes()
    document = json.loads(data)
    assert sorted(document) == sorted(GROUP_OF)
    assert data == canonical(document) + b"\n"
    assert read_run_metadata(Path(outcome.attempt_dir, "metadata.json")) == outcome.metadata
    assert document["status"] == outcome.metadata.decision.status.value == "PASS"
    assert document["run_id"] == outcome.metadata.run.run_id
    assert document["evidence_digest"] == outcome.metadata.checked.evidence_digest


# --- the FLATTENED mechanism of kernel.serde and kernel.schemas ----------------------


@attrs.frozen
class _Inner:
    a: int
    b: str


@attrs.frozen
class _Outer:
    c: bool
    inner: _Inner = attrs.field(metadata={FLATTENED: True})


@attrs.frozen
class _Clash:
    a: int
    inner: _Inner = attrs.field(metadata={FLATTENED: True})


@attrs.frozen
class _NotARecord:
    inner: int = attrs.field(metadata={FLATTENED: True})


def test_flattened_fields_read_and_write_as_the_enclosing_objects_keys() -> None:
    value = _Outer(True, _Inner(1, "x"))
    assert unstructure(value) == {"c": True, "a": 1, "b": "x"}
    assert structure({"a": 1, "b": "x", "c": True}, _Outer) == value
    with pytest.raises(SerdeError, match=r"expected int, found string '1' @ \$\.a"):
        structure({"a": "1", "b": "x", "c": True}, _Outer)


def test_a_flattening_that_cannot_be_flat_is_a_programming_error() -> None:
    for record in (_Clash, _NotARecord):
        with pytest.raises(TypeError):
            make_converter().get_structure_hook(record)
        with pytest.raises(TypeError):
            make_converter().get_unstructure_hook(record)


def test_the_schema_of_a_flattened_record_lists_the_group_keys_in_place() -> None:
    schema = record_schema("t", "t", "t", [_Outer])
    defs = schema["$defs"]
    assert isinstance(defs, dict) and list(defs) == ["_Outer"]  # no entry for the group
    outer = defs["_Outer"]
    assert isinstance(outer, dict)
    assert outer["required"] == ["c", "a", "b"]
    assert outer["properties"] == {
        "c": {"type": "boolean"},
        "a": {"type": "integer"},
        "b": {"type": "string"},
    }
