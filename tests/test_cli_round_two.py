"""The smaller findings of issue 20 (item 7), each as a pipeline or a newcomer meets it.

Every test runs the real command line in a fresh interpreter
(``tests/support/cli.py``) and failed before its fix: a message naming a
distribution that does not exist, docs that sent a newcomer wrong, a pipe
refused as "not a regular file", ``-`` refused where the README promises
stdin, a non-UTF-8 work directory that started a run, a public key called
"too open", help flattened into one error line, ``{DRAFT}`` and ``<str>`` in
usage lines, a malformed manifest named by nobody.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernel.bundles import seal_bundle
from kernel.cli import COMMANDS
from kernel.drafts import SearchDraft
from kernel.organs import BUILTIN_MANIFEST
from kernel.serde import dumps, loads
from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN, kernel
from tests.test_external_helpers import Scenario

DRAFT = ROOT / "examples" / "drafts" / "marbles.json"
EXAMPLE = ROOT / "examples" / "replay" / "bundle.json"
CHAIN = ROOT / "examples" / "replay" / "chain.json"


def _one_line_error(done: subprocess.CompletedProcess[str], code: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {code}: "), done.stderr


def _kernel_with(prelude: str, *args: str | Path, stdin: str | None = None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, after ``prelude`` ran in its interpreter (what is absent)."""
    return subprocess.run([sys.executable, "-c", f"{prelude}\n{KERNEL_MAIN}", *map(str, args)],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd)


# --- messages name the real distribution and both solvers -----------------------------


def test_no_message_names_a_distribution_that_does_not_exist() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name == "failclosed-replay"
    for path in (ROOT / "kernel").rglob("*.py"):
        assert "replay-kernel[" not in path.read_text(encoding="utf-8"), path


def test_attest_without_its_extra_names_the_real_extra(tmp_path: Path) -> None:
    done = _kernel_with("import sys; sys.modules['cryptography'] = None",
                        "attest-keygen", tmp_path / "k.pem", tmp_path / "k.pub")
    assert done.returncode == 2
    _one_line_error(done, "attest_unavailable")
    assert "pip install 'failclosed-replay[attest]'" in done.stderr  # was replay-kernel[attest]


def test_dask_without_its_extra_names_the_real_extra(tmp_path: Path) -> None:
    done = _kernel_with("import sys; sys.modules['distributed'] = None",
                        "run", EXAMPLE, "--work-dir", tmp_path / "w", "--executor", "dask",
                        "--workers", "1", "-q")
    assert done.returncode == 2
    _one_line_error(done, "executor_unavailable")
    assert "pip install 'failclosed-replay[scale]'" in done.stderr  # was replay-kernel[scale]
    assert not (tmp_path / "w").exists()


def test_certifier_unavailable_names_z3_cvc5_and_the_certify_extra(tmp_path: Path) -> None:
    # The interpreter the certifier looks beside has no z3 next to it.
    (tmp_path / "bin").mkdir()
    done = _kernel_with(f"import sys; sys.executable = {str(tmp_path / 'bin' / 'python')!r}",
                        "run", EXAMPLE, "--work-dir", tmp_path / "w", "-q")
    assert done.returncode == 2
    _one_line_error(done, "certifier_unavailable")
    assert "z3" in done.stderr and "cvc5" in done.stderr  # cvc5 was not named
    assert "pip install 'failclosed-replay[certify]'" in done.stderr


# --- the docs a newcomer follows ----------------------------------------------------------


def test_the_guide_installs_and_lists_every_extra_attest_included() -> None:
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in extras:  # each named in the table's first column
        assert re.search(rf"^\| [^|]*`{extra}`[^|]* \|", guide, re.MULTILINE), extra
    installs = [line for line in guide.splitlines() if "pip install" in line]
    assert installs and all("attest" in line for line in installs), installs


