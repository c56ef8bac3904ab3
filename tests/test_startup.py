"""Start-up stays cheap: what a command imports, checked structurally (never timed).

Each command runs as a user runs it, in a fresh interpreter, which reports
``sys.modules`` as it exits (``-X importtime`` would miss the command
module, imported through ``importlib``). The budget (issue 17: ``envlock
inspect`` of a small library in 0.08 s) is measured in bench/whole; here,
only that no heavy module comes back.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# Never needed to parse arguments, read an ELF file or print a verdict.
HEAVY = {
    "requests",
    "urllib3",
    "certifi",
    "resolvelib",
    "tomli_w",
    "packaging",
    "elftools",  # pyelftools: ~0.1 s of imports; binary/elf.py reads ELF with struct
    "zipfile",  # wheels only
    "subprocess",  # c++filt only, when a library misses symbols
    "shutil",  # argparse imports it for the terminal width; cli asks os directly
    "pathlib",  # and urllib.parse with it: inspect uses os.path
    "envlock.lock",
    "envlock.transport",
}


# The console script's two lines, plus a report of every module loaded when the process ends.
_RUN = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
    "sys.argv = ['envlock', *sys.argv[1:]]\n"
    "from envlock.cli import main\n"
    "raise SystemExit(main())\n"
)


def imported(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``envlock ARGS`` in a fresh interpreter; its result and every module it imported."""
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True)
    reports = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert len(reports) == 1, proc.stderr[-2000:]
    return proc, set(reports[0].split()[1:])


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m in HEAVY or m.split(".")[0] in HEAVY or m.rsplit(".", 1)[0] in HEAVY}


def small_library() -> Path:
    found = sorted(Path(sysconfig.get_config_var("DESTSHARED")).glob("math.*.so"))
    assert found, "this interpreter has no math extension module to inspect"
    return found[0]


def test_inspect_of_a_library_imports_nothing_heavy() -> None:
    proc, modules = imported("inspect", str(small_library()))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "verdict: runs (no device code)" in proc.stdout
    assert "envlock.binary.elf" in modules  # the trace is read: the work's own modules are there
    assert heavy(modules) == set()
    # only the chosen command's module
    assert {m for m in modules if m.startswith("envlock.cli.") and m.endswith("_cmd")} == {
        "envlock.cli.inspect_cmd"
    }


@pytest.mark.parametrize("args", [("--version",), ("--help",)])
def test_version_and_help_import_no_command(args: tuple[str, ...]) -> None:
    proc, modules = imported(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "envlock.cli" in modules
    assert heavy(modules) == set()
    assert {m for m in modules if m.startswith("envlock.cli.") and m.endswith("_cmd")} == set()
    assert not {m for m in modules if m.startswith("envlock.binary")}
