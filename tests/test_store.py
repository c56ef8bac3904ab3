"""A store object whose bytes no longer hash to its name is quarantined, never reused."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from envlock.fetch import ArtifactError, fetch_one
from envlock.lock.model import Artifact, Package
from envlock.store import Store
from helpers import copy_lock, make_wheel, run_envlock


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
    copy_lock(root, "ct129", "ct200")
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


def test_quarantine_keeps_the_bytes_under_a_name_that_says_what_and_when(tmp_path: Path) -> None:
    """Never reused, never lost: the object moves to quarantine/<UTC time>-<pid>-<its store path>."""
    import os
    import re

    store = Store(tmp_path / "deep" / "store")  # quarantine/ and its parents are made on demand
    path, sha = store.put_wheel(b"wheel bytes", "x-1.0-py3-none-any.whl")
    path.write_bytes(b"rotten")
    moved = store.quarantine(path)
    assert not path.exists() and moved.read_bytes() == b"rotten"
    assert moved.parent == store.root / "quarantine"
    pattern = rf"\d{{8}}T\d{{6}}-{os.getpid()}-wheels_{sha}_x-1\.0-py3-none-any\.whl"
    assert re.fullmatch(pattern, moved.name), moved.name


def test_a_manifest_over_the_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is a constant (1 GiB); a small one here keeps the test small, the rule the same."""
    from envlock.errors import LockError
    from envlock.lock import manifest

    monkeypatch.setattr(manifest, "MANIFEST_LIMIT", 1 << 30 >> 20)  # 1 KiB, shown as 0 GiB
    at_limit, over = tmp_path / "at.tsv", tmp_path / "over.tsv"
    at_limit.write_bytes(b"x" * 1024)
    over.write_bytes(b"x" * 1025)
    assert manifest.read_manifest_bytes(at_limit) == b"x" * 1024
    with pytest.raises(LockError) as caught:
        manifest.read_manifest_bytes(over, "locks/pylock.h.files.tsv")
    assert (
        str(caught.value)
        == "locks/pylock.h.files.tsv: over 0 GiB; not a manifest envlock wrote (refusing it)"
    )
    with pytest.raises(LockError, match=rf"^{re.escape(str(over))}: over "):
        manifest.read_manifest_bytes(over)
