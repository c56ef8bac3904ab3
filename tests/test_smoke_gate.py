"""``smoke --deep`` as a gate, on an ordinary venv of registry packages (pip, setuptools, rich,
pygments) plus one built here: failures expected on any healthy venv (platform-only modules,
test packages, missing optional extras, vendored optional imports, ``[smoke] exclude``) carry
their reason and do not gate; real failures do; the text fits 100 columns."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import MIRROR, write_profile
from helpers import make_venv, make_wheel, run_envlock, uv_install

REGISTRY = ["pip==26.2.1", "setuptools==84.0.0", "rich==15.0.0", "pygments==2.21.0"]
OFFLINE = [MIRROR, Path("/opt/wheels")]


@pytest.fixture(scope="module")
def ordinary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hosts/plain.toml: the venv, no [smoke] table; the workspace root is returned."""
    base = tmp_path_factory.mktemp("gate")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    pythons = sorted(pyenv.glob("3.12.*/bin/python3.12"))
    venv = make_venv(base / "venv", str(pythons[-1]) if pythons else "3.12")
    links = [arg for d in OFFLINE if d.is_dir() for arg in ("--find-links", str(d))]
    uv_install(venv, *(["--no-index", *links] if links else []), *REGISTRY)
    gizmo = make_wheel(
        base / "wheels",
        "gizmo",
        "1.0",
        {
            "gizmo/__init__.py": b"",
            "gizmo/fast.py": b"import zzaccel\n",  # zzaccel: only in the 'fast' extra
            "gizmo/broken.py": b"import zzhard\n",  # zzhard: a hard requirement, not installed
            "gizmo/tests/__init__.py": b"",
            "gizmo/tests/test_gizmo.py": b"import zzpytestplugin\n",
        },
        requires=("zzhard>=1", "zzaccel>=2; extra == 'fast'"),
    )
    uv_install(venv, "--no-deps", str(gizmo))
    root = base / "fleet"
    write_profile(root, "plain", venv, None)
    return root


def _smoke(root: Path, host: str, *args: str, deep: bool = True) -> tuple[int, dict[str, Any]]:
    depth = ["--deep"] if deep else []
    proc = run_envlock(root, "smoke", host, *depth, "--jobs", "2", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)["result"]
    return proc.returncode, data


def test_expected_failures_carry_their_reason_and_only_real_ones_gate(ordinary: Path) -> None:
    code, result = _smoke(ordinary, "plain")
    failed = {r["target"]: r for r in result["results"] if r["status"] == "failed"}
    real = sorted(t for t, r in failed.items() if r["expected"] is None)
    assert real == ["gizmo.broken", "pygments.sphinxext"], {t: failed[t]["why"] for t in real}
    assert code == 1 and result["passed"] is False
    assert result["counts"]["failed"] == 2 and result["counts"]["expected"] == len(failed) - 2
    reasons = {t: r["expected"] for t, r in failed.items() if r["expected"]}
    assert reasons["rich._win32_console"] == "platform-only: rich._win32_console is Windows code"
    assert reasons["pip._vendor.rich._windows_renderer"].startswith("platform-only: ")
    assert reasons["pip._vendor.truststore._macos"].endswith("is macOS code")
    assert reasons["gizmo.tests.test_gizmo"].startswith("test package: tests is a test suite")
    assert reasons["gizmo.fast"] == "optional extra: zzaccel is only in gizmo's extra 'fast', not installed"
    assert reasons["pip._vendor.urllib3.contrib.socks"] == (
        "vendored: pip._vendor.urllib3.contrib.socks is a vendored copy in pip, which does not require socks"
    )
    assert failed["gizmo.broken"]["why"] == "no installed distribution provides zzhard; gizmo imports it"


def test_text_fits_100_columns_and_verbose_gives_the_details(ordinary: Path) -> None:
    proc = run_envlock(ordinary, "smoke", "plain", "--deep", "--jobs", "2")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines[:-1]) <= 100, proc.stdout  # the summary line is one line
    assert lines[0].split() == ["result", "kind", "module", "why"]
    assert any(line.startswith("failed  missing-module  gizmo.broken") for line in lines), proc.stdout
    assert any(line.startswith("expected failures, not gating: ") for line in lines), proc.stdout
    assert "rich._win32_console" not in proc.stdout  # counted, listed under -v
    verbose = run_envlock(ordinary, "smoke", "plain", "--deep", "--jobs", "2", "-v")
    assert verbose.returncode == 1
    assert verbose.stdout.splitlines()[0].split() == ["result", "kind", "module", "at", "why"]
    assert "site-packages/gizmo/broken.py:1" in verbose.stdout
    assert "rich._win32_console" in verbose.stdout and "platform-only: rich._win32_console" in verbose.stdout


def test_profile_exclude_patterns_make_the_gate_pass(ordinary: Path) -> None:
    venv = next(line for line in (ordinary / "hosts" / "plain.toml").read_text().splitlines())
    (ordinary / "hosts" / "gated.toml").write_text(
        f'{venv}\n[smoke]\nexclude = ["*.sphinxext", "gizmo.broken"]\n'
    )
    code, result = _smoke(ordinary, "gated")
    assert code == 0 and result["passed"] is True and result["counts"]["failed"] == 0
    reasons = {r["target"]: r["expected"] for r in result["results"] if r["status"] == "failed"}
    assert reasons["gizmo.broken"].startswith("excluded: matches 'gizmo.broken' ([smoke] exclude in ")
    assert reasons["pygments.sphinxext"].startswith("excluded: matches '*.sphinxext'")
    assert reasons["pygments.sphinxext"].endswith("hosts/gated.toml)")
    (ordinary / "hosts" / "bad.toml").write_text(f'{venv}\n[smoke]\nexclude = ["gizmo broken"]\n')
    proc = run_envlock(ordinary, "smoke", "bad", "--deep")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("envlock: error: hosts/bad.toml: smoke.exclude[0]: "), proc.stderr


def test_a_profile_check_is_never_expected(ordinary: Path) -> None:
    venv = next(line for line in (ordinary / "hosts" / "plain.toml").read_text().splitlines())
    (ordinary / "hosts" / "checked.toml").write_text(
        f'{venv}\n[smoke]\nchecks = ["import gizmo.tests.test_gizmo"]\nexclude = ["gizmo.*", "*.sphinxext"]\n'
    )
    code, result = _smoke(ordinary, "checked", deep=False)
    checks = [r for r in result["results"] if r["check"]]
    assert [(r["status"], r["expected"]) for r in checks] == [("failed", None)]
    assert code == 1


def test_a_missing_name_caused_by_an_earlier_import_is_retried_alone(tmp_path: Path) -> None:
    """One module deletes a name another imports (as an import hook can): after it, in the same
    worker, the import fails; alone it works. That is an order effect, not a real failure."""
    wheel = make_wheel(
        tmp_path / "wheels",
        "patchy",
        "1.0",
        {
            "patchy/__init__.py": b"",
            "patchy/lib.py": b"thing = 1\n",
            "patchy/a_patch.py": b"import patchy.lib\ndel patchy.lib.thing\n",
            "patchy/z_use.py": b"from patchy.lib import thing\n",
        },
    )
    venv = make_venv(tmp_path / "venv")
    uv_install(venv, str(wheel))
    root = tmp_path / "fleet"
    write_profile(root, "one", venv, None)
    code, result = _smoke(root, "one", "--jobs", "1")
    z_use = next(r for r in result["results"] if r["target"] == "patchy.z_use")
    assert z_use["status"] == "ok", z_use
    assert "failed after other imports" in z_use["order_dependent"], z_use
    assert code == 0
