"""The requirements export is accepted by real pip --require-hashes and pip-sync."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Reference
from helpers import run_envlock, walk_payload

BIN = Path(sys.executable).parent


def _export(workspace: Path, tmp_path: Path) -> Path:
    assert run_envlock(workspace, "capture", "ct129").returncode == 0
    out = tmp_path / "requirements.txt"
    proc = run_envlock(workspace, "export", "ct129", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _site_payload(venv: Path) -> dict[str, str]:
    return {k: v for k, v in walk_payload(venv).items() if k.startswith("site/")}


def test_pip_require_hashes_installs_export(workspace: Path, tmp_path: Path, reference: Reference) -> None:
    requirements = _export(workspace, tmp_path)
    text = requirements.read_text()
    assert "six==1.17.0 \\\n    --hash=sha256:" in text
    assert "localpkg @ file://" in text
    target = tmp_path / "pipvenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(target / "bin/python"),
            "install",
            "-q",
            "--no-deps",
            "--require-hashes",
            "-r",
            str(requirements),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert _site_payload(target) == _site_payload(reference.venv)


def test_pip_sync_installs_export(workspace: Path, tmp_path: Path, reference: Reference) -> None:
    requirements = _export(workspace, tmp_path)
    target = tmp_path / "synced"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    proc = subprocess.run(
        [
            str(BIN / "pip-sync"),
            "--python-executable",
            str(target / "bin/python"),
            str(requirements),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = _site_payload(reference.venv)
    got = _site_payload(target)
    assert {k: got.get(k) for k in expected} == expected
    # pip-sync leaves the venv's own pip and setuptools alone, by design.
    seeded = (
        "site/pip",
        "site/setuptools",
        "site/pkg_resources",
        "site/_distutils_hack",
        "site/distutils-precedence.pth",
    )
    assert [k for k in got if k not in expected and not k.startswith(seeded)] == []
