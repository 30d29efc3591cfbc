"""ExternalCertifier: evidence for ``arithmetic.target_certified`` from a real SMT pair.

Theory of operation (ADR-0006; seed 003; ADR-0003 "Receipt bridge"), for one
``ContractClosed`` attempt whose obligations include ``TARGET_CERTIFIED``
(``task_for`` takes from the state, in the driver, only what the steps below
read: the attempt's ids, its obligation refs and its candidate frame; the
steps run in the ``CertificationTask``, wherever the executor runs it,
ADR-0008):

1. ``certification_problem`` of the exact candidate frame (pure);
2. ``plan_verification(certification_spec(...))``: an assurance request
   authored by the search run's session (``search-run:<run_id>``), bound to
   the candidate, the problem digest, the check digest and the check's
   content digest (ADR-0019);
3. a fresh attempt directory ``work_dir/<attempt_id>/`` (absent or empty;
   never reused): ``repository/certification.smt2`` (the problem),
   ``manifest.json`` (the pinned entry, loaded back strictly), and ``run/``
   (``run_check`` with job ``certify-<attempt_id>``: z3 produces, cvc5
   checks);
4. a PASS counts only if the run's specification digest is the planned
   problem's digest and its check digest the planned check's (else no
   evidence); the ``RunOutcome`` becomes the backend output document (``vkit-smt``,
   ``backend_version`` = check digest, verdict ``verified`` for PASS and
   ``unknown`` for BLOCKED with the reason in ``detail``; ``evidence`` = the
   retained digests);
5. ``seal_verification`` with ``Producer(test_engineer,
   "kernel-certifier:<check digest prefix>")``, a session independent of
   the author;
6. one ``ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE,
   dumps(CertificationEvidence(request, receipt)))``, whose document is also
   kept as ``work_dir/<attempt_id>/certification.json`` for audit.

Rules:

- ``gather`` never raises: a missing problem, a planning or sealing
  rejection, a refused directory, an I/O or manifest failure each give no
  evidence plus a warning on the ``kernel.orchestrate`` logger; the pure
  authority then reports ``unavailable`` (fail closed). Nothing here can
  turn a failure into a PASS: only ``run_check``'s PASS maps to ``verified``.
- The output document holds no path of the work directory (``detail`` has
  it replaced by ``<work-dir>``), so the receipt, and with it every outcome
  id, is the same wherever the work directory lies and whichever executor
  ran the attempt.
- Deadlines, the child environment and the work directory are fields of the
  certifier, given by the caller.
- With an evidence ``store`` (``_evidence_store``, ADR-0019), step 3 first
  looks up the key of (the check's content digest, the problem digest): a
  hit whose every artifact holds its recorded digest is written into the
  run's ``evidence/`` by the kernel and the producer does not run; the
  currently pinned checker still runs on it with a fresh request. A miss
  (absent, or corrupt: reported and moved aside) runs both steps, and the
  evidence of a PASS is inserted. ``work_dir/<attempt_id>/evidence-source.json``
  records which: ``{"evidence": "produced"|"reused", "insert": ..., "key":
  ..., "lookup": "off"|"hit"|<miss reason>}``; ``insert`` is ``conflict``
  when the store already held other artifacts for the same key (the producer
  is not deterministic; the stored ones are kept, never mixed in). The
  outcome never depends on it (ADR-0019: the closing reason names the
  certification by content).
- A repeat within a run (``CertificationTask.certified_by``, set by the
  driver through ``reusing`` when an earlier attempt of the run passed the
  same store key: ADR-0019 "A repeat within a run") runs no step: once the
  earlier attempt's ``run/metadata.json`` reads back strictly as a PASS of
  ``certify-<that attempt>`` on this problem's digest and this check's
  digest, the attempt directory gets the problem, the manifest copy and
  ``certified-by.json`` naming that attempt, and no ``run/``; the request is
  planned for this attempt's candidate as always, and the receipt sealed
  over the earlier run's backend output (``candidate`` this attempt's).
  ``evidence-source.json`` says ``{"evidence": "reused", "lookup": "run",
  "certified_by": <attempt>}``. If the earlier run does not read back so,
  the attempt is certified as if it were the first (a note says why).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, final

import attrs

from kernel.external import (
    CheckEntry,
    ExternalError,
    Manifest,
    RunLimits,
    RunOutcome,
    RunRecordError,
    Status,
    content_digest,
    identity_object,
    load_manifest,
    process_pin_cache,
    read_run_metadata,
    run_check,
    seal_job,
)
from kernel.frames import ProblemFrame
from kernel.identity import JsonValue, canonical_json, digest
from kernel.orchestrate._attempt_record import (
    AttemptRecord,
    RecordRefused,
    land_record,
    matches_record,
    take_record,
)
from kernel.orchestrate._backend import backend_output
from kernel.orchestrate._evidence_store import EvidenceStore, Hit, InsertResult, store_key
from kernel.orchestrate._landed import landed_check_digest
from kernel.orchestrate._recheck import rechecked_on_driver
from kernel.orchestrate._tools import CERTIFY_SPECIFICATION, this_machine_entry
from kernel.organs import (
    CERTIFICATION_MEDIA_TYPE,
    TARGET_CERTIFIED,
    CertificationEvidence,
    certification_problem,
    certification_spec,
    problem_digest,
)
from kernel.replay import ContractClosed, ProofEvidence
from kernel.serde import SerdeError, dumps, loads
from kernel.verification import (
    Producer,
    Rejection,
    Role,
    plan_verification,
    seal_verification,
)
from kernel.verification import Status as ReceiptStatus

__all__ = [
    "CERTIFICATION_RECORD",
    "CERTIFIED_BY",
    "RUN_ID",
    "CertificationTask",
    "Rederive",
    "ExternalCertifier",
    "author_session",
    "backend_output",
    "producer_session",
]

LOG: Final = logging.getLogger("kernel.orchestrate")
RUN_ID: Final = "run"
CERTIFICATION_RECORD: Final = "certification.json"
EVIDENCE_SOURCE: Final = "evidence-source.json"
CERTIFIED_BY: Final = "certified-by.json"
_ATTEMPT_ID: Final = re.compile(r"[0-9a-f]{64}")
_REPLAYS: Final = f"{RUN_ID}/replays"


#: The driver's own derivation of a landed attempt's certification (``kernel.audit``'s
#: ``rederive_certification``: every receipt rule, as audit and resume apply them):
#: the certification, or None with the reasons.
Rederive = Callable[[Path], tuple[CertificationEvidence | None, tuple[str, ...]]]
# Beyond the evidence limit, what an attempt directory holds besides its
# artifacts: four step logs, the receipt, and the kernel's own small records.
_RECORD_OVERHEAD: Final = 16 * 1024 * 1024


def certified_by_document(attempt_id: str) -> bytes:
    """The bytes of ``certified-by.json``: the earlier attempt whose run certified this one."""
    return canonical_json({"attempt_id": attempt_id, "certified_by_version": 1}) + b"\n"


def author_session(run_id: str) -> str:
    """The session that authored every candidate of search run ``run_id``."""
    return f"search-run:{run_id}"


def producer_session(check_digest: str) -> str:
    """The certifier's own session: named by the pinned check, never by the run."""
    return f"kernel-certifier:{check_digest[:16]}"


