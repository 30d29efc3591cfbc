"""Replay bundles as bytes: one document for small runs, a stream of lines for any size (pure).

Two layouts, one table of limits (``BUNDLE_LIMITS``) that the writers here
and the readers here both obey, so a bundle this module writes is never one
it refuses (adr/0013-streaming-bundles-and-verdicts.md):

- **document**: the canonical JSON of a ``ReplayBundle`` and a newline, at
  most ``document_bytes``;
- **stream** (JSON Lines, ``BUNDLE_STREAM_FORMAT``), every line at most
  ``line_bytes``, the file unbounded:

  1. one header line: ``{"format": ..., "header": StreamHeader}``, the chain's
     head and the run without its attempts, and ``attempt_count`` N;
  2. N run lines: the run's ``CandidateAttempt`` records, in order;
  3. N attempt lines: ``StreamAttempt`` (``attempt_index``, the attempt's
     reconstruction and adapter input), in order.

  The run comes before any attempt line because the run id covers every
  attempt: no outcome may be decided before the whole run is known. The run
  lines are the envelope: a defect there refuses the whole stream
  (``BundleStreamError``). A defect in an attempt line (malformed, too large,
  wrong index, missing at the end) is that attempt's ``invalid_replay_input``
  refusal and every other attempt is still classified.

``BundleStreamReader`` is sans-I/O: the command reads lines and feeds them;
each fed attempt line gives one ready request or one refusal at once, so a
caller can classify and write it before reading on (memory holds the run's
attempt records, never the reconstructions already classified).

Everything here is pure: no files, no clock; the commands do the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, TypeVar, final

import attrs

from kernel._values import DIGEST, NAME, NON_NEGATIVE_INT, tuple_of
from kernel.drafts import DraftCandidate, SearchDraft
from kernel.frames import ProblemFrame
from kernel.identity import JsonValue, canonical_json
from kernel.replay import (
    AuthorityManifest,
    ReplayAdapterInput,
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayBundle,
    ReplayDisposition,
    ReplayRequest,
    build_replay_input,
    examine_run,
    refuse_malformed_attempt,
    requests_from_bundle,
    validate,
)
from kernel.serde import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    SerdeError,
    parse_json,
    structure,
    unstructure,
)
from kernel.upstream import (
    CandidateAttempt,
    CandidateReconstruction,
    ComputeBudgetDecision,
    ContractAssessment,
    ContractResidual,
    GeometricSearchRun,
    SearchChain,
    SearchGateDecision,
    SearchRunInput,
    build_chain,
)

__all__ = [
    "BUNDLE_LIMITS",
    "BUNDLE_STREAM_FORMAT",
    "DRAFT_STREAM_FORMAT",
    "BundleLimitError",
    "BundleLimits",
    "BundleSealError",
    "BundleStreamError",
    "BundleStreamReader",
    "DraftHeader",
    "ReadRun",
    "ReadyAttempt",
    "RefusedAttempt",
    "StreamAttempt",
    "StreamHeader",
    "StreamRun",
    "bundle_document",
    "bundle_stream_lines",
    "draft_stream_lines",
    "document_attempts",
    "is_stream_header",
    "outcome_line",
    "read_draft_stream",
    "seal_bundle",
]

BUNDLE_STREAM_FORMAT: Final = "replay-kernel.bundle-stream.v1"
DRAFT_STREAM_FORMAT: Final = "replay-kernel.draft-stream.v1"
_T = TypeVar("_T")


@final
@attrs.frozen
class BundleLimits:
    """What a reader accepts and therefore what a writer may produce."""

    document_bytes: int  # a whole single-document bundle (its newline included)
    line_bytes: int  # one line of a stream (its newline excluded)
    depth: int  # JSON nesting depth of a document or of one line


BUNDLE_LIMITS: Final = BundleLimits(
    document_bytes=MAX_DOCUMENT_BYTES, line_bytes=MAX_DOCUMENT_BYTES, depth=MAX_DEPTH
)


class BundleLimitError(ValueError):
    """A bundle (or one of its lines) that the reader would refuse; nothing may be written."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BundleStreamError(ValueError):
    """The stream's envelope (header or run lines, their count, the end) is unsound."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BundleSealError(ValueError):
    """A draft that cannot become a replay bundle (a stable code and a message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# --- stream records ---------------------------------------------------------


@final
@attrs.frozen
class StreamRun:
    """A run without its attempts (they follow, one a line), and how many there are."""

    run_id: str = attrs.field(validator=DIGEST)
    run_policy_version: str = attrs.field(validator=NAME)
    run_input: SearchRunInput = attrs.field(validator=attrs.validators.instance_of(SearchRunInput))
    input_digest: str = attrs.field(validator=DIGEST)
    attempt_count: int = attrs.field(validator=NON_NEGATIVE_INT)


@final
@attrs.frozen
class StreamHeader:
    """The chain's head: everything but the run's attempts and the reconstructions."""

    problem_frame: ProblemFrame = attrs.field(validator=attrs.validators.instance_of(ProblemFrame))
    assessment: ContractAssessment = attrs.field(
        validator=attrs.validators.instance_of(ContractAssessment)
    )
    residuals: tuple[ContractResidual, ...] = attrs.field(validator=tuple_of(ContractResidual))
    gate: SearchGateDecision = attrs.field(
        validator=attrs.validators.instance_of(SearchGateDecision)
    )
    budget: ComputeBudgetDecision = attrs.field(
        validator=attrs.validators.instance_of(ComputeBudgetDecision)
    )
    run: StreamRun = attrs.field(validator=attrs.validators.instance_of(StreamRun))


@final
@attrs.frozen
class _HeaderLine:
    format: str
    header: StreamHeader


@final
@attrs.frozen
class StreamAttempt:
    """One attempt line: which attempt, its reconstruction and its adapter input."""

    attempt_index: int = attrs.field(validator=NON_NEGATIVE_INT)
    reconstruction: CandidateReconstruction = attrs.field(
        validator=attrs.validators.instance_of(CandidateReconstruction)
    )
    input: ReplayAdapterInput = attrs.field(
        validator=attrs.validators.instance_of(ReplayAdapterInput)
    )


@final
@attrs.frozen
class ReadyAttempt:
    """An attempt whose records were read soundly: classify ``request``."""

    attempt_index: int
    attempt_id: str | None
    request: ReplayRequest


@final
@attrs.frozen
class RefusedAttempt:
    """An attempt whose line was unsound: ``refusal`` is its outcome."""

    attempt_index: int
    attempt_id: str | None
    refusal: ReplayAdapterRefusal


# --- limits, shared by writers and readers ------------------------------------


def _depth(value: JsonValue) -> int:
    deepest = 0
    stack: list[tuple[JsonValue, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _encode(value: JsonValue, limits: BundleLimits, what: str, *, document: bool = False) -> bytes:
    # The writer applies the reader's own checks (depth, then size) to every
    # line or document before it is written: what it writes, it would read.
    cap = limits.document_bytes - 1 if document else limits.line_bytes
    depth = _depth(value)
    if depth > limits.depth:
        raise BundleLimitError("too_deep", f"{what}: nesting depth {depth} exceeds {limits.depth}")
    data = canonical_json(value)
    if len(data) > cap:
        raise BundleLimitError(
            "document_too_large" if document else "line_too_large",
            f"{what}: {len(data)} bytes exceeds the limit of {cap}",
        )
    return data


def bundle_document(bundle: ReplayBundle, limits: BundleLimits = BUNDLE_LIMITS) -> bytes:
    """The single-document layout (canonical JSON, newline); ``BundleLimitError`` if too big."""
    data = _encode(unstructure(bundle), limits, "bundle document", document=True)
    return data + b"\n"


def bundle_stream_lines(
    bundle: ReplayBundle, limits: BundleLimits = BUNDLE_LIMITS
) -> Iterator[bytes]:
    """The stream layout, one line (with its newline) at a time.

    Raises ``BundleLimitError`` for a line the reader would refuse (before
    yielding it) and ``ValueError`` for a bundle without one input and one
    reconstruction per attempt.
    """
    chain = bundle.chain
    run = chain.run
    attempts = run.candidate_attempts
    if not len(attempts) == len(chain.reconstructions) == len(bundle.inputs):
        raise ValueError(
            f"bundle holds {len(attempts)} attempts, {len(chain.reconstructions)} "
            f"reconstructions and {len(bundle.inputs)} inputs; they must be equal"
        )
    header = _HeaderLine(BUNDLE_STREAM_FORMAT, StreamHeader(
        chain.problem_frame, chain.assessment, chain.residuals, chain.gate, chain.budget,
        StreamRun(run.run_id, run.run_policy_version, run.run_input, run.input_digest,
                  len(attempts)),
    ))
    yield _encode(unstructure(header), limits, "header line") + b"\n"
    for index, attempt in enumerate(attempts):
        yield _encode(unstructure(attempt), limits, f"run line {index}") + b"\n"
    for index, (reconstruction, replay_input) in enumerate(
        zip(chain.reconstructions, bundle.inputs, strict=True)
    ):
        line = StreamAttempt(index, reconstruction, replay_input)
        yield _encode(unstructure(line), limits, f"attempt line {index}") + b"\n"


def is_stream_header(first_line: bytes, limits: BundleLimits = BUNDLE_LIMITS) -> bool:
    """Whether a file's first line opens a bundle stream (a JSON object with ``format``)."""
    try:
        value = parse_json(first_line, max_bytes=limits.line_bytes, max_depth=limits.depth)
    except SerdeError:
        return False
    return isinstance(value, dict) and "format" in value


def document_attempts(bundle: ReplayBundle) -> Iterator[ReadyAttempt]:
    """The attempts of a single-document bundle, in run order.

    Raises ``ValueError`` unless it holds one input and one reconstruction per attempt.
    """
    requests = requests_from_bundle(bundle)
    for index, request in enumerate(requests):
        yield ReadyAttempt(index, request.attempt.attempt_id, request)


# --- the stream reader (sans-I/O) -------------------------------------------------


#: What a stream reader built from its header and run lines (``read_run``).
ReadRun = tuple[StreamHeader, GeometricSearchRun]


class BundleStreamReader:
    """Reads a bundle stream one line at a time (``feed``), then ``finish``.

    ``feed`` returns ``None`` for a header or run line and one ``ReadyAttempt``
    or ``RefusedAttempt`` for each attempt line; it raises
    ``BundleStreamError`` when the envelope is unsound. ``finish`` refuses
    every attempt whose line never came, and raises if the run never did.
    """

    def __init__(self, limits: BundleLimits = BUNDLE_LIMITS) -> None:
        self._limits = limits
        self._line = 0
        self._header: StreamHeader | None = None
        self._run_attempts: list[CandidateAttempt] = []
        self._run: GeometricSearchRun | None = None
        self._next_attempt = 0

    @property
    def run(self) -> GeometricSearchRun | None:
        """The whole run, once its last run line has been read."""
        return self._run

    @property
    def run_ready(self) -> bool:
        """Whether the header and every run line have been read (attempt lines come next)."""
        return self._run is not None

    @property
    def run_id(self) -> str | None:
        """The run's id as the header states it (not yet verified), once read."""
        return None if self._header is None else self._header.run.run_id

    @property
    def attempt_count(self) -> int | None:
        """N, once the header has been read."""
        return None if self._header is None else self._header.run.attempt_count

    def read_run(self) -> ReadRun:
        """The header and the run this reader built from its lines (``ValueError`` before)."""
        if self._header is None or self._run is None:
            raise ValueError("the run has not been read yet")
        return self._header, self._run

    @classmethod
    def resumed(
        cls, header: StreamHeader, run: GeometricSearchRun, limits: BundleLimits = BUNDLE_LIMITS
    ) -> BundleStreamReader:
        """A reader past the run lines of ``header`` and ``run`` (``read_run`` of another
        reader), expecting attempt line 0: for a worker handed a run read elsewhere.

        Nothing here re-validates ``run``: replay examines every run it classifies
        against (``examine_run`` re-runs every record's validators), so a run that
        is not what a reader builds is refused there, never trusted.
        """
        if type(header) is not StreamHeader or type(run) is not GeometricSearchRun:
            raise ValueError("not a stream header and a search run")
        head = header.run
        if (run.run_id, run.run_policy_version, run.run_input, run.input_digest) != (
            head.run_id, head.run_policy_version, head.run_input, head.input_digest
        ) or len(run.candidate_attempts) != head.attempt_count:
            raise ValueError("the run is not the one its header states")
        reader = cls(limits)
        reader._header = header
        reader._run_attempts = list(run.candidate_attempts)
        reader._run = run
        reader._line = 1 + len(reader._run_attempts)
        return reader

    def positioned(self, attempt_index: int) -> BundleStreamReader:
        """A reader of this run that expects attempt line ``attempt_index`` next.

        For reading a stream in shards (the sharded replay of the orchestration layer): each
        shard's attempt lines fed to a reader positioned at the shard's first
        attempt give exactly what feeding every line to one reader gives (the
        same outcomes, the same line numbers in refusals), because each
        attempt line, sound or not, takes exactly one attempt and one line.
        The run (and every record it holds) is shared with this reader, so
        facts examined for it apply to the requests of every positioned copy.
        Raises ``ValueError`` before the run is read or past its last attempt.
        """
        if self._header is None or self._run is None:
            raise ValueError("the run has not been read yet")
        count = len(self._run_attempts)
        if type(attempt_index) is not int or not 0 <= attempt_index <= count:
            raise ValueError(f"attempt index {attempt_index!r} is outside 0..{count}")
        reader = BundleStreamReader(self._limits)
        reader._header = self._header
        reader._run_attempts = self._run_attempts
        reader._run = self._run
        reader._line = 1 + count + attempt_index
        reader._next_attempt = attempt_index
        return reader

    def _parse(self, line: bytes, cls: type[_T]) -> _T:
        value = parse_json(line, max_bytes=self._limits.line_bytes, max_depth=self._limits.depth)
        return structure(value, cls)

    def feed_oversized(self) -> RefusedAttempt | None:
        """A line longer than ``line_bytes`` (the caller skipped its bytes)."""
        return self._defect("line_too_large", f"more than {self._limits.line_bytes} bytes")

    def feed(self, line: bytes) -> ReadyAttempt | RefusedAttempt | None:
        """One line, without its newline."""
        if len(line) > self._limits.line_bytes:
            return self.feed_oversized()
        try:
            return self._feed(line)
        except SerdeError as exc:
            return self._defect(exc.code, f"{exc.path}: {exc.message}")

    def _defect(self, code: str, message: str) -> RefusedAttempt | None:
        self._line += 1
        where = f"line {self._line}"
        if self._run is None:
            raise BundleStreamError(code, f"{where}: {message}")
        return self._attempt_refused(f"{where}: {code}: {message}")

    def _attempt_refused(self, detail: str) -> RefusedAttempt:
        index = self._next_attempt
        if index >= len(self._run_attempts):
            raise BundleStreamError("trailing_lines", f"line {self._line}: after the last attempt")
        self._next_attempt += 1
        return RefusedAttempt(
            index, self._run_attempts[index].attempt_id,
            refuse_malformed_attempt(index, f"bundle stream attempt {index}: {detail}"),
        )

    def _feed(self, line: bytes) -> ReadyAttempt | RefusedAttempt | None:
        header = self._header
        if header is None:
            value = parse_json(
                line, max_bytes=self._limits.line_bytes, max_depth=self._limits.depth
            )
            stated = value.get("format") if isinstance(value, dict) else None
            if stated != BUNDLE_STREAM_FORMAT:  # before the schema: say what is unsupported
                raise SerdeError("unsupported_bundle_format", "$.format",
                                 f"{stated!r} is not {BUNDLE_STREAM_FORMAT!r}")
            head = structure(value, _HeaderLine)
            self._line += 1
            self._header = head.header
            self._complete_run_if_due()
            return None
        if self._run is None:
            self._run_attempts.append(self._parse(line, CandidateAttempt))
            self._line += 1
            self._complete_run_if_due()
            return None
        if self._next_attempt >= len(self._run_attempts):
            self._line += 1
            raise BundleStreamError("trailing_lines", f"line {self._line}: after the last attempt")
        item = self._parse(line, StreamAttempt)
        self._line += 1
        index = self._next_attempt
        if item.attempt_index != index:
            return self._attempt_refused(
                f"line {self._line}: attempt_index {item.attempt_index}, expected {index}"
            )
        self._next_attempt += 1
        attempt = self._run_attempts[index]
        request = ReplayRequest(
            item.input, header.problem_frame, header.assessment, header.residuals,
            header.gate, header.budget, self._run, attempt, item.reconstruction,
        )
        return ReadyAttempt(index, attempt.attempt_id, request)

    def _complete_run_if_due(self) -> None:
        header = self._header
        assert header is not None
        if len(self._run_attempts) < header.run.attempt_count:
            return
        head = header.run
        try:
            self._run = GeometricSearchRun(
                head.run_id, head.run_policy_version, head.run_input, head.input_digest,
                tuple(self._run_attempts),
            )
        except (TypeError, ValueError) as exc:
            raise BundleStreamError("schema_mismatch", f"the run: {exc}") from exc

    def finish(self) -> tuple[RefusedAttempt, ...]:
        """End of input: a refusal for each attempt whose line never came."""
        if self._header is None:
            raise BundleStreamError("stream_truncated", "no header line")
        if self._run is None:
            raise BundleStreamError(
                "stream_truncated",
                f"{len(self._run_attempts)} of {self._header.run.attempt_count} run lines",
            )
        missing: list[RefusedAttempt] = []
        while self._next_attempt < len(self._run_attempts):
            missing.append(self._attempt_refused("attempt line missing (stream truncated)"))
        return tuple(missing)


# --- outcome lines ------------------------------------------------------------------


def outcome_line(
    attempt_index: int, attempt_id: str | None, outcome: ReplayAdapterOutcome
) -> bytes:
    """One outcome line: the outcome record, unchanged, in an envelope naming its attempt.

    ``{"attempt_id": ..., "attempt_index": i, "outcome": {...}}`` in canonical
    JSON and a newline; ``attempt_id`` is the run's id for that attempt, or
    ``null`` where the run does not have one.
    """
    return canonical_json({
        "attempt_id": attempt_id,
        "attempt_index": attempt_index,
        "outcome": unstructure(outcome),
    }) + b"\n"


# --- sealing a draft ------------------------------------------------------------------


#: The dispositions replay reports as integrity (the input is not what the run
#: recorded; README "Exit codes"). A sealed bundle must never yield one.
_INTEGRITY: Final = frozenset({
    ReplayDisposition.CANDIDATE_IDENTITY_MISMATCH, ReplayDisposition.INVALID_REPLAY_INPUT,
})


def seal_bundle(draft: SearchDraft, manifest: AuthorityManifest) -> ReplayBundle:
    """The sealed bundle for ``draft`` under ``manifest`` (every id computed here).

    Raises ``BundleSealError`` with code ``organ_not_in_manifest`` (no contract
    authority and proof policy for the draft's organ), ``original_frame_not_refused``
    (the organ's contract accepts the original frame: nothing to replay),
    ``candidate_does_not_reconstruct`` (a delta that does not apply) or
    ``candidate_does_not_replay`` (replay would refuse a candidate as an
    integrity failure: its source text differs from the problem's, its spans
    or its frame's content do not reproduce, ...; ``_refuse_unreplayable``).
    """
    authority = manifest.contract_authorities.get(draft.candidate_organ)
    if authority is None or draft.candidate_organ not in manifest.proof_policies:
        raise BundleSealError(
            "organ_not_in_manifest",
            f"organ {draft.candidate_organ!r} has no contract authority and proof policy "
            f"in {manifest.manifest_version}",
        )
    assessment = authority.assess(draft.problem_frame)
    if assessment.runnable:
        raise BundleSealError(
            "original_frame_not_refused",
            "the organ's contract accepts the original frame, so there is nothing to replay",
        )
    try:
        chain: SearchChain = build_chain(
            draft.problem_frame, assessment,
            [c.to_candidate_draft(draft.problem_frame) for c in draft.candidates],
            operator_set_id=draft.operator_set_id,
            operator_set_version=draft.operator_set_version,
        )
    except ValueError as exc:
        raise BundleSealError("candidate_does_not_reconstruct", str(exc)) from exc
    inputs = tuple(build_replay_input(chain, i, manifest)
                   for i in range(len(chain.run.candidate_attempts)))
    bundle = ReplayBundle(chain, inputs)
    _refuse_unreplayable(bundle, draft, manifest)
    return bundle


def _refuse_unreplayable(bundle: ReplayBundle, draft: SearchDraft,
                        manifest: AuthorityManifest) -> None:
    """Raise ``BundleSealError`` (``candidate_does_not_replay``) for the first candidate
    replay would refuse as an integrity failure.

    Every check replay makes on the chain is a function of the draft alone
    once the chain is sealed from it, so each attempt is put through replay's
    own validation (``kernel.replay.validate``, which runs no authority); a
    refusal there is a defect of the draft (a bug of the search process) and
    must be reported now, not later as tampering (issue 20, finding 4).
    Refusals that depend on the authorities (a target not allowlisted, an
    obligation the manifest does not support) are outcomes, not defects.
    """
    chain = bundle.chain
    facts = examine_run(
        chain.run,
        shared=(chain.problem_frame, chain.assessment, chain.gate, chain.budget, chain.residuals),
    )
    for index, request in enumerate(requests_from_bundle(bundle)):
        checked = validate(request, manifest, facts=facts)
        if isinstance(checked, ReplayAdapterRefusal) and checked.replay_disposition in _INTEGRITY:
            candidate = draft.candidates[index]
            reasons = ", ".join(checked.reason_codes)
            raise BundleSealError(
                "candidate_does_not_replay",
                f"candidate {index} (operator {candidate.operator_id} "
                f"{candidate.operator_version}): {reasons}: {checked.explanation}; replay "
                f"would refuse it as {checked.replay_disposition.value}",
            )


# --- draft streams (what ``kernel bundle`` reads for runs of any size) -------------------


@final
@attrs.frozen
class DraftHeader:
    """A draft without its candidates (they follow, one a line)."""

    problem_frame: ProblemFrame = attrs.field(validator=attrs.validators.instance_of(ProblemFrame))
    candidate_organ: str = attrs.field(validator=NAME)
    operator_set_id: str = attrs.field(validator=NAME)
    operator_set_version: str = attrs.field(validator=NAME)


@final
@attrs.frozen
class _DraftHeaderLine:
    format: str
    header: DraftHeader


def draft_stream_lines(draft: SearchDraft, limits: BundleLimits = BUNDLE_LIMITS) -> Iterator[bytes]:
    """A draft as JSON Lines: a header line, then one ``DraftCandidate`` a line."""
    header = _DraftHeaderLine(DRAFT_STREAM_FORMAT, DraftHeader(
        draft.problem_frame, draft.candidate_organ, draft.operator_set_id,
        draft.operator_set_version,
    ))
    yield _encode(unstructure(header), limits, "draft header line") + b"\n"
    for index, candidate in enumerate(draft.candidates):
        yield _encode(unstructure(candidate), limits, f"candidate line {index}") + b"\n"


def read_draft_stream(
    lines: Iterable[bytes | None], limits: BundleLimits = BUNDLE_LIMITS
) -> SearchDraft:
    """The draft a draft stream holds (lines without newlines; ``None``: over-long).

    A draft has no attempts yet, so any defect refuses it whole
    (``BundleStreamError``): there is nothing to classify around it.
    """
    header: DraftHeader | None = None
    candidates: list[DraftCandidate] = []
    for number, line in enumerate(lines, start=1):
        if line is None:
            raise BundleStreamError("line_too_large",
                                    f"line {number}: more than {limits.line_bytes} bytes")
        try:
            value = parse_json(line, max_bytes=limits.line_bytes, max_depth=limits.depth)
            if header is None:
                stated = value.get("format") if isinstance(value, dict) else None
                if stated != DRAFT_STREAM_FORMAT:
                    raise SerdeError("unsupported_draft_format", "$.format",
                                     f"{stated!r} is not {DRAFT_STREAM_FORMAT!r}")
                header = structure(value, _DraftHeaderLine).header
            else:
                candidates.append(structure(value, DraftCandidate))
        except SerdeError as exc:
            raise BundleStreamError(exc.code, f"line {number}: {exc.path}: {exc.message}") from exc
    if header is None:
        raise BundleStreamError("stream_truncated", "no header line")
    try:
        return SearchDraft(header.problem_frame, header.candidate_organ, header.operator_set_id,
                           header.operator_set_version, tuple(candidates))
    except (TypeError, ValueError) as exc:
        raise BundleStreamError("schema_mismatch", f"the draft: {exc}") from exc
