"""Remote hosts over a real sshd on loopback, each in its own mount namespace."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Reference
from envlock.errors import EnvlockError
from envlock.hosts import parse_profile
from envlock.transfer import Item, push
from envlock.transport import open_transport
from helpers import ENVLOCK, UV, run_envlock, wait_stopped
from sshrig import HOST_ROOT, VENV_PATH, SshRig

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _python(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    assert found, f"CPython {minor} missing under {PYENV}"
    return str(found[-1])


@pytest.fixture(scope="session")
def rig(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Iterator[SshRig]:
    rig = SshRig.start(tmp_path_factory.mktemp("ssh"), ("ct-a", "ct-b"))
    try:
        for alias, minor in (("ct-a", "3.12"), ("ct-b", "3.8")):
            for argv in (
                [UV, "venv", "-q", "--python", _python(minor), VENV_PATH],
                [
                    "env",
                    "UV_LINK_MODE=copy",
                    UV,
                    "pip",
                    "install",
                    "-q",
                    "--python",
                    f"{VENV_PATH}/bin/python",
                    "--index-url",
                    reference.index.url,
                    "alpha==1.0",
                    "six==1.17.0",
                ],
            ):
                proc = rig.run(alias, argv)
                assert proc.returncode == 0, proc.stderr
        yield rig
    finally:
        rig.stop()


def _workspace(root: Path, host: str, text: str) -> Path:
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / f"{host}.toml").write_text(text)
    return root


def test_capture_over_ssh_writes_the_same_lock_as_a_local_capture(
    rig: SshRig, reference: Reference, tmp_path: Path
) -> None:
    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    remote_ws = _workspace(tmp_path / "remote", "ct129", rig.profile("ct-a", extra=index))
    proc = run_envlock(remote_ws, "capture", "ct129", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    packages = {p["name"]: p["source"] for p in json.loads(proc.stdout)["result"]["packages"]}
    assert packages == {"alpha": "index", "beta": "index", "six": "index"}
    assert list((rig.base / "ct-a" / "cache").glob("envlock-agent-*/__main__.py")), "agent not shipped"

    local_ws = _workspace(tmp_path / "local", "ct129", f'venv = "{VENV_PATH}"\n{index}')
    on_host = rig.run("ct-a", [ENVLOCK, "capture", "ct129", "--root", str(local_ws)])
    assert on_host.returncode == 0, on_host.stderr
    remote_lock = (remote_ws / "locks/pylock.ct129.toml").read_bytes()
    assert remote_lock == (local_ws / "locks/pylock.ct129.toml").read_bytes()
    assert b'abi = "cp312"' in remote_lock
    assert (remote_ws / "locks/pylock.ct129.files.tsv").read_bytes() == (
        local_ws / "locks/pylock.ct129.files.tsv"
    ).read_bytes()


def test_two_hosts_same_path_different_pythons(rig: SshRig, reference: Reference, tmp_path: Path) -> None:
    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a", extra=index))
    (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-b", extra=index))
    for host in ("ct129", "ct200"):
        proc = run_envlock(root, "capture", host)
        assert proc.returncode == 0, proc.stderr
    assert 'abi = "cp312"' in (root / "locks/pylock.ct129.toml").read_text()
    assert 'abi = "cp38"' in (root / "locks/pylock.ct200.toml").read_text()


@pytest.mark.parametrize(
    ("alias", "venv", "needle"),
    [
        ("closedport", VENV_PATH, "cannot connect"),
        ("wrongkey", VENV_PATH, "authentication failed"),
        ("ct-a", f"{VENV_PATH}/nowhere", f"venv {VENV_PATH}/nowhere: no such directory"),
        ("ct-a", f"{VENV_PATH}/lib", "is not a venv (no bin/python)"),
    ],
)
def test_clear_errors(rig: SshRig, tmp_path: Path, alias: str, venv: str, needle: str) -> None:
    root = _workspace(tmp_path, "ct200", rig.profile(alias, venv=venv))
    proc = run_envlock(root, "capture", "ct200")
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "ct200" in lines[0], proc.stderr
    assert not (root / "locks").exists()


def _items(directory: Path, sizes: list[int]) -> list[Item]:
    directory.mkdir(parents=True, exist_ok=True)
    items = []
    for i, size in enumerate(sizes):
        path = directory / f"artifact{i}-1.0-py3-none-any.whl"
        path.write_bytes(os.urandom(size))
        items.append(Item(hashlib.sha256(path.read_bytes()).hexdigest(), path.name, path))
    return items


def test_push_sends_only_what_is_missing(rig: SshRig, tmp_path: Path) -> None:
    profile = parse_profile(
        "ct-a", {"venv": VENV_PATH, "ssh": "ct-a", "ssh_args": ["-F", str(rig.config)]}, tmp_path
    )
    items = _items(tmp_path / "art", [10, 20_000, 3_000_000])
    with open_transport(profile) as transport:
        first = push(transport, VENV_PATH, items[:2], remote_dir="~/.cache/envlock/push-test")
        assert [i.name for i in first.sent] == [items[0].name, items[1].name]
        second = push(transport, VENV_PATH, items, remote_dir="~/.cache/envlock/push-test")
        assert [i.name for i in second.sent] == [items[2].name]
        assert len(second.already_there) == 2
    landed = rig.base / "ct-a" / "cache" / "push-test"
    for item in items:
        assert hashlib.sha256((landed / item.sha256 / item.name).read_bytes()).hexdigest() == item.sha256


def test_transfer_killed_midway_leaves_no_corrupt_file(rig: SshRig, tmp_path: Path) -> None:
    profile = parse_profile(
        "ct-a", {"venv": VENV_PATH, "ssh": "ct-a", "ssh_args": ["-F", str(rig.config)]}, tmp_path
    )
    (big,) = _items(tmp_path / "big", [256 * 1024 * 1024])
    remote = "~/.cache/envlock/kill-test"
    incoming = rig.base / "ct-a" / "cache" / "kill-test" / ".incoming"
    errors: list[BaseException] = []

    def run_push() -> None:
        try:
            with open_transport(profile) as transport:
                push(transport, VENV_PATH, [big], remote_dir=remote)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_push)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = list(incoming.glob("*/*.part")) if incoming.exists() else []
        if parts and parts[0].stat().st_size > 1 << 20:
            break
        time.sleep(0.005)
    else:
        pytest.fail("the transfer never started")
    # "[r]eceive" matches the agent but not the shell that runs pkill.
    killed = rig.run("ct-a", ["pkill", "-9", "-f", "[r]eceive --dir " + remote])
    assert killed.returncode == 0, killed.stderr
    thread.join(timeout=60)
    assert errors and isinstance(errors[0], EnvlockError), errors
    final = rig.base / "ct-a" / "cache" / "kill-test" / big.sha256 / big.name
    assert not final.exists()

    with open_transport(profile) as transport:
        result = push(transport, VENV_PATH, [big], remote_dir=remote)
    assert [i.name for i in result.sent] == [big.name]
    assert hashlib.sha256(final.read_bytes()).hexdigest() == big.sha256
    # The killed transfer's directory went with the next receive (its process
    # is gone), and that receive removed its own.
    assert list(incoming.iterdir()) == []


def _payload_bytes(venv: Path) -> dict[str, str]:
    """Raw sha256 of every payload file (bin/ included, no normalisation)."""
    skip = ("activate", "python", "Activate", "deactivate", "pydoc")
    result = {}
    for path in sorted(venv.rglob("*")):
        rel = path.relative_to(venv).as_posix()
        if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts:
            continue
        if (rel.startswith("bin/") and path.name.startswith(skip)) or rel == "pyvenv.cfg":
            continue
        if path.parent.name.endswith(".dist-info") and path.name in {
            "INSTALLER",
            "REQUESTED",
            "RECORD",
            "direct_url.json",
            "uv_cache.json",
        }:
            continue
        result[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


def test_apply_over_ssh_same_path_is_byte_identical(
    rig: SshRig, reference: Reference, tmp_path: Path
) -> None:
    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a", extra=index))
    (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-b", extra=index))
    assert run_envlock(root, "capture", "ct129").returncode == 0
    for suffix in (".toml", ".files.tsv"):
        (root / "locks" / f"pylock.ct200{suffix}").write_bytes(
            (root / "locks" / f"pylock.ct129{suffix}").read_bytes()
        )
    proc = run_envlock(root, "apply", "ct200", "--format", "json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    report = json.loads(proc.stdout)["result"]["host_report"]
    assert report["previous"] == f"{VENV_PATH}.envlock/previous"
    reference_bytes = _payload_bytes(rig.venv_dir("ct-a"))
    assert any(k.startswith("bin/") for k in reference_bytes)
    assert _payload_bytes(rig.venv_dir("ct-b")) == reference_bytes
    smoke = rig.run("ct-b", [f"{VENV_PATH}/bin/alpha"])
    assert smoke.stdout.strip() == "alpha", smoke.stderr
    again = run_envlock(root, "apply", "ct200", "--format", "json")
    assert json.loads(again.stdout)["result"]["noop"] is True


def _drop_during_apply(
    rig: SshRig, reference: Reference, tmp_path: Path, fault: str, then: signal.Signals
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Apply to a fresh venv on ct-b; cut the SSH connection while the agent waits at ``fault``;
    then continue (SIGCONT) or kill (SIGKILL) the agent, as the host would have gone on."""
    venv = f"{HOST_ROOT}/drop-{then.name.lower()}"
    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a", extra=index))
    (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-b", venv=venv, extra=index))
    assert run_envlock(root, "capture", "ct129").returncode == 0
    for suffix in (".toml", ".files.tsv"):
        locks = root / "locks"
        (locks / f"pylock.ct200{suffix}").write_bytes((locks / f"pylock.ct129{suffix}").read_bytes())
    proc = subprocess.Popen(
        [ENVLOCK, "apply", "ct200", "--root", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, ENVLOCK_FAULT=fault),
    )
    agent = wait_stopped(rig.hosts["ct-b"].proc.pid, proc)
    assert rig.drop_connections("ct-b") > 0
    os.kill(agent, then)
    out, err = proc.communicate(timeout=300)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done, rig.hosts["ct-b"].root / Path(venv).name


def test_ssh_drop_after_which_the_host_finished_says_so(
    rig: SshRig, reference: Reference, tmp_path: Path
) -> None:
    done, venv = _drop_during_apply(rig, reference, tmp_path, "stop:before:swap", signal.SIGCONT)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "host ct200: the connection was lost during the apply; on the host: " in done.stderr, done.stderr
    assert "the apply finished: the new venv is swapped in at" in done.stderr, done.stderr
    assert (venv / "bin" / "alpha").is_file()


def test_ssh_drop_after_which_the_host_stopped_says_the_venv_is_untouched(
    rig: SshRig, reference: Reference, tmp_path: Path
) -> None:
    done, venv = _drop_during_apply(rig, reference, tmp_path, "stop:before:verify", signal.SIGKILL)
    assert done.returncode == 2
    assert "the connection was lost during the apply" in done.stderr, done.stderr
    assert "on the host: the apply stopped at verify, before the swap" in done.stderr, done.stderr
    assert "is untouched" in done.stderr and not venv.exists()


def test_a_stale_agent_on_a_host_is_refused_and_removing_it_as_told_heals(
    rig: SshRig, reference: Reference, tmp_path: Path
) -> None:
    """The realistic stale bundle: the one cached on the host differs from what this envlock ships."""
    import re

    from envlock.agent.protocol import AGENT_PROTOCOL

    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    root = _workspace(tmp_path, "ct200", rig.profile("ct-b", extra=index))
    first = run_envlock(root, "capture", "ct200")
    assert first.returncode == 0, first.stderr
    (shipped,) = (rig.base / "ct-b" / "cache").glob("envlock-agent-*/envlock/agent/protocol.py")
    bundle = shipped.parents[2]
    text = re.sub(r"^AGENT_PROTOCOL = \d+$", "AGENT_PROTOCOL = 99", shipped.read_text(), flags=re.M)
    shipped.write_text(text)
    try:
        for pycache in bundle.rglob("__pycache__"):
            subprocess.run(["rm", "-rf", str(pycache)], check=True)
        lock = (root / "locks" / "pylock.ct200.toml").read_bytes()
        stale = run_envlock(root, "capture", "ct200", "--no-cache")
        assert stale.returncode == 2, stale.stderr
        assert stale.stderr.strip() == (
            "envlock: error: host ct200: its agent speaks protocol 99, "
            f"this envlock speaks protocol {AGENT_PROTOCOL}: "
            f"the agent bundle there is stale; remove ~/.cache/envlock/{bundle.name} on ct200 "
            "(envlock ships the agent again on the next run)"
        )
        assert (root / "locks" / "pylock.ct200.toml").read_bytes() == lock
    finally:
        proc = rig.run("ct-b", ["sh", "-c", f"rm -rf ~/.cache/envlock/{bundle.name}"])
        assert proc.returncode == 0, proc.stderr
    healed = run_envlock(root, "capture", "ct200", "--no-cache")
    assert healed.returncode == 0, healed.stderr
    assert "AGENT_PROTOCOL = 99" not in shipped.read_text()


# ------------------------------------------------------------------ master connection reuse


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """An XDG_RUNTIME_DIR of the test's own, short (a socket path holds 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    try:
        yield path
    finally:
        for sock in _sockets(path / "envlock-ssh"):
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True)
        subprocess.run(["rm", "-rf", str(path)], check=True)


def _sockets(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if stat.S_ISSOCK(p.lstat().st_mode))


def _accepted(rig: SshRig, alias: str) -> int:
    """SSH connections the host's sshd accepted so far (its log is per session)."""
    return (rig.base / alias / "sshd.log").read_text().count("Accepted publickey")


def _envlock(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env=env)


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENVLOCK_SSH_PERSIST"}
    return {**env, "XDG_RUNTIME_DIR": str(runtime), **extra}


def _alive(sock: Path) -> bool:
    check = subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "check", "x"], capture_output=True)
    return check.returncode == 0


