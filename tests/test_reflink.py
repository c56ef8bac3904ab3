"""apply clones files (FICLONE reflinks) on a filesystem that has them, copies elsewhere.

The reflink filesystem is a real XFS image made by the test and loop-mounted
(needs root and loop devices; ``make test-deps`` installs xfsprogs).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Reference, write_profile
from envlock.agent.reflink import clone_file, clone_probe
from helpers import copy_lock, run_envlock

MKFS_XFS = "/usr/sbin/mkfs.xfs"


@pytest.fixture(scope="module")
def xfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 600 MB sparse XFS image with reflinks, loop-mounted."""
    if os.geteuid() != 0 or not Path("/dev/loop-control").exists():
        pytest.skip("no loop devices here (needs root and /dev/loop-control) to mount an XFS image")
    if not Path(MKFS_XFS).exists():
        pytest.fail("mkfs.xfs missing: `make test-deps` installs xfsprogs")
    base = tmp_path_factory.mktemp("xfs")
    image, mount = base / "xfs.img", base / "mnt"
    mount.mkdir()
    with open(image, "wb") as out:
        out.truncate(600 << 20)
    subprocess.run([MKFS_XFS, "-q", "-m", "reflink=1", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        image.unlink()


def _extents(path: Path) -> list[tuple[int, str]]:
    """(physical start block, flags) of each extent, as FIEMAP reports them (filefrag -v)."""
    out = subprocess.run(["filefrag", "-v", str(path)], capture_output=True, text=True, check=True).stdout
    rows = re.findall(r"^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*\d+:\s+\d+:\s*(?:\d+:)?\s*(\S*)$", out, re.M)
    return [(int(start), flags) for start, flags in rows]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _apply(root: Path, *extra: str) -> dict[str, Any]:
    proc = run_envlock(root, "apply", "ct200", "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    return result


def test_the_probe_tells_a_reflink_filesystem_from_others(xfs: Path, tmp_path: Path) -> None:
    assert clone_probe(str(xfs), str(xfs)) is None
    assert "Invalid cross-device link" in str(clone_probe(str(tmp_path), str(xfs)))
    assert not [p for p in xfs.iterdir() if p.name.startswith(".envlock-clone-")], "probe files left"
    source = xfs / "source"
    source.write_bytes(os.urandom(1 << 20))
    clone_file(str(source), str(xfs / "clone"))
    assert _extents(xfs / "clone")[0][0] == _extents(source)[0][0]
    with pytest.raises(FileExistsError):
        clone_file(str(source), str(xfs / "clone"))  # never over an existing file


def test_apply_on_xfs_clones_and_a_write_to_the_live_venv_leaves_the_cache_alone(
    xfs: Path, tmp_path: Path, reference: Reference
) -> None:
    root = tmp_path / "fleet"
    target = xfs / "venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    copy_lock(root, "ct129", "ct200")
    report = _apply(root)["host_report"]
    assert (report["link_mode"], report["link_note"]) == ("clone", None)

    # ~/.cache is on another filesystem: the venv's own cache, in its state directory, is the source.
    live = next(target.glob("lib/python*/site-packages/six.py"))
    (cached,) = [p for p in Path(f"{target}.envlock/uv-cache").rglob("six.py") if p.is_file()]
    assert os.stat(live).st_ino != os.stat(cached).st_ino  # not a hard link
    (block, flags), *_ = _extents(live)
    assert "shared" in flags and block == _extents(cached)[0][0], (_extents(live), _extents(cached))

    # Copy on write: the live venv's write gets its own block; the cache keeps its bytes.
    before = _sha(cached)
    with open(live, "r+b") as stream:
        stream.write(b"# patched by hand\n")
        stream.flush()
        os.fsync(stream.fileno())  # XFS allocates the copied block at writeback
    assert _sha(cached) == before and _extents(live)[0][0] != _extents(cached)[0][0]

    # The next apply (which discards the edit) clones again; the edited venv becomes the rollback copy,
    # and neither it nor the new live venv nor the cache shares a writable block with another.
    report = _apply(root, "--discard-drift")["host_report"]
    assert report["link_mode"] == "clone"
    previous = next(Path(f"{target}.envlock/previous").glob("lib/python*/site-packages/six.py"))
    assert previous.read_bytes().startswith(b"# patched by hand\n")
    assert _sha(live) == before and _sha(cached) == before
    assert len({os.stat(p).st_ino for p in (live, previous, cached)}) == 3
    assert run_envlock(root, "verify", "ct200").returncode == 0


def test_apply_copies_where_the_filesystem_has_no_reflinks(tmp_path: Path, reference: Reference) -> None:
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout
    if kind.strip() not in ("ext2/ext3", "tmpfs"):
        pytest.skip(f"{tmp_path} is on {kind.strip()}, which may have reflinks")
    root = tmp_path / "fleet"
    target = tmp_path / "venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    copy_lock(root, "ct129", "ct200")
    report = _apply(root)["host_report"]
    assert report["link_mode"] == "copy" and "no reflinks from" in report["link_note"], report
    assert not Path(f"{target}.envlock/uv-cache").exists()
    live = next(target.glob("lib/python*/site-packages/six.py"))
    assert os.stat(live).st_nlink == 1
    shutil.rmtree(target)
