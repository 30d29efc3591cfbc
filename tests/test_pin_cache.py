"""A run's ``PinCache``: pinned files read once per process, and never trusted past a change.

Each test runs real producer and checker steps (``Scenario``) through
``run_check`` with one cache shared by several attempts, as the certifier of
``kernel run`` does, and compares what was read (``hashed_bytes``, the sealed
copies made) and what was decided with a run that has no cache.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.external import PinCache, Reason, RunOutcome, Status, process_pin_cache
from tests.test_external_helpers import BELOW_SANDBOX, Scenario
from tests.test_external_ledger import rewrite_keeping_mtime

pytestmark = pytest.mark.usefixtures("no_leftovers")


def _stored(outcome: RunOutcome) -> dict[str, Any]:
    value = json.loads(Path(outcome.attempt_dir, "metadata.json").read_bytes())
    assert isinstance(value, dict)
    return value


def _after_the_ctime_of(path: Path) -> None:
    """Return once a file written now is stamped with a later ctime than ``path``'s."""
    probe = path.with_name(path.name + ".tick")
    for _ in range(10_000):
        probe.write_bytes(b"")
        if probe.stat().st_ctime_ns > path.stat().st_ctime_ns:
            probe.unlink()
            return
        time.sleep(0.001)
    raise AssertionError(f"the clock stamped nothing later than {path}'s ctime")


def _pinned_bytes(scenario: Scenario, helper: Path) -> int:
    """What one attempt reads of its pinned files: the executable, both scripts, the helper."""
    paths: set[str] = {
        os.path.realpath(path)
        for path in (scenario.executable, scenario.producer_script, scenario.checker_script, helper)
    }
    return sum(os.stat(path).st_size for path in paths)


@pytest.fixture
def scenario(tmp_path: Path) -> tuple[Scenario, Path]:
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    return Scenario(tmp_path, max_containment=BELOW_SANDBOX, checker_deps=(helper,)), helper


def test_later_attempts_read_no_pinned_file_again_and_decide_the_same(
    scenario: tuple[Scenario, Path],
) -> None:
    run, helper = scenario
    cache = PinCache()
    first = run.run("run-1", pins=cache)
    assert first.status is Status.PASS, _stored(first)["detail"]
    read, copies = cache.files.hashed_bytes, cache.copies_made
    # The first attempt read every pinned file once (its sealed copies are hashed from
    # memory, the helper from disk) and sealed the executable and the two scripts.
    assert copies == 3
    assert 0 < read <= _pinned_bytes(run, helper)
    for number in (2, 3):
        again = run.run(f"run-{number}", pins=cache)
        assert again.status is Status.PASS, _stored(again)["detail"]
        assert _stored(again)["check_digest"] == _stored(first)["check_digest"]
    assert (cache.files.hashed_bytes, cache.copies_made) == (read, copies)
    # Without a cache an attempt reads them all again, and decides the same.
    alone = run.run("run-4")
    assert alone.status is Status.PASS
    assert _stored(alone)["check_digest"] == _stored(first)["check_digest"]


@pytest.mark.parametrize("which", ["helper (read by path)", "checker script (sealed copy)"])
def test_a_pin_rewritten_between_attempts_blocks_the_next_one(
    scenario: tuple[Scenario, Path], which: str
) -> None:
    run, helper = scenario
    target = helper if which.startswith("helper") else run.checker_script
    cache = PinCache()
    assert run.run("run-1", pins=cache).status is Status.PASS
    original = target.read_bytes()
    forged = original.replace(b"1", b"2", 1) if target == helper else original.replace(
        b"import", b"Import", 1
    )
    assert forged != original and len(forged) == len(original)
    rewrite_keeping_mtime(target, forged)
    blocked = run.run("run-2", pins=cache)
    assert blocked.status is Status.BLOCKED
    assert blocked.reason is Reason.PIN_MISMATCH
    assert hashlib.sha256(forged).hexdigest() in _stored(blocked)["detail"]
    assert _stored(blocked)["checker"] is None  # nothing ran on the forged bytes


def test_the_same_bytes_under_a_new_inode_are_read_again_and_pass(
    scenario: tuple[Scenario, Path],
) -> None:
    run, _ = scenario
    cache = PinCache()
    assert run.run("run-1", pins=cache).status is Status.PASS
    read, copies = cache.files.hashed_bytes, cache.copies_made
    replacement = run.checker_script.with_suffix(".new")
    replacement.write_bytes(run.checker_script.read_bytes())
    os.replace(replacement, run.checker_script)
    # The record of the new file settles once a later write is stamped later
    # (the FileLedger rule); a run that starts within the same timestamp tick
    # would rightly hash it again, so the run starts past that tick.
    _after_the_ctime_of(run.checker_script)
    again = run.run("run-2", pins=cache)
    assert again.status is Status.PASS, _stored(again)["detail"]
    assert cache.copies_made == copies + 1  # a fresh sealed copy of the new file
    assert cache.files.hashed_bytes == read  # sealed copies are hashed from memory


def test_a_checker_rewriting_its_pinned_helper_poisons_no_later_attempt(tmp_path: Path) -> None:
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    rewrite = (
        "import os\n"
        f"path = {str(helper)!r}\n"
        "before = os.stat(path)\n"
        "open(path, 'r+b').write(b'VALUE = 2\\n')\n"
        "os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))\n"
    )
    run = Scenario(
        tmp_path, max_containment=BELOW_SANDBOX, checker_custom=rewrite, checker_deps=(helper,)
    )
    cache = PinCache()
    first = run.run("run-1", pins=cache)
    assert first.reason is Reason.PIN_CHANGED_DURING_RUN
    second = run.run("run-2", pins=cache)
    assert second.reason is Reason.PIN_MISMATCH


def test_attempts_on_several_threads_share_one_cache(scenario: tuple[Scenario, Path]) -> None:
    run, _ = scenario
    cache = PinCache()
    outcomes: dict[str, RunOutcome] = {}

    def attempt(name: str) -> None:
        outcomes[name] = run.run(name, pins=cache)

    threads = [threading.Thread(target=attempt, args=(f"run-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes) == [f"run-{n}" for n in range(4)]
    assert {outcome.status for outcome in outcomes.values()} == {Status.PASS}


def _child_sees_a_fresh_cache(queue: multiprocessing.Queue[int]) -> None:
    queue.put(process_pin_cache().copies_made)


def test_a_forked_child_starts_its_own_process_cache() -> None:
    parent = process_pin_cache()
    assert process_pin_cache() is parent
    saved = parent.copies_made
    parent.copies_made = 12345  # a mark only the parent's cache carries
    try:
        context = multiprocessing.get_context("fork")
        queue: multiprocessing.Queue[int] = context.Queue()
        child = context.Process(target=_child_sees_a_fresh_cache, args=(queue,))
        child.start()
        seen = queue.get(timeout=30)
        child.join(timeout=30)
    finally:
        parent.copies_made = saved
    assert seen == 0