def test_a_second_run_reuses_the_first_runs_connection(
    rig: SshRig, reference: Reference, tmp_path: Path, runtime_dir: Path
) -> None:
    index = f'[index]\nurls = ["{reference.index.url}"]\n'
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a", extra=index))
    env = _env(runtime_dir)
    before = _accepted(rig, "ct-a")
    first = _envlock(root, env, "capture", "ct129")
    assert first.returncode == 0, first.stderr
    control = runtime_dir / "envlock-ssh"
    assert stat.S_IMODE(control.stat().st_mode) == 0o700
    (sock,) = _sockets(control)
    assert _alive(sock), "the master did not outlive the run"
    second = _envlock(root, env, "verify", "ct129")
    assert second.returncode == 0, second.stderr + second.stdout
    assert _accepted(rig, "ct-a") == before + 1, "the second run opened a connection of its own"
    assert _sockets(control) == [sock]

    # Another profile of the same host with other ssh options gets a master of its own.
    other = _workspace(tmp_path / "other", "ct129", rig.profile("ct-a", extra=index).replace(
        'ssh_args = ["-F",', 'ssh_args = ["-o", "Compression=no", "-F",'
    ))  # fmt: skip
    third = _envlock(other, env, "smoke", "ct129")
    assert third.returncode == 0, third.stderr
    assert len(_sockets(control)) == 2
    assert _accepted(rig, "ct-a") == before + 2