def _environment(value: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    pairs = tuple(sorted(dict(value).items()))
    for key, item in pairs:
        if type(key) is not str or type(item) is not str:
            raise TypeError("environment keys and values must be str")
    return pairs


def _absolute_path(value: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(value))


class _NoEvidence(Exception):
    """Internal: this attempt gets no evidence; the message is the note."""


@final
@attrs.frozen
class ExternalCertifier:
    """An ``EvidenceProvider`` that certifies targets with the pinned z3 -> cvc5 pair.

    ``work_dir`` is where attempt directories are laid out (absolute);
    ``entry`` is the pinned check (``certification_entry``); ``limits`` the
    producer and checker deadlines; ``environment`` the exact child
    environment. A ``TaskProvider``: what crosses an executor is its
    ``CertificationTask`` for each attempt (it and the certifier are
    picklable), never the attempt's state or run.
    """

    work_dir: Path = attrs.field(converter=_absolute_path)
    entry: CheckEntry = attrs.field(validator=attrs.validators.instance_of(CheckEntry))
    limits: RunLimits = attrs.field(validator=attrs.validators.instance_of(RunLimits))
    environment: tuple[tuple[str, str], ...] = attrs.field(converter=_environment)
    store: EvidenceStore | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(EvidenceStore)),
    )
    # How the driver derives a certification that came back from a worker
    # (ADR 0022); None: the worker's evidence is kept once its record lands.
    rederive: Rederive | None = attrs.field(default=None)
    # --resume (ADR 0022): an attempt directory the interrupted run landed may be
    # kept instead of certified again (``kept_already``); off for a fresh run.
    adopt: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    # The driver re-runs its pinned checker on what a worker returns (``_recheck``).
    recheck: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @property
    def record_limit(self) -> int:
        """The bytes an attempt's record may hold on its way back to the driver."""
        return (self.limits.evidence_limit_bytes + 4 * self.limits.output_limit_bytes
                + self.limits.receipt_limit_bytes + _RECORD_OVERHEAD)

    def keep(
        self, task: CertificationTask, evidence: tuple[ProofEvidence, ...],
        record: AttemptRecord | None,
    ) -> tuple[tuple[ProofEvidence, ...], tuple[str, ...]]:
        """On the driver: land what a worker sent back for ``task``; the evidence that counts.

        The record is written into this work directory (or, where the worker
        shares it, must already be there byte for byte). Then the
        certification counts only as this driver derives it again from the
        landed directory: the request it would plan itself, every receipt
        rule (``rederive``), and the very document the worker returned. Any
        difference is no evidence plus a note (ADR 0022), never a PASS.
        """
        label = f"attempt {task.attempt_id[:16]}"
        if record is None:
            if evidence:
                return (), (f"{label}: its worker returned evidence without the attempt's "
                            "record; not counted",)
            return evidence, ()
        target = self.work_dir / task.attempt_id
        try:
            if any(e.path == _REPLAYS or e.path.startswith(_REPLAYS + "/") for e in record.entries):
                raise RecordRefused("a worker's record holds no replay (the driver's own go there)")
            if target.exists() or target.is_symlink():
                if not matches_record(target, record, self.record_limit):
                    raise RecordRefused(f"{target} differs from the record its worker returned")
            else:
                land_record(self.work_dir, record, task.attempt_id, self.record_limit)
        except (RecordRefused, OSError) as exc:
            return (), (f"{label}: the record from its worker was refused: {exc}",)
        if not evidence or self.rederive is None:
            return evidence, ()
        derived, why = self._derived(task, target)
        if why is None and evidence != _evidence_of(derived):
            why = "the evidence returned is not what its record derives"
        problem = certification_problem(task.candidate_frame)
        if (why is None and self.recheck and problem is not None and derived is not None
                and derived.receipt.status is ReceiptStatus.VERIFIED):  # only a pass can mislead
            why = rechecked_on_driver(target, RUN_ID, self.entry, problem, self.limits,
                                      dict(self.environment))
        if why is not None:
            return (), (f"{label}: the certification from its worker is not counted: {why}",)
        if (self.store is not None and problem is not None and derived is not None
                and derived.receipt.status is ReceiptStatus.VERIFIED):
            return evidence, self._stored_from(target, problem, label)
        return evidence, ()

    def _stored_from(self, target: Path, problem: str, label: str) -> tuple[str, ...]:
        """A counted pass that came home, into the driver's own store (a worker's is its
        own); stored evidence is never trusted (its checker runs on each reuse)."""
        try:
            metadata = read_run_metadata(target / RUN_ID / "metadata.json")
            key = store_key(self.check_content_digest, problem_digest(problem))
            inserted = self._insert(key, problem_digest(problem),
                                    RunOutcome(str(target / RUN_ID), metadata))
        except (RunRecordError, OSError) as exc:
            return (f"{label}: not stored in the evidence store: {exc}",)
        if inserted is InsertResult.CONFLICT:
            return (f"{label}: the evidence store holds other evidence for its problem; "
                    "the stored evidence is kept",)
        return ()

    def kept_already(self, task: CertificationTask) -> tuple[ProofEvidence, ...] | None:
        """On the driver, before ``task`` is sent: what the interrupted run left, if it counts.

        Only with ``adopt`` (``--resume``). An attempt directory that the
        interrupted run landed counts as one just back from a worker would:
        derived here under every receipt rule, the request this attempt
        plans. It is kept only with a verified receipt, since a failure may
        be the interrupt's own doing. Then nothing runs. Anything else is
        removed, with a note, and the attempt is certified afresh.
        None: certify it.
        """
        target = self.work_dir / task.attempt_id
        if not self.adopt or not (target.exists() or target.is_symlink()):
            return None
        why: str | None
        if self.recheck:  # kept only as the driver's checker passed it: run it again whole
            why = "this run re-checks on the driver"
        elif target.is_dir() and not target.is_symlink() and self.rederive is not None:
            derived, why = self._derived(task, target)
            if derived is not None and why is None:
                if derived.receipt.status is ReceiptStatus.VERIFIED:
                    return _evidence_of(derived)
                why = f"its receipt is {derived.receipt.status.value}, not verified"
        else:
            why = "not an attempt directory" if self.rederive is not None else "not derived"
        LOG.warning("attempt %s: the certification the interrupted run left is not kept (%s); "
                    "certifying it again", task.attempt_id[:16], why)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
        return None

    def _derived(
        self, task: CertificationTask, target: Path
    ) -> tuple[CertificationEvidence | None, str | None]:
        """The certification ``target`` derives on this driver, or why it does not count."""
        assert self.rederive is not None
        derived, reasons = self.rederive(target)
        why = (f"it does not derive on the driver: {reasons[0]}" if reasons
               else "no certification derives from it" if derived is None
               else "the request is not the one this attempt plans" if
               derived.request != self._planned_request(
                   task, landed_check_digest(target, self.entry, self.check_digest))
               else None)
        return derived, why

    def _planned_request(self, task: CertificationTask, check_digest: str | None = None) -> object:
        problem = certification_problem(task.candidate_frame)
        if problem is None:
            return None
        plan = plan_verification(certification_spec(
            candidate_digest=task.candidate_digest, author_session=author_session(task.run_id),
            problem=problem, check_digest=check_digest or self.check_digest,
            check_content_digest=self.check_content_digest))
        return None if isinstance(plan, Rejection) else plan.request

    def on_this_machine(self) -> ExternalCertifier:
        """This certifier with this machine's own install, where it holds the same bytes.

        Where every pinned path of ``entry`` exists, nothing changes (its pins
        are checked as ever). Otherwise this machine's tools, found next to
        its interpreter, are used when their content digest is the entry's
        (issue 36, deliverable 3); else the entry stays and fails closed here.
        """
        pinned = [self.entry.producer.executable, self.entry.checker.executable,
                  *self.entry.producer.dependencies, *self.entry.checker.dependencies]
        if all(os.path.exists(pin.path) for pin in pinned):
            return self
        local = this_machine_entry()
        if local is None or local.check_id != self.entry.check_id:
            return self
        if content_digest(local) != self.check_content_digest:
            LOG.warning("this machine's certify tools are not the driver's bytes (content "
                        "digest %s, the driver's %s)", content_digest(local)[:16],
                        self.check_content_digest[:16])
            return self
        return attrs.evolve(self, entry=local)

    @property
    def check_digest(self) -> str:
        """The digest of the approved entry (its identity object); pins are not hashed here."""
        return digest(identity_object(self.entry))

    @property
    def check_content_digest(self) -> str:
        """The entry's content digest: its pins by SHA-256 and role, no path (ADR-0019)."""
        return content_digest(self.entry)

    def gather(self, state: ContractClosed) -> tuple[ProofEvidence, ...]:
        """One certification item for ``state``, or ``()`` (with a logged note)."""
        return self.task_for(state).gather()

    def task_for(self, state: ContractClosed) -> CertificationTask:
        """What certifying ``state`` reads, and nothing else of it (its run stays here)."""
        replay_input = state.validated.request.replay_input
        frame = state.validated.candidate_frame
        return CertificationTask(
            self,
            attempt_id=replay_input.attempt_id,
            run_id=replay_input.run_id,
            candidate_digest=replay_input.candidate_digest,
            obligation_refs=replay_input.proof_obligation_refs,
            candidate_frame=frame,
            in_flight_key=self._in_flight_key(replay_input.proof_obligation_refs, frame),
        )

    def _in_flight_key(self, obligations: tuple[str, ...], frame: ProblemFrame) -> str | None:
        """The store key the task will look up, for the driver to order by; None without a store.

        Only the order of submission depends on it (``_inflight``): the task
        computes its key again where it runs, from what it certifies.
        """
        if self.store is None or TARGET_CERTIFIED not in obligations:
            return None
        problem = certification_problem(frame)
        if problem is None:
            return None
        return store_key(self.check_content_digest, problem_digest(problem))

    def _gather(self, task: CertificationTask) -> tuple[ProofEvidence, ...]:
        if TARGET_CERTIFIED not in task.obligation_refs:
            return ()
        label = f"attempt {task.attempt_id[:16]}"
        try:
            return (self._certify(task),)
        except _NoEvidence as reason:
            LOG.warning("%s: no %s evidence: %s", label, TARGET_CERTIFIED, reason)
        except Exception as exc:  # any failure of the shell is no evidence, never a verdict
            LOG.warning(
                "%s: no %s evidence: %s: %s", label, TARGET_CERTIFIED, type(exc).__name__, exc
            )
        return ()

    def _certify(self, task: CertificationTask) -> ProofEvidence:
        problem = certification_problem(task.candidate_frame)
        if problem is None:
            raise _NoEvidence("the candidate frame has no certification problem")
        check_digest = self.check_digest
        plan = plan_verification(
            certification_spec(
                candidate_digest=task.candidate_digest,
                author_session=author_session(task.run_id),
                problem=problem,
                check_digest=check_digest,
                check_content_digest=self.check_content_digest,
            )
        )
        if isinstance(plan, Rejection):
            raise _NoEvidence(f"planning rejected: {plan.code.value}: {plan.message}")
        outcome = None
        if task.certified_by is not None:
            outcome = self._reused(task.attempt_id, task.certified_by, problem)
        if outcome is None:
            outcome = self._run(task.attempt_id, task.candidate_digest, problem)
        checked = outcome.metadata.checked
        ran = (checked.specification_digest, checked.check_digest)
        if outcome.status is Status.PASS and ran != (problem_digest(problem), check_digest):
            # The plan binds the problem and the check; a PASS about anything else
            # (the specification changed on disk before the snapshot) closes nothing.
            raise _NoEvidence(
                "the run's specification or check digest is not the planned problem's"
            )
        output = backend_output(
            outcome,
            candidate_digest=task.candidate_digest,
            check_digest=check_digest,
            work_dir=self.work_dir,
        )
        receipt = seal_verification(
            plan, output, Producer(Role.TEST_ENGINEER, producer_session(check_digest))
        )
        if isinstance(receipt, Rejection):
            raise _NoEvidence(f"sealing rejected: {receipt.code.value}: {receipt.message}")
        document = dumps(CertificationEvidence(plan.request, receipt))
        (self.work_dir / task.attempt_id / CERTIFICATION_RECORD).write_bytes(document + b"\n")
        return ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, document)

    def _reused(self, attempt_id: str, first: str, problem: str) -> RunOutcome | None:
        """The earlier attempt ``first``'s passed run, for this attempt; None: certify anew.

        Nothing of this attempt's directory is written unless the earlier run
        reads back strictly as a PASS of this problem under this check.
        """
        found = self._first_run(attempt_id, first, problem)
        if isinstance(found, str):
            LOG.warning(
                "attempt %s: not reusing attempt %s's certification (%s); certifying it anew",
                attempt_id[:16], first[:16], found,
            )  # fmt: skip
            return None
        attempt, _ = self._prepared_attempt(attempt_id, problem)
        (attempt / CERTIFIED_BY).write_bytes(certified_by_document(first))
        source: dict[str, JsonValue] = {
            "certified_by": first,
            "evidence": "reused",
            "insert": None,
            "key": store_key(self.check_content_digest, problem_digest(problem)),
            "lookup": "run",
        }
        (attempt / EVIDENCE_SOURCE).write_bytes(canonical_json(source) + b"\n")
        return found

    def _first_run(self, attempt_id: str, first: str, problem: str) -> RunOutcome | str:
        """``first``'s run as this attempt's, or why it cannot be."""
        if not _ATTEMPT_ID.fullmatch(first) or first == attempt_id:
            return "not another attempt of this run"
        run = self.work_dir / first / RUN_ID
        try:
            metadata = read_run_metadata(run / "metadata.json")
        except RunRecordError as exc:
            return f"{exc.code}: {exc.message}"
        expected = (Status.PASS, f"certify-{first}", problem_digest(problem), self.check_digest)
        found = (
            metadata.decision.status,
            metadata.run.job_id,
            metadata.checked.specification_digest,
            metadata.checked.check_digest,
        )
        if found != expected:
            return "its run is not a PASS of this problem under this check"
        return RunOutcome(str(run), metadata)

    def _prepared_attempt(self, attempt_id: str, problem: str) -> tuple[Path, Path]:
        """A fresh attempt directory with the problem and the manifest copy; and the manifest."""
        attempt = self._fresh_attempt_dir(attempt_id)
        repository = attempt / "repository"
        repository.mkdir()  # exclusive: a concurrent claim on the same attempt fails here
        (repository / CERTIFY_SPECIFICATION).write_bytes(problem.encode("utf-8"))
        manifest_path = attempt / "manifest.json"
        manifest_path.write_bytes(dumps(Manifest(1, (self.entry,))) + b"\n")
        return attempt, manifest_path

    def _run(self, attempt_id: str, candidate_digest: str, problem: str) -> RunOutcome:
        attempt, manifest_path = self._prepared_attempt(attempt_id, problem)
        repository = attempt / "repository"
        try:
            manifest = load_manifest(manifest_path, repository_root=repository)
            entry = manifest.entry(self.entry.check_id)
        except ExternalError as exc:
            raise _NoEvidence(f"manifest refused: {exc}") from exc
        if entry != self.entry:
            raise _NoEvidence("the manifest read back is not the approved entry")
        job = seal_job(
            f"certify-{attempt_id}",
            entry.check_id,
            f"{TARGET_CERTIFIED} for candidate {candidate_digest}",
        )
        key = store_key(self.check_content_digest, problem_digest(problem))
        source: dict[str, JsonValue] = {
            "certified_by": None, "evidence": "produced", "insert": None, "key": key,
        }
        supplied: dict[str, bytes] | None = None
        if self.store is None:
            source["lookup"] = "off"
        else:
            found = self.store.load(key, entry.evidence_artifacts)
            if isinstance(found, Hit):
                supplied, source["lookup"], source["evidence"] = found.evidence, "hit", "reused"
            else:
                source["lookup"] = found.reason.value
                if found.corrupt:
                    LOG.warning(
                        "attempt %s: evidence store entry %s is corrupt (%s: %s); "
                        "producing the evidence again",
                        attempt_id[:16], key[:16], found.reason.value, found.detail,
                    )
        outcome = run_check(
            entry,
            job,
            repository_root=repository,
            manifest_path=manifest_path,
            run_root=attempt,
            run_id=RUN_ID,
            limits=self.limits,
            environment=dict(self.environment),
            supplied_evidence=supplied,
            pins=process_pin_cache(),
        )
        if self.store is not None and supplied is None and outcome.status is Status.PASS:
            inserted = self._insert(key, problem_digest(problem), outcome)
            source["insert"] = inserted.value
            if inserted is InsertResult.CONFLICT:
                LOG.warning(
                    "attempt %s: the producer's evidence differs from the stored evidence "
                    "for the same problem and check (nondeterministic producer); "
                    "the stored evidence is kept",
                    attempt_id[:16],
                )
        (attempt / EVIDENCE_SOURCE).write_bytes(canonical_json(source) + b"\n")
        return outcome

    def _insert(self, key: str, problem_sha: str, outcome: RunOutcome) -> InsertResult:
        """The evidence of a PASS into the store, each artifact read back against its digest."""
        assert self.store is not None
        evidence = Path(outcome.attempt_dir) / "evidence"
        artifacts: dict[str, bytes] = {}
        for recorded in outcome.metadata.checked.artifacts:
            data = (evidence / recorded.path).read_bytes()
            if hashlib.sha256(data).hexdigest() != recorded.sha256:
                return InsertResult.FAILED
            artifacts[recorded.path] = data
        return self.store.insert(
            key,
            check_content_digest=self.check_content_digest,
            specification_digest=problem_sha,
            artifacts=artifacts,
        )

    def _fresh_attempt_dir(self, attempt_id: str) -> Path:
        attempt = self.work_dir / attempt_id
        if attempt.is_symlink():
            raise _NoEvidence(f"{attempt} is a symlink")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        attempt.mkdir(exist_ok=True)
        if any(attempt.iterdir()):
            raise _NoEvidence(f"attempt directory {attempt} is not empty (never reused)")
        return attempt



