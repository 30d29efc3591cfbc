"""Issue 34, deliverable 6: the containment level says which parts of the sandbox held.

A run's metadata records the parts its steps held (uid, view, filter, cgroup,
bounded output); a manifest may require any of them, and where the machine
cannot give a required part the attempt is ``BLOCKED
containment_unavailable`` naming it, before any step runs. Each part is
tried against what this machine gives: as root (CI here) and again as an
ordinary user (``tests/test_sandbox_ordinary_user.py``), which lacks the uid
part and, without delegation, the cgroup, so both branches run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernel.external import (
    ContainmentLevel,
    ContainmentPart,
    ManifestError,
    Reason,
    Status,
    available_level,
    available_parts,
    identity_object,
)
from tests.orchestrate_helpers import shipped_entry
from tests.test_external_helpers import HONEST_PRODUCER, Scenario

pytestmark = pytest.mark.slow

IN_SANDBOX = pytest.mark.skipif(
    available_level() is not ContainmentLevel.SANDBOX, reason="needs the sandbox (bubblewrap)"
)


def _requiring(tmp_path: Path, parts: list[str], **extra: Any) -> tuple[Scenario, Path]:
    ran = tmp_path / "producer-ran"
    # Below the sandbox the marker is written where a run ran; in it, the write
    # is refused, and the metadata's process record says whether it ran.
    marker = f"try:\n    open({str(ran)!r}, 'w')\nexcept OSError:\n    pass\n"
    scenario = Scenario(tmp_path, producer=HONEST_PRODUCER + marker)
    document = scenario.document()
    document["checks"][0]["required_containment_parts"] = parts
    document["checks"][0].update(extra)
    scenario.write_manifest(document)
    return scenario, ran


@IN_SANDBOX
def test_a_sandboxed_run_records_every_part_the_machine_gives(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path).run()
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    stored = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    recorded = stored["containment_parts"]
    assert recorded == sorted(part.value for part in available_parts())
    assert {"filter", "view"} <= set(recorded)  # the sandbox level is those two
    assert ("uid" in recorded) is (os.geteuid() == 0)  # a root kernel's steps, never root


def test_below_the_sandbox_no_part_is_recorded(tmp_path: Path) -> None:
    outcome = Scenario(tmp_path).run(max_containment=ContainmentLevel.NAMESPACE)
    assert outcome.status is Status.PASS, outcome.metadata.decision.detail
    stored = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    assert stored["containment"] == "namespace"
    assert stored["containment_parts"] is None


@IN_SANDBOX
@pytest.mark.parametrize("part", [p.value for p in ContainmentPart])
def test_a_required_part_is_had_or_the_attempt_is_blocked_naming_it(
    tmp_path: Path, part: str
) -> None:
    scenario, ran = _requiring(tmp_path, [part])
    outcome = scenario.run()
    if ContainmentPart(part) in available_parts():
        assert outcome.status is Status.PASS, outcome.metadata.decision.detail
        assert outcome.metadata.containment_parts is not None
        assert ContainmentPart(part) in outcome.metadata.containment_parts
        return
    assert outcome.reason is Reason.CONTAINMENT_UNAVAILABLE
    detail = outcome.metadata.decision.detail
    assert f"containment part {part}" in detail and "cannot give it" in detail, detail
    assert not ran.exists()  # refused before any step
    assert outcome.metadata.execution.producer is None


def test_a_required_part_blocks_below_the_sandbox_naming_each_part(tmp_path: Path) -> None:
    scenario, ran = _requiring(tmp_path, ["cgroup", "filter"])
    outcome = scenario.run(max_containment=ContainmentLevel.NAMESPACE)
    assert outcome.reason is Reason.CONTAINMENT_UNAVAILABLE
    detail = outcome.metadata.decision.detail
    assert "requires containment sandbox" in detail
    assert "; cgroup: " in detail and "; filter: " in detail, detail
    assert not ran.exists()


@pytest.mark.parametrize(
    ("parts", "extra", "code"),
    [
        (["view", "view"], {}, "duplicate_entry"),
        (["seatbelt"], {}, "manifest_schema"),
        (["view"], {"required_containment": "namespace"}, "containment_conflict"),
        ("view", {}, "manifest_schema"),
    ],
)
def test_a_bad_parts_requirement_is_refused_when_the_manifest_loads(
    tmp_path: Path, parts: Any, extra: dict[str, Any], code: str
) -> None:
    scenario, _ = _requiring(tmp_path, parts, **extra)
    with pytest.raises(ManifestError) as caught:
        scenario.manifest()
    assert caught.value.code == code, caught.value.message


def test_required_parts_enter_the_check_identity_only_when_given(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = identity_object(Scenario(tmp_path / "a").entry())
    strict = identity_object(_requiring(tmp_path / "b", ["filter", "view"])[0].entry())
    assert isinstance(plain, dict) and isinstance(strict, dict)
    assert "required_containment_parts" not in plain
    assert strict["required_containment_parts"] == ["filter", "view"]


def test_the_main_job_requires_the_view_and_the_filter_everywhere() -> None:
    entry = shipped_entry()
    assert entry.required_containment is ContainmentLevel.SANDBOX
    assert entry.required_containment_parts == (ContainmentPart.FILTER, ContainmentPart.VIEW)
