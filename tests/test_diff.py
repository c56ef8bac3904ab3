"""envlock diff through the real CLI: lock files, host names, and live:HOST."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from conftest import Index, write_profile
from envlock.changes import diff_locks
from helpers import make_venv, run_envlock, uv_install
from lockfactory import lib, make_lock, pkg, seed_locks, write_lock_files


def _seed_workspace(root: Path) -> None:
    for lock in seed_locks():
        write_lock_files(root / "locks", lock)


def test_seed_case_reads_at_a_glance(tmp_path: Path) -> None:
    _seed_workspace(tmp_path)
    proc = run_envlock(tmp_path, "diff", "ct200", "ct129")
    assert proc.returncode == 1, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert "xgrammar 0.1.10 -> 0.1.32 (upgrade)" in lines
    assert "llguidance 1.3.0 only on ct129" in lines
    assert "soundfile 0.13.1 only on ct129" in lines
    assert "nvidia-cuda-runtime 13.0.96 only on ct200" in lines
    native = lines.index("native, on ct200 only:")
    assert (
        lines[native + 1]
        == "sgl_kernel common_ops: needs libcudart.so.12, which nothing in the venv provides, "
        "nor does the host"
    )
    assert "gpu cc 12.0, driver 575.57.08 -> cc 9.0, driver 575.57.08" in lines
    assert lines[0] == (
        "ct200 -> ct129: 1 upgrade, 3 only on ct129, 1 only on ct200; 3 identical (5 -> 7 packages)"
    )
    # The other way round, the same facts from the other side.
    back = run_envlock(tmp_path, "diff", "ct129", "ct200").stdout
    assert "xgrammar 0.1.32 -> 0.1.10 (downgrade)" in back
    assert "llguidance 1.3.0 only on ct129" in back


def test_diff_json_envelope(tmp_path: Path) -> None:
    _seed_workspace(tmp_path)
    proc = run_envlock(tmp_path, "diff", "locks/pylock.ct200.toml", "ct129", "--format", "json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 2 and data["command"] == "diff"
    result = data["result"]
    assert (result["a"], result["b"], result["identical"]) == ("ct200", "ct129", False)
    assert result["summary"] == {
        "packages_a": 5,
        "packages_b": 7,
        "unchanged": 3,
        "upgrade": 1,
        "downgrade": 0,
        "added": 3,
        "removed": 1,
        "artifact": 0,
    }
    (native,) = result["native"]
    assert native == {
        "side": "ct200",
        "package": "sgl-kernel",
        "library": "site-packages/sgl_kernel/common_ops.abi3.so",
        "problem": "needed",
        "needs": "libcudart.so.12",
        "host": "missing",
        "detail": "sgl_kernel common_ops: needs libcudart.so.12, which nothing in the venv provides, "
        "nor does the host",
    }


def test_identical_and_same_version_changes(tmp_path: Path) -> None:
    lock = make_lock("ct129", [pkg("six", "1.17.0"), pkg("numpy", "2.2.6")])
    a = write_lock_files(tmp_path / "a", lock)
    b = write_lock_files(tmp_path / "b", lock)
    proc = run_envlock(tmp_path, "diff", str(a), str(b))
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"{a} and {b}: identical (2 packages)"  # same host: named as given
    rebuilt = make_lock("ct129", [pkg("six", "1.17.0", label="rebuilt"), pkg("numpy", "2.2.6")])
    write_lock_files(tmp_path / "b", rebuilt)
    proc = run_envlock(tmp_path, "diff", str(a), str(b))
    assert proc.returncode == 1
    assert "six 1.17.0: same version, other bytes: six-1.17.0-py3-none-any.whl sha256 " in proc.stdout


def test_glibc_too_new_for_one_host() -> None:
    so = lib("site-packages/numpy/_core/_multiarray_umath.so", glibc="2.38")
    a = make_lock("old-host", [pkg("numpy", "2.3.1", native=[so])], glibc="2.35")
    b = replace(a, host="new-host", platform=replace(a.platform, libc_version="2.39"))
    result = diff_locks(a, b)
    assert [p.describe() for p in result.load_only_a] == [
        "numpy _multiarray_umath: needs GLIBC_2.38, newer than the host's glibc 2.35"
    ]
    assert result.load_only_b == () and result.changes == ()
    assert [e.describe() for e in result.environment] == ["platform x86_64 glibc 2.35 -> x86_64 glibc 2.39"]


def test_diff_could_not_run(tmp_path: Path) -> None:
    proc = run_envlock(tmp_path, "diff", "ct129", "ct200")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "envlock: error: locks/pylock.ct129.toml: no such lock "
        "(run `envlock capture` or `envlock lock` first)"
    )
    assert run_envlock(tmp_path, "diff", "live:", "ct200").returncode == 2
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "pylock.bad.toml").write_text("lock-version = '1.0'\n")
    write_lock_files(tmp_path / "locks", make_lock("ct129", [pkg("six", "1.17.0")]))
    proc = run_envlock(tmp_path, "diff", "bad", "ct129")
    assert proc.returncode == 2 and "locks/pylock.bad.toml" in proc.stderr


def test_live_side_against_its_lock(tmp_path: Path, index: Index) -> None:
    venv = make_venv(tmp_path / "venv")
    uv_install(venv, "--index-url", index.url, "six==1.17.0")
    root = tmp_path / "fleet"
    write_profile(root, "ct129", venv, index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    lock_bytes = (root / "locks" / "pylock.ct129.toml").read_bytes()

    proc = run_envlock(root, "diff", "ct129", "live:ct129")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ct129 and live:ct129: identical (1 package)"

    uv_install(venv, "--index-url", index.url, "idna==3.20")
    six = next(venv.glob("lib/python*/site-packages/six.py"))
    six.write_bytes(six.read_bytes() + b"\n# patched\n")
    proc = run_envlock(root, "diff", "ct129", "live:ct129")
    assert proc.returncode == 1, proc.stderr
    assert "idna 3.20 only on live:ct129" in proc.stdout
    assert "six 1.17.0: same version, " in proc.stdout
    assert (root / "locks" / "pylock.ct129.toml").read_bytes() == lock_bytes  # live: writes no lock
