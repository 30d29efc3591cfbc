"""Control characters a step could put in a detail are escaped (issue 34, deliverable 5)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from kernel.external import Reason, RunKind, Status
from kernel.external._attempt import Recorder
from kernel.text import escaped

_SEPARATORS = {"\u2028", "\u2029"}


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or char in _SEPARATORS


def test_a_terminal_escape_becomes_visible_text() -> None:
    assert escaped("red \x1b[31m bell \x07 csi \x9b end\n") == (
        "red \\x1b[31m bell \\x07 csi \\x9b end\\x0a")
    assert escaped("line\u2028para\u2029") == "line\\u2028para\\u2029"


@given(st.text())
def test_no_control_character_survives_and_the_rest_is_untouched(text: str) -> None:
    out = escaped(text)
    assert not any(_is_control(char) for char in out)
    # Every other character is kept, in order: only controls were rewritten.
    assert [c for c in out if c != "\\"] == [
        c for c in "".join(
            f"x{ord(ch):02x}" if _is_control(ch) and ord(ch) <= 0xFF
            else f"u{ord(ch):04x}" if _is_control(ch) else ch
            for ch in text) if c != "\\"]


def test_a_recorded_detail_holds_no_control_character() -> None:
    recorder = Recorder(RunKind.RUN, "run-1", None, "check", "/m/manifest.json", "/m",
                        "job-1", "0" * 64)
    metadata = recorder.freeze(Status.BLOCKED, Reason.IO_ERROR,
                               "evidence/\x1b]0;owned\x07: No space left")
    assert metadata.decision.detail == "evidence/\\x1b]0;owned\\x07: No space left"
