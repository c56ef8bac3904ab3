"""The resolver's documented order (resolve/provider.py), on a real index of built wheels.

The reference runs ``near 1.5``. When a target cannot keep it, the policy is
the smallest version change: the nearest newer release first, then the
nearest older one; never the newest, never the oldest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import UV, build_simple_index, make_venv, make_wheel, run_envlock

VERSIONS = ("1.3", "1.4", "1.5", "1.5.1", "1.6", "1.7", "2.0")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("policy")
    wheels = [
        make_wheel(work / "wheels", "near", v, {"near/__init__.py": f"V = {v!r}\n".encode()})
        for v in VERSIONS
    ]
    url = build_simple_index(work / "index", wheels)
    venv = make_venv(work / "venv-ct129")
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(venv / "bin/python"), "--index-url", url, "near==1.5"],
        check=True,
    )
    (work / "hosts").mkdir()
    (work / "hosts" / "ct129.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{url}"]\n')
    proc = run_envlock(work, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return work


def _locked(fleet: Path, host: str, override: str) -> str:
    python = ".".join(str(n) for n in sys.version_info[:3])
    (fleet / "hosts" / f"{host}.toml").write_text(
        f'venv = "{fleet}/venv-{host}"\nreference = "ct129"\n'
        f'[target]\npython = "{python}"\n[lock]\noverrides = ["{override}"]\n'
    )
    proc = run_envlock(fleet, "lock", host, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (near,) = [p for p in json.loads(proc.stdout)["result"]["packages"] if p["name"] == "near"]
    return str(near["version"])


@pytest.mark.parametrize(
    ("host", "override", "expected"),
    [
        ("keep", "near>=1", "1.5"),  # the reference's own artifact first
        ("newer", "near!=1.5", "1.5.1"),  # nearest newer: 1.5.1, not 1.6 or 2.0
        ("newer2", "near!=1.5,!=1.5.1", "1.6"),  # then the next newer, before any older
        ("major", "near>1.7", "2.0"),
        ("older", "near<1.5", "1.4"),  # no newer allowed: the nearest older, not 1.3
    ],
)
def test_nearest_version_to_the_reference(fleet: Path, host: str, override: str, expected: str) -> None:
    assert _locked(fleet, host, override) == expected
