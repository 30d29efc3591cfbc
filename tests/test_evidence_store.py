"""The evidence store (ADR-0019): content keys, verified hits, every corruption a miss.

The store is untrusted input: each test damages it the way a hostile or
crashed writer would and checks that ``load`` answers a ``Miss`` with its
reason (never evidence, never an exception), and that an insert afterwards
repairs it. Keys and entry documents are recomputed with
``tests.support.reference``. Concurrency and SIGKILL use real processes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel.orchestrate import EvidenceStore, Hit, InsertResult, Miss, MissReason, store_key
from tests.support.reference import canonical, sha

CONTENT = hashlib.sha256(b"a check, its pins by content").hexdigest()
PROBLEM = hashlib.sha256(b"(check-sat)\n").hexdigest()
DECLARED = ("target_certified.smt2", "z3-answer.txt")
ARTIFACTS = {
    "target_certified.smt2": b"(check-sat)\n",
    "z3-answer.txt": b"target_certified unsat\n",
}
KEY = store_key(CONTENT, PROBLEM)


def _stored(tmp_path: Path) -> EvidenceStore:
    store = EvidenceStore(tmp_path / "store")
    inserted = store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    )
    assert inserted is InsertResult.STORED
    return store


def _entry(store: EvidenceStore) -> Path:
    return store.root / "entries" / KEY


def _miss(store: EvidenceStore, reason: MissReason) -> None:
    found = store.load(KEY, DECLARED)
    assert isinstance(found, Miss), found
    assert found.reason is reason, found
    assert found.corrupt is (reason is not MissReason.ABSENT)


def test_the_key_is_the_content_and_nothing_else() -> None:
    expected = sha(
        {"check_content_digest": CONTENT, "specification_digest": PROBLEM, "store_version": 1}
    )
    assert expected == KEY
    assert store_key(CONTENT, PROBLEM.replace("a", "b", 1)) != KEY


def test_miss_insert_hit(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "store")
    _miss(store, MissReason.ABSENT)
    store = _stored(tmp_path)
    found = store.load(KEY, DECLARED)
    assert isinstance(found, Hit)
    assert found.evidence == ARTIFACTS
    document = json.loads((_entry(store) / "entry.json").read_bytes())
    assert (_entry(store) / "entry.json").read_bytes() == canonical(document) + b"\n"
    assert document == {
        "artifacts": [
            {"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
            for n, d in sorted(ARTIFACTS.items())
        ],
        "check_content_digest": CONTENT,
        "key": KEY,
        "specification_digest": PROBLEM,
        "store_version": 1,
    }
    # The same evidence again: present, nothing rewritten.
    again = store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    )
    assert again is InsertResult.PRESENT
    assert not any((store.root / "tmp").iterdir())
    # Another check's declared artifact list never takes this entry.
    _miss_declared = store.load(KEY, ("z3-answer.txt",))
    assert isinstance(_miss_declared, Miss)
    assert _miss_declared.reason is MissReason.ARTIFACTS_NOT_DECLARED


def test_an_insert_under_a_key_not_its_content_is_refused(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "store")
    wrong = store_key(CONTENT, CONTENT)
    assert store.insert(
        wrong, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    ) is InsertResult.FAILED
    assert not (store.root / "entries" / wrong).exists()


def _flip(entry: Path) -> None:
    path = entry / "artifacts" / "z3-answer.txt"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def _truncate(entry: Path) -> None:
    path = entry / "artifacts" / "z3-answer.txt"
    path.write_bytes(path.read_bytes()[:-3])


def _swap_artifacts(entry: Path) -> None:
    a, b = (entry / "artifacts" / name for name in DECLARED)
    first, second = a.read_bytes(), b.read_bytes()
    a.write_bytes(second)
    b.write_bytes(first)


def _same_size_forgery(entry: Path) -> None:
    path = entry / "artifacts" / "z3-answer.txt"
    path.write_bytes(b"target_certified sat  \n")
    assert len(path.read_bytes()) == len(ARTIFACTS["z3-answer.txt"])


def _garbage_entry(entry: Path) -> None:
    (entry / "entry.json").write_bytes(b"{\"key\": ")


def _other_key(entry: Path) -> None:
    document = json.loads((entry / "entry.json").read_bytes())
    document["key"] = "0" * 64
    (entry / "entry.json").write_bytes(canonical(document))


def _extra_field(entry: Path) -> None:
    document = json.loads((entry / "entry.json").read_bytes())
    document["status"] = "PASS"
    (entry / "entry.json").write_bytes(canonical(document))


def _artifact_symlink(entry: Path) -> None:
    path = entry / "artifacts" / "z3-answer.txt"
    target = entry.parent.parent / "elsewhere.txt"
    target.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(target)


def _artifact_fifo(entry: Path) -> None:
    path = entry / "artifacts" / "z3-answer.txt"
    path.unlink()
    os.mkfifo(path)


def _artifact_missing(entry: Path) -> None:
    (entry / "artifacts" / "z3-answer.txt").unlink()


def _undeclared(entry: Path) -> None:
    (entry / "artifacts" / "sitecustomize.py").write_bytes(b"print('planted')\n")


def _entry_json_dir(entry: Path) -> None:
    (entry / "entry.json").unlink()
    (entry / "entry.json").mkdir()


def _entry_symlink(entry: Path) -> None:
    moved = entry.parent.parent / "moved"
    entry.rename(moved)
    entry.symlink_to(moved)


CORRUPTIONS = {
    "flipped byte": (_flip, MissReason.ARTIFACT_DIGEST),
    "truncated artifact": (_truncate, MissReason.ARTIFACT_SIZE),
    "swapped artifacts": (_swap_artifacts, MissReason.ARTIFACT_SIZE),
    "same-size forgery": (_same_size_forgery, MissReason.ARTIFACT_DIGEST),
    "garbage entry.json": (_garbage_entry, MissReason.MALFORMED),
    "entry.json of another key": (_other_key, MissReason.KEY_MISMATCH),
    "extra field in entry.json": (_extra_field, MissReason.MALFORMED),
    "artifact symlink": (_artifact_symlink, MissReason.ARTIFACT_UNREADABLE),
    "artifact fifo": (_artifact_fifo, MissReason.ARTIFACT_UNREADABLE),
    "artifact missing": (_artifact_missing, MissReason.UNDECLARED_FILE),
    "undeclared file": (_undeclared, MissReason.UNDECLARED_FILE),
    "entry.json a directory": (_entry_json_dir, MissReason.NOT_REGULAR),
    "entry a symlink": (_entry_symlink, MissReason.NOT_REGULAR),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_each_corruption_is_a_reported_miss_and_an_insert_repairs_it(
    name: str, tmp_path: Path
) -> None:
    corrupt, reason = CORRUPTIONS[name]
    store = _stored(tmp_path)
    corrupt(_entry(store))
    _miss(store, reason)
    repaired = store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    )
    assert repaired is InsertResult.STORED
    found = store.load(KEY, DECLARED)
    assert isinstance(found, Hit) and found.evidence == ARTIFACTS
    assert any((store.root / "quarantine").iterdir())


def test_other_evidence_for_the_same_key_is_a_conflict_and_never_mixed(tmp_path: Path) -> None:
    store = _stored(tmp_path)
    other = {**ARTIFACTS, "z3-answer.txt": b"target_certified unsat (run 2)\n"}
    assert store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=other
    ) is InsertResult.CONFLICT
    found = store.load(KEY, DECLARED)
    assert isinstance(found, Hit) and found.evidence == ARTIFACTS


def _insert_in_child(root: str, start: float) -> str:
    while time.monotonic() < start:
        pass
    store = EvidenceStore(Path(root))
    return store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    ).value


def test_concurrent_writers_publish_one_entry(tmp_path: Path) -> None:
    root = tmp_path / "store"
    context = multiprocessing.get_context("spawn")
    with context.Pool(6) as pool:
        start = time.monotonic() + 2.0
        results = pool.starmap(_insert_in_child, [(str(root), start)] * 12)
    assert results.count("stored") == 1, results
    assert set(results) <= {"stored", "present"}, results
    found = EvidenceStore(root).load(KEY, DECLARED)
    assert isinstance(found, Hit) and found.evidence == ARTIFACTS
    assert not any((root / "tmp").iterdir())
    assert [p.name for p in (root / "entries").iterdir()] == [KEY]


_KILLED_WRITER = """
import sys, time
from pathlib import Path
import kernel.orchestrate._evidence_store as s
real = s._write_synced
def slow(path, data):
    real(path, data)
    print("wrote", path.name, flush=True)
    time.sleep(600)
s._write_synced = slow
s.EvidenceStore(Path(sys.argv[1])).insert(
    sys.argv[2], check_content_digest=sys.argv[3], specification_digest=sys.argv[4],
    artifacts={"target_certified.smt2": b"(check-sat)\\n", "z3-answer.txt": b"x\\n"},
)
"""


def test_sigkill_mid_insert_leaves_no_entry(tmp_path: Path) -> None:
    root = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(root), KEY, CONTENT, PROBLEM],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("wrote")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    store = EvidenceStore(root)
    assert any((root / "tmp").iterdir())  # the killed writer's staging is all that is left
    _miss(store, MissReason.ABSENT)
    assert store.insert(
        KEY, check_content_digest=CONTENT, specification_digest=PROBLEM, artifacts=ARTIFACTS
    ) is InsertResult.STORED
    found = store.load(KEY, DECLARED)
    assert isinstance(found, Hit) and found.evidence == ARTIFACTS
