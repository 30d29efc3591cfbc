"""Fixtures shared across test modules; ``tests/conftest.py`` registers them.

A module opts in with ``pytestmark = pytest.mark.usefixtures("no_leftovers")``
rather than copying the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import assert_no_leftover

__all__ = ["no_leftovers"]


@pytest.fixture
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """After the test, no process that names its ``tmp_path`` is still alive.

    Every producer, checker and ``kernel`` process a test starts names the
    test's directory in its command line, so this finds what a test left.
    """
    yield
    assert_no_leftover(tmp_path)
