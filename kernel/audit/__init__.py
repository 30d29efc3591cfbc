"""Verification of stored runs (impure, offline): the audit and the attestation.

A stored run (a ``kernel check run`` run directory, or a ``kernel run`` work
directory) is evidence, never an authority. This package reads one back and
recomputes every content address it carries (``audit_run``; ADR-0010), and
signs what audited intact as an in-toto Statement in a DSSE envelope
(``attest_run`` / ``verify_attestation``). It never runs a producer, a
checker or a solver and never opens the network.

It is not orchestration: it sits above ``kernel.orchestrate`` (whose pure
driver re-derives the outcomes, and whose certifier's record names it
reads) and below the command line; nothing below imports it
(pyproject.toml's import-linter contract, ARCHITECTURE.md "Layers").

- ``audit_run`` / ``detect_layout`` / ``report_document``: the audit;
- ``BUNDLE_COPY`` / ``BUNDLE_STREAM_COPY``: where ``kernel run`` keeps the
  bundle it ran in its work directory, which the audit re-derives from;
- ``StoredCertifications``: the certifications of a work directory, each
  handed to the pure core only once its attempt audits intact (the audit's
  re-derivation and ``kernel run --resume`` use it);
- ``attest_run`` / ``verify_attestation`` and the key helpers: the signed
  Statement (the ``attest`` extra's cryptography is imported on first use),
  and beside it the SLSA Verification Summary (``VSA_PREDICATE_TYPE``,
  ``SUMMARY_FILE``, ``summary_path``).
"""

from __future__ import annotations

from kernel.audit._attest import (
    ATTESTATION_FILE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    AttestationError,
    attest_run,
    generate_key_pair,
    key_id,
    load_private_key,
    load_public_key,
    pae,
    verify_attestation,
)
from kernel.audit._bundle import BUNDLE_COPY, BUNDLE_STREAM_COPY
from kernel.audit._outcomes import StoredCertifications
from kernel.audit._run import (
    AuditCode,
    AuditFinding,
    AuditInputError,
    AuditReport,
    RunLayout,
    audit_run,
    detect_layout,
    report_document,
)
from kernel.audit._summary import SUMMARY_FILE, VSA_PREDICATE_TYPE, summary_path
from kernel.audit._work_dir import rederive_certification

__all__ = [
    "ATTESTATION_FILE",
    "AttestationError",
    "AuditCode",
    "AuditFinding",
    "AuditInputError",
    "AuditReport",
    "BUNDLE_COPY",
    "BUNDLE_STREAM_COPY",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "RunLayout",
    "STATEMENT_TYPE",
    "SUMMARY_FILE",
    "StoredCertifications",
    "VSA_PREDICATE_TYPE",
    "attest_run",
    "audit_run",
    "detect_layout",
    "generate_key_pair",
    "key_id",
    "load_private_key",
    "load_public_key",
    "pae",
    "rederive_certification",
    "report_document",
    "summary_path",
    "verify_attestation",
]
