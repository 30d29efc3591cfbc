"""A cluster across machines speaks mutual TLS (issue 36, deliverable 2; docs/main-job.md).

A real ``dask scheduler`` and ``dask worker`` on ``tls://``, with a
certificate authority and certificates made here (``cryptography``), and
``kernel run --scheduler tls://... --tls-ca-file --tls-cert --tls-key``: the
outcome bytes are an inline run's. A client without certificates, or with
one from another authority, is refused at the boundary (exit 2,
``scheduler_unreachable``) and writes nothing; TLS files without a
``tls://`` address, or only some of them, are an ``option_conflict``.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.orchestrate_helpers import ROOT
from tests.support.cli import KERNEL_MAIN
from tests.support.separate_workers import stop_all

pytestmark = pytest.mark.slow

BUNDLE = ROOT / "examples" / "e2e" / "bundle.json"
DASK = Path(sys.executable).parent / "dask"
START_SECONDS = 60.0


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _authority(directory: Path, label: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Name]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(f"replay-kernel test CA {label}")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path = directory / f"ca-{label}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, name


def _issued(directory: Path, name: str, authority: tuple[Path, ec.EllipticCurvePrivateKey,
            x509.Name]) -> tuple[Path, Path]:
    _, ca_key, ca_name = authority
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    return cert_path, key_path


def _kernel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", KERNEL_MAIN, *map(str, args)],
                          capture_output=True, text=True, timeout=600, check=False)


@contextlib.contextmanager
def _tls_cluster(root: Path, ca: Path, scheduler: tuple[Path, Path],
                 worker: tuple[Path, Path]) -> Iterator[str]:
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(argv: list[str], name: str) -> None:
        with (root / f"{name}.log").open("wb") as log:
            processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, cwd=root,
                                              start_new_session=True))

    tls = ["--tls-ca-file", str(ca)]
    scheduler_file = root / "scheduler.json"
    spawn([str(DASK), "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
           "--no-dashboard", "--scheduler-file", str(scheduler_file), *tls,
           "--tls-cert", str(scheduler[0]), "--tls-key", str(scheduler[1])], "scheduler")
    try:
        deadline = time.monotonic() + START_SECONDS
        while not scheduler_file.is_file() or not scheduler_file.stat().st_size:
            assert time.monotonic() < deadline and processes[0].poll() is None
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://"), address
        spawn([str(DASK), "worker", address, "--nthreads", "1", "--nworkers", "2",
               "--no-dashboard", "--host", "127.0.0.1", *tls, "--tls-cert", str(worker[0]),
               "--tls-key", str(worker[1])], "worker")
        log = root / "scheduler.log"
        while log.read_text(errors="replace").count("Register worker") < 2:
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield address
    finally:
        stop_all(processes)


def test_a_run_over_mutual_tls_gives_the_inline_bytes_and_strangers_are_refused(
    tmp_path: Path,
) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    authority = _authority(pki, "cluster")
    ca = authority[0]
    client = _issued(pki, "driver", authority)
    stranger_ca = _authority(pki, "stranger")
    stranger = _issued(pki, "stranger", stranger_ca)
    inline = tmp_path / "inline.jsonl"
    done = _kernel("run", BUNDLE, "--work-dir", tmp_path / "inline-W", "-q", "-o", inline)
    assert done.returncode == 3, done.stderr
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    with _tls_cluster(cluster, ca, _issued(pki, "scheduler", authority),
                      _issued(pki, "worker", authority)) as address:
        out = tmp_path / "tls.jsonl"
        done = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                       "--tls-ca-file", ca, "--tls-cert", client[0], "--tls-key", client[1],
                       "--work-dir", tmp_path / "W", "-q", "-o", out)
        assert done.returncode == 3, done.stderr
        assert out.read_bytes() == inline.read_bytes()
        audited = _kernel("audit", tmp_path / "W")
        assert audited.returncode == 0, audited.stdout + audited.stderr
        replayed = _kernel("replay", BUNDLE, "--executor", "dask", "--scheduler", address,
                           "--tls-ca-file", ca, "--tls-cert", client[0],
                           "--tls-key", client[1], "-q", "-o", tmp_path / "replay.jsonl")
        assert replayed.returncode == 3, replayed.stderr
        # Without a certificate, or with a stranger's: refused before anything is written.
        for label, files in (("none", ()),
                             ("stranger", ("--tls-ca-file", stranger_ca[0], "--tls-cert",
                                           stranger[0], "--tls-key", stranger[1]))):
            work = tmp_path / f"W-{label}"
            refused = _kernel("run", BUNDLE, "--executor", "dask", "--scheduler", address,
                              *files, "--connect-timeout", "3", "--work-dir", work, "-q")
            assert refused.returncode == 2, (label, refused.stderr)
            assert refused.stderr.startswith("error: scheduler_unreachable: "), refused.stderr
            assert refused.stderr.count("\n") == 1, refused.stderr
            assert not work.exists()


@pytest.mark.parametrize(("options", "says"), [
    (("--scheduler", "tcp://127.0.0.1:9", "--tls-ca-file", "CA", "--tls-cert", "C",
      "--tls-key", "K"), "TLS files are for a tls:// scheduler address"),
    (("--scheduler", "tls://127.0.0.1:9", "--tls-cert", "C"),
     "--tls-ca-file, --tls-cert and --tls-key go together"),
])
def test_tls_options_that_cannot_work_are_refused_up_front(
    tmp_path: Path, options: tuple[str, ...], says: str
) -> None:
    for name in ("CA", "C", "K"):
        (tmp_path / name).write_text("not used\n")
    done = subprocess.run([sys.executable, "-c", KERNEL_MAIN, "run", str(BUNDLE),
                           "--work-dir", str(tmp_path / "W"), "--executor", "dask", *options],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: option_conflict: "), done.stderr
    assert says in done.stderr
    assert not (tmp_path / "W").exists()
