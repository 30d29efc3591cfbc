"""A signed summary never says more than the run (issue 35, finding 1).

``kernel attest`` once defaulted to ``--fail-on integrity,unavailable`` where
``kernel run`` defaults to ``unclassified``: a run that exited 1 with nothing
certified got a signed SLSA summary saying PASSED. Here, for every
``--fail-on`` choice and for none, on the same stored runs, the summary is
PASSED exactly when ``kernel run`` with that ``--fail-on`` exited 0. The runs:
the shipped draft sealed for ``builtin.v1`` (every obligation unsupported by
kernel run's manifest: nothing certified), and the replay scenario (one
attempt tampered with).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from kernel.commands._verdict import FailOn
from tests.support.cli import kernel

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
TAMPERED = ROOT / "examples" / "replay" / "bundle.json"
CHOICES = [None, *(c.value for c in FailOn)]


@pytest.fixture(scope="module")
def builtin_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "marbles-builtin.json"
    done = kernel("bundle", DRAFT, "--manifest", "builtin.v1", "-o", out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("keys")
    done = kernel("attest-keygen", base / "signer.pem", base / "signer.pub")
    assert done.returncode == 0, done.stderr
    return base / "signer.pem"


def _summary_result(work: Path) -> str:
    envelope = json.loads((work / "verification-summary.dsse.json").read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    result = statement["predicate"]["verificationResult"]
    assert isinstance(result, str)
    return result


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: c or "default")
@pytest.mark.parametrize("which", ["unsupported", "tampered"])
def test_the_summary_passes_exactly_when_kernel_run_exits_0(
    tmp_path: Path, builtin_bundle: Path, key: Path, choice: str | None, which: str
) -> None:
    bundle = builtin_bundle if which == "unsupported" else TAMPERED
    policy = () if choice is None else ("--fail-on", choice)
    work = tmp_path / "work"
    ran = kernel("run", bundle, "--work-dir", work, "-o", tmp_path / "out.jsonl", "-q", *policy)
    assert ran.returncode in (0, 1, 3), ran.stderr
    attested = kernel("attest", work, "--key", key, *policy)
    assert attested.returncode == 0, attested.stderr
    assert _summary_result(work) == ("PASSED" if ran.returncode == 0 else "FAILED"), (
        choice, ran.returncode, ran.stderr)


def test_the_failed_run_of_the_finding_is_failed_by_default(
    tmp_path: Path, builtin_bundle: Path, key: Path
) -> None:
    # The finding itself: exit 1, nothing certified, and the default summary said PASSED.
    work = tmp_path / "work"
    ran = kernel("run", builtin_bundle, "--work-dir", work, "-o", tmp_path / "out.jsonl", "-q")
    assert ran.returncode == 1, ran.stderr
    assert kernel("attest", work, "--key", key).returncode == 0
    assert _summary_result(work) == "FAILED"
