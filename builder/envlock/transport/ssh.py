"""SSH hosts through the system OpenSSH client.

Using the system client means ``~/.ssh/config`` aliases, keys, agents, jump
hosts and known_hosts all work as they do for the user. Every command of a
run goes over one multiplexed connection (ControlMaster), which stays open
for ``ssh_persist`` seconds after the run for the next one to reuse, in a
private per-user socket directory (``envlock.transport.sshcontrol``; 0: a
connection per run, closed and its directory removed at the end). The
remote side runs every command through the login shell, so each word is
quoted with ``shlex.quote``; nothing from a profile or a lock reaches that
shell unquoted.

The agent is shipped once per envlock version: a small bootstrap run by the
venv's Python finds ``~/.cache/envlock/envlock-agent-<key>/`` on the host and
runs it; when it is missing, the bundle is streamed over the same
connection, checked against its sha256 and unpacked atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import EnvlockError, TransportError
from envlock.hosts import HostProfile
from envlock.transport.sshcontrol import ControlPlan, control_plan

NEED_BUNDLE = 99
BOOT = r"""
import os, sys
d = os.path.join(os.path.expanduser("~"), ".cache", "envlock", "envlock-agent-" + sys.argv[1])
if not os.path.isfile(os.path.join(d, "__main__.py")):
    sys.stderr.write("@need-bundle\n")
    sys.exit(99)
sys.path.insert(0, d)
sys.argv = [d] + sys.argv[2:]
import runpy
runpy.run_module("envlock.agent", run_name="__main__", alter_sys=True)
"""
INSTALL = r"""
import hashlib, io, os, shutil, sys, tempfile, zipfile
key, want = sys.argv[1], sys.argv[2]
data = sys.stdin.buffer.read()
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.stderr.write("envlock-agent: error: agent bundle damaged: sha256 %s, not %s\n" % (got, want))
    sys.exit(2)
base = os.path.join(os.path.expanduser("~"), ".cache", "envlock")
os.makedirs(base, exist_ok=True)
tmp = tempfile.mkdtemp(prefix=".envlock-agent-" + key + ".", dir=base)
zipfile.ZipFile(io.BytesIO(data)).extractall(tmp)
try:
    os.rename(tmp, os.path.join(base, "envlock-agent-" + key))
except OSError:
    shutil.rmtree(tmp, ignore_errors=True)
"""


def _quote(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


FIXED_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15"]


@dataclass
class SshTransport:
    host: str
    target: str
    options: list[str]
    control: ControlPlan
    bundle_key: str
    bundle_path: Path

    @classmethod
    def connect(cls, profile: HostProfile) -> SshTransport:
        """Reuse this profile's master connection, or open one; fail early with a clear reason."""
        from envlock.transport import bundle_key_and_bytes

        assert profile.ssh is not None
        control = control_plan(profile, FIXED_OPTIONS)
        # envlock's options come first: ssh keeps the first value it is given,
        # so a profile's -o ControlPath cannot move the socket elsewhere.
        options = [*FIXED_OPTIONS, "-o", f"ControlPath={control.path}", *profile.ssh_args]
        key, path = bundle_key_and_bytes()
        transport = cls(profile.name, profile.ssh, options, control, key, path)
        if control.lock is None:
            transport._start_master("yes", "yes")
            return transport
        with open(control.lock, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            if not transport._master_alive():
                # auto: ssh removes a stale socket (its master gone) before binding its own.
                transport._start_master("auto", f"{control.persist}s")
        return transport

    def _master_alive(self) -> bool:
        check = subprocess.run(
            ["ssh", *self.options, "-O", "check", "--", self.target],
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        return check.returncode == 0

    def _start_master(self, master: str, persist: str) -> None:
        proc = subprocess.run(
            ["ssh", *self.options, "-o", f"ControlMaster={master}", "-o", f"ControlPersist={persist}",
             "-f", "-N", "--", self.target],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            self.close()
            raise self.connection_error(proc.stderr.strip().splitlines())

    def connection_error(self, lines: list[str]) -> EnvlockError:
        text = " ".join(lines[-3:]) if lines else "ssh failed"
        who = f"host {self.host} ({self.target})"
        if "Permission denied" in text:
            return TransportError(f"{who}: authentication failed: {lines[-1]}")
        if "Host key verification failed" in text:
            return TransportError(f"{who}: host key verification failed (check known_hosts)")
        return TransportError(f"{who}: cannot connect: {lines[-1] if lines else 'ssh failed'}")

    def ssh_argv(self, remote: list[str]) -> list[str]:
        return ["ssh", *self.options, "-o", "ControlMaster=no", "--", self.target, _quote(remote)]

    def agent_argv(self, venv: str, args: list[str], python: str | None = None) -> list[str]:
        # No probe first: the bootstrap itself answers "@need-bundle" when the
        # agent is missing, run_agent calls repair() and runs again. Saves one
        # SSH session (about 0.1 s) on every run after the first.
        python = python or f"{venv.rstrip('/')}/bin/python"
        return self.ssh_argv([python, "-I", "-c", BOOT, self.bundle_key, *args])

    def repair(self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None) -> bool:
        """Ship the agent bundle; it is checked against its sha256 on arrival."""
        if returncode != NEED_BUNDLE:
            return False
        python = python or f"{venv.rstrip('/')}/bin/python"
        data = self.bundle_path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        sent = subprocess.run(
            self.ssh_argv([python, "-I", "-c", INSTALL, self.bundle_key, sha]),
            input=data,
            capture_output=True,
        )
        if sent.returncode != 0:
            lines = sent.stderr.decode("utf-8", "replace").strip().splitlines()
            raise self.diagnose(venv, sent.returncode, lines) or EnvlockError(
                f"host {self.host}: cannot install the agent: {lines[-1] if lines else sent.returncode}"
            )
        return True

    def diagnose(
        self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None
    ) -> EnvlockError | None:
        if returncode == 255:
            return self.connection_error(stderr_lines)
        if returncode in (126, 127) and python is not None:
            return EnvlockError(f"host {self.host}: no Python at {python}")
        if returncode in (126, 127):
            check = subprocess.run(
                self.ssh_argv(["test", "-d", venv]), stdin=subprocess.DEVNULL, capture_output=True
            )
            if check.returncode != 0:
                return EnvlockError(f"host {self.host}: venv {venv}: no such directory")
            return EnvlockError(f"host {self.host}: {venv} is not a venv (no bin/python)")
        return None

    def run_shell(self, script: str, args: list[str]) -> bytes:
        proc = subprocess.run(
            self.ssh_argv(["sh", "-c", script, "envlock", *args]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
        if proc.returncode == 255:
            raise self.connection_error(proc.stderr.decode("utf-8", "replace").strip().splitlines())
        return proc.stdout

    def stale_agent_fix(self) -> str:
        where = f"~/.cache/envlock/envlock-agent-{self.bundle_key}"
        return f"remove {where} on {self.host} (envlock ships the agent again on the next run)"

    def close(self) -> None:
        """A shared master stays for the next run (it exits after ``ssh_persist`` idle seconds);
        a run's own master is shut and its directory removed."""
        if self.control.lock is not None:
            return
        directory = os.path.dirname(self.control.path)
        if os.path.exists(self.control.path):
            subprocess.run(
                ["ssh", *self.options, "-O", "exit", "--", self.target],
                stdin=subprocess.DEVNULL,
                capture_output=True,
            )
        shutil.rmtree(directory, ignore_errors=True)
