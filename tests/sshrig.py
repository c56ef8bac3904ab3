"""A real SSH test rig: sshd on 127.0.0.1, one per fake host, same venv path.

Each host is an ``sshd -D`` in its own mount namespace (``unshare -m``) in
which a private directory is bound on the shared venv path and another on
the agent's cache, so two hosts can hold different venvs at one path, as
ct129 and ct200 do. Keys are generated per session; an ssh_config gives each
host an alias, used by profiles as ``ssh = "<alias>"`` with
``ssh_args = ["-F", <config>]``. Needs root and Debian's openssh-server
(``make test`` installs it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers import descendants

# Each host's private directory is bound here; the venv lives inside it so
# that apply can rename it (a mount point itself cannot be renamed).
HOST_ROOT = "/opt/envlock-test-host"
VENV_PATH = HOST_ROOT + "/venv"
SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {port}: {log.read_text()}")


@dataclass
class SshHost:
    alias: str
    port: int
    root: Path  # what the host sees at HOST_ROOT
    proc: subprocess.Popen[bytes]


@dataclass
class SshRig:
    base: Path
    config: Path
    key: Path
    hosts: dict[str, SshHost] = field(default_factory=dict)

    @classmethod
    def start(cls, base: Path, aliases: tuple[str, ...]) -> SshRig:
        if shutil.which("sshd") is None and not Path(SSHD).exists():
            raise RuntimeError("sshd not found: install Debian's openssh-server (make test does)")
        keys = base / "keys"
        keys.mkdir(parents=True)
        for name in ("host_key", "client_key", "wrong_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True
            )
        authorized = keys / "authorized_keys"
        shutil.copy(keys / "client_key.pub", authorized)
        authorized.chmod(0o600)
        Path(HOST_ROOT).mkdir(parents=True, exist_ok=True)
        agent_cache = Path.home() / ".cache" / "envlock"
        agent_cache.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)
        rig = cls(base, base / "ssh_config", keys / "client_key")
        config = ""
        for alias in aliases:
            port = free_port()
            home = base / alias
            (home / "root").mkdir(parents=True)
            (home / "cache").mkdir()
            sshd_config = home / "sshd_config"
            sshd_config.write_text(
                f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host_key'}\n"
                f"AuthorizedKeysFile {authorized}\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile {home / 'sshd.pid'}\nMaxSessions 50\nMaxStartups 50\n"
                "AcceptEnv ENVLOCK_FAULT\n"  # the fault tests' hooks reach the agent on the host
            )
            log = home / "sshd.log"
            script = (
                f"mount --bind {home / 'root'} {HOST_ROOT} && "
                f"mount --bind {home / 'cache'} {agent_cache} && "
                f"exec {SSHD} -D -e -f {sshd_config}"
            )
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            _wait_listening(port, proc, log)
            rig.hosts[alias] = SshHost(alias, port, home / "root", proc)
            config += (
                f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                f"  IdentityFile {keys / 'client_key'}\n  IdentitiesOnly yes\n"
                "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
                "  SendEnv ENVLOCK_FAULT\n"
            )
        config += (
            f"Host wrongkey\n  HostName 127.0.0.1\n  Port {rig.hosts[aliases[0]].port}\n  User root\n"
            f"  IdentityFile {keys / 'wrong_key'}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            f"Host closedport\n  HostName 127.0.0.1\n  Port {free_port()}\n  User root\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
        rig.config.write_text(config)
        return rig

    def run(self, alias: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Run a command on the host (inside its namespace), as argv."""
        import shlex

        remote = " ".join(shlex.quote(a) for a in argv)
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            ["ssh", "-F", str(self.config), alias, remote], capture_output=True, text=True, **kwargs
        )

    def venv_dir(self, alias: str) -> Path:
        """Where this machine sees the host's VENV_PATH."""
        return self.hosts[alias].root / "venv"

    def profile(self, alias: str, venv: str = VENV_PATH, extra: str = "") -> str:
        return f'venv = "{venv}"\nssh = "{alias}"\nssh_args = ["-F", "{self.config}"]\n{extra}'

    def drop_connections(self, alias: str) -> int:
        """Cut every SSH connection to the host, as a network failure would: kill its
        per-connection sshd processes (not the listener, not what they started)."""
        main = self.hosts[alias].proc.pid
        killed = 0
        for pid, comm in descendants(main):
            if comm.startswith("sshd"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue  # the connection ended between the listing and the kill
                killed += 1
        return killed

    def stop(self) -> None:
        for alias in self.hosts:
            # envlock keeps its master connections for a while (ssh_persist): cutting
            # them makes those masters exit now rather than outlive the rig.
            self.drop_connections(alias)
        for host in self.hosts.values():
            host.proc.terminate()
            try:
                host.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                host.proc.kill()
