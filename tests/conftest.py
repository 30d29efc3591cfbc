"""Hypothesis profiles: ``ci`` (default, bounded) and ``deep`` (``make fuzz``).

The shared fixtures of ``tests/support/fixtures.py`` are registered here, for
every module (a module opts in with ``pytest.mark.usefixtures``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tests.support.fixtures import no_leftovers

__all__ = ["no_leftovers"]  # a fixture: pytest finds it by name in this module

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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
