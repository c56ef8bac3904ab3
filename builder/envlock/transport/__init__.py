"""Reach a host: run the agent in its venv, locally or over SSH.

``open_transport(profile)`` gives a context manager; ``run_agent`` runs one
agent command through it. Only argument lists are executed locally; over SSH,
where the remote side always goes through a shell, every word is quoted with
``shlex.quote`` (see ``ssh.py``), so nothing from a profile or a lock is ever
pasted into a shell string unquoted.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from envlock.agent import describe_exit
from envlock.errors import AgentError, AgentReportedError, EnvlockError
from envlock.hosts import HostProfile

ProgressCallback = Callable[[dict[str, Any]], None]
AGENT_ERROR = "envlock-agent: error: "
NEED_AGENT = "@need-bundle"  # the SSH bootstrap's word for "send me the agent"


class Transport(Protocol):
    """How envlock reaches a host."""

    host: str

    def agent_argv(self, venv: str, args: list[str], python: str | None = None) -> list[str]:
        """The local command line that runs ``envlock-agent ARGS`` in ``venv``'s Python
        (or in ``python``, for work that must not depend on the venv, like apply)."""
        ...

    def diagnose(
        self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None
    ) -> EnvlockError | None:
        """A clearer error for a failed agent start (no such venv, host unreachable), if any."""
        ...

    def repair(self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None) -> bool:
        """Fix what made the agent fail to start (ship a missing agent); True: run again."""
        ...

    def run_shell(self, script: str, args: list[str]) -> bytes:
        """Run a POSIX ``sh`` script with ``args`` on the host; its stdout (exit status ignored)."""
        ...

    def close(self) -> None: ...


@contextmanager
def open_transport(profile: HostProfile) -> Iterator[Transport]:
    from envlock.transport.local import LocalTransport
    from envlock.transport.ssh import SshTransport

    transport: Transport = (
        LocalTransport(host=profile.name) if profile.ssh is None else SshTransport.connect(profile)
    )
    try:
        yield transport
    finally:
        transport.close()


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
    stdin: IO[bytes] | None = None,
    python: str | None = None,
) -> bytes:
    """Run one agent command; return its stdout.

    ``on_first_line`` sees stdout's first line as soon as the agent sends it,
    while the agent works on. ``stdin`` is streamed to the agent.
    """
    try:
        return _run_agent_once(transport, venv, args, on_progress, on_first_line, stdin, python)
    except _NeedsRepair as needs:
        if not transport.repair(venv, needs.returncode, needs.stderr_lines, python):
            raise needs.error from None
        return _run_agent_once(transport, venv, args, on_progress, on_first_line, stdin, python)


class _NeedsRepair(Exception):
    def __init__(self, error: EnvlockError, returncode: int, stderr_lines: list[str]) -> None:
        super().__init__(str(error))
        self.error, self.returncode, self.stderr_lines = error, returncode, stderr_lines


def _run_agent_once(
    transport: Transport,
    venv: str,
    args: list[str],
    on_progress: ProgressCallback | None,
    on_first_line: Callable[[bytes], None] | None,
    stdin: IO[bytes] | None,
    python: str | None,
) -> bytes:
    argv = transport.agent_argv(venv, args, python)
    errors: list[str] = []
    try:
        proc = subprocess.Popen(
            argv,
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise EnvlockError(f"host {transport.host}: cannot start {argv[0]}: {exc.strerror}") from exc
    assert proc.stderr is not None and proc.stdout is not None
    pump = threading.Thread(target=_pump_stderr, args=(proc.stderr, on_progress, errors), daemon=True)
    pump.start()
    try:
        stdout = b""
        if on_first_line is not None:
            stdout = proc.stdout.readline()
            if stdout.endswith(b"\n"):
                on_first_line(stdout)
        stdout += proc.stdout.read()
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        pump.join()
    if proc.returncode != 0:
        reported = [e for e in errors if e.startswith(AGENT_ERROR)]
        if reported:
            raise AgentReportedError(f"host {transport.host}: {reported[-1][len(AGENT_ERROR) :]}")
        if not stdout and any(line == NEED_AGENT for line in errors):
            error = AgentError(f"host {transport.host}: the agent is not installed there")
            raise _NeedsRepair(error, proc.returncode, errors)
        better = transport.diagnose(venv, proc.returncode, errors, python)
        if better is not None:
            raise better
        status = describe_exit(proc.returncode)
        if proc.returncode < 0:  # killed: its last words are not why
            tail = status + (f"; last output: {errors[-1]}" if errors else "")
        else:
            tail = errors[-1] if errors else status
        raise AgentError(f"host {transport.host}: agent failed in {venv}: {tail}")
    return stdout


def bundle_key_and_bytes() -> tuple[str, Path]:
    """The agent bundle's content key and local path (for shipping it to hosts)."""
    from envlock.agent.bundle import bundle_path
    from envlock.workspace import cache_dir

    path = bundle_path(cache_dir())
    return path.stem.removeprefix("envlock-agent-"), path