def test_integrating_describes_the_draft_and_seal_bundle_as_they_are() -> None:
    text = (ROOT / "docs" / "integrating.md").read_text(encoding="utf-8")
    assert "`explanation` included" not in text  # a draft has no explanation field
    assert re.search(r"`removed_bindings`.*\n?.*\*\*names\*\*", text)
    assert "takes a typed\n`kernel.drafts.SearchDraft`" in text
    # What it says works: seal_bundle on a typed draft read with kernel.serde.loads.
    draft = loads(DRAFT.read_bytes(), SearchDraft)
    assert seal_bundle(draft, BUILTIN_MANIFEST).chain.run.candidate_attempts


def test_no_doc_shows_a_path_of_a_developer_s_machine() -> None:
    for path in (ROOT / "docs").glob("*.md"):
        text = path.read_text(encoding="utf-8")
        for machine in ("/work/", "/root/"):
            assert machine not in text, (path.name, machine)


# --- pipes and stdin ------------------------------------------------------------------


def _fifo_fed(tmp_path: Path, data: bytes, name: str = "fifo") -> tuple[Path, threading.Thread]:
    fifo = tmp_path / name
    os.mkfifo(fifo)

    def feed() -> None:
        # Opening for writing waits for the reader; a reader that never
        # comes (the old refusal) is released by opening it ourselves.
        with open(fifo, "wb") as handle:
            handle.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    return fifo, writer


def _release(fifo: Path, writer: threading.Thread) -> None:
    if writer.is_alive():
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            writer.join(timeout=5)
        finally:
            os.close(fd)


def test_replay_reads_a_fifo_as_a_stream(tmp_path: Path) -> None:
    expected = kernel("replay", EXAMPLE, "-q", "-f", "jsonl")
    fifo, writer = _fifo_fed(tmp_path, EXAMPLE.read_bytes())
    try:
        done = kernel("replay", fifo, "-q", "-f", "jsonl")
    finally:
        _release(fifo, writer)
    assert "not_a_regular_file" not in done.stderr  # before: refused, exit 2
    assert (done.returncode, done.stdout) == (expected.returncode, expected.stdout)


def test_replay_of_a_process_substitution_works() -> None:
    # What a shell user types: kernel replay <(cat bundle.json)
    script = f'"$0" -c "$1" replay <(cat "{EXAMPLE}") -q -f jsonl'
    done = subprocess.run(["bash", "-c", script, sys.executable, KERNEL_MAIN],
                          capture_output=True, text=True, timeout=120, check=False)
    expected = kernel("replay", EXAMPLE, "-q", "-f", "jsonl")
    assert "not_a_regular_file" not in done.stderr, done.stderr
    assert (done.returncode, done.stdout) == (expected.returncode, expected.stdout)


def test_digest_reads_a_fifo_it_looks_at_twice(tmp_path: Path) -> None:
    # digest first looks whether the input is a stream, then reads it: a FIFO
    # can be read only once, so its bytes are remembered, as stdin's are.
    fifo, writer = _fifo_fed(tmp_path, CHAIN.read_bytes())
    try:
        done = kernel("digest", fifo)
    finally:
        _release(fifo, writer)
    assert done.returncode == 0, done.stderr
    assert done.stdout == kernel("digest", CHAIN).stdout


def test_a_fifo_is_still_read_within_the_size_limit(tmp_path: Path) -> None:
    fifo, writer = _fifo_fed(tmp_path, b"[" * 70 + b"]" * 70)
    try:
        done = kernel("digest", fifo)
    finally:
        _release(fifo, writer)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_a_device_is_still_refused_as_an_input() -> None:
    done = kernel("replay", "/dev/zero")
    assert done.returncode == 2
    _one_line_error(done, "not_a_regular_file")


def test_check_run_reads_its_job_from_stdin(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    job = dumps(scenario.job).decode()
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_MAIN, "check", "run", str(scenario.manifest_path), "demo",
         "--job", "-", "--run-root", str(scenario.run_root), "--run-id", "stdin-1",
         "--repo", str(scenario.repo)],
        input=job, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr  # before: stdin_not_supported, exit 2
    assert json.loads(done.stdout)["metadata"]["status"] == "PASS"


