"""Real faults on the newer paths: host pull, bundles, store push, the no-op memos.

Every fault is real: a loopback HTTP server (``http.server``) that drops or
stalls a connection mid-body, ``SIGKILL`` of the process doing the work, a
small tmpfs mounted as the directory being written (the tests run as root),
and files truncated as a crash while writing would leave them. After each
fault the next run must recover, and nothing partial may carry a final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest

from conftest import Reference, write_profile
from envlock.agent import bytecode
from envlock.agent.hashing import StatCache
from envlock.agent.journal import StateDir
from envlock.agent.snapshot import default_cache_path
from envlock.agent.stamp import applied, read_slots, record_apply, write_stamp
from envlock.lock.digest import lock_digest, tree_digest
from envlock.workspace import Workspace
from helpers import ENVLOCK, copy_lock, descendants, process_state, wait_stopped, walk_payload
from lockfactory import make_lock, pkg, rows_for, with_manifest, write_lock_files
from sshrig import HOST_ROOT, VENV_PATH, SshRig

PYTHON = str(Path(ENVLOCK).parent / "python")
DIGEST = "sha256:" + "a" * 64
PYENV = Path.home() / ".pyenv" / "versions"


# ------------------------------------------------------------------ a server that misbehaves on cue


@dataclass
class Behaviour:
    """What the server does with the next GET: cut the body after ``cut`` bytes, or stall there."""

    cut: int | None = None
    stall: bool = False
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[str] = field(default_factory=list)  # "GET <path> <Range or ->"
    clients: list[str] = field(default_factory=list)  # each request's User-Agent


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        behaviour = self.server.behaviour
        data = self.server.files.get(self.path)
        ranged = self.headers.get("Range")
        behaviour.requests.append(f"GET {self.path} {ranged or '-'}")
        behaviour.clients.append(self.headers.get("User-Agent", ""))
        if data is None:
            self.send_error(404)
            return
        start = int(ranged.removeprefix("bytes=").rstrip("-")) if ranged else 0
        body = data[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = behaviour.cut
        if cut is None:
            self.wfile.write(body)
            return
        self.wfile.write(body[:cut])
        self.wfile.flush()
        if behaviour.stall:
            behaviour.stalled.set()
            behaviour.release.wait(30)
        self.close_connection = True  # the rest never comes: the client sees a short body


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.behaviour = Behaviour()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.behaviour.release.set()
    srv.shutdown()
    srv.server_close()


@dataclass(frozen=True)
class Artifact:
    sha256: str
    name: str
    data: bytes

    def item(self, server: _Server) -> dict[str, Any]:
        path = f"/wheels/{self.sha256}/{self.name}"
        server.files[path] = self.data
        return {"sha256": self.sha256, "name": self.name, "size": len(self.data), "urls": [server.url + path]}


def artifact(size: int, name: str = "big-1.0-py3-none-any.whl") -> Artifact:
    data = os.urandom(size)
    return Artifact(hashlib.sha256(data).hexdigest(), name, data)


def pull_proc(drop: Path, items: list[dict[str, Any]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [PYTHON, "-m", "envlock.agent", "pull", "--dir", str(drop)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(items))
    proc.stdin.close()
    return proc


def agent_pull(drop: Path, items: list[dict[str, Any]]) -> dict[str, Any]:
    proc = subprocess.run(
        [PYTHON, "-m", "envlock.agent", "pull", "--dir", str(drop)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def finals(drop: Path) -> list[Path]:
    """Every file under a final name in the drop (``<sha256>/<name>``)."""
    return [p for p in drop.glob("*/*") if not p.parent.name.startswith(".")]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: writing more than that fails with ENOSPC, as a full disk does."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


# ------------------------------------------------------------------ host pull


def test_a_connection_dropped_mid_body_is_resumed_by_the_next_pull(tmp_path: Path, server: _Server) -> None:
    big = artifact(5 << 20)
    item = big.item(server)
    drop = tmp_path / "drop"
    server.behaviour.cut = 1 << 20  # every attempt of this run is cut after 1 MiB (resumed in-run)
    answer = agent_pull(drop, [item])
    assert answer["pulled"] == [] and "wheels" in answer["failed"][0]["error"], answer
    assert finals(drop) == [], "a cut-off download took its final name"
    part = drop / ".pulling" / f"{big.sha256}-{big.name}.part"
    assert part.stat().st_size == 3 << 20  # three attempts, each resumed where the last stopped
    assert [r.split()[-1] for r in server.behaviour.requests] == ["-", "bytes=1048576-", "bytes=2097152-"]
    # The link is back: the next run asks only for the rest.
    server.behaviour = Behaviour()
    answer = agent_pull(drop, [item])
    assert answer["failed"] == [] and answer["pulled"][0]["resumed_from"] == 3 << 20, answer
    assert (drop / big.sha256 / big.name).read_bytes() == big.data
    assert server.behaviour.requests == [f"GET /wheels/{big.sha256}/{big.name} bytes={3 << 20}-"]
    assert not part.exists()


def test_a_pull_killed_mid_download_leaves_no_final_name_and_the_next_one_finishes(
    tmp_path: Path, server: _Server
) -> None:
    big = artifact(2 << 20)
    item = big.item(server)
    drop = tmp_path / "drop"
    server.behaviour = Behaviour(cut=512 << 10, stall=True)
    proc = pull_proc(drop, [item])
    assert server.behaviour.stalled.wait(30), "the agent never started the download"
    time.sleep(0.2)  # let the agent write what it received
    proc.send_signal(signal.SIGKILL)  # a killed apply: no cleanup runs
    proc.wait(timeout=10)
    server.behaviour.release.set()
    assert finals(drop) == []
    # The killed agent's flock went with it: the next pull is not blocked, and ends whole.
    server.behaviour = Behaviour()
    answer = agent_pull(drop, [item])
    assert answer["failed"] == [], answer
    assert (drop / big.sha256 / big.name).read_bytes() == big.data
    assert list((drop / ".pulling").iterdir()) == []


def test_a_full_disk_during_pull_names_the_path_and_poisons_nothing(
    small_disk: Path, server: _Server
) -> None:
    drop = small_disk / "drop"
    big, small = artifact(2 << 20), artifact(64 << 10, "small-1.0-py3-none-any.whl")
    answer = agent_pull(drop, [big.item(server)])
    assert answer["pulled"] == [], answer
    error = answer["failed"][0]["error"]
    assert "No space left on device" in error and str(drop / ".pulling") in error, error
    # Once: a full disk is not a dropped link, and is not retried.
    assert len(server.behaviour.requests) == 1, server.behaviour.requests
    assert finals(drop) == [] and list((drop / ".pulling").iterdir()) == [], "the space was not given back"
    # The drop is not poisoned: what fits is pulled and kept.
    answer = agent_pull(drop, [small.item(server)])
    assert answer["failed"] == [] and (drop / small.sha256 / small.name).read_bytes() == small.data


# ------------------------------------------------------------------ air-gapped bundles


def envlock(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("ENVLOCK_STORE", "ENVLOCK_FAULT")}
    return subprocess.run(
        [ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env={**full, **env}
    )


@dataclass(frozen=True)
class Bundled:
    root: Path  # a workspace: ct129 captured, ct200 (target) given its lock
    target: Path  # ct200's venv, never built here
    bundle: Path  # ct200's bundle, written whole


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Bundled:
    base = tmp_path_factory.mktemp("bundled")
    root = base / "ws"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    proc = envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    target = base / "target-venv"
    write_profile(root, "ct200", target, None)
    copy_lock(root, "ct129", "ct200")
    out = base / "ct200.bundle"
    proc = envlock(root, "bundle", "ct200", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return Bundled(root, target, out)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_full_disk_while_writing_a_bundle_is_one_line_and_no_file(
    bundled: Bundled, small_disk: Path
) -> None:
    out = small_disk / "ct200.bundle"
    line = one_line(envlock(bundled.root, "bundle", "ct200", "-o", str(out)))
    assert str(out) in line and "No space left on device" in line, line
    assert list(small_disk.iterdir()) == [], "a partial bundle was left behind"


def test_a_bundle_killed_midway_never_appears_under_its_name(bundled: Bundled, tmp_path: Path) -> None:
    out = tmp_path / "ct200.bundle"
    for _ in range(10):  # until the kill lands while the bundle is being written
        proc = subprocess.Popen(
            [ENVLOCK, "bundle", "ct200", "-o", str(out), "--root", str(bundled.root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and not any(p.name.endswith(".part") for p in tmp_path.iterdir()):
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == -signal.SIGKILL:
            break
        out.unlink()  # it finished first: again
    else:
        pytest.fail("the bundle always finished before the kill")
    assert not out.exists(), "a killed bundle appeared under its final name"
    # The next run writes it whole, beside the killed run's leftover part.
    proc2 = envlock(bundled.root, "bundle", "ct200", "-o", str(out))
    assert proc2.returncode == 0, proc2.stderr
    assert out.read_bytes() == bundled.bundle.read_bytes()


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.0005])
def test_a_truncated_bundle_is_refused_in_one_line(bundled: Bundled, tmp_path: Path, keep: float) -> None:
    data = bundled.bundle.read_bytes()
    cut = tmp_path / "cut.bundle"
    cut.write_bytes(data[: int(len(data) * keep)])
    line = one_line(envlock(bundled.root, "apply", "ct200", "--from", str(cut)))
    assert str(cut) in line, line
    assert not bundled.target.exists()
    assert not list(bundled.root.rglob("*.part")), "a partial member was left in the store"


def test_a_full_disk_while_reading_a_bundle_is_one_line(bundled: Bundled, small_disk: Path) -> None:
    # The lock, manifest and uv go to a temporary directory first: put it on the full disk.
    line = one_line(
        envlock(bundled.root, "apply", "ct200", "--from", str(bundled.bundle), TMPDIR=str(small_disk))
    )
    assert "No space left on device" in line and str(small_disk) in line, line
    assert not bundled.target.exists()
    assert list(small_disk.iterdir()) == []


# ------------------------------------------------------------------ store push


def test_a_full_shared_store_fails_the_push_in_one_line_and_the_next_capture_pushes(
    tmp_path: Path, reference: Reference, small_disk: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,size=8k", str(small_disk)], check=True)
    shared = small_disk / "store"
    root = tmp_path / "ws"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    (root / "envlock.toml").write_text(f'[store]\npush = "{shared}"\n')
    line = one_line(envlock(root, "capture", "ct129"))
    assert (
        line.startswith(f"envlock: error: store.push {shared}: cannot write ") and "No space left" in line
    ), line

    def objects() -> list[Path]:
        return [p for p in shared.rglob("*") if p.is_file()]

    # Nothing partial under a final name, nothing partial left behind at all.
    assert not [p for p in objects() if p.name.startswith(".")], objects()
    for path in objects():
        want = path.parent.name if path.parts[-3] == "wheels" else path.name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == want, path
    # The disk grows: the lock did not change, yet the next capture pushes what is missing.
    before = len(objects())
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    proc = envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    assert "unchanged" in proc.stdout
    assert len(objects()) > before and list(shared.glob("wheels/*/localpkg-*.whl")), objects()
    local = sorted(p.relative_to(root / "store") for p in (root / "store").rglob("*") if p.is_file())
    for path in objects():
        rel = path.relative_to(shared)
        assert rel in local and path.read_bytes() == (root / "store" / rel).read_bytes()
    assert len(objects()) >= 3


# ------------------------------------------------------------------ no-op memos a crash damaged

# What a crash (or a power cut before the data reached the disk) leaves of a small JSON file:
# nothing, a prefix, zeros, or a file of another shape.
DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda good: b"",
    "truncated": lambda good: good[: len(good) // 2],
    "zeros": lambda good: b"\0" * len(good),
    "not text": lambda good: b"\xff\xfe" + good,
    "a list": lambda good: b"[]",
    "null": lambda good: b"null",
    "wrong types": lambda good: json.dumps({k: 5 for k in json.loads(good)}).encode(),
}


def _stamped_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "lib" / "pkg" / "__pycache__").mkdir(parents=True)
    (venv / "lib" / "pkg" / "m.py").write_text("M = 1\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    StateDir(str(venv)).create()
    write_stamp(StateDir(str(venv)), DIGEST)
    record_apply(StateDir(str(venv)), {"old": None, "new": [1, 2], "digest": DIGEST})
    return venv


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_stamp_or_slots_file_is_unknown_never_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    venv = _stamped_venv(tmp_path)
    state = StateDir(str(venv))
    assert applied(str(venv), DIGEST)["matches"]  # the stamp as written proves the no-op
    assert bytecode.damaged_bytecode(str(venv)) == []  # writes the bytecode memo and its sum
    memo = bytecode._memo_path(str(venv))
    assert memo is not None
    for path in (state.stamp, state.slots, memo, memo + ".sum", default_cache_path(str(venv)) or ""):
        good = Path(path).read_bytes() if Path(path).is_file() else b'{"version": 1, "entries": {}}'
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(DAMAGE[damage](good if path != memo + ".sum" else b'{"s": 1}'))
    answer = applied(str(venv), DIGEST)
    assert not answer["matches"] and answer["stamp_digest"] is None, answer
    assert read_slots(state)["live"] is None
    assert bytecode.damaged_bytecode(str(venv)) == []
    assert StatCache(default_cache_path(str(venv))).entries == {}


def _lock_workspace(tmp_path: Path) -> Workspace:
    packages = [pkg("six", "1.17.0", files=2)]
    rows = rows_for(packages)
    packages = [replace(p, tree_digest=tree_digest(r for r in rows if r.owner == p.name)) for p in packages]
    lock, manifest = with_manifest(make_lock("ct200", packages), rows)
    workspace = Workspace(tmp_path / "fleet")
    write_lock_files(workspace.locks_dir, replace(lock, digest=lock_digest(lock)), manifest)
    return workspace


MEMO_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    **DAMAGE,
    "digest not a string": lambda good: json.dumps({**json.loads(good), "digest": 5}).encode(),
}


@pytest.mark.parametrize("damage", sorted(MEMO_DAMAGE))
def test_a_damaged_lock_facts_memo_is_read_again_from_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workspace = _lock_workspace(tmp_path)
    first = workspace.read_lock_head("ct200")
    (memo,) = (tmp_path / "cache" / "envlock" / "lockheads").glob("*.json")
    good = memo.read_bytes()
    memo.write_bytes(MEMO_DAMAGE[damage](good))
    assert workspace.read_lock_head("ct200") == first
    assert memo.read_bytes() == good  # and written again whole


# ------------------------------------------------------------------ SSH master reuse


def _master_pid(sock: Path) -> int | None:
    check = subprocess.run(
        ["ssh", "-o", f"ControlPath={sock}", "-O", "check", "x"], capture_output=True, text=True
    )
    if check.returncode != 0:
        return None
    return int(check.stderr.split("pid=")[1].split(")")[0])


def test_a_master_killed_its_socket_deleted_or_its_connection_cut_costs_only_a_new_connection(
    tmp_path: Path,
) -> None:
    rig = SshRig.start(tmp_path / "rig", ("ct-m",))
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: a socket path holds 108 bytes
    orphans: list[int] = []
    try:
        made = rig.run(
            "ct-m", [sorted(PYENV.glob("3.12.*/bin/python3.12"))[-1].as_posix(), "-m", "venv", VENV_PATH]
        )
        assert made.returncode == 0, made.stderr
        root = tmp_path / "ws"
        (root / "hosts").mkdir(parents=True)
        (root / "hosts" / "ct-m.toml").write_text(rig.profile("ct-m"))
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
        env.pop("ENVLOCK_SSH_PERSIST", None)

        def smoke() -> None:
            # A hang would be the failure here, not a slow pass: ssh's own timeouts are 15 s.
            proc = subprocess.run(
                [ENVLOCK, "smoke", "ct-m", "--root", str(root)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stderr

        def accepted() -> int:
            return (rig.base / "ct-m" / "sshd.log").read_text().count("Accepted publickey")

        smoke()
        (sock,) = (runtime / "envlock-ssh").glob("*-*")
        first = _master_pid(sock)
        assert first is not None
        # 1. The master is killed (OOM killer, a logout): its socket stays behind, stale.
        os.kill(first, signal.SIGKILL)
        before = accepted()
        smoke()
        second = _master_pid(sock)
        assert second not in (None, first) and accepted() == before + 1
        # 2. The socket is deleted (a tmp cleaner) while its master lives on: a new master.
        sock.unlink()
        smoke()
        orphans.append(second)  # still running, unreachable: it exits after ssh_persist
        assert _master_pid(sock) not in (None, second) and accepted() == before + 2
        # 3. The connection dies under the master (sshd restarted, the network cut).
        assert rig.drop_connections("ct-m") > 0
        smoke()
        assert _master_pid(sock) is not None and accepted() == before + 3
    finally:
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        rig.stop()
        subprocess.run(["rm", "-rf", str(runtime)], check=False)


# ------------------------------------------------------------------ fleet apply


def test_a_fleet_host_whose_connection_dies_fails_alone_and_ctrl_c_leaves_hosts_recoverable(
    tmp_path: Path, bundled: Bundled
) -> None:
    rig = SshRig.start(tmp_path / "rig", ("fl-a", "fl-b"))
    try:
        root = tmp_path / "ws"
        (root / "hosts").mkdir(parents=True)
        shutil.copytree(bundled.root / "locks", root / "locks")
        shutil.copytree(bundled.root / "store", root / "store")
        for host in ("fl-a", "fl-b"):
            (root / "hosts" / f"{host}.toml").write_text(rig.profile(host, venv=f"{HOST_ROOT}/venv"))
            copy_lock(root, "ct129", host)
        fleet = [ENVLOCK, "apply", "fl-a", "fl-b", "--format", "json", "--root", str(root)]

        def start(fault: str | None, argv: list[str] = fleet) -> subprocess.Popen[str]:
            env = {k: v for k, v in os.environ.items() if k != "ENVLOCK_FAULT"}
            env.update({"ENVLOCK_FAULT": fault} if fault else {})
            # A session of its own: Ctrl-C reaches the whole foreground process group, ssh included.
            return subprocess.Popen(
                argv, stdout=PIPE, stderr=PIPE, text=True, env=env, start_new_session=True
            )

        # 1. Both agents wait before verify; fl-a's connection is cut and its agent killed.
        proc = start("stop:before:verify")
        agents = {host: wait_stopped(rig.hosts[host].proc.pid, proc) for host in ("fl-a", "fl-b")}
        assert rig.drop_connections("fl-a") > 0
        os.kill(agents["fl-a"], signal.SIGKILL)
        os.kill(agents["fl-b"], signal.SIGCONT)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, err  # a host could not run (docs/fleet.md)
        hosts = {h["host"]: h for h in json.loads(out)["result"]["hosts"]}
        assert hosts["fl-b"]["outcome"] == "ok", hosts["fl-b"]
        assert hosts["fl-a"]["outcome"] == "error", hosts["fl-a"]
        cause = hosts["fl-a"]["cause"]
        assert "connection was lost during the apply" in cause and "untouched" in cause, cause
        assert not (rig.hosts["fl-a"].root / "venv").exists()

        # 2. Ctrl-C of a one-host apply while its agent waits; then the host goes down.
        proc = start("stop:before:verify", [ENVLOCK, "apply", "fl-a", "--root", str(root)])
        agent = wait_stopped(rig.hosts["fl-a"].proc.pid, proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and err.strip() == "envlock: interrupted", err
        os.kill(agent, signal.SIGKILL)

        # 3. Ctrl-C of the fleet apply while fl-a's agent waits (fl-b is a no-op by now).
        proc = start("stop:before:verify")
        agent = wait_stopped(rig.hosts["fl-a"].proc.pid, proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "interrupted" in err and "fl-a" in err, err
        os.kill(agent, signal.SIGCONT)  # the host goes on without its controller
        for _ in range(600):
            if process_state(agent) in (None, "Z"):
                break
            time.sleep(0.1)

        # 4. The next run finishes what is left: every host ok.
        proc = start(None)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (out, err)
        assert (rig.hosts["fl-a"].root / "venv" / "bin" / "alpha").is_file()
    finally:
        rig.stop()


def test_a_full_disk_while_receiving_pushed_artifacts_names_the_file(small_disk: Path) -> None:
    """The controller pushes what a host could not pull: the same disk may be full for that too."""
    big = artifact(2 << 20)
    frame = json.dumps({"sha256": big.sha256, "name": big.name, "size": len(big.data)}).encode() + b"\n"
    drop = small_disk / "drop"
    proc = subprocess.run(
        [PYTHON, "-m", "envlock.agent", "receive", "--dir", str(drop)],
        input=frame + big.data,
        capture_output=True,
    )
    assert proc.returncode == 2
    error = json.loads(proc.stderr.decode().removeprefix("@error "))
    assert error["code"] == "receive" and str(drop / ".incoming") in error["message"], error
    assert "No space left on device" in error["message"], error
    assert finals(drop) == [] and list((drop / ".incoming").iterdir()) == []


def test_an_apply_whose_agent_is_killed_mid_pull_is_finished_by_the_next(
    tmp_path: Path, bundled: Bundled, server: _Server, reference: Reference
) -> None:
    """A whole apply: the host pulls the store-only wheels from a server that stalls mid-body, and
    its agent is SIGKILLed there. Nothing takes a final name, no venv appears; the next apply ends."""
    store = bundled.root / "store"
    for path in [*store.glob("wheels/*/*"), *store.glob("blobs/*/*")]:
        server.files["/" + path.relative_to(store).as_posix()] = path.read_bytes()
    root = tmp_path / "clone"  # no local store: only the server has the repacked wheels
    root.mkdir()
    shutil.copytree(bundled.root / "locks", root / "locks")
    target = tmp_path / "target-venv"
    write_profile(root, "ct200", target, None, "pull = true\n")
    (root / "envlock.toml").write_text(f'[store]\nurl = "{server.url}/"\n')
    env = {
        k: v for k, v in os.environ.items() if k not in ("ENVLOCK_STORE", "ENVLOCK_FAULT", "XDG_CACHE_HOME")
    }
    env["HOME"] = str(tmp_path / "home")
    argv = [ENVLOCK, "apply", "ct200", "--root", str(root)]
    server.behaviour = Behaviour(cut=100, stall=True)
    proc = subprocess.Popen(argv, stdout=PIPE, stderr=PIPE, text=True, env=env)
    assert server.behaviour.stalled.wait(120), proc.communicate()
    assert server.behaviour.clients[0] == "envlock-agent"  # the host pulling, not the controller
    for pid, _name in descendants(proc.pid):  # the agent, and anything it started
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    server.behaviour.release.set()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "Traceback" not in err, (out, err)
    drop = tmp_path / "home" / ".cache" / "envlock" / "artifacts"
    for path in finals(drop):  # whatever has a final name is whole
        assert path.read_bytes() == server.files[f"/wheels/{path.parent.name}/{path.name}"], path
    assert not target.exists()
    server.behaviour = Behaviour()
    again = subprocess.run([*argv, "--format", "json"], capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)["result"]
    assert result["pulled_files"] > 0 and result["pull_failures"] == [], result
    assert walk_payload(target) == walk_payload(reference.venv)
