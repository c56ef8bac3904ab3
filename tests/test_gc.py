"""envlock gc: frees store and cache objects no lock needs, keeps every one a lock needs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from conftest import Reference, write_profile
from helpers import ENVLOCK, copy_lock, run_envlock, walk_payload


def _gc(root: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gc with its own home: the user cache and the local transfer drop are the test's."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env["HOME"] = str(home)
    return subprocess.run(
        [ENVLOCK, "gc", *args, "--root", str(root)], capture_output=True, text=True, env=env
    )


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def test_gc_frees_only_what_no_lock_needs(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    target = tmp_path / "target-venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    copy_lock(root, "ct129", "ct200")
    store = root / "store"
    lock = json.loads(run_envlock(root, "show", "ct129", "--format", "json").stdout)["result"]
    needed = {(p["sha256"], p["wheel"]) for p in lock["packages"]}
    stored = {(p.parent.name, p.name) for p in (store / "wheels").glob("*/*")}
    assert stored & needed and (store / "blobs").is_dir()  # capture stored repacked wheels and blobs
    before = _tree(store)
    # What no lock needs: a stray wheel, a needed sha256 under another file name, a stray blob.
    sha, name = sorted(stored & needed)[0]
    junk = {
        store / "wheels" / ("0" * 64) / "junk-1.0-py3-none-any.whl": b"j" * 1000,
        store / "wheels" / sha / "renamed-1.0-py3-none-any.whl": b"r" * 10,
        store / "blobs" / "ff" / ("f" * 64): b"b" * 100,
    }
    home = tmp_path / "home"
    cache = home / ".cache" / "envlock"
    drop = cache / "artifacts"
    junk[drop / ("1" * 64) / "old-2.0-py3-none-any.whl"] = b"o" * 2000
    junk[cache / "envlock-agent-0123456789abcdef.pyz"] = b"z" * 300
    junk[cache / "envlock-agent-0123456789abcdef" / "__main__.py"] = b"m"
    for path, data in junk.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    pushed = drop / sha / name
    pushed.parent.mkdir(parents=True)
    shutil.copy(store / "wheels" / sha / name, pushed)
    (cache / "provenance.json").write_text("{}")  # a memo

    dry = _gc(root, home, "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    result = json.loads(dry.stdout)["result"]
    freed = {Path(f["path"]) for f in result["freed"]}
    assert freed == {
        store / "wheels" / ("0" * 64) / "junk-1.0-py3-none-any.whl",
        store / "wheels" / sha / "renamed-1.0-py3-none-any.whl",
        store / "blobs" / "ff" / ("f" * 64),
        drop / ("1" * 64),
        cache / "envlock-agent-0123456789abcdef.pyz",
        cache / "envlock-agent-0123456789abcdef",
    }, result["freed"]
    assert result["freed_bytes"] == 1000 + 10 + 100 + 2000 + 300 + 1
    assert result["locks"] == ["locks/pylock.ct129.toml", "locks/pylock.ct200.toml"]
    assert all(path.exists() for path in junk)  # a dry run deletes nothing
    text = _gc(root, home, "--dry-run")
    assert (
        "would free 3.4 KB: store wheel 2 (1.0 KB), store blob 1 (100 B), transfer drop 1 (2.0 KB), "
        in text.stdout
    )
    assert "store/wheels/000000000000…/junk-1.0-py3-none-any.whl" in text.stdout, text.stdout
    assert max(len(line) for line in text.stdout.splitlines()[:8]) <= 100, text.stdout
    assert "dry run: nothing was deleted" in text.stdout

    done = _gc(root, home)
    assert done.returncode == 0, done.stderr
    assert "freed 3.4 KB" in done.stdout, done.stdout
    assert not any(path.exists() for path in junk)
    assert _tree(store) == before  # every object the locks need is still there
    assert pushed.is_file() and (cache / "provenance.json").is_file()
    # ... and is enough: the lock applies from the store alone (repacked wheels exist nowhere else).
    applied = run_envlock(root, "apply", "ct200")
    assert applied.returncode == 0, applied.stderr
    assert walk_payload(target) == walk_payload(reference.venv)


def test_gc_deletes_nothing_while_a_lock_cannot_be_read(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    stray = root / "store" / "wheels" / ("0" * 64) / "junk-1.0-py3-none-any.whl"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"junk")
    (root / "locks" / "pylock.ct300.toml").write_text("lock-version = [\n")
    proc = _gc(root, tmp_path / "home")
    assert proc.returncode == 2
    assert proc.stderr.startswith("envlock: error: locks/pylock.ct300.toml: not valid TOML"), proc.stderr
    assert "gc deletes nothing while a lock cannot be read" in proc.stderr
    assert stray.is_file()
