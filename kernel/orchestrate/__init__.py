"""The orchestrator (impure): the run's attempts in canonical order, with external evidence.

It sits above the pure core and the external protocol and imports downwards
only (``kernel.replay``, ``kernel.organs``, ``kernel.verification``,
``kernel.external``, ``kernel.serde``, ``kernel.identity``); nothing pure
imports it. See ``adr/0006-orchestrator-and-main-job.md``. The audit and
attestation of stored runs are not orchestration: they live in
``kernel.audit``, the layer above this one; the SMT producer and checker the
certifier runs are programs, not modules (``kernel/programs/``).

- ``replay_bundle`` / ``replay_requests``: validate -> replay_contract ->
  (``provider.gather`` on an optional ``concurrent.futures.Executor``) ->
  replay_proofs -> dispose, outcomes in the run's order;
- ``open_executor(ExecutorSpec(...))``: that executor (inline, a spawn
  process pool, or Dask distributed), closed on exit (ADR-0008);
- ``EvidenceProvider``: the seam; ``NoEvidence`` gathers nothing; a
  ``TaskProvider`` also cuts each attempt down to an ``EvidenceTask``, which
  is all that crosses an executor (ADR-0008);
- the work directory's protocol (``_work_dir``): ``run_state``, ``recorded_outcomes``,
  ``clear_unrecorded``, ``keep_bundle``, ``mark_interrupted``, ``WorkDirError``;
- sharded runs (ADR 0020): ``open_sharded``'s shards (``Shard``, ``SharedRun``)
  classified on ``process_shards`` / ``dask_shards`` / ``shards_beside``
  runners, and ``replay_shards`` for the main job's certifying shards;
- ``ExternalCertifier``: evidence for ``arithmetic.target_certified`` from
  the pinned z3 -> cvc5 pair (``discover_tools``, ``certification_entry``),
  sealed by the verification adapter in an independent session; its tasks
  are ``CertificationTask`` values.

Names are imported lazily (PEP 562 ``__getattr__``): ``from kernel.orchestrate
import ExternalCertifier`` loads the certifier and what it needs, nothing
else. A spawned pool worker
or a Dask worker unpickling a task imports only ``_driver`` and the provider's
own module, which keeps worker start-up and ``kernel run`` start-up small
(issue 10, items 6 and 7).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names, for type checkers and readers; loaded on first use
    from kernel.orchestrate._backend import backend_output
    from kernel.orchestrate._certifier import (
        CERTIFICATION_RECORD,
        CERTIFIED_BY,
        EVIDENCE_SOURCE,
        RUN_ID,
        CertificationTask,
        ExternalCertifier,
        author_session,
        producer_session,
    )
    from kernel.orchestrate._driver import gather_safely, replay_bundle, replay_requests
    from kernel.orchestrate._evidence_store import (
        EvidenceStore,
        Hit,
        InsertResult,
        Miss,
        MissReason,
        store_key,
    )
    from kernel.orchestrate._executors import (
        MAX_WORKERS,
        ExecutorKind,
        ExecutorSpec,
        TlsFiles,
        check_executor_spec,
        open_executor,
    )
    from kernel.orchestrate._inflight import FirstOfKey
    from kernel.orchestrate._provider import (
        EvidenceProvider,
        EvidenceTask,
        NoEvidence,
        TaskProvider,
    )
    from kernel.orchestrate._recheck import RECHECK_ID
    from kernel.orchestrate._sharded_run import Settled, replay_shards
    from kernel.orchestrate._shards import (
        DEFAULT_SHARD_SIZE,
        RUN_SHARD_SIZE,
        Shard,
        ShardError,
        ShardRunner,
        SharedRun,
        classify_item,
        dask_shards,
        process_shards,
        shards_beside,
        shared_document,
        shared_stream,
    )
    from kernel.orchestrate._tools import (
        BACKENDS_DIR,
        CERTIFY_CHECK_ID,
        CERTIFY_OBLIGATION,
        CERTIFY_SPECIFICATION,
        CertifierTools,
        certification_entry,
        discover_tools,
    )
    from kernel.orchestrate._work_dir import (
        ATTEMPT_DIR,
        BUNDLE_COPY,
        BUNDLE_PARTIAL,
        BUNDLE_STREAM_COPY,
        INTERRUPTED_FILE,
        OUTCOMES_FILE,
        STATE_FILE,
        WorkDirError,
        check_fresh_work_dir,
        clear_unrecorded,
        create_work_dir,
        holds_nothing,
        keep_bundle,
        mark_interrupted,
        recorded_count,
        recorded_outcomes,
        run_state,
        still_as_left,
    )
    from kernel.orchestrate.errors import CertifierSetupError, ExecutorSetupError, OrchestrateError

# name -> the submodule that defines it
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "CERTIFICATION_RECORD",
            "CERTIFIED_BY",
            "EVIDENCE_SOURCE",
            "CertificationTask",
            "ExternalCertifier",
            "RUN_ID",
            "author_session",
            "producer_session",
        ),
        "kernel.orchestrate._certifier",
    ),
    **dict.fromkeys(
        (
            "EvidenceStore",
            "Hit",
            "InsertResult",
            "Miss",
            "MissReason",
            "store_key",
        ),
        "kernel.orchestrate._evidence_store",
    ),
    **dict.fromkeys(
        (
            "gather_safely",
            "replay_bundle",
            "replay_requests",
        ),
        "kernel.orchestrate._driver",
    ),
    "FirstOfKey": "kernel.orchestrate._inflight",
    "backend_output": "kernel.orchestrate._backend",
    "RECHECK_ID": "kernel.orchestrate._recheck",
    **dict.fromkeys(("Settled", "replay_shards"), "kernel.orchestrate._sharded_run"),
    **dict.fromkeys(
        (
            "DEFAULT_SHARD_SIZE",
            "RUN_SHARD_SIZE",
            "Shard",
            "ShardError",
            "ShardRunner",
            "SharedRun",
            "classify_item",
            "dask_shards",
            "process_shards",
            "shards_beside",
            "shared_document",
            "shared_stream",
        ),
        "kernel.orchestrate._shards",
    ),
    **dict.fromkeys(
        (
            "ExecutorKind",
            "ExecutorSpec",
            "MAX_WORKERS",
            "TlsFiles",
            "check_executor_spec",
            "open_executor",
        ),
        "kernel.orchestrate._executors",
    ),
    **dict.fromkeys(
        (
            "EvidenceProvider",
            "EvidenceTask",
            "NoEvidence",
            "TaskProvider",
        ),
        "kernel.orchestrate._provider",
    ),
    **dict.fromkeys(
        (
            "BACKENDS_DIR",
            "CERTIFY_CHECK_ID",
            "CERTIFY_OBLIGATION",
            "CERTIFY_SPECIFICATION",
            "CertifierTools",
            "certification_entry",
            "discover_tools",
        ),
        "kernel.orchestrate._tools",
    ),
    **dict.fromkeys(
        (
            "ATTEMPT_DIR",
            "BUNDLE_COPY",
            "BUNDLE_PARTIAL",
            "BUNDLE_STREAM_COPY",
            "INTERRUPTED_FILE",
            "OUTCOMES_FILE",
            "STATE_FILE",
            "WorkDirError",
            "check_fresh_work_dir",
            "clear_unrecorded",
            "create_work_dir",
            "holds_nothing",
            "keep_bundle",
            "mark_interrupted",
            "recorded_count",
            "recorded_outcomes",
            "run_state",
            "still_as_left",
        ),
        "kernel.orchestrate._work_dir",
    ),
    **dict.fromkeys(
        (
            "CertifierSetupError",
            "ExecutorSetupError",
            "OrchestrateError",
        ),
        "kernel.orchestrate.errors",
    ),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ATTEMPT_DIR",
    "BACKENDS_DIR",
    "BUNDLE_COPY",
    "BUNDLE_PARTIAL",
    "BUNDLE_STREAM_COPY",
    "CERTIFICATION_RECORD",
    "CERTIFIED_BY",
    "CERTIFY_CHECK_ID",
    "CERTIFY_OBLIGATION",
    "CERTIFY_SPECIFICATION",
    "CertificationTask",
    "CertifierSetupError",
    "CertifierTools",
    "DEFAULT_SHARD_SIZE",
    "EVIDENCE_SOURCE",
    "EvidenceProvider",
    "EvidenceStore",
    "EvidenceTask",
    "ExecutorKind",
    "ExecutorSetupError",
    "ExecutorSpec",
    "ExternalCertifier",
    "FirstOfKey",
    "Hit",
    "INTERRUPTED_FILE",
    "InsertResult",
    "MAX_WORKERS",
    "Miss",
    "MissReason",
    "NoEvidence",
    "OUTCOMES_FILE",
    "OrchestrateError",
    "RECHECK_ID",
    "RUN_ID",
    "RUN_SHARD_SIZE",
    "STATE_FILE",
    "Settled",
    "Shard",
    "ShardError",
    "ShardRunner",
    "SharedRun",
    "TaskProvider",
    "TlsFiles",
    "WorkDirError",
    "author_session",
    "backend_output",
    "certification_entry",
    "check_executor_spec",
    "check_fresh_work_dir",
    "classify_item",
    "clear_unrecorded",
    "create_work_dir",
    "dask_shards",
    "discover_tools",
    "gather_safely",
    "holds_nothing",
    "keep_bundle",
    "mark_interrupted",
    "open_executor",
    "process_shards",
    "producer_session",
    "recorded_count",
    "recorded_outcomes",
    "replay_bundle",
    "replay_requests",
    "replay_shards",
    "run_state",
    "shards_beside",
    "shared_document",
    "shared_stream",
    "still_as_left",
    "store_key",
]
