"""Text a step wrote, made safe to print: control characters escaped (issue 34).

A detail can quote what a producer or a checker chose (a receipt's field, a
file name, an error message); printed raw, its escape sequences would drive
the operator's terminal. ``escaped`` writes every C0 and C1 control
character (tab and newline included: a detail is one line), DEL, and the
Unicode line and paragraph separators as ``\\xNN`` / ``\\uNNNN``, and leaves
everything else, non-ASCII text included, as it is. (A backslash is left as
it is: the aim is a terminal that obeys nothing, not a reversible encoding.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["escaped"]


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_TABLE: Final = {
    **{code: _escape(code) for code in (*range(0x20), *range(0x7F, 0xA0))},
    0x2028: _escape(0x2028),
    0x2029: _escape(0x2029),
}


def escaped(text: str) -> str:
    """``text`` with its control characters written as escapes."""
    return text.translate(_TABLE)
