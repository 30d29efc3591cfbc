"""Certifications on a simulated two-node cluster against a local Dask cluster (issue 36).

``python -m bench._two_nodes [CERTIFICATIONS] [ROUNDS]`` (``make bench-two-nodes``;
root, with ``unshare`` and, for the networks, ``ip``):

- *local*: ``kernel run --executor dask --workers 2`` (issue 22's local
  cluster, started and stopped by the command);
- *two nodes*: ``kernel run --executor dask --scheduler ADDRESS`` against a
  real scheduler and two real workers, each in a mount namespace of its own
  (a private tmpfs over the work directory's parent, so every record comes
  home through Dask, ADR 0022) and, where the machine allows it, a network
  namespace of its own joined by a veth pair (``tests/support/separate_workers.py``).
  The cluster is started once, as a real one would be running already.

Interleaved ROUNDS times in one process; the outcome bytes of every run are
compared. Reported: median wall times, the throughput ratio (local time /
two-node time; target at least 0.9), and the evidence transfer per
certification: the bytes of each landed attempt directory, and the time to
take its record, pickle it, unpickle it and land it (the driver's and the
worker's CPU on the way home, the network aside).
"""

from __future__ import annotations

import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._store import repeating_bundle
from kernel.audit import rederive_certification
from kernel.bundles import bundle_document
from kernel.orchestrate._attempt_record import land_record, take_record
from tests.support.separate_workers import can_make_networks, separate_workers

KERNEL = Path(sys.executable).parent / "kernel"
_LIMIT = 1 << 30


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(KERNEL), *argv], capture_output=True, check=False)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"kernel {' '.join(argv[:1])} failed ({done.returncode}): "
                         f"{done.stderr.decode()[-2000:]}")
    return took


def _transfer(work: Path, scratch: Path) -> tuple[list[int], list[float], list[float]]:
    """Per landed attempt directory: its bytes; the worker's side of bringing it home (take
    the record, pickle it); the driver's (unpickle, land, derive it again)."""
    sizes: list[int] = []
    worker: list[float] = []
    driver: list[float] = []
    for attempt in sorted(p for p in work.iterdir() if p.is_dir() and len(p.name) == 64):
        sizes.append(sum(f.stat().st_size for f in attempt.rglob("*") if f.is_file()))
        target = scratch / f"land-{len(sizes)}"
        target.mkdir()
        started = time.perf_counter()
        data = pickle.dumps(take_record(attempt, _LIMIT))
        taken = time.perf_counter()
        land_record(target, pickle.loads(data), attempt.name, _LIMIT)
        derived, reasons = rederive_certification(target / attempt.name)
        if derived is None or reasons:
            raise SystemExit(f"{attempt.name}: a landed copy does not derive: {reasons}")
        worker.append(taken - started)
        driver.append(time.perf_counter() - taken)
    return sizes, worker, driver


def main(certifications: int = 200, rounds: int = 2) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-two-nodes-") as scratch_name:
        scratch = Path(scratch_name)
        shared = scratch / "shared"
        shared.mkdir()
        bundle = scratch / "bundle.json"
        bundle.write_bytes(bundle_document(repeating_bundle(tuple(range(certifications)))))
        cluster = scratch / "cluster"
        cluster.mkdir()
        local: list[float] = []
        nodes: list[float] = []
        network = can_make_networks()
        with separate_workers(cluster, shared, network=network) as address:
            for index in range(rounds):
                out_l, out_n = scratch / f"l{index}.jsonl", scratch / f"n{index}.jsonl"
                local.append(_timed(["run", str(bundle), "--work-dir", str(shared / f"L{index}"),
                                     "-q", "-o", str(out_l), "--executor", "dask",
                                     "--workers", "2"]))
                nodes.append(_timed(["run", str(bundle), "--work-dir", str(shared / f"N{index}"),
                                     "-q", "-o", str(out_n), "--executor", "dask",
                                     "--scheduler", address]))
                if out_l.read_bytes() != out_n.read_bytes():
                    raise SystemExit("the two clusters' outcome bytes differ")
        sizes, worker, driver = _transfer(shared / "N0", scratch)
    lo, no = statistics.median(local), statistics.median(nodes)
    print(f"kernel run, {certifications} certifications, {rounds} interleaved rounds "
          f"(two-node workers with {'networks' if network else 'loopback'} of their own)")
    print(f"  local Dask cluster of 2 (started by the command): median {lo:.1f} s "
          f"({', '.join(f'{t:.1f}' for t in local)})")
    print(f"  two nodes, no shared file system:              median {no:.1f} s "
          f"({', '.join(f'{t:.1f}' for t in nodes)})")
    print(f"  throughput, two nodes against local: {lo / no:.2f}x (target >= 0.9)")
    print(f"  evidence transfer per certification: {statistics.median(sizes) / 1024:.1f} KiB "
          f"median (max {max(sizes) / 1024:.1f} KiB, {len(sizes)} records)")
    print(f"    worker side (take the record, pickle): {statistics.median(worker) * 1000:.1f} ms "
          f"median; driver side (unpickle, land, derive again): "
          f"{statistics.median(driver) * 1000:.1f} ms median")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:3]))
