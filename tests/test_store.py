"""A store object whose bytes no longer hash to its name is quarantined, never reused."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from envlock.fetch import ArtifactError, fetch_one
from envlock.lock.model import Artifact, Package
from envlock.store import Store
from helpers import make_wheel, run_envlock


def test_corrupt_wheel_is_quarantined_and_fetched_again(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "src", "qpkg", "1.0", {"qpkg.py": b"Q = 1\n"})
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    art = Artifact(filename=wheel.name, sha256=sha, size=wheel.stat().st_size, url=wheel.as_uri())
    pkg = Package(name="qpkg", version="1.0", wheel=art, source="index")
    store = Store(tmp_path / "store")
    fetched = fetch_one(store, tmp_path, pkg)
    good = fetched.path.read_bytes()
    fetched.path.write_bytes(good[:-10] + b"0123456789")  # a flipped tail, same size
    with pytest.raises(ArtifactError) as caught:
        fetch_one(store, tmp_path, pkg)
    message = str(caught.value)
    assert "qpkg-1.0-py3-none-any.whl in the store is corrupt" in message
    assert "qpkg needs it" in message and "fetch it afresh from file://" in message
    quarantined = list((store.root / "quarantine").iterdir())
    assert len(quarantined) == 1 and str(quarantined[0]) in message
    assert quarantined[0].read_bytes().endswith(b"0123456789")
    assert not fetched.path.exists()
    # The hint holds: the next run fetches a good copy.
    assert fetch_one(store, tmp_path, pkg).path.read_bytes() == good


def test_corrupt_script_blob_stops_apply_and_recapture_heals(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    target = tmp_path / "target-venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(root / "locks" / f"pylock.ct129{suffix}", root / "locks" / f"pylock.ct200{suffix}")
    text = (root / "locks" / "pylock.ct200.toml").read_text()
    sha = text.split('"bin/alpha" = "', 1)[1][:64]
    blob = root / "store" / "blobs" / sha[:2] / sha
    good = blob.read_bytes()
    blob.write_bytes(good.replace(b"alpha", b"omega"))
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "alpha bin/alpha: store blob" in lines[0] and "is corrupt" in lines[0]
    assert "envlock capture --no-cache HOST" in lines[0] and "quarantine" in lines[0]
    assert not target.exists() and not blob.exists()
    assert len(list((root / "store" / "quarantine").iterdir())) == 1
    # The hint holds: a capture that rehashes puts a good copy back; apply then goes through.
    assert run_envlock(root, "capture", "ct129", "--no-cache").returncode == 0
    assert blob.read_bytes() == good
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
