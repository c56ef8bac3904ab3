"""A real devpi-server on loopback, installed from the registry into a cached venv.

``start_devpi`` creates (once per machine, under ~/.cache/envlock-tests) a
venv holding devpi-server, initialises a server directory, starts the server
on a free 127.0.0.1 port and waits for its API. A server that cannot be
installed or started fails the test with its log: never a silent skip.
Users and indexes are made with devpi's REST API (``Devpi.index``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

DEVPI_SERVER = "devpi-server==6.20.3"
CACHE = Path(os.environ.get("ENVLOCK_TEST_CACHE", Path.home() / ".cache" / "envlock-tests"))
START_TIMEOUT = 90.0
# devpi derives its login-token key with argon2 at start: ~35 s with the default
# cost on a loaded 2-core machine, 4 s with this one (test tokens need no strength).
CHEAP_KEYS = ("--argon2-memory-cost", "8", "--argon2-time-cost", "1", "--argon2-parallelism", "1")


@dataclass(frozen=True)
class DevpiIndex:
    """One index: ``url`` takes uploads (POST), ``simple`` serves PEP 503/691 pages."""

    url: str
    simple: str
    user: str
    password: str


@dataclass
class Devpi:
    root: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[bytes]
    log: Path
    made: dict[str, DevpiIndex] = field(default_factory=dict)

    def index(self, user: str, name: str, password: str = "secret-pw") -> DevpiIndex:
        """``user/name``: a non-volatile index (files are never replaced), made when first asked for."""
        key = f"{user}/{name}"
        if key in self.made:
            return self.made[key]
        response = requests.put(f"{self.root}/{user}", json={"password": password}, timeout=30)
        assert response.status_code in (201, 409), (response.status_code, response.text)
        response = requests.put(
            f"{self.root}/{key}",
            json={"type": "stage", "bases": [], "volatile": False},
            auth=(user, password),
            timeout=30,
        )
        assert response.status_code == 200, (response.status_code, response.text)
        made = DevpiIndex(f"{self.root}/{key}/", f"{self.root}/{key}/+simple/", user, password)
        self.made[key] = made
        return made

    def serial(self) -> int:
        """devpi's change serial: it moves with every write the server commits (an upload)."""
        return int(requests.get(f"{self.root}/+api", timeout=30).headers["X-Devpi-Serial"])

    def upload_raw(self, index: DevpiIndex, filename: str, data: bytes) -> requests.Response:
        """Put bytes on the index under ``filename`` as a plain upload client would."""
        name, version = filename.split("-")[:2]
        fields = {
            ":action": "file_upload",
            "protocol_version": "1",
            "metadata_version": "2.1",
            "name": name,
            "version": version,
            "filetype": "bdist_wheel",
            "pyversion": "py3",
            "sha256_digest": hashlib.sha256(data).hexdigest(),
        }
        return requests.post(
            index.url,
            data=fields,
            files={"content": (filename, data)},
            auth=(index.user, index.password),
            timeout=60,
        )


def _locked(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # xdist workers: one installs, the others wait
    return fd


def devpi_bin() -> Path:
    """The cached venv's bin/ with devpi-server, installed from the registry on first use."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    venv = CACHE / f"devpi-{DEVPI_SERVER.split('==')[1]}-{tag}"
    done = venv / ".complete"
    fd = _locked(CACHE / ".devpi-install.lock")
    try:
        if not done.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            proc = subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", DEVPI_SERVER],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                pytest.fail(f"cannot install {DEVPI_SERVER} into {venv}:\n{proc.stdout}\n{proc.stderr}")
            done.touch()
    finally:
        os.close(fd)
    return venv / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_devpi(work: Path) -> Devpi:
    bin_dir = devpi_bin()
    server_dir, log = work / "server", work / "devpi.log"
    init = subprocess.run(
        [str(bin_dir / "devpi-init"), "--serverdir", str(server_dir), "--no-root-pypi"],
        capture_output=True,
        text=True,
    )
    if init.returncode != 0:
        pytest.fail(f"devpi-init failed:\n{init.stdout}\n{init.stderr}")
    port = _free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(bin_dir / "devpi-server"), "--serverdir", str(server_dir), "--host", "127.0.0.1",
             "--port", str(port), *CHEAP_KEYS],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"devpi-server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(f"{root}/+api", timeout=2).status_code == 200:
                return Devpi(root, process, log)
        except requests.RequestException:
            pass
        time.sleep(0.2)
    process.kill()
    process.wait()
    pytest.fail(f"devpi-server did not answer on {root} in {START_TIMEOUT:.0f} s:\n{log.read_text()}")


def stop_devpi(devpi: Devpi) -> None:
    devpi.process.terminate()
    try:
        devpi.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        devpi.process.kill()
        devpi.process.wait()
