"""The bundle a ``kernel run`` work directory ran, read back from its copy (ADR-0010).

``kernel run`` keeps the bundle exactly as it read it in the work directory
(``bundle.json`` for a single document, ``bundle.jsonl`` for a stream). The
audit re-derives every outcome from it, so a work directory is audited
whole without being asked. The copy is evidence of the run store like any
other file: a copy that is absent, unreadable or no bundle is a finding,
never an exception. It binds the outcomes to *a* bundle; which bundle the
operator meant is bound by ``--bundle`` (the operator's own copy, compared
here attempt by attempt) or by the attestation, which signs the copy's
digest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kernel.audit._store import AuditCode, Auditor, Unreadable, read_bounded
from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleStreamError,
    BundleStreamReader,
    ReadyAttempt,
    RefusedAttempt,
    document_attempts,
    is_stream_header,
)
from kernel.orchestrate import BUNDLE_COPY, BUNDLE_STREAM_COPY
from kernel.replay import ReplayBundle
from kernel.serde import SerdeError, dumps, parse_json, structure

__all__ = ["BUNDLE_COPY", "BUNDLE_STREAM_COPY", "Attempt", "bundle_attempts", "copied_attempts"]


Attempt = ReadyAttempt | RefusedAttempt


def bundle_attempts(bundle: ReplayBundle) -> list[Attempt]:
    """A document's attempts in run order; ``ValueError`` when its shape is unsound."""
    return list(document_attempts(bundle))


def _stream_attempts(path: Path) -> list[Attempt]:
    # Raises Unreadable, BundleStreamError; each line bounded as kernel run reads it.
    limit = BUNDLE_LIMITS.line_bytes
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    reader = BundleStreamReader()
    found: list[Attempt] = []
    with os.fdopen(fd, "rb") as handle:
        # Line by line as kernel run's reader (kernel.commands._io.bounded_lines):
        # an over-long line is skipped, never held, and refuses its attempt.
        while line := handle.readline(limit + 2):
            body = line[:-1] if line.endswith(b"\n") else line
            if len(body) <= limit:
                item = reader.feed(body)
            else:
                while not line.endswith(b"\n") and (line := handle.readline(1 << 20)):
                    pass
                item = reader.feed_oversized()
            if item is not None:
                found.append(item)
    found.extend(reader.finish())
    return found


def copied_attempts(a: Auditor, root: Path, required: bool) -> list[Attempt] | None:
    """The attempts of the bundle copy in ``root``; None (with a finding if due) otherwise."""
    present = [
        name
        for name in (BUNDLE_COPY, BUNDLE_STREAM_COPY)
        if (root / name).exists() or (root / name).is_symlink()
    ]
    a.checked += 1
    if not present:
        if required:
            a.finding(
                root / BUNDLE_COPY, "bundle copy", AuditCode.MISSING,
                "absent: kernel run keeps the bundle it ran here (for a work directory of "
                "an older kernel, pass the bundle with --bundle)",
            )  # fmt: skip
        return None
    if len(present) > 1:
        a.finding(
            root / BUNDLE_STREAM_COPY, "bundle copy", AuditCode.UNDECLARED,
            "two bundle copies: kernel run keeps one",
        )  # fmt: skip
        return None
    path = root / present[0]
    try:
        if present[0] == BUNDLE_STREAM_COPY:
            return _stream_attempts(path)
        data = read_bounded(path, BUNDLE_LIMITS.document_bytes)
        if is_stream_header(data.split(b"\n", 1)[0]):
            raise Unreadable(AuditCode.MALFORMED, "a bundle stream stored as a document")
        bundle = structure(parse_json(data, max_depth=BUNDLE_LIMITS.depth), ReplayBundle)
        return bundle_attempts(bundle)
    except Unreadable as exc:
        a.finding(path, "bundle copy", exc.code, exc.message)
    except OSError as exc:
        a.finding(path, "bundle copy", AuditCode.NOT_REGULAR, f"unreadable: {exc.strerror}")
    except (SerdeError, BundleStreamError) as exc:
        a.finding(path, "bundle copy", AuditCode.MALFORMED, f"{exc.code}: {exc.message}")
    except ValueError as exc:
        a.finding(path, "bundle copy", AuditCode.MALFORMED, str(exc))
    return None


def same_attempts(ours: Sequence[Attempt], theirs: Sequence[Attempt]) -> bool:
    """Whether two bundles hold the same attempts (requests, or refusals), in order."""

    def key(item: Attempt) -> bytes:
        body = dumps(item.request) if isinstance(item, ReadyAttempt) else dumps(item.refusal)
        return b"%d %b" % (item.attempt_index, body)

    return len(ours) == len(theirs) and all(
        key(x) == key(y) for x, y in zip(ours, theirs, strict=True)
    )
