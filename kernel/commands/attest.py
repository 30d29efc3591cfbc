"""`kernel attest RUN_DIR --key KEY`: sign a stored run's outcomes (ADR-0010).

The shell around ``kernel.audit.attest_run``; ``kernel attest-keygen``
creates a key pair (private key mode 0600). Verification is ``kernel audit
--verify-key``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from kernel.audit import (
    ATTESTATION_FILE,
    PREDICATE_TYPE,
    SUMMARY_FILE,
    VSA_PREDICATE_TYPE,
    AttestationError,
    AuditInputError,
    attest_run,
    generate_key_pair,
    load_private_key,
    summary_path,
)
from kernel.commands._io import (
    read_document,
    refuse,
    refuse_a_stream,
    refuse_output_is_input,
    refuse_stdio,
    refuse_unless_replaceable,
    write_atomically,
)
from kernel.commands._outcomes import AttestFailOnOption, fail_on_classes
from kernel.commands._verdict import EXIT_INTEGRITY, EXIT_OK, EXIT_USAGE, FailOn, Tally
from kernel.replay import (
    ReplayAdapterOutcome,
    ReplayAdapterRefusal,
    ReplayAdapterResult,
    ReplayBundle,
)
from kernel.serde import SerdeError, parse_json, structure

_HELP = f"""Sign a stored run's outcomes: an in-toto Statement v1 in a DSSE envelope.

The run is audited first, exactly as `kernel audit` does (for a work
directory: every outcome re-derived from the bundle it keeps, or from
--bundle); a run that does not audit intact is never signed. The
Statement's subjects are every file of RUN_DIR (the bundle copy included)
and the --outcomes file, with their SHA-256; its predicate
({PREDICATE_TYPE}) holds the run's outcomes. The envelope (payload type
application/vnd.in-toto+json) is signed with the Ed25519 key KEY (PKCS#8
PEM, unencrypted, readable by its owner only) over the DSSE
pre-authentication encoding, and written to --out (default
RUN_DIR/{ATTESTATION_FILE}) with the user's umask: a regular file is
replaced atomically, a symlink followed; a device, FIFO or directory, or an
--out that is --key, --outcomes or --bundle, is refused before anything is
signed. Beside it,
{SUMMARY_FILE} holds a second signed Statement, the SLSA Verification
Summary ({VSA_PREDICATE_TYPE}) that policy engines read: its policy is the
bundle and the manifests by digest and the --fail-on classes, its input
attestation the outcomes envelope, and its result PASSED when the run's
re-derived outcomes pass under --fail-on (the exit code kernel run gives
them is 0; the same classes and default as kernel run), else FAILED. Verify it with
`kernel audit RUN_DIR --verify-key PUBKEY`, or with any DSSE/in-toto tool.

Exit codes (README "Exit codes"): 0 signed; 2 input refused (not a stored
run, an unreadable --outcomes or --bundle, a key that is unreadable,
not Ed25519 or readable by others, an --out refused as above); 3 integrity: the run does not audit
intact, so nothing is written (error code run_not_intact). Each refusal is
one line 'error: <code>: <message>' on stderr.

Example: kernel attest runs/1 --key keys/attest.pem"""

_KEYGEN_HELP = """Create an Ed25519 key pair for `kernel attest` as PEM files.

