"""Text output a person reads: proper plurals, a wheel without native code, CPU-only libraries.

Through the installed console script, on real wheels and the session's reference venv.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import Index, Reference, write_profile
from helpers import ENVLOCK, make_wheel


def envlock(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVLOCK, *args], capture_output=True, text=True)


def test_a_wheel_without_shared_libraries_says_so(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pure", "1.0", {"pure/__init__.py": b"X = 1\n"})
    proc = envlock("inspect", str(wheel))
    assert proc.returncode == 0, proc.stderr
    assert "no shared libraries in this wheel: nothing to load, no device code" in proc.stdout
    assert "containers" not in proc.stdout  # no empty table
    assert "verdict: runs (no device code)" in proc.stdout
    assert "native" not in proc.stdout


def test_a_cpu_only_library_is_not_called_native_and_shows_its_link_facts(index: Index) -> None:
    beta = str(index.wheels["beta"])  # beta/libenvtest.so: a plain C library, no device code
    proc = envlock("inspect", beta)
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("beta/libenvtest.so ")]
    assert row.split()[1:] == ["loads", "no", "device", "code"], row
    assert "1 library: 1 without device code" in proc.stdout
    assert "verdict: runs (no device code)" in proc.stdout
    data = json.loads(envlock("inspect", beta, "--format", "json").stdout)["result"]
    (library,) = data["libraries"]
    # JSON keeps its verdict values (native: it runs) and says what the text now says
    assert (library["verdict"], library["device_code"], data["device_code"]) == ("native", False, False)
    (facts,) = [line for line in proc.stdout.splitlines() if line.startswith("  beta/libenvtest.so: ")]
    needs, glibc = facts.removeprefix("  beta/libenvtest.so: needs ").split("; ")
    assert set(needs.split()) == set(library["load"]["needed"]) and "libc.so.6" in needs.split()
    assert glibc == f"glibc >= {library['glibc']}" and library["glibc"].startswith("2.")


def test_inspect_of_a_venv_hides_cpu_only_libraries_unless_asked(reference: Reference) -> None:
    plain = envlock("inspect", str(reference.venv))
    assert plain.returncode == 0, plain.stderr
    assert "1 library without device code, all load (-v or --format json lists them)" in plain.stdout
    loud = envlock("inspect", "-v", str(reference.venv))
    assert "beta/libenvtest.so" in loud.stdout and "needs " in loud.stdout


def test_smoke_summary_counts_one_check_in_the_singular(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, None, '[smoke]\nchecks = ["import six"]\n')
    proc = envlock("smoke", "ct129", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert " modules + 1 check in " in summary, summary
    assert ", 0 failed, 0 skipped" in summary
