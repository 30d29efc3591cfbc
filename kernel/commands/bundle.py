"""`kernel bundle DRAFT`: seal a search draft into a replay bundle.

The integrator's entry point: a search process (in any language) writes a
draft — the refused frame, the operator set, and each candidate as a whole
frame or a delta — and this command seals the chain (assessment by the
organ's own contract authority, residuals, gate, budget, run, attempts,
reconstructions) and one adapter input per attempt for the chosen static
manifest. Every id is computed here with the documented payloads
(adr/0001-records-and-identities.md); none is typed in.

Exit codes:

- 0: the bundle was written;
- 1: the draft cannot become a replay bundle (its organ has no contract
  authority in the manifest, the organ's contract accepts the original frame
  so there is nothing to replay, or a delta does not apply to it);
- 2: the draft was refused at the boundary (unreadable, malformed JSON,
  schema mismatch).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, assert_never

import typer

from kernel.commands._io import read_document, refuse, write_atomically
from kernel.drafts import SearchDraft
from kernel.organs import BUILTIN_MANIFEST, CERTIFIED_MANIFEST
from kernel.replay import AuthorityManifest, ReplayBundle, build_replay_input
from kernel.serde import dumps
from kernel.upstream import build_chain


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


def seal_bundle(draft: SearchDraft, manifest: AuthorityManifest) -> ReplayBundle:
    """The sealed bundle for ``draft``; raises ValueError when it cannot be one."""
    authority = manifest.contract_authorities.get(draft.candidate_organ)
    if authority is None or draft.candidate_organ not in manifest.proof_policies:
        raise ValueError(f"organ_not_in_manifest: organ {draft.candidate_organ!r} has no "
                         f"contract authority and proof policy in {manifest.manifest_version}")
    assessment = authority.assess(draft.problem_frame)
    if assessment.runnable:
        raise ValueError("original_frame_not_refused: the organ's contract accepts the "
                         "original frame, so there is nothing to replay")
    try:
        chain = build_chain(
            draft.problem_frame, assessment,
            [c.to_candidate_draft(draft.problem_frame) for c in draft.candidates],
            operator_set_id=draft.operator_set_id,
            operator_set_version=draft.operator_set_version,
        )
    except ValueError as exc:
        raise ValueError(f"candidate_does_not_reconstruct: {exc}") from exc
    inputs = tuple(build_replay_input(chain, i, manifest)
                   for i in range(len(chain.run.candidate_attempts)))
    return ReplayBundle(chain, inputs)


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
            "--out", help="Write the bundle here (atomically) instead of stdout.")] = None,
    ) -> None:
        """Seal a search draft into a replay bundle (every id computed, none typed in).

        Exit codes: 0 bundle written; 1 the draft cannot become a bundle (organ
        not in the manifest, original frame not refused, a delta that does not
        apply); 2 draft refused at the boundary.
        """
        draft = read_document(draft_path, SearchDraft)
        try:
            bundle = seal_bundle(draft, manifest_for(manifest))
        except ValueError as exc:
            code, _, message = str(exc).partition(": ")
            refuse(code, f"{draft_path}: {message}", exit_code=1)
        data = dumps(bundle) + b"\n"
        if out is None:
            typer.echo(data.decode("utf-8"), nl=False)
            return
        try:
            write_atomically(out, data)
        except OSError as exc:
            refuse("unwritable_output", f"{out}: {exc.strerror or exc}")
