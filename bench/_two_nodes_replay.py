"""Sharded replay through the command line on the simulated two-node cluster (issue 36).

``python -m bench._two_nodes_replay [ATTEMPTS]`` (``make bench-two-nodes-replay``;
root, with ``unshare`` and, for the networks, ``ip``; default 1,000,000):

A draft stream of ATTEMPTS candidates (the shipped draft's four, repeated)
is sealed by ``kernel bundle --layout stream``, then classified twice by
``kernel replay``, each a fresh process:

- *two nodes*: ``--scheduler ADDRESS``, a real scheduler and two real
  workers, each in a mount namespace of its own (a private tmpfs over the
  scratch directory) and, where the machine allows it, a network namespace
  of its own joined by a veth pair (``tests/support/separate_workers.py``);
- *local*: ``--executor dask --workers 2``, the local cluster the command
  starts and stops (issue 22), for reference.

Reported per command: wall time, CPU and peak RSS from ``wait4``. With
``--scheduler`` the command starts no worker, so its peak RSS is the
driver's alone; the local run's includes its workers' (the largest child).
Both outcome streams must hold ATTEMPTS lines and be byte-identical.
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from bench._stream import _draft, _measured
from tests.support.separate_workers import can_make_networks, separate_workers


def main(attempts: int = 1_000_000) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-two-nodes-replay-") as scratch_name:
        scratch = Path(scratch_name)
        hidden = scratch / "hidden"  # what each worker sees as an empty tmpfs
        hidden.mkdir()
        cluster = scratch / "cluster"
        cluster.mkdir()
        draft = _draft(scratch, attempts)
        bundle = scratch / "bundle.jsonl"
        wall, cpu, rss, _ = _measured("bundle", draft, "--layout", "stream", "--out", bundle)
        draft.unlink()
        print(f"{attempts} attempts; kernel bundle --layout stream: {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU, peak RSS {rss / 1024:.0f} MiB")
        network = can_make_networks()
        rows: list[tuple[str, float, float, int]] = []
        out_nodes, out_local = scratch / "nodes.jsonl", scratch / "local.jsonl"
        with separate_workers(cluster, hidden, network=network) as address:
            wall, cpu, rss, _ = _measured("replay", bundle, "--quiet", "--out", out_nodes,
                                          "--scheduler", address)
            rows.append(("two nodes (--scheduler; driver only)", wall, cpu, rss))
        wall, cpu, rss, _ = _measured("replay", bundle, "--quiet", "--out", out_local,
                                      "--executor", "dask", "--workers", "2")
        rows.append(("local Dask of 2 (command + workers)", wall, cpu, rss))
        lines = sum(1 for _ in out_nodes.open("rb"))
        if lines != attempts or not filecmp.cmp(out_nodes, out_local, shallow=False):
            raise SystemExit(f"the two-node replay wrote {lines} lines for {attempts} attempts, "
                             "or its bytes differ from the local cluster's")
    print(f"kernel replay, workers with {'networks' if network else 'loopback'} of their own; "
          "outcome bytes identical")
    print(f"{'':40} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'CPU/attempt ms':>15}")
    for name, wall, cpu, rss in rows:
        print(f"{name:40} {wall:>8.1f} {cpu:>8.1f} {rss / 1024:>13.0f} "
              f"{cpu / attempts * 1000:>15.3f}")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