def _evidence_of(derived: CertificationEvidence | None) -> tuple[ProofEvidence, ...]:
    if derived is None:
        return ()
    return (ProofEvidence(TARGET_CERTIFIED, CERTIFICATION_MEDIA_TYPE, dumps(derived)),)


def _names(_: object, attribute: attrs.Attribute[tuple[str, ...]], value: object) -> None:
    if type(value) is not tuple or not all(type(item) is str for item in value):
        raise TypeError(f"{attribute.name} must be a tuple of str")


_TEXT: Final = attrs.validators.instance_of(str)


@final
@attrs.frozen
class CertificationTask:
    """One attempt's certification as it crosses the executor (``ExternalCertifier.task_for``).

    It holds the certifier and what certifying reads of the contract-closed
    state: the attempt's ids, its declared obligations and the exact
    candidate frame; never the request or the run, so its pickled size does
    not grow with the run (ADR-0008). The evidence it returns is bound to
    the attempt by the driver, which kept the state.
    """

    certifier: ExternalCertifier = attrs.field(
        validator=attrs.validators.instance_of(ExternalCertifier)
    )
    attempt_id: str = attrs.field(validator=_TEXT)
    run_id: str = attrs.field(validator=_TEXT)
    candidate_digest: str = attrs.field(validator=_TEXT)
    obligation_refs: tuple[str, ...] = attrs.field(validator=_names)
    candidate_frame: ProblemFrame = attrs.field(
        validator=attrs.validators.instance_of(ProblemFrame)
    )
    # The driver submits one task per key at a time (ADR-0019); never read by ``gather``.
    in_flight_key: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_TEXT)
    )
    # An earlier attempt of the run whose certification of the same key passed.
    certified_by: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_TEXT)
    )

    def gather(self) -> tuple[ProofEvidence, ...]:
        """One certification item, or ``()`` (with a logged note); never raises."""
        here = self.certifier.on_this_machine()
        return here._gather(self if here is self.certifier else attrs.evolve(self, certifier=here))

    def take_record(self) -> AttemptRecord | None:
        """On the worker, after ``gather``: the attempt directory as a value (None: none made)."""
        attempt = self.certifier.work_dir / self.attempt_id
        if not attempt.is_dir() or attempt.is_symlink():
            return None
        try:
            return take_record(attempt, self.certifier.record_limit)
        except (RecordRefused, OSError) as exc:
            LOG.warning("attempt %s: its record cannot be sent back: %s", self.attempt_id[:16], exc)
            return None

    def reusable(self, evidence: tuple[ProofEvidence, ...]) -> bool:
        """Whether a later attempt of this key may reuse this certification: it was verified."""
        if self.in_flight_key is None or len(evidence) != 1:
            return False
        try:
            document = loads(evidence[0].document, CertificationEvidence)
        except SerdeError:
            return False
        return document.receipt.status is ReceiptStatus.VERIFIED

    def reusing(self, first: CertificationTask) -> CertificationTask:
        """This task, to seal its certification over ``first``'s run (same key, earlier)."""
        if first.in_flight_key != self.in_flight_key or first.certifier != self.certifier:
            return self
        return attrs.evolve(self, certified_by=first.attempt_id)
