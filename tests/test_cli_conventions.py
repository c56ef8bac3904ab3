"""The command line follows the conventions people bring from git and uv.

Global options before or after the command, the workspace found from the
current directory up, no styling unless stdout is a terminal (and NO_COLOR,
--no-color), -v/-q, and a mistyped host name answered with the closest one.
All through the installed console script.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Reference, write_profile
from helpers import ENVLOCK

BOLD = "\033[1m"


def envlock(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    return subprocess.run([ENVLOCK, *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Path:
    root = tmp_path_factory.mktemp("conventions") / "fleet"
    write_profile(root, "gpu01", reference.venv, reference.index.url)
    proc = envlock("capture", "gpu01", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    return root


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    result.pop("seconds", None)
    result.pop("stats", None)
    return result


def test_global_options_go_before_or_after_the_command(fleet: Path) -> None:
    before = envlock("--root", str(fleet), "--format", "json", "verify", "gpu01")
    after = envlock("verify", "gpu01", "--root", str(fleet), "--format", "json")
    mixed = envlock("--format=json", "verify", "--root", str(fleet), "gpu01")
    assert _result(before) == _result(after) == _result(mixed)
    assert _result(before)["clean"] is True
    # a value given after the command wins over one given before it, as with git -c
    text = envlock("--format", "json", "verify", "gpu01", "--root", str(fleet), "--format", "text")
    assert text.returncode == 0 and text.stdout.startswith("gpu01: "), text.stdout


def test_workspace_is_found_from_a_subdirectory(fleet: Path) -> None:
    proc = envlock("show", "gpu01", "--format", "json", cwd=fleet / "locks")
    assert _result(proc)["host"] == "gpu01"
    verify = envlock("verify", "gpu01", cwd=fleet / "locks")
    assert verify.returncode == 0, verify.stderr


def test_outside_a_workspace_the_error_says_where_it_looked(tmp_path: Path) -> None:
    outside = tmp_path / "a" / "b"
    outside.mkdir(parents=True)
    proc = envlock("verify", "ref", cwd=outside)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert f"no hosts/ directory in {outside} or any directory above it" in line, line
    assert "--root DIR" in line, line
    # lock files named by path still work outside a workspace
    shown = envlock("show", str(tmp_path / "nosuch.toml"), cwd=outside)
    assert "nosuch.toml: no such lock" in shown.stderr, shown.stderr


def _on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """Run with stdout on a pseudo-terminal; what it printed."""
    main, child = pty.openpty()
    proc = subprocess.run([ENVLOCK, *args], stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert proc.returncode == 0, proc.stderr
    return b"".join(chunks).decode()


def test_styling_only_on_a_terminal_and_never_with_no_color(fleet: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    args = ("show", "gpu01", "--root", str(fleet))
    assert BOLD in _on_a_terminal(*args, env=env)  # the table header, on a terminal
    assert BOLD not in _on_a_terminal(*args, env={**env, "NO_COLOR": "1"})
    assert BOLD not in _on_a_terminal(*args, "--no-color", env=env)
    assert BOLD not in _on_a_terminal("--no-color", *args, env=env)
    piped = envlock(*args, env=env)
    assert piped.returncode == 0 and "\033" not in piped.stdout


def test_verbose_shows_the_steps_and_quiet_hides_them(fleet: Path) -> None:
    loud = envlock("capture", "gpu01", "-v", "--root", str(fleet))
    quiet = envlock("-q", "capture", "gpu01", "--root", str(fleet))
    plain = envlock("capture", "gpu01", "--root", str(fleet))
    assert loud.returncode == quiet.returncode == plain.returncode == 0
    assert "• " in loud.stdout, loud.stdout  # the steps, even though stdout is a pipe
    assert "• " not in quiet.stdout and "• " not in plain.stdout
    assert "locks/pylock.gpu01.toml: unchanged" in quiet.stdout


def test_a_mistyped_host_gets_the_closest_name(fleet: Path) -> None:
    (fleet / "hosts" / "gpu02-spare.toml").write_text('venv = "/nonexistent"\n')
    proc = envlock("smoke", "gpu10", "--root", str(fleet))
    assert proc.returncode == 2
    assert "did you mean 'gpu01'?" in proc.stderr, proc.stderr
    assert "known hosts: gpu01, gpu02-spare" in proc.stderr
    far = envlock("smoke", "zzzzzz", "--root", str(fleet))
    assert "did you mean" not in far.stderr and "known hosts: gpu01" in far.stderr, far.stderr


def test_the_demo_headings_are_plain_when_piped(tmp_path: Path) -> None:
    """`make demo | cat` printed bold escapes; the heading helper now asks the terminal first."""
    demo = Path(__file__).resolve().parent.parent / "demo" / "run.py"
    code = f"import runpy; say = runpy.run_path({str(demo)!r})['say']; say('step')"
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert piped.stdout == "\n==> step\n"
    main, child = pty.openpty()
    subprocess.run([sys.executable, "-c", code], stdout=child, check=True, env=_no_color_unset())
    os.close(child)
    assert BOLD.encode() in os.read(main, 4096)
    os.close(main)


def _no_color_unset() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "NO_COLOR"}


def test_a_root_without_hosts_says_so(tmp_path: Path) -> None:
    proc = envlock("smoke", "ref", "--root", str(tmp_path))
    assert proc.returncode == 2
    assert f"{tmp_path}/hosts: no such directory (is --root {tmp_path} the workspace?)" in proc.stderr, (
        proc.stderr
    )
