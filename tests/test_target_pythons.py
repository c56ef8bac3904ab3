"""The agent runs in the target venv's own Python, 3.8 to 3.13, while envlock runs on 3.11."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from helpers import UV, make_venv, run_envlock, uv_install, walk_payload

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def _python(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    if not found:
        pytest.fail(f"CPython {minor} is not installed under {PYENV} (the test rig provides 3.8 to 3.13)")
    return str(found[-1])


@pytest.mark.parametrize("minor", ["3.8", "3.12", "3.13"])
def test_capture_and_rebuild_on_other_pythons(minor: str, tmp_path: Path, reference: Reference) -> None:
    python = _python(minor)
    venv = make_venv(tmp_path / f"v{minor}", python)
    uv_install(venv, "--index-url", reference.index.url, "alpha==1.0", "six==1.17.0")
    root = tmp_path / "fleet"
    write_profile(root, "ct129", venv, reference.index.url)
    proc = run_envlock(root, "capture", "ct129", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["result"]
    assert {p["name"]: p["source"] for p in result["packages"]} == {
        "alpha": "index",
        "beta": "index",
        "six": "index",
    }
    lock_text = (root / "locks/pylock.ct129.toml").read_text()
    assert f'abi = "cp{minor.replace(".", "")}"' in lock_text
    assert f'requires-python = "=={minor}.*"' in lock_text
    target = make_venv(tmp_path / "rebuilt", python)
    subprocess.run(
        [
            UV,
            "pip",
            "sync",
            "-q",
            "--python",
            str(target / "bin/python"),
            str(root / "locks/pylock.ct129.toml"),
        ],
        check=True,
    )
    assert walk_payload(target) == walk_payload(venv)
