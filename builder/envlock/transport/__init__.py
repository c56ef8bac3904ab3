"""Reach a host: run the agent in its venv, locally or over SSH.

``open_transport(profile)`` gives a context manager; ``run_agent`` runs one
agent command through it. Only argument lists are executed locally; over SSH,
where the remote side always goes through a shell, every word is quoted with
``shlex.quote`` (see ``ssh.py``), so nothing from a profile or a lock is ever
pasted into a shell string unquoted.

What the agent says is ``envlock.agent.protocol``'s: ``agent_answer`` reads an
answer and refuses an agent of another protocol version; a failure the agent
reports (an ``@error`` line) becomes an ``AgentReportedError`` with its code.
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
from envlock.agent.protocol import AGENT_PROTOCOL, ErrorMessage, HashStats, ProgressEvent
from envlock.errors import AgentError, AgentProtocolError, AgentReportedError, EnvlockError
from envlock.hosts import HostProfile
from envlock.reporter import Reporter

StatsCallback = Callable[[HashStats], None]
AGENT_ERROR = "envlock-agent: error: "  # an agent before structured errors, and the SSH installer
STRUCTURED_ERROR = "@error "
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

    def stale_agent_fix(self) -> str:
        """What to remove, and where, so that the next run brings the agent this envlock ships."""
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


class _Stderr:
    """What the agent said on stderr besides progress: plain lines and its ``@error`` report."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.error: ErrorMessage | None = None


def _pump_stderr(
    stream: IO[bytes], reporter: Reporter | None, on_stats: StatsCallback | None, sink: _Stderr
) -> None:
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith("@progress "):
            event = _progress_event(line)
            if reporter is not None and event is not None:
                reporter.progress(event["phase"], event["done"], event["total"], event["detail"])
        elif line.startswith("@stats "):
            if on_stats is not None:
                on_stats(json.loads(line[len("@stats ") :]))
        elif line.startswith(STRUCTURED_ERROR) and _error_message(line) is not None:
            sink.error = _error_message(line)
        elif line:
            sink.lines.append(line)


def _progress_event(line: str) -> ProgressEvent | None:
    """A ``@progress`` line's event; None for a damaged one (a bar is not worth a failure)."""
    try:
        data = json.loads(line[len("@progress ") :])
        return {
            "phase": str(data["phase"]),
            "done": int(data["done"]),
            "total": int(data["total"]),
            "detail": str(data.get("detail", "")),
        }
    except (ValueError, TypeError, KeyError):
        return None


def _error_message(line: str) -> ErrorMessage | None:
    """An ``@error`` line's report, or None when it is not one (then it is shown as it is)."""
    try:
        data = json.loads(line[len(STRUCTURED_ERROR) :])
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("message"), str):
        return None
    details = data.get("details")
    return {
        "code": str(data.get("code") or "unspecified"),
        "message": data["message"],
        "details": details if isinstance(details, dict) else {},
    }


def agent_answer(transport: Transport, line: bytes, what: str) -> Any:
    """One JSON answer of the agent (``what``: its command), its protocol version checked.

    The caller annotates the result with the answer's type from
    ``envlock.agent.protocol``. Every answer that starts a conversation with
    a host carries ``protocol``; an agent bundle left on the host by another
    envlock (same cache key, other code) is refused here, before its answer
    is trusted.
    """
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise AgentError(f"host {transport.host}: the agent's {what} answer is not JSON: {exc}") from exc
    if not isinstance(answer, dict):
        raise AgentError(f"host {transport.host}: the agent's {what} answer is not a JSON object")
    check_protocol(transport, answer)
    return answer


def check_protocol(transport: Transport, answer: dict[str, Any]) -> None:
    """Refuse an answer from an agent of another protocol version, saying what to do."""
    version = answer.get("protocol")
    if version == AGENT_PROTOCOL:
        return
    spoken = f"protocol {version}" if isinstance(version, int) else "no protocol version (an older agent)"
    raise AgentProtocolError(
        f"host {transport.host}: its agent speaks {spoken}, this envlock speaks protocol {AGENT_PROTOCOL}: "
        f"the agent bundle there is stale; {transport.stale_agent_fix()}"
    )


def run_agent(
    transport: Transport,
    venv: str,
    args: list[str],
    *,
    reporter: Reporter | None = None,
    on_stats: StatsCallback | None = None,
    on_first_line: Callable[[bytes], None] | None = None,
    stdin: IO[bytes] | None = None,
    python: str | None = None,
) -> bytes:
    """Run one agent command; return its stdout.

    ``reporter`` hears its ``@progress`` events, ``on_stats`` sees its
    ``@stats`` line. ``on_first_line`` sees stdout's first line as soon as
    the agent sends it, while the agent works on. ``stdin`` is streamed to
    the agent. A failure the agent reports raises ``AgentReportedError``
    with the agent's code.
    """
    listeners = (reporter, on_stats, on_first_line)
    try:
        return _run_agent_once(transport, venv, args, listeners, stdin, python)
    except _NeedsRepair as needs:
        if not transport.repair(venv, needs.returncode, needs.stderr_lines, python):
            raise needs.error from None
        return _run_agent_once(transport, venv, args, listeners, stdin, python)


class _NeedsRepair(Exception):
    def __init__(self, error: EnvlockError, returncode: int, stderr_lines: list[str]) -> None:
        super().__init__(str(error))
        self.error, self.returncode, self.stderr_lines = error, returncode, stderr_lines


def _run_agent_once(
    transport: Transport,
    venv: str,
    args: list[str],
    listeners: tuple[Reporter | None, StatsCallback | None, Callable[[bytes], None] | None],
    stdin: IO[bytes] | None,
    python: str | None,
) -> bytes:
    reporter, on_stats, on_first_line = listeners
    argv = transport.agent_argv(venv, args, python)
    stderr = _Stderr()
    errors = stderr.lines
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
    pump = threading.Thread(target=_pump_stderr, args=(proc.stderr, reporter, on_stats, stderr), daemon=True)
    pump.start()
    try:
        stdout = b""
        if on_first_line is not None:
            stdout = proc.stdout.readline()
            if stdout.endswith(b"\n"):
                on_first_line(stdout)
        stdout += proc.stdout.read()
        proc.wait()
    except BaseException:  # Ctrl-C
        proc.kill()
        proc.wait()
        # Not a plain join: over a shared SSH master the pipe is held by the master, not by the
        # ssh client just killed, and stays open as long as the agent there runs (a hang).
        pump.join(timeout=1)
        raise
    pump.join()
    if proc.returncode != 0:
        if stderr.error is not None:
            report = stderr.error
            raise AgentReportedError(
                f"host {transport.host}: {report['message']}", code=report["code"], details=report["details"]
            )
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
    from envlock.transport.bundle import bundle_path
    from envlock.workspace import cache_dir

    path = bundle_path(cache_dir())
    return path.stem.removeprefix("envlock-agent-"), path
