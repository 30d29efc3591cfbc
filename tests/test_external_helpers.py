"""Shared builders for the external-protocol tests (no tests of its own).

Every backend here is a real Python script written into ``tmp_path`` and run
by ``sys.executable`` through the real process layer. Digests are recomputed
with ``tests.support.reference``, independently of ``kernel.external``; the
process checks are ``tests.support.processes``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel.external import (
    CheckEntry,
    ContainmentLevel,
    Job,
    Manifest,
    RunLimits,
    RunOutcome,
    default_environment,
    load_manifest,
    replay_run,
    run_check,
    seal_job,
)
from tests.support.reference import sha256_file

__all__ = [
    "BELOW_SANDBOX",
    "HONEST_CHECKER",
    "HONEST_PRODUCER",
    "PYTHON",
    "Scenario",
    "operator_config",
    "replay_stored",
]

PYTHON = sys.executable

#: The level at which a test exercises the kernel's own after-step checks
#: (a pin, the snapshot, the evidence or a role directory changed by a step).
#: In the sandbox (ADR 0018) the same writes are refused inside the step, which
#: tests/test_sandbox.py shows; below it, on a machine without bubblewrap, these
#: checks are what stops them, so they keep their tests.
BELOW_SANDBOX = ContainmentLevel.NAMESPACE


# The honest producer writes every declared artifact with fixed content.
HONEST_PRODUCER = """
import json, os, sys
request = json.load(open(sys.argv[1]))
evidence = request["paths"]["evidence"]
for path in request["evidence_artifacts"]:
    target = os.path.join(evidence, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as handle:
        handle.write("evidence for " + path + "\\n")
"""

# The honest checker binds its receipt to the request. ``mutate(receipt)``
# (defined by each test, default identity) forges one field; ``RAW`` (bytes
# or None) replaces the whole receipt; ``EXIT`` is the exit status.
HONEST_CHECKER = """
import json, sys
request = json.load(open(sys.argv[1]))
receipt_path = sys.argv[2]
receipt = {
    "schema_version": 1,
    "job_id": request["job_id"],
    "run_id": request["run_id"],
    "check_id": request["check_id"],
    "check_digest": request["check_digest"],
    "specification_digest": request["specification_digest"],
    "identity": request["identity"],
    "evidence_digest": request["evidence_digest"],
    "verdict": "accepted",
    "obligations": [
        {"name": name, "result": "accepted", "evidence": [request["evidence_artifacts"][0]]}
        for name in request["claim"]["obligations"]
    ],
}
RAW = None
EXIT = 0
WRITE = True
def mutate(receipt):
    return receipt
%(custom)s
receipt = mutate(receipt)
if WRITE:
    with open(receipt_path, "wb") as handle:
        handle.write(RAW if RAW is not None else json.dumps(receipt).encode())
sys.exit(EXIT)
"""


def _dedent(code: str) -> str:
    return textwrap.dedent(code).strip("\n") + "\n"


class Scenario:
    """A repository, two scripts and a manifest under ``tmp_path``, pinned by hashlib."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        producer: str = HONEST_PRODUCER,
        checker_custom: str = "",
        checker: str | None = None,
        artifacts: Sequence[str] = ("proof.txt",),
        obligations: Sequence[str] = ("first", "second"),
        inputs: Sequence[str] = (),
        executable: str = PYTHON,
        checker_deps: Sequence[Path] = (),
        producer_tools: Sequence[Path] = (),
        max_containment: ContainmentLevel | None = None,
    ) -> None:
        self.tmp = tmp_path
        self.repo = tmp_path / "repo"
        self.repo.mkdir()
        (self.repo / "spec").mkdir()
        (self.repo / "spec" / "claim.txt").write_text("claim: 1 + 1 = 2\n")
        for relative in inputs:
            (self.repo / relative).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / relative).write_text(f"input {relative}\n")
        self.scripts = tmp_path / "scripts"
        self.scripts.mkdir()
        self.producer_script = self.scripts / "producer.py"
        self.producer_script.write_text(_dedent(producer))
        self.checker_script = self.scripts / "checker.py"
        checker_text = (
            checker
            if checker is not None
            else HONEST_CHECKER % {"custom": _dedent(checker_custom) if checker_custom else ""}
        )
        self.checker_script.write_text(_dedent(checker_text))
        self.executable = executable
        self.artifacts = tuple(artifacts)
        self.obligations = tuple(obligations)
        self.inputs = tuple(inputs)
        self.checker_deps = tuple(checker_deps)
        self.producer_tools = tuple(producer_tools)
        self.max_containment = max_containment
        self.manifest_path = tmp_path / "manifest.json"
        self.write_manifest()
        self.job = seal_job("job-1", "demo", "a test job")
        self.run_root = tmp_path / "runs"

    def pin(self, path: Path | str) -> dict[str, str]:
        return {"path": str(path), "sha256": sha256_file(Path(path))}

    def document(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "checks": [
                {
                    "check_id": "demo",
                    "claim": {
                        "specification": "spec/claim.txt",
                        "obligations": list(self.obligations),
                        "assumptions": ["arithmetic on small naturals"],
                        "model_scope": "one equation",
                    },
                    "assurance": "independent-checker",
                    "inputs": list(self.inputs),
                    "evidence_artifacts": list(self.artifacts),
                    "producer": {
                        "argv": ["{{python}}", str(self.producer_script), "{{request}}"],
                        "executable": self.pin(self.executable),
                        "dependencies": [self.pin(self.producer_script)],
                        "trusted_tool_dependencies": [self.pin(p) for p in self.producer_tools],
                    },
                    "checker": {
                        "argv": [
                            "{{python}}",
                            str(self.checker_script),
                            "{{request}}",
                            "{{receipt}}",
                        ],
                        "executable": self.pin(self.executable),
                        "dependencies": [self.pin(self.checker_script)]
                        + [self.pin(p) for p in self.checker_deps],
                        "trusted_tool_dependencies": [],
                    },
                }
            ],
        }

    def write_manifest(self, document: dict[str, Any] | None = None) -> None:
        self.manifest_path.write_text(json.dumps(document or self.document(), indent=1))

    def manifest(self) -> Manifest:
        return load_manifest(self.manifest_path, repository_root=self.repo)

    def entry(self) -> CheckEntry:
        return self.manifest().entry("demo")

    def run(
        self,
        run_id: str = "run-1",
        *,
        job: Job | None = None,
        entry: CheckEntry | None = None,
        producer_timeout: float = 30.0,
        checker_timeout: float = 30.0,
        **kwargs: Any,
    ) -> RunOutcome:
        kwargs.setdefault("max_containment", self.max_containment)
        return run_check(
            entry or self.entry(),
            job or self.job,
            repository_root=self.repo,
            manifest_path=self.manifest_path,
            run_root=self.run_root,
            run_id=run_id,
            limits=RunLimits(producer_timeout, checker_timeout),
            environment=default_environment(),
            **kwargs,
        )


def operator_config(run_dir: Path) -> dict[str, Path]:
    """The operator's manifest and repository: the Scenario's files above the run.

    Found from the test's own layout, never from anything the run recorded.
    """
    for folder in Path(run_dir).parents:
        if (folder / "manifest.json").is_file() and (folder / "repo").is_dir():
            return {"manifest_path": folder / "manifest.json", "repository_root": folder / "repo"}
    raise AssertionError(f"no Scenario above {run_dir}")


def replay_stored(run_dir: str | Path, replay_id: str = "replay-1", **kwargs: Any) -> RunOutcome:
    """``replay_run`` of a stored run with the operator's configuration (``kwargs`` override)."""
    return replay_run(
        Path(run_dir),
        **{**operator_config(Path(run_dir)), **kwargs},
        replay_id=replay_id,
        limits=RunLimits(30.0, 30.0),
        environment=default_environment(),
    )
