"""External checks: ``kernel check run`` against two ``in-toto-run`` steps (issue 10, item 5).

    python -m bench._external [--rounds 7]
    python -m bench._external --quick        # 3 rounds, fewer in-process runs: < 1 minute

Both sides run the same producer and checker scripts on the same ten 1 MiB
inputs, interleaved round by round (kernel, in-toto, in-toto, kernel, ...):

- kernel: one ``kernel check run`` process (contained steps, at the strongest
  level this machine gives; pins, snapshot, evidence, receipt validation);
- in-toto: ``in-toto-run`` for the producer (materials: the inputs; products:
  the evidence) then ``in-toto-run`` for the checker (materials: inputs and
  evidence; products: the receipt), each signing its link with an ed25519 key.

Reported per side: median wall time and median CPU of the whole process tree
(``RUSAGE_CHILDREN``), and the kernel/in-toto ratio of each (< 1: the kernel is
cheaper). Separately, the kernel's in-process CPU for one ``run_check`` beyond
its two launches: the run's own CPU (``RUSAGE_SELF``) in-process, with the
scripts' CPU excluded by construction, with the ten 1 MiB inputs (copied
by the kernel and hashed once; the checks after each step compare stat
fingerprints, ADR 0009 "Lean steps") and with one 1 KiB input (the fixed
part). And the kernel CLI's start-up, which is
most of the whole-process difference. Then the split of that in-process
CPU by step (pins and identity, snapshot copy, checks after each step, the
launches' own in-process part: fork, exec, output drain and wait, file
writes including the one commit point, ...), the bytes the attempt's
``FileLedger`` read to hash, the ``fsync`` calls, and the hash floor (copying
and hashing the inputs once, with nothing else). Needs ``in-toto``
(``>=3,<4``, in the ``dev`` extra); without it the comparison says it was
skipped.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from rich.console import Console

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

INPUTS: Final = 10
INPUT_BYTES: Final = 1024 * 1024

PRODUCER: Final = """
import hashlib, json, os, sys
request = json.load(open(sys.argv[1]))
root = request["paths"]["snapshot"]
digest = hashlib.sha256()
for name in sorted(os.listdir(os.path.join(root, "data"))):
    digest.update(open(os.path.join(root, "data", name), "rb").read())
with open(os.path.join(request["paths"]["evidence"], "proof.txt"), "w") as handle:
    handle.write(digest.hexdigest() + "\\n")
"""

CHECKER: Final = """
import json, sys
request = json.load(open(sys.argv[1]))
receipt = {
    "schema_version": 1, "job_id": request["job_id"], "run_id": request["run_id"],
    "check_id": request["check_id"], "check_digest": request["check_digest"],
    "specification_digest": request["specification_digest"],
    "identity": request["identity"], "evidence_digest": request["evidence_digest"],
    "verdict": "accepted",
    "obligations": [
        {"name": name, "result": "accepted", "evidence": ["proof.txt"]}
        for name in request["claim"]["obligations"]
    ],
}
with open(sys.argv[2], "w") as handle:
    json.dump(receipt, handle)
