"""A compromised worker's coherent forgery, and the driver that re-checks (issue 36, deliverable 2).

The two workers here run the kernel with two of its sealed scripts swapped
at launch (``dask worker --preload``): the producer writes evidence that
poses nothing (``(assert false)``) and claims ``unsat``, and the checker
accepts whatever it is given. The worker's kernel writes every record
around that itself: the real pins, digests that agree, a receipt that the
receipt rules accept. Deriving the returned record again on the driver
cannot tell (ADR 0022): without ``--recheck-returned`` the forgery counts,
and the attempts close with evidence no checker ever accepted. With it, the
driver's own pinned checker replays the returned evidence and rejects it:
no forged attempt closes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN
from tests.support.separate_workers import can_make_networks, can_unshare, separate_workers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_unshare(), reason="needs root and unshare -m (a mount namespace)"),
]

BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"

# Run by each worker as it starts: the sealed script copies of both steps are
# replaced, after the kernel has hashed and pinned the real ones.
_COMPROMISE = textwrap.dedent('''
    import os
    import attrs
    from kernel.external import _steps

    PRODUCER = """
    import json, os, sys
    request = json.load(open(sys.argv[-1]))
    evidence = request["paths"]["evidence"]
    names = request["claim"]["obligations"]
    for name in names:
        open(os.path.join(evidence, name + ".smt2"), "w").write("(assert false)\\\\n")
    open(os.path.join(evidence, "z3-answer.txt"), "w").write(
        "".join(name + " unsat\\\\n" for name in names))
    """
    CHECKER = """
    import json, sys
    request = json.load(open(sys.argv[1]))
    keys = ("job_id", "run_id", "check_id", "check_digest", "specification_digest",
            "identity", "evidence_digest")
    receipt = {key: request[key] for key in keys}
    receipt.update(schema_version=1, verdict="accepted", obligations=[
        {"name": n, "result": "accepted", "evidence": [n + ".smt2", "z3-answer.txt"]}
        for n in request["claim"]["obligations"]])
    json.dump(receipt, open(sys.argv[2], "w"), sort_keys=True)
    """
    # Dask may load a preload twice: patch the kernel's own function, once.
    real = getattr(_steps, "_real_sealed_command", _steps._sealed_command)
    _steps._real_sealed_command = real

    def forged(role, command, argv, attempt):
        executable, rewritten, scripts = real(role, command, argv, attempt)
        fd = os.memfd_create("forged")
        os.write(fd, (PRODUCER if role.value == "producer" else CHECKER).encode())
        os.lseek(fd, 0, os.SEEK_SET)
        old = f"/dev/fd/{scripts[0].fd}"
        rewritten = tuple(f"/dev/fd/{fd}" if a == old else a for a in rewritten)
        return executable, rewritten, (attrs.evolve(scripts[0], fd=fd), *scripts[1:])

    _steps._sealed_command = forged
''')


def _kernel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, text=True, timeout=600, check=False)


def _closed(path: Path) -> set[str]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {line["attempt_id"] for line in lines
            if line["outcome"]["replay_disposition"] == "contract_and_proof_closed"}


def test_a_coherent_forgery_counts_unless_the_driver_rechecks_and_then_it_never_does(
    tmp_path: Path,
) -> None:
    inline = tmp_path / "inline.jsonl"
    done = _kernel("run", BUNDLE, "--work-dir", tmp_path / "inline-W", "-q", "-o", inline)
    assert done.returncode == 3, done.stderr  # the e2e bundle holds a tampered attempt
    honest = _closed(inline)
    assert len(honest) == 2
    preload = tmp_path / "compromise.py"
    preload.write_text(_COMPROMISE)
    shared = tmp_path / "shared"
    shared.mkdir()
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    trusting, rechecking = tmp_path / "trusting.jsonl", tmp_path / "rechecking.jsonl"
    with separate_workers(cluster, shared, preload, network=can_make_networks()) as address:
        dask = ("--executor", "dask", "--scheduler", address)
        trusted = _kernel("run", BUNDLE, *dask, "--work-dir", shared / "T",
                          "-o", trusting)
        rechecked = _kernel("run", BUNDLE, *dask, "--recheck-returned",
                            "--work-dir", shared / "R", "-o", rechecking)
    # The attack is real: the worker's records derive, and the forgery closes attempts.
    assert trusted.returncode == 3, trusted.stderr
    assert _closed(trusting) == honest, trusted.stderr
    forged_evidence = [p.read_text() for p in (shared / "T").glob("*/run/evidence/*.smt2")]
    assert forged_evidence and set(forged_evidence) == {"(assert false)\n"}
    # Re-checked on the driver, none of it counts.
    assert rechecked.returncode == 3, rechecked.stderr
    assert not _closed(rechecking), rechecking.read_text()
    notes = rechecked.stderr
    assert notes.count("the driver's own checker did not accept it") == 3, notes
    # What the driver's checker said is kept with the attempt, and audits.
    replays = sorted((shared / "R").glob("*/run/replays/driver-recheck/metadata.json"))
    assert len(replays) == 3
    assert {json.loads(p.read_bytes())["status"] for p in replays} == {"BLOCKED"}
    # Audit (and so --resume) derive no certification from a rejected recheck either:
    # the outcomes recorded without that evidence are what the records give.
    audited = _kernel("audit", shared / "R", "--outcomes", rechecking, "--bundle", BUNDLE)
    assert audited.returncode == 0, audited.stdout + audited.stderr
