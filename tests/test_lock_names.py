"""Lock file names PEP 751 allows for any host name (issue 14, item 9), read back under the old names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import Reference, write_profile
from envlock.lock.io import read_lock
from envlock.workspace import host_of_lock_name, lock_name
from helpers import UV, make_venv, run_envlock

# PEP 751, "File name": pylock.toml or pylock.<name>.toml, the name without a dot.
PEP751_NAME = re.compile(r"^pylock\.([^.]+)\.toml$")
HOST = "gpu01.lab"
NEW_NAMES = ["pylock.gpu01%2Elab.files.tsv", "pylock.gpu01%2Elab.toml"]


def _sync(lock: Path, target: Path) -> subprocess.CompletedProcess[str]:
    python = str(target / "bin" / "python")
    return subprocess.run(
        [UV, "pip", "sync", "--python", python, "--offline", str(lock)], capture_output=True, text=True
    )


def test_lock_name_mapping_is_reversible() -> None:
    for host in ("ct129", "gpu01.lab", "a.b.c", "under_score-dash", "x%2E"):
        name = lock_name(host)
        assert "." not in name
        assert host_of_lock_name(name) == host
    assert lock_name("gpu01.lab") == "gpu01%2Elab"
    assert lock_name("ct129") == "ct129"


def test_dotted_host_lock_is_a_pep751_name_uv_syncs(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    write_profile(root, HOST, reference.venv, reference.index.url)
    proc = run_envlock(root, "capture", HOST)
    assert proc.returncode == 0, proc.stderr
    locks = sorted(p.name for p in (root / "locks").iterdir())
    assert locks == NEW_NAMES
    lock_file = root / "locks" / "pylock.gpu01%2Elab.toml"
    assert PEP751_NAME.match(lock_file.name)
    assert read_lock(lock_file).host == HOST  # the host name is kept inside the lock

    assert _sync(lock_file, make_venv(tmp_path / "synced")).returncode == 0
    # The name envlock used to write is what uv refuses: the reason for the mapping.
    dotted = tmp_path / "pylock.gpu01.lab.toml"
    dotted.write_bytes(lock_file.read_bytes())
    refused = _sync(dotted, make_venv(tmp_path / "refused"))
    assert refused.returncode != 0

    shown = run_envlock(root, "show", HOST)
    assert shown.returncode == 0, shown.stderr
    assert HOST in shown.stdout


def test_old_dotted_names_are_read_then_renamed(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    write_profile(root, HOST, reference.venv, reference.index.url)
    assert run_envlock(root, "capture", HOST).returncode == 0
    locks = root / "locks"
    (locks / "pylock.gpu01%2Elab.toml").rename(locks / "pylock.gpu01.lab.toml")
    (locks / "pylock.gpu01%2Elab.files.tsv").rename(locks / "pylock.gpu01.lab.files.tsv")

    verified = run_envlock(root, "verify", HOST)  # the lock and its manifest, under the old names
    assert verified.returncode == 0, verified.stdout + verified.stderr

    recaptured = run_envlock(root, "capture", HOST, "--format", "json")
    assert recaptured.returncode == 0, recaptured.stderr
    assert json.loads(recaptured.stdout)["result"]["lock"] == "locks/pylock.gpu01%2Elab.toml"
    assert sorted(p.name for p in locks.iterdir()) == NEW_NAMES
