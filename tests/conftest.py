"""Hypothesis profiles: ``ci`` (default, bounded), ``deep`` (``make fuzz``) and
``mutate`` (``make mutate``).

Under mutmut (which sets ``MUTANT_UNDER_TEST`` in every process it runs tests
in) the default is ``mutate``: a property runs a few fixed examples, so one
mutant costs a fraction of a second rather than the full ``ci`` search, and
the figures of a run do not depend on a random seed. The mutants the
properties alone would catch are few; the exact-message tests of
``tests/test_mutants_*.py`` do the killing. ``HYPOTHESIS_PROFILE`` overrides.

Under mutmut each test also starts with the kernel's per-class validation
plans cold (``kernel/replay/_facts.py``), as a fresh process would. mutmut
runs a mutant only against the tests it saw *execute* the mutated function;
with a warm cache only the first test to validate each record class would
reach the plan's computation, and its mutants would meet one test instead of
every test that validates a record.

The shared fixtures of ``tests/support/fixtures.py`` are registered here, for
every module (a module opts in with ``pytest.mark.usefixtures``).
"""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import HealthCheck, settings

from tests.support.fixtures import no_leftovers

__all__ = ["no_leftovers"]  # a fixture: pytest finds it by name in this module

# A suite started in the background (`make test &`, nohup) inherits SIGINT
# ignored, and every command it starts would inherit that too: the tests that
# interrupt a command with SIGINT would then see it run on to its verdict. A
# handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "deep",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "mutate",
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=False,
)
_DEFAULT_PROFILE = "mutate" if "MUTANT_UNDER_TEST" in os.environ else "ci"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _DEFAULT_PROFILE))


_UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


@pytest.fixture(autouse=_UNDER_MUTMUT)
def cold_validation_plans() -> None:
    """Forget the per-class validation plans (autouse only under mutmut)."""
    from kernel.replay import _facts

    _facts._PLANS.clear()


# Tests that time a process or signal one at a chosen moment: the launch-kill
# and interrupt loops, deadlines, "gone within N s". `make unit` runs the rest
# on two processes (pytest-xdist) and these after, alone (-m serial), so that
# their bounds measure the kernel, not a neighbour's load.
_SERIAL_MODULES = frozenset({
    "test_cli_interrupts", "test_cli_newcomer", "test_cli_run_resume", "test_containment",
    "test_evidence_limits", "test_external_process", "test_orchestrate_scale",
    "test_pool_spawn_signals", "test_shard_workers", "test_signals_in_finalizers",
    "test_support",
})  # fmt: skip
_SERIAL_WORDS = ("killed", "interrupt", "signal", "sigterm", "sigint", "dying", "deadline")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        name = item.name.lower()
        if module in _SERIAL_MODULES or any(word in name for word in _SERIAL_WORDS):
            item.add_marker(pytest.mark.serial)