"""


def _pin(path: Path) -> dict[str, str]:
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


class Workbench:
    """Scripts, a repository with ten 1 MiB inputs, a manifest, a job and a signing key."""

    def __init__(self, root: Path, inputs: int = INPUTS, input_bytes: int = INPUT_BYTES) -> None:
        self.root = root
        self.repo = root / "repo"
        (self.repo / "data").mkdir(parents=True)
        (self.repo / "spec.txt").write_text("claim: the inputs hash as the proof says\n")
        for index in range(inputs):
            (self.repo / "data" / f"input-{index}.bin").write_bytes(os.urandom(input_bytes))
        self.producer = root / "producer.py"
        self.producer.write_text(PRODUCER)
        self.checker = root / "checker.py"
        self.checker.write_text(CHECKER)
        python = Path(sys.executable)
        declared = [f"data/input-{index}.bin" for index in range(inputs)]
        entry = {
            "check_id": "bench",
            "claim": {
                "specification": "spec.txt",
                "obligations": ["inputs_hashed"],
                "assumptions": ["none"],
                "model_scope": "ten files",
            },
            "assurance": "benchmark",
            "inputs": declared,
            "evidence_artifacts": ["proof.txt"],
            "producer": {
                "argv": ["{{python}}", str(self.producer), "{{request}}"],
                "executable": _pin(python),
                "dependencies": [_pin(self.producer)],
                "trusted_tool_dependencies": [],
            },
            "checker": {
                "argv": ["{{python}}", str(self.checker), "{{request}}", "{{receipt}}"],
                "executable": _pin(python),
                "dependencies": [_pin(self.checker)],
                "trusted_tool_dependencies": [],
            },
        }
        self.manifest = root / "manifest.json"
        self.manifest.write_text(json.dumps({"schema_version": 1, "checks": [entry]}))
        from kernel.external import seal_job
        from kernel.serde import dumps

        self.job = root / "job.json"
        self.job.write_bytes(dumps(seal_job("bench-1", "bench", "benchmark job")))
        self.key = root / "signing-key.pem"
        self._write_key()
        self.round = 0
        self.copy_cpu: list[float] = []  # the in-toto side's snapshot copies, in this process

    def _write_key(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self.key.write_bytes(pem)

    def kernel(self, level: str | None = None) -> None:
        self.round += 1
        capped = ("--max-containment", level) if level is not None else ()
        done = subprocess.run(
            [str(Path(sys.executable).parent / "kernel"), "check", "run", str(self.manifest),
             "bench", "--job", str(self.job), "--run-root", str(self.root / "runs"),
             "--run-id", f"k{self.round}", "--repo", str(self.repo), *capped],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"kernel check run failed: {done.stderr.decode()}")

    def in_toto(self) -> None:
        self.round += 1
        work = self.root / "toto" / str(self.round)
        snapshot = work / "snapshot"
        start = _self_cpu()
        shutil.copytree(self.repo, snapshot)  # the kernel copies its snapshot too
        self.copy_cpu.append(_self_cpu() - start)
        evidence = work / "evidence"
        evidence.mkdir()
        request = {
            "job_id": "bench-1", "run_id": f"t{self.round}", "check_id": "bench",
            "check_digest": "0" * 64, "specification_digest": "0" * 64, "identity": {},
            "evidence_digest": "0" * 64, "claim": {"obligations": ["inputs_hashed"]},
            "paths": {"snapshot": str(snapshot), "evidence": str(evidence)},
        }  # fmt: skip
        (work / "request.json").write_text(json.dumps(request))
        tool = str(Path(sys.executable).parent / "in-toto-run")
        common = ["--signing-key", str(self.key), "--base-path", str(work)]
        steps = [
            [tool, "-n", "produce", *common, "-m", "snapshot", "-p", "evidence", "--",
             sys.executable, str(self.producer), str(work / "request.json")],
            [tool, "-n", "check", *common, "-m", "snapshot", "evidence", "-p", "receipt.json",
             "--", sys.executable, str(self.checker), str(work / "request.json"),
             str(work / "receipt.json")],
        ]  # fmt: skip
        for argv in steps:
            done = subprocess.run(
                argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"in-toto-run failed: {done.stderr.decode()}")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(action: object) -> tuple[float, float]:
    assert callable(action)
    wall, cpu = time.perf_counter(), _children_cpu()
    action()
    return time.perf_counter() - wall, _children_cpu() - cpu


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# The split: the steps of run_check, each timed in CPU (this process, all its
# threads: the output drain of a launch counts in "launch"), nested calls
# subtracted from their caller. Names are looked up in these modules.
_SPLIT: Final = {
    "identity and pins (first read of every pinned file, sealed copies)": ("build_identity",),
    "snapshot copy (inputs copied by the kernel, each copy hashed once)": ("freeze_snapshot",),
    "checks after the steps (snapshot, evidence, pins: fingerprints)": (
        "verify_snapshot",
        "hash_evidence",
        "recheck_pins",
    ),
    "launches, in-process part (fork/exec, drain, wait)": ("run_process",),
    "file writes (job, identity, requests, logs; metadata commit with fsync)": (
        "write_atomic",
        "write_new",
        "write_json_new",
    ),
    "requests and receipt (build, validate)": ("request_object", "validate_receipt"),
    "attempt directory, job, containment choice": (
        "fresh_attempt",
        "check_job",
        "choose_containment",
    ),
}

_F = TypeVar("_F", bound=Callable[..., object])


@contextlib.contextmanager
def _split_cpu(totals: dict[str, float], counts: collections.Counter[str]) -> Iterator[None]:
    """Wrap the steps of ``_SPLIT`` (and ``os.fsync``, counted) for the duration."""
    import kernel.external._files as files_module
    import kernel.external._run as run_module
    import kernel.external._steps as steps_module

    modules = (run_module, steps_module, files_module)
    nested: list[float] = []
    saved: list[tuple[object, str, object]] = []

    def wrap(label: str, function: _F) -> _F:
        @functools.wraps(function)
        def timed(*args: object, **kwargs: object) -> object:
            start = _self_cpu()
            nested.append(0.0)
            try:
                return function(*args, **kwargs)
            finally:
                inner = nested.pop()
                spent = _self_cpu() - start
                totals[label] = totals.get(label, 0.0) + spent - inner
                if nested:
                    nested[-1] += spent

        return timed  # type: ignore[return-value]  # same signature, wrapped

    for label, names in _SPLIT.items():
        for module in modules:
            for name in names:
                if hasattr(module, name):
                    saved.append((module, name, getattr(module, name)))
                    setattr(module, name, wrap(label, getattr(module, name)))
    fsync = os.fsync
    ledger_sha256 = files_module.FileLedger.sha256

    def counted_fsync(fd: FileDescriptorLike) -> None:
        counts["fsync"] += 1
        fsync(fd)

    def counted_sha256(
        self: files_module.FileLedger,
        path: Path | str,
        *,
        follow_symlinks: bool,
        stop: files_module.StopWhen | None = None,
    ) -> str:
        before = self.hashed_bytes
        try:
            return ledger_sha256(self, path, follow_symlinks=follow_symlinks, stop=stop)
        finally:
            counts["hashed"] += self.hashed_bytes - before

    os.fsync = counted_fsync
    files_module.FileLedger.sha256 = counted_sha256  # type: ignore[method-assign]  # counted
    try:
        yield
    finally:
        os.fsync = fsync
        files_module.FileLedger.sha256 = ledger_sha256  # type: ignore[method-assign]  # restored
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


class InProcess:
    """``run_check`` in this process: CPU per run, its split, bytes hashed, fsyncs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.split: dict[str, float] = {}  # running totals while a split run is wrapped
        self.split_runs: list[dict[str, float]] = []  # each split run's own parts
        self.counts: collections.Counter[str] = collections.Counter()