def test_a_stale_socket_is_replaced_by_a_new_master(
    rig: SshRig, reference: Reference, tmp_path: Path, runtime_dir: Path
) -> None:
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a"))
    env = _env(runtime_dir)
    assert _envlock(root, env, "smoke", "ct129").returncode == 0
    (sock,) = _sockets(runtime_dir / "envlock-ssh")
    subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"], capture_output=True, check=True)
    # What a killed master leaves: a socket file nobody listens on.
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(sock))
    assert not _alive(sock)
    before = _accepted(rig, "ct-a")
    again = _envlock(root, env, "smoke", "ct129")
    assert again.returncode == 0, again.stderr
    assert _accepted(rig, "ct-a") == before + 1
    assert _sockets(runtime_dir / "envlock-ssh") == [sock] and _alive(sock)


@pytest.mark.parametrize("where", ["profile", "env"])
def test_persist_zero_opens_one_connection_per_run_and_leaves_nothing(
    rig: SshRig, tmp_path: Path, runtime_dir: Path, where: str
) -> None:
    extra = 'ssh_persist = "0s"\n' if where == "profile" else 'ssh_persist = "5m"\n'
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a", extra=extra))
    scratch = runtime_dir / "t"  # where the run's own socket directory goes (short, as above)
    scratch.mkdir()
    env = _env(runtime_dir, TMPDIR=str(scratch))
    if where == "env":
        env["ENVLOCK_SSH_PERSIST"] = "0"  # beats the profile's 5m
    before = _accepted(rig, "ct-a")
    for _ in range(2):
        proc = _envlock(root, env, "smoke", "ct129")
        assert proc.returncode == 0, proc.stderr
    assert _accepted(rig, "ct-a") == before + 2
    assert not (runtime_dir / "envlock-ssh").exists()
    assert list(scratch.iterdir()) == [], "the run's private socket directory was left behind"


