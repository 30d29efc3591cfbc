"""`kernel bundle DRAFT`: seal a search draft into a replay bundle.

The integrator's entry point: a search process (in any language) writes a
draft — the refused frame, the operator set, and each candidate as a whole
frame or a delta — and this command seals the chain (assessment by the
organ's own contract authority, residuals, gate, budget, run, attempts,
reconstructions) and one adapter input per attempt for the chosen static
manifest. Every id is computed here with the documented payloads
(adr/0001-records-and-identities.md); none is typed in.

Layout (``--layout``): a single JSON document when it fits the reader's limit
(``auto``, the default), else a bundle stream (JSON Lines; see
``kernel.bundles``); ``seal_bundle`` itself is ``kernel.bundles.seal_bundle``.

Exit codes:

- 0: the bundle was written;
- 1: the draft cannot become a replay bundle (its organ has no contract
  authority in the manifest, the organ's contract accepts the original frame
  so there is nothing to replay, a delta does not apply to it, or replay
  would refuse a candidate as an integrity failure: ``candidate_does_not_replay``
  names the candidate and replay's reason); nothing is written;
- 2: the draft was refused at the boundary (unreadable, malformed JSON,
  schema mismatch).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, assert_never

import typer

from kernel.bundles import (
    BUNDLE_LIMITS,
    BundleLimitError,
    BundleSealError,
    BundleStreamError,
    bundle_document,
    bundle_stream_lines,
    is_stream_header,
    read_draft_stream,
    seal_bundle,
)
from kernel.commands._io import (
    OutputFile,
    bounded_lines,
    open_input,
    refuse,
    refuse_output_is_input,
)
from kernel.drafts import SearchDraft
from kernel.organs import BUILTIN_MANIFEST, CERTIFIED_MANIFEST
from kernel.replay import AuthorityManifest
from kernel.serde import SerdeError, loads


class Layout(Enum):
    """How the bundle is written (``kernel.bundles``)."""

    AUTO = "auto"  # a document when it fits BUNDLE_LIMITS.document_bytes, else a stream
    DOCUMENT = "document"
    STREAM = "stream"


class ManifestChoice(Enum):
    """The static manifests a bundle can be sealed for (no lookup beyond these)."""

    BUILTIN = "builtin.v1"
    CERTIFIED = "certified.v1"


def manifest_for(choice: ManifestChoice) -> AuthorityManifest:
    match choice:
        case ManifestChoice.BUILTIN:
            return BUILTIN_MANIFEST
        case ManifestChoice.CERTIFIED:
            return CERTIFIED_MANIFEST
        case _:
            assert_never(choice)


Progress = Callable[[str, int | None, int | None], None]


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    """``progress(phase, done, total)`` drawn on stderr (a rich bar) when enabled."""
    if not enabled:
        yield lambda phase, done, total: None
        return
    from rich.console import Console  # imported only when a bar is drawn
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("lines"), console=Console(stderr=True), transient=True)
    task = bar.add_task("reading", total=None)

    def update(phase: str, done: int | None, total: int | None) -> None:
        bar.update(task, description=phase, completed=done or 0, total=total)

    with bar:
        yield update


def _read_draft(path: Path) -> SearchDraft:
    """A draft document, or a draft stream (JSON Lines) for runs of any size."""
    handle = open_input(path)
    lines = bounded_lines(handle, BUNDLE_LIMITS.line_bytes)
    first = next(lines, b"")
    if first is not None and is_stream_header(first):
        try:
            return read_draft_stream(itertools.chain((first,), lines))
        except BundleStreamError as exc:
            refuse(exc.code, f"{path}: {exc.message}")
    if first is None:
        refuse("document_too_large", f"{path}: more than {BUNDLE_LIMITS.document_bytes} bytes")
    rest = handle.read(BUNDLE_LIMITS.document_bytes + 1 - len(first))
    data = first + (b"\n" + rest if rest else b"")
    if len(data) > BUNDLE_LIMITS.document_bytes:
        refuse("document_too_large", f"{path}: more than {BUNDLE_LIMITS.document_bytes} bytes")
    try:
        return loads(data, SearchDraft)
    except SerdeError as exc:
        refuse(exc.code, f"{path}: {exc.message}")


def register(app: typer.Typer) -> None:
    """Attach the ``bundle`` command to ``app``."""

    @app.command("bundle")
    def bundle_command(
        draft_path: Annotated[Path, typer.Argument(
            metavar="DRAFT", help="Search draft (JSON): problem_frame, candidate_organ, "
            "operator_set_id, operator_set_version, candidates[{operator_id, "
            "operator_version, frame | delta}].")],
        manifest: Annotated[ManifestChoice, typer.Option(
            "--manifest", help="Static manifest the inputs name: builtin.v1 (in-process "
            "obligations, for `kernel replay`) or certified.v1 (adds the externally "
            "certified obligation, for `kernel run`).")] = ManifestChoice.BUILTIN,
        out: Annotated[Path | None, typer.Option(
            "--out", "-o", metavar="FILE",
            help="Write the bundle to FILE instead of stdout ('-'): a regular file is "
                 "replaced atomically, a device or FIFO written through, a symlink "
                 "followed; FILE may not be DRAFT.")] = None,
        layout: Annotated[Layout, typer.Option(
            "--layout", help="document (one JSON document, small runs), stream (JSON Lines, "
            "any size) or auto: a document when it fits the reader's limit, else a "
            "stream.")] = Layout.AUTO,
        quiet: Annotated[bool, typer.Option(
            "--quiet", "-q", help="No progress bar on stderr.")] = False,
    ) -> None:
        """Seal a search draft into a replay bundle (every id computed, none typed in).

        DRAFT is a path or - for stdin: a JSON document, or for runs of any size a
        draft stream (JSON Lines: {"format": "replay-kernel.draft-stream.v1",
        "header": {problem_frame, candidate_organ, operator_set_id,
        operator_set_version}}, then one candidate a line). The bundle obeys the
        limits kernel replay and kernel run read with (kernel.bundles.BUNDLE_LIMITS):
        nothing is written that they would refuse.

        Every attempt is put through replay's own checks before anything is
        written: a bundle this command writes never replays as an integrity
        failure (a candidate whose source text differs from the problem's is
        refused here, candidate_does_not_replay, naming the candidate).

        Exit codes: 0 bundle written; 1 the draft cannot become a bundle (organ
        not in the manifest, original frame not refused, a delta that does not
        apply, a candidate replay would refuse, a document or line over the
        limits); 2 usage error or draft refused at the boundary. Nothing is
        written unless the whole bundle is.

        Example: kernel bundle draft.json -o bundle.json
        """
        refuse_output_is_input(out, draft_path)
        with _progress(not quiet and sys.stderr.isatty()) as progress:
            draft = _read_draft(draft_path)
            progress("sealing", None, None)
            try:
                bundle = seal_bundle(draft, manifest_for(manifest))
            except BundleSealError as exc:
                refuse(exc.code, f"{draft_path}: {exc.message}", exit_code=1)
            data: bytes | None = None
            if layout is not Layout.STREAM:
                try:
                    data = bundle_document(bundle)
                except BundleLimitError as exc:
                    if layout is Layout.DOCUMENT:
                        refuse(exc.code, f"{draft_path}: {exc.message} (try --layout stream)",
                               exit_code=1)
            with OutputFile(out or Path("-")) as sink:
                if data is not None:
                    sink.write(data)
                else:
                    total = 1 + 2 * len(draft.candidates)
                    try:
                        # Each line is checked against the reader's limits before it is
                        # written; a refusal discards the partial file.
                        for done, line in enumerate(bundle_stream_lines(bundle, BUNDLE_LIMITS)):
                            sink.write(line)
                            if done % 256 == 0:
                                progress("writing", done, total)
                    except BundleLimitError as exc:
                        refuse(exc.code, f"{draft_path}: {exc.message}", exit_code=1)
                sink.commit()