def in_process_overhead(
    bench: Workbench, runs: int, *, split: bool = False, into: InProcess | None = None
) -> InProcess:
    """CPU of ``run_check`` in this process, per run (the scripts run elsewhere).

    With ``split``, the steps are wrapped (``_split_cpu``): the CPU of each,
    the fsync calls and the bytes the attempts' ledgers read to hash.
    """
    from kernel.external import RunLimits, default_environment, load_job, load_manifest, run_check

    entry = load_manifest(bench.manifest, repository_root=bench.repo).entry("bench")
    job = load_job(bench.job)
    result = into if into is not None else InProcess()
    with contextlib.ExitStack() as stack:
        if split:
            stack.enter_context(_split_cpu(result.split, result.counts))
        for _ in range(runs):
            index = len(result.samples)
            start = _self_cpu()
            outcome = run_check(
                entry,
                job,
                repository_root=bench.repo,
                manifest_path=bench.manifest,
                run_root=bench.root / "inproc",
                run_id=f"i{index}-{'s' if split else 'p'}",
                limits=RunLimits(60.0, 60.0),
                environment=default_environment(),
            )
            result.samples.append(_self_cpu() - start)
            if split:
                result.split_runs.append(dict(result.split))
                result.split.clear()
            if outcome.status.value != "PASS":
                detail = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
                raise SystemExit(f"run_check did not pass: {detail['detail']}")
    return result


