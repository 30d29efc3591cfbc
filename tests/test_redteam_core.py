"""Adversarial regression tests for the pure core (kernel/replay, verification, organs,
serde, identity, upstream, frames, drafts).

Each test pins one defect found by red-teaming; its docstring says what the
attack was. Timings are generous bounds on work that used to be quadratic
(or worse): the honest cost is milliseconds, the old cost minutes or hours.
"""

from __future__ import annotations

import time

from kernel.serde import SerdeError, _max_depth, parse_json


def _elapsed(fn: object) -> float:
    assert callable(fn)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# --- serde: the depth pre-scan ------------------------------------------------


def test_an_unterminated_string_of_escaped_quotes_is_refused_in_linear_time() -> None:
    """``"\\"\\"\\"...`` never closes: the old string regex restarted at every
    escaped quote and rescanned to the end (quadratic; 32 KB took 3 s, 16 MiB
    would take days), so any evidence document could hang replay."""
    data = b'"' + b'\\"' * 200_000
    def parse() -> None:
        try:
            parse_json(data)
        except SerdeError as exc:
            assert exc.code == "malformed_json"
        else:
            raise AssertionError("an unterminated string parsed")

    assert _elapsed(parse) < 2.0


def test_brackets_inside_an_unterminated_string_do_not_count_as_depth() -> None:
    # JSON never sees them as brackets; the scan must not either.
    assert _max_depth(b'[1, "abc' + b"[" * 100) == 1
    assert _max_depth(b'["a\\' ) == 1
    assert _max_depth(b'[[["x"]]]') == 3
