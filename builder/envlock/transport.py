"""Run the agent on a host: locally as a subprocess, or over SSH (own issue).

Only argument lists are ever executed; nothing from a profile or lock is
pasted into a shell string.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from envlock.agent.bundle import bundle_dir
from envlock.errors import AgentError, EnvlockError
from envlock.hosts import HostProfile
from envlock.workspace import cache_dir

ProgressCallback = Callable[[dict[str, Any]], None]


class Transport(Protocol):
    """How envlock reaches a host. Implementations: Local (here), SSH."""

    host: str

    def agent_argv(self, venv: str) -> list[str]:
        """The command that starts the agent in ``venv``'s own Python."""
        ...


@dataclass
class LocalTransport:
    host: str

    def agent_argv(self, venv: str) -> list[str]:
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            if not os.path.isdir(venv):
                raise EnvlockError(f"host {self.host}: venv {venv}: no such directory")
            raise EnvlockError(f"host {self.host}: {venv} is not a venv (no bin/python)")
        return [python, "-I", str(bundle_dir(cache_dir()))]


def transport_for(profile: HostProfile) -> Transport:
    if profile.ssh is not None:
        raise EnvlockError(f"{profile.path}: ssh: SSH hosts are not supported by this envlock yet")
    return LocalTransport(host=profile.name)


def _pump_stderr(stream: IO[bytes], on_progress: ProgressCallback | None, sink: list[str]) -> None:
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith("@progress "):
            if on_progress is not None:
                on_progress(json.loads(line[len("@progress ") :]))
        elif line.startswith("@stats "):
            if on_progress is not None:
                on_progress({"phase": "stats", **json.loads(line[len("@stats ") :])})
        elif line:
            sink.append(line)


def run_agent(
    transport: Transport,
    venv: str,
    args: list[str],
    *,
    on_progress: ProgressCallback | None = None,
    on_first_line: Callable[[bytes], None] | None = None,
    stdout_to: Path | None = None,
) -> bytes:
    """Run one agent command; return its stdout (or write it to ``stdout_to``).

    ``on_first_line`` sees stdout's first line as soon as the agent sends it,
    while the agent works on.
    """
    argv = transport.agent_argv(venv) + args
    errors: list[str] = []
    sink: IO[bytes] | int = subprocess.PIPE
    out_file = open(stdout_to, "wb") if stdout_to else None  # noqa: SIM115
    if out_file is not None:
        sink = out_file
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.PIPE)
    except OSError as exc:
        if out_file:
            out_file.close()
        raise EnvlockError(f"host {transport.host}: cannot start {argv[0]}: {exc.strerror}") from exc
    assert proc.stderr is not None
    pump = threading.Thread(target=_pump_stderr, args=(proc.stderr, on_progress, errors), daemon=True)
    pump.start()
    try:
        stdout = b""
        if proc.stdout is not None:
            if on_first_line is not None:
                stdout = proc.stdout.readline()
                if stdout.endswith(b"\n"):
                    on_first_line(stdout)
            stdout += proc.stdout.read()
        proc.wait()
    finally:
        pump.join()
        if out_file:
            out_file.close()
    if proc.returncode != 0:
        reported = [e for e in errors if e.startswith("envlock-agent: error: ")]
        if reported:
            raise AgentError(f"host {transport.host}: {reported[-1][len('envlock-agent: error: ') :]}")
        tail = errors[-1] if errors else f"exit status {proc.returncode}"
        raise AgentError(f"host {transport.host}: agent failed in {venv}: {tail}")
    return stdout