The private key is created new (never overwritten, never through a
symlink) with mode 0600; the public key with the user's umask. Prints the
key id (securesystemslib's default key id, which in-toto tools match).

Exit codes: 0 created; 2 a file exists or cannot be written, or the
`attest` extra (cryptography) is not installed.

Example: kernel attest-keygen keys/attest.pem keys/attest.pub"""


def _passes(lines: Sequence[bytes], classes: frozenset[FailOn]) -> bool:
    """Whether the re-derived outcome lines pass under ``classes`` (exit 0 of kernel run)."""
    tally = Tally(classes)
    for index, line in enumerate(lines):
        tally.add(index, None, _outcome(line))
    return tally.exit_code == EXIT_OK


def _outcome(line: bytes) -> ReplayAdapterOutcome:
    document = parse_json(line)
    record = document.get("outcome", document) if isinstance(document, dict) else document
    kind: type[ReplayAdapterOutcome] = (
        ReplayAdapterRefusal
        if isinstance(record, dict) and "replay_refusal_id" in record
        else ReplayAdapterResult
    )
    try:
        return structure(record, kind)
    except SerdeError as exc:  # the audit has read every line already: not reached
        refuse("outcomes_unreadable", f"an audited outcome does not read back: {exc}")


_PUBLIC_PEM = b"-----BEGIN PUBLIC KEY-----"


def _refuse_a_public_key(key: Path) -> None:
    """Refuse a public key given as ``--key`` for what it is (``key_not_private``, exit 2).

    A public key file is readable by others (its mode is the umask's), so it
    was refused as ``key_file_too_open``: true of the file, no help to whoever
    passed the wrong half of the pair. Only the PEM label is looked at.
    """
    if not key.is_file():
        return  # load_private_key says what it is
    try:
        with key.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return
    if head.lstrip().startswith(_PUBLIC_PEM):
        refuse("key_not_private",
               f"{key}: a public key, not a private key; --key takes the private key "
               "(kernel attest-keygen PRIVATE_PEM PUBLIC_PEM wrote both; the public one "
               "is for kernel audit --verify-key)")


def _refuse_outputs(
    run_dir: Path, out: Path | None, key: Path, outcomes: Path | None, bundle: Path | None
) -> None:
    """Refuse, before anything is read or signed, outputs that would destroy or cannot be.

    ADR 0013 "Outputs": an output that is one of the inputs is refused; a
    symlink is followed. Attest writes two files from one ``--out`` (the
    envelope, the summary beside it), so both must be regular files or absent.
    """
    envelope = out if out is not None else run_dir / ATTESTATION_FILE
    summary = summary_path(Path(os.path.abspath(run_dir)), out)
    why = ("kernel attest writes the envelope there and the verification summary beside it "
           "(name a regular file); nothing was signed")
    for label, path in (("--out", envelope), ("the summary", summary)):
        refuse_output_is_input(path, key, outcomes, bundle, label=label)
        refuse_unless_replaceable(path, label, why)


def register(app: typer.Typer) -> None:
    """Attach the ``attest`` and ``attest-keygen`` commands to ``app``."""

    @app.command("attest", help=_HELP)
    def attest_command(
        run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="The stored run.")],
        key: Annotated[Path, typer.Option(
            "--key", metavar="KEY", help="Ed25519 private key, PKCS#8 PEM, mode 0600.")],
        outcomes: Annotated[Path | None, typer.Option(
            "--outcomes", metavar="FILE",
            help="Another copy of the outcome lines (kernel run -o), audited and attested too.")
        ] = None,
        bundle: Annotated[Path | None, typer.Option(
            "--bundle", metavar="FILE",
            help="Re-derive every outcome from this bundle (yours) instead of the work "
                 "directory's copy.")] = None,
        out: Annotated[Path | None, typer.Option(
            "-o", "--out", metavar="FILE",
            help=f"Where to write the envelope (default RUN_DIR/{ATTESTATION_FILE}); the "
                 f"verification summary goes beside it ({SUMMARY_FILE}).")] = None,
        fail_on: AttestFailOnOption = None,
        quiet: Annotated[bool, typer.Option(
            "--quiet", "-q", help="Do not print the envelope's path on stdout.")] = False,
    ) -> None:
        # The one default kernel run takes too (fail_on_classes' own): the summary
        # says PASSED only where kernel run --fail-on the same would exit 0.
        classes = fail_on_classes(fail_on)
        refuse_stdio(RUN_DIR=run_dir, key=key, outcomes=outcomes, out=out)
        if not run_dir.is_dir():  # audit's own words for it, checked first as audit does
            what = "no such directory" if not run_dir.exists() else "not a directory"
            refuse("not_a_directory", f"{run_dir}: {what}")
        if out is not None and out.is_symlink():
            # Followed, as every output is (ADR 0013); the summary goes beside
            # the envelope itself, where `kernel audit --attestation` finds it.
            out = Path(os.path.realpath(out))
        _refuse_outputs(run_dir, out, key, outcomes, bundle)
        if key.is_dir():  # was reported as unwritable_output (IsADirectoryError)
            refuse("key_unreadable", f"{key}: a directory, not a key file")
        loaded = None
        if bundle is not None:
            refuse_a_stream(bundle, "kernel attest --bundle reads a single-document bundle "
                            "(kernel bundle --layout document writes one)")
            loaded = read_document(bundle, ReplayBundle)
        _refuse_a_public_key(key)
        try:
            private_key = load_private_key(key)
            target = attest_run(
                run_dir, private_key, outcomes=outcomes, bundle=loaded, out=out,
                fail_on=[c.value for c in FailOn if c in classes],
                passed=lambda lines: _passes(lines, classes), write=write_atomically,
            )
        except AttestationError as exc:
            integrity = exc.code == "run_not_intact"
            refuse(exc.code, exc.message, exit_code=EXIT_INTEGRITY if integrity else EXIT_USAGE)
        except AuditInputError as exc:
            refuse(exc.code, exc.message)
        except OSError as exc:
            refuse("unwritable_output", f"{out or run_dir}: {exc.strerror or exc}")
        if not quiet:
            typer.echo(str(target))  # the summary is beside it (summary_path)

    @app.command("attest-keygen", help=_KEYGEN_HELP)
    def keygen_command(
        private_path: Annotated[Path, typer.Argument(
            metavar="PRIVATE_PEM", help="New private key file (created with mode 0600).")],
        public_path: Annotated[Path, typer.Argument(
            metavar="PUBLIC_PEM", help="New public key file.")],
    ) -> None:
        refuse_stdio(PRIVATE_PEM=private_path, PUBLIC_PEM=public_path)
        try:
            typer.echo(generate_key_pair(private_path, public_path))
        except AttestationError as exc:
            refuse(exc.code, exc.message)