def _unsafe(runtime: Path, how: str) -> Path:
    control = runtime / "envlock-ssh"
    if how == "group-writable":
        control.mkdir(mode=0o700)
        control.chmod(0o770)
    elif how == "world-writable":
        control.mkdir(mode=0o700)
        control.chmod(0o1777)
    elif how == "someone-else's":
        control.mkdir(mode=0o700)
        os.chown(control, 65534, 65534)
    elif how == "symlink":
        (runtime / "elsewhere").mkdir(mode=0o700)
        control.symlink_to(runtime / "elsewhere")
    elif how == "parent-world-writable":
        runtime.chmod(0o777)
    return control


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("group-writable", "writable by group or others (mode 0770)"),
        ("world-writable", "writable by group or others (mode 1777)"),
        ("someone-else's", "owned by uid 65534, not by you"),
        ("symlink", "it is a symlink"),
        ("parent-world-writable", "is writable by others and not sticky"),
    ],
)
def test_an_unsafe_socket_directory_is_refused(
    rig: SshRig, tmp_path: Path, runtime_dir: Path, how: str, why: str
) -> None:
    control = _unsafe(runtime_dir, how)
    root = _workspace(tmp_path, "ct129", rig.profile("ct-a"))
    before = _accepted(rig, "ct-a")
    proc = _envlock(root, _env(runtime_dir), "smoke", "ct129")
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"ssh control directory {control}: " in lines[0] and why in lines[0], (
        proc.stderr
    )
    assert "ENVLOCK_SSH_PERSIST=0" in lines[0]
    assert _accepted(rig, "ct-a") == before
    assert not any(_sockets(d) for d in (control, runtime_dir / "elsewhere"))
