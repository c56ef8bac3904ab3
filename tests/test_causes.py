"""Errors say why: uv's nested causes reach the user; a killed agent is said to be killed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.agent.apply import ApplyError, _run
from envlock.errors import AgentError
from envlock.transport import run_agent
from envlock.transport.local import LocalTransport
from helpers import UV, make_wheel


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real full disk."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_disk_full_inside_uv_reaches_the_message(
    tmp_path: Path, tiny_fs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = make_wheel(
        tmp_path / "wheels",
        "bigpkg",
        "1.0",
        {"bigpkg/__init__.py": b"", "bigpkg/data.bin": os.urandom(3 << 20)},
    )
    venv = tiny_fs / "venv"
    subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    monkeypatch.setenv("COLUMNS", "60")  # uv wraps its message to this width
    with pytest.raises(ApplyError) as caught:
        _run(
            [UV, "pip", "install", "--python", str(venv / "bin" / "python"), "--offline", "--no-index",
             "--no-deps", "--link-mode", "copy", "--cache-dir", str(tmp_path / "uv-cache"), "-q", str(wheel)],
            "installing 1 wheels",
        )  # fmt: skip
    message = str(caught.value)
    assert message.startswith("installing 1 wheels failed: Failed to install: bigpkg-1.0")
    assert "No space left on device" in message


def test_cause_lines_in_both_spellings() -> None:
    from envlock.agent.apply import _cause

    old = "error: Failed to build venv\n  Caused by: Permission denied (os error 13)\n"
    assert _cause(old, 2) == "Failed to build venv: Permission denied (os error 13)"
    assert _cause("", -9) == "killed by signal 9 (SIGKILL)"
    assert _cause("some output\n", 1) == "some output"
    wrapped = (  # uv under COLUMNS=60
        "error: Failed to install:\n       bigpkg-1.0-py3-none-any.whl\n"
        "  cause: failed to copy file from\n         /a/data.bin\n         to\n"
        "         /b/.tmpHKcIuF:\n         No space left on device (os error 28)\n"
    )
    assert _cause(wrapped, 2) == (
        "Failed to install: bigpkg-1.0-py3-none-any.whl: "
        "failed to copy file from /a/data.bin to /b/.tmpHKcIuF: No space left on device (os error 28)"
    )


def test_a_killed_agent_says_so(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    drop = tmp_path / "drop-for-kill-test"
    read_end, write_end = os.pipe()
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            with os.fdopen(read_end, "rb") as stdin:
                run_agent(LocalTransport("local"), str(venv), ["receive", "--dir", str(drop)], stdin=stdin)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    try:
        pid = _find_agent(str(drop))
        os.kill(pid, 9)  # the agent this test started, by its pid
        thread.join(timeout=60)
    finally:
        os.close(write_end)
        thread.join(timeout=60)
    assert len(errors) == 1 and isinstance(errors[0], AgentError), errors
    assert "killed by signal 9 (SIGKILL)" in str(errors[0])
    assert "exit status -9" not in str(errors[0])


def _find_agent(marker: str) -> int:
    """The pid of the agent process whose command line names ``marker`` (a bounded wait)."""
    for _ in range(200_000):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in cmdline and b"receive" in cmdline:
                return int(entry.name)
        os.sched_yield()
    pytest.fail("the agent never started")