def test_check_run_names_stdin_in_a_malformed_job(tmp_path: Path) -> None:
    scenario = Scenario(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_MAIN, "check", "run", str(scenario.manifest_path), "demo",
         "--job", "-", "--run-root", str(scenario.run_root), "--repo", str(scenario.repo)],
        input="{", capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2
    _one_line_error(done, "job_malformed_json")
    assert "<stdin>" in done.stderr
    assert not scenario.run_root.exists() or list(scenario.run_root.iterdir()) == []


# --- boundaries -------------------------------------------------------------------------


def test_run_refuses_a_work_dir_whose_name_is_not_utf8_before_anything_runs(
    tmp_path: Path,
) -> None:
    name = os.fsdecode(b"work-\xff")
    done = kernel("run", EXAMPLE, "--work-dir", tmp_path / name, "-q")
    assert done.returncode == 2  # before: the run started and every certification failed
    _one_line_error(done, "work_dir_not_utf8")
    assert list(tmp_path.iterdir()) == []


def test_attest_with_a_public_key_says_it_is_not_a_private_key(tmp_path: Path) -> None:
    private, public = tmp_path / "k.pem", tmp_path / "k.pub"
    assert kernel("attest-keygen", private, public).returncode == 0
    (tmp_path / "run").mkdir()  # a directory: RUN_DIR is checked first (not_a_directory)
    for mode in (0o644, 0o600):  # as written, and after a chmod 600
        public.chmod(mode)
        done = kernel("attest", tmp_path / "run", "--key", public)
        assert done.returncode == 2
        _one_line_error(done, "key_not_private")  # before: key_file_too_open / key_malformed


def test_check_identity_names_the_manifest_that_is_not_json(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{")
    done = kernel("check", "identity", manifest, "demo", "--repo", tmp_path)
    assert done.returncode == 2
    _one_line_error(done, "manifest_malformed_json")
    assert str(manifest) in done.stderr


# --- help ------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["check"], ["verify"]])
def test_no_arguments_prints_the_usage_help_not_one_error_line(args: list[str]) -> None:
    done = kernel(*args)
    assert done.returncode == 2
    assert "error: usage_error" not in done.stderr
    assert done.stderr.startswith("Usage: kernel"), done.stderr
    assert done.stderr.count("\n") > 5  # the help as help, one item a line
    assert "\nCommands:\n" in done.stderr


def _every_command() -> list[list[str]]:
    found = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        texts = list(pool.map(lambda name: kernel(name, "--help").stdout, COMMANDS))
    for name, help_text in zip(COMMANDS, texts, strict=True):
        if "\nCommands:\n" in help_text:
            section = help_text.split("\nCommands:\n", 1)[1]
            found += [[name, line.split()[0]] for line in section.splitlines()
                      if line.startswith("  ") and line.split()]
        else:
            found.append([name])
    return found


def test_usage_lines_and_help_rows_show_readable_metavars() -> None:
    commands = _every_command()
    assert ["check", "pins"] in commands and ["bundle"] in commands
    # One process per command, two at a time: each is a start-up of the CLI.
    with ThreadPoolExecutor(max_workers=2) as pool:
        helps = list(pool.map(lambda command: kernel(*command, "--help"), commands))
    for command, done in zip(commands, helps, strict=True):
        assert done.returncode == 0, command
        usage = done.stdout.splitlines()[0]
        assert usage.startswith("Usage: kernel "), usage
        assert "{" not in usage and "<" not in usage, usage  # was {DRAFT}, {PATH...}...
        rows = [line for line in done.stdout.splitlines()
                if re.match(r"^  (-|[A-Za-z_.]+ )", line)]
        for row in rows:
            # typer's type labels after a name: <str>, <path>, <float>, <list[Path]>
            assert not re.search(r"<(str|path|int|float|list\[\w+\])>", row), (command, row)
    bundle = kernel("bundle", "--help").stdout
    assert bundle.splitlines()[0] == "Usage: kernel bundle [OPTIONS] DRAFT"
    pins = kernel("check", "pins", "--help").stdout
    assert pins.splitlines()[0] == "Usage: kernel check pins [OPTIONS] PATH..."
