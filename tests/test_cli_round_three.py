"""Small messages and one vocabulary of options (issue 35, findings 8 and 10).

Each case runs the real command line in a fresh interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import kernel


@pytest.mark.parametrize("command", ["attest", "audit"])
@pytest.mark.parametrize("kind", ["file", "absent"])
def test_a_run_dir_that_is_no_directory_is_not_a_directory_for_audit_and_attest_alike(
    tmp_path: Path, command: str, kind: str
) -> None:
    # attest used to say "unwritable_output: --out FILE/attestation.dsse.json: Not a
    # directory" where audit says not_a_directory.
    target = tmp_path / "run"
    if kind == "file":
        target.write_text("")
    key = tmp_path / "key.pem"
    key.write_text("")
    args = ("--key", key) if command == "attest" else ()
    done = kernel(command, target, *args)
    assert done.returncode == 2, done.stderr
    what = "not a directory" if kind == "file" else "no such directory"
    assert done.stderr == f"error: not_a_directory: {target}: {what}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["key.pem", *(["run"] if kind == "file" else [])])


def test_attest_takes_o_as_every_writing_command_does() -> None:
    done = kernel("attest", "--help")
    assert done.returncode == 0
    assert "-o, --out" in done.stdout or "-o FILE, --out FILE" in done.stdout, done.stdout


ROOT = Path(__file__).resolve().parents[1]


def _at_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run the kernel with stdout and stderr on a real pty; what the terminal received."""
    import os
    import subprocess
    import sys

    from tests.support.cli import KERNEL_MAIN

    main, child = os.openpty()
    process = subprocess.Popen([sys.executable, "-c", KERNEL_MAIN, *argv], stdin=child,
                               stdout=child, stderr=child, close_fds=True)
    os.close(child)
    received = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other end is closed
            break
        if not chunk:
            break
        received += chunk
    os.close(main)
    return process.wait(60), received.decode("utf-8", "replace")


@pytest.mark.parametrize("command", ["replay", "bundle"])
def test_at_a_terminal_the_progress_bar_is_cleared_before_the_verdict_line(
    tmp_path: Path, command: str
) -> None:
    # Issue 35, finding 6: kernel replay under a pty ended with the verdict glued
    # onto the last frame of the bar ("0/8 attempts 0:00:00 -:--:--verdict: ...").
    if command == "replay":
        argv = ["replay", str(ROOT / "examples" / "replay" / "bundle.json"),
                "-o", str(tmp_path / "out.jsonl")]
    else:
        argv = ["bundle", str(ROOT / "examples" / "drafts" / "marbles.json"),
                "--manifest", "builtin.v1", "-o", str(tmp_path / "bundle.json")]
    code, screen = _at_a_terminal(argv)
    assert code in (0, 3), screen
    lines = screen.replace("\r\n", "\n").split("\n")
    verdicts = [line for line in lines if "verdict:" in line]
    if command == "replay":
        assert len(verdicts) == 1, screen
        # Nothing of the bar before it on its line, and no frame drawn after it.
        assert verdicts[0].startswith("verdict: "), repr(verdicts[0])
        after = screen[screen.index("verdict: "):]
        assert "attempts" not in after.split("\n", 1)[1].replace("attempts:", ""), repr(after)
    assert "replaying" not in screen.split("verdict:")[-1], repr(screen[-400:])


def test_a_flipped_explanation_byte_is_not_reported_as_the_same_id_twice(tmp_path: Path) -> None:
    # Issue 35, finding 10: "recorded 3cedcf91..., recomputed 3cedcf91..." read as no
    # difference. The explanation is outside the id (ADR-0229 §13.3); the
    # re-derivation catches the flip, and the line says the id is not what differs.
    bundle = tmp_path / "bundle.json"
    assert kernel("bundle", ROOT / "examples" / "drafts" / "marbles.json", "--manifest",
                  "builtin.v1", "-o", bundle).returncode == 0
    work = tmp_path / "work"
    ran = kernel("run", bundle, "--work-dir", work, "-o", tmp_path / "out.jsonl", "-q")
    assert ran.returncode == 1, ran.stderr
    log = work / "outcomes.jsonl"
    data = log.read_bytes()
    at = data.index(b"unsupported_proof_obligation: ") + 1
    log.write_bytes(data[:at] + b"N" + data[at + 1:])  # 'u' 'n' -> 'u' 'N'
    audit = kernel("audit", work)
    assert audit.returncode == 3, audit.stdout + audit.stderr
    mismatches = [line for line in audit.stdout.splitlines() if line.startswith("MISMATCH")]
    assert mismatches, audit.stdout
    for line in mismatches:
        if "recorded " in line and ", recomputed " in line:
            recorded = line.split("recorded ")[1].split(",")[0]
            assert f"recomputed {recorded})" not in line, line


def test_check_pins_of_a_missing_file_says_no_such_file(tmp_path: Path) -> None:
    # Issue 35, finding 10: "check pins MISSING" said "not a regular file".
    missing = tmp_path / "MISSING"
    done = kernel("check", "pins", missing)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"error: file_not_found: {missing}: no such file\n"
    directory = tmp_path / "dir"
    directory.mkdir()
    done = kernel("check", "pins", directory)
    assert done.stderr == f"error: not_a_file: {directory}: not a regular file\n"


@pytest.mark.parametrize(("words", "expected"), [
    ("kernel run x --executor ", ["inline", "process", "dask"]),
    ("kernel replay x --executor p", ["process"]),
    ("kernel run x --fail-on ", ["integrity", "unavailable", "refused", "blocked",
                                  "unclassified", "any"]),
    ("kernel replay x --fail-on integrity,un", ["integrity,unavailable",
                                                "integrity,unclassified"]),
    ("kernel attest x --fail-on b", ["blocked"]),
])
def test_bash_completion_offers_the_values_of_executor_and_fail_on(
    words: str, expected: list[str]
) -> None:
    # Issue 35, finding 10: bash completion offered no values for either.
    import os
    import subprocess
    import sys

    from tests.support.cli import KERNEL_MAIN

    env = {**os.environ, "_KERNEL_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split(" ")) - 1)}
    done = subprocess.run([sys.executable, "-c", KERNEL_MAIN], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.stdout.split() == expected, done.stderr