def hash_floor(bench: Workbench, runs: int, *, first: int = 0) -> list[float]:
    """CPU of the work a snapshot cannot avoid, done bare: copy each input (the
    kernel's fast copy, ``shutil.copyfile``) and hash the copy once."""
    samples: list[float] = []
    sources = [*sorted((bench.repo / "data").iterdir()), bench.repo / "spec.txt"]
    buffer = bytearray(1024 * 1024)
    view = memoryview(buffer)
    for index in range(first, first + runs):
        target = bench.root / "floor" / str(index)
        target.mkdir(parents=True)
        start = _self_cpu()
        for source in sources:
            copy = shutil.copyfile(source, target / source.name)
            hasher = hashlib.sha256()
            with open(copy, "rb", buffering=0) as reader:
                while count := reader.readinto(buffer):
                    hasher.update(view[:count])
            hasher.hexdigest()
        samples.append(_self_cpu() - start)
    return samples


def _import_cli() -> None:
    subprocess.run([sys.executable, "-c", "import kernel.cli"], check=True)


def _ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.1f} ms "
        f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"
    )


def report(console: Console, rounds: int, *, quick: bool = False) -> list[str]:
    """Measure, print and return the result lines."""
    if shutil.which("in-toto-run", path=str(Path(sys.executable).parent)) is None:
        line = "external: skipped (in-toto-run not installed: pip install 'in-toto>=3,<4')"
        console.print(line)
        return [line]
    from kernel.external import available_level

    with tempfile.TemporaryDirectory(prefix="bench-external-") as folder:
        bench = Workbench(Path(folder))
        bench.kernel()  # warm the page cache and the kernel's imports once
        bench.in_toto()
        kernel: list[tuple[float, float]] = []
        toto: list[tuple[float, float]] = []
        namespace: list[tuple[float, float]] = []

        def below_sandbox() -> None:
            bench.kernel("namespace")

        for index in range(rounds):
            trio = (
                (bench.kernel, kernel), (bench.in_toto, toto), (below_sandbox, namespace)
            )  # fmt: skip
            rotated = trio[index % 3 :] + trio[: index % 3]
            for action, samples in rotated:
                samples.append(_timed(action))
        runs = 3 if quick else max(5, rounds)
        small = Workbench(Path(folder) / "small", inputs=1, input_bytes=1024)
        time.sleep(2.1)  # the inputs and scripts settle (ADR 0009, "Lean steps")
        # Interleaved like the rounds above: each of the four measures once per round.
        inproc, fixed, split = InProcess(), InProcess(), InProcess()
        floor: list[float] = []
        for _ in range(runs):
            in_process_overhead(bench, 1, into=inproc)
            floor.extend(hash_floor(bench, 1, first=len(floor)))
            in_process_overhead(small, 1, into=fixed)
            in_process_overhead(bench, 1, split=True, into=split)
        startup = [_timed(_import_cli) for _ in range(rounds)]
    level = available_level()
    ratios_cpu = [k[1] / t[1] for k, t in zip(kernel, toto, strict=True)]
    ratios_wall = [k[0] / t[0] for k, t in zip(kernel, toto, strict=True)]
    # What the sandbox itself costs (ADR 0018): the same check capped at namespace.
    sandbox_cpu = [k[1] / n[1] for k, n in zip(kernel, namespace, strict=True)]
    sandbox_wall = [k[0] / n[0] for k, n in zip(kernel, namespace, strict=True)]
    copies = bench.copy_cpu[1:]  # the first one is the warm-up round's
    with_copy = [k[1] / (t[1] + c) for k, t, c in zip(kernel, toto, copies, strict=True)]
    lines = [
        f"external ({INPUTS} x {INPUT_BYTES // 1024} KiB inputs, containment "
        f"{level.value if level else 'none'}, {rounds} rounds):",
        f"  kernel check run: wall {statistics.median(k[0] for k in kernel) * 1000:.0f} ms, "
        f"cpu {statistics.median(k[1] for k in kernel) * 1000:.0f} ms (whole process tree)",
        f"  sandbox / namespace (the same kernel check run capped at namespace): cpu "
        f"{statistics.median(sandbox_cpu):.2f}x (min {min(sandbox_cpu):.2f}, max "
        f"{max(sandbox_cpu):.2f}), wall {statistics.median(sandbox_wall):.2f}x",
        f"  two in-toto-run steps: wall {statistics.median(t[0] for t in toto) * 1000:.0f} ms, "
        f"cpu {statistics.median(t[1] for t in toto) * 1000:.0f} ms",
        f"  kernel / in-toto: cpu {statistics.median(ratios_cpu):.2f}x "
        f"(min {min(ratios_cpu):.2f}, max {max(ratios_cpu):.2f}), "
        f"wall {statistics.median(ratios_wall):.2f}x",
        f"  the in-toto side's snapshot copy (shutil.copytree in this process, not counted "
        f"above): cpu {statistics.median(bench.copy_cpu) * 1000:.0f} ms; kernel / (in-toto + "
        f"that copy): cpu "
        f"{statistics.median(with_copy):.2f}x",
        f"  of which the kernel CLI's start-up (python -c 'import kernel.cli'): cpu "
        f"{statistics.median(c for _, c in startup) * 1000:.0f} ms; kernel / in-toto without "
        f"it: cpu {_without(kernel, toto, statistics.median(c for _, c in startup)):.2f}x",
        f"  run_check in-process cpu per run (beyond the launched processes): "
        f"{_ms(inproc.samples)}; with one 1 KiB input: {_ms(fixed.samples)}",
        f"  hash floor (copy the {INPUTS} inputs and hash each copy once, nothing else): "
        f"{_ms(floor)}; "
        f"in-process beyond it (same round): median "
        f"{statistics.median(i - f for i, f in zip(inproc.samples, floor, strict=True)) * 1000:.1f}"
        " ms",
        f"  per run: {split.counts['hashed'] // len(split.samples):,} bytes read by the "
        f"attempt's ledger to hash (first reads of the evidence and of pins that are not "
        f"sealed copies, and any check whose fingerprint changed or is not trusted; the "
        f"{INPUTS * INPUT_BYTES:,} input bytes are hashed once, from their copies); "
        f"{split.counts['fsync'] // len(split.samples)} fsync calls",
        f"  split of the in-process cpu, median per run of each part ({len(split.samples)} "
        f"runs, total {statistics.median(split.samples) * 1000:.1f} ms median):",
    ]
    parts = {
        label: statistics.median(run.get(label, 0.0) for run in split.split_runs)
        for label in _SPLIT
    }
    for label, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        lines.append(f"    {seconds * 1000:6.2f} ms  {label}")
    rest = statistics.median(
        total - sum(run.values())
        for total, run in zip(split.samples, split.split_runs, strict=True)
    )
    lines.append(
        f"    {rest * 1000:6.2f} ms  the rest (driver, metadata, pathlib...: total minus parts)"
    )
    for line in lines:
        console.print(line)
    return lines


def _without(
    kernel: list[tuple[float, float]], toto: list[tuple[float, float]], startup: float
) -> float:
    return statistics.median((k[1] - startup) / t[1] for k, t in zip(kernel, toto, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._external", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument(
        "--quick", action="store_true", help="3 rounds and 3 in-process runs (under a minute)"
    )
    args = parser.parse_args(argv)
    report(Console(soft_wrap=True), 3 if args.quick else args.rounds, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
