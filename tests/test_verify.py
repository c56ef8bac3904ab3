"""envlock verify through the real CLI, on small real venvs built from the session index."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Index, write_profile
from envlock.lock.compare import change_flags, compare_rows
from envlock.lock.model import FileEntry
from helpers import UV, make_venv, make_wheel, run_envlock, uv_install


@pytest.fixture
def fleet(tmp_path: Path, index: Index) -> tuple[Path, Path]:
    """A venv of alpha (+beta, with a real .so) and six, captured into a workspace."""
    venv = make_venv(tmp_path / "venv")
    uv_install(venv, "--index-url", index.url, "alpha==1.0", "six==1.17.0")
    root = tmp_path / "fleet"
    write_profile(root, "ct129", venv, index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return root, venv


def verify(root: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = run_envlock(root, "verify", "ct129", "--format", "json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["result"]


def site(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages"))


def test_unchanged_venv_is_clean_and_warm(fleet: tuple[Path, Path]) -> None:
    root, _ = fleet
    code, result = verify(root)
    assert code == 0 and result["clean"] is True
    assert result["files"] == [] and result["distributions"] == []
    assert result["stats"]["hashed"] == 0  # capture left the stat cache warm
    text = run_envlock(root, "verify", "ct129")
    assert text.returncode == 0
    assert text.stdout.startswith(f"ct129: {result['files_checked']} files match locks/pylock.ct129.toml in ")


def test_patched_deleted_and_added_files(fleet: tuple[Path, Path]) -> None:
    root, venv = fleet
    sp = site(venv)
    six = sp / "six.py"
    six.write_bytes(six.read_bytes() + b"\nPATCHED = True\n")
    data = bytearray((sp / "alpha" / "__init__.py").read_bytes())
    data[0] ^= 0x20  # same size, other bytes
    (sp / "alpha" / "__init__.py").write_bytes(bytes(data))
    (sp / "beta" / "__init__.py").unlink()
    (sp / "alpha" / "extra.py").write_text("X = 1\n")
    (sp / "beta" / "libenvtest.so").chmod(0o755)

    code, result = verify(root)
    assert code == 1 and result["clean"] is False
    files = {(f["path"], f["state"], f.get("flags")) for f in result["files"]}
    assert files == {
        ("site-packages/six.py", "changed", "S5.."),
        ("site-packages/alpha/__init__.py", "changed", ".5.."),
        ("site-packages/beta/__init__.py", "missing", None),
        ("site-packages/alpha/extra.py", "extra", None),
        ("site-packages/beta/libenvtest.so", "changed", "..M."),
    }
    owners = {f["path"]: f["owner"] for f in result["files"]}
    assert owners["site-packages/alpha/extra.py"] == ":unowned"
    assert owners["site-packages/six.py"] == "six"
    assert result["distributions"] == []

    text = run_envlock(root, "verify", "ct129")
    assert text.returncode == 1
    assert "S5..     six                  site-packages/six.py" in text.stdout
    assert "missing  beta                 site-packages/beta/__init__.py" in text.stdout
    assert "1 missing, 1 extra); 0 distributions in " in text.stdout, text.stdout
    assert "distribution  locked" not in text.stdout  # no distribution drift: no table


def test_distribution_drift(fleet: tuple[Path, Path], index: Index, tmp_path: Path) -> None:
    root, venv = fleet
    older = make_wheel(tmp_path / "wheels", "six", "1.16.0", {"six.py": b"OLD = 1\n"})
    uv_install(venv, str(older))
    uv_install(venv, "--index-url", index.url, "idna==3.20")
    subprocess.run([UV, "pip", "uninstall", "-q", "--python", str(venv / "bin/python"), "alpha"], check=True)

    code, result = verify(root)
    assert code == 1
    dists = {d["name"]: (d["state"], d["locked"], d["live"]) for d in result["distributions"]}
    assert dists == {
        "six": ("version", "1.17.0", "1.16.0"),
        "idna": ("extra", None, "3.20"),
        "alpha": ("missing", "1.0", None),
    }
    states = {f["path"]: f["state"] for f in result["files"]}
    assert states["site-packages/alpha/__init__.py"] == "missing"
    assert states["site-packages/idna/__init__.py"] == "extra"
    text = run_envlock(root, "verify", "ct129").stdout
    assert "six           1.17.0  1.16.0  version drift" in text
    assert "… and " in text and "(--all lists them)" in text  # idna's many files are folded
    assert "(--all lists them)" not in run_envlock(root, "verify", "ct129", "--all").stdout
    assert "(--all lists them)" not in run_envlock(root, "verify", "ct129", "-v").stdout  # -v lists all too
    assert text.splitlines()[0].split() == ["distribution", "locked", "live", "status"]
    assert "; 3 distributions in " in text


def test_verify_could_not_run(fleet: tuple[Path, Path], tmp_path: Path) -> None:
    root, venv = fleet
    manifest = root / "locks" / "pylock.ct129.files.tsv"
    manifest.write_bytes(manifest.read_bytes().replace(b"\tf\n", b"\tx\n", 1))
    proc = run_envlock(root, "verify", "ct129")
    assert proc.returncode == 2
    assert proc.stderr.startswith("envlock: error: locks/pylock.ct129.files.tsv: sha256 does not match")
    proc = run_envlock(root, "verify", "nohost")
    assert proc.returncode == 2
    assert "locks/pylock.nohost.toml: no such lock" in proc.stderr
    shutil.rmtree(venv)
    other = tmp_path / "other"
    write_profile(other, "ct129", venv, None)
    shutil.copytree(root / "locks", other / "locks")
    (other / "locks" / "pylock.ct129.files.tsv").write_bytes(
        manifest.read_bytes().replace(b"\tx\n", b"\tf\n", 1)
    )
    proc = run_envlock(other, "verify", "ct129")
    assert proc.returncode == 2 and "no such directory" in proc.stderr, proc.stderr


def test_no_cache_rehashes_and_still_matches(fleet: tuple[Path, Path]) -> None:
    root, venv = fleet
    code, result = verify(root, "--no-cache")
    assert code == 0 and result["stats"]["hashed"] > 0
    # A touched file (new mtime, same bytes) is rehashed and still clean.
    six = site(venv) / "six.py"
    os.utime(six, (1, 1))
    code, result = verify(root)
    assert code == 0 and result["stats"]["hashed"] == 1


def row(path: str, sha: str = "a" * 64, size: int = 1, kind: str = "f") -> FileEntry:
    return FileEntry(owner="p", path=path, sha256=sha, size=size, kind=kind)  # type: ignore[arg-type]


def test_change_flags_like_rpm() -> None:
    assert change_flags(row("x"), row("x", size=2, sha="b" * 64)) == "S5.."
    assert change_flags(row("x"), row("x", kind="x")) == "..M."
    assert change_flags(row("x", sha="t1", kind="l"), row("x", sha="t2", kind="l")) == "...L"
    assert change_flags(row("x", kind="l"), row("x")) == "..M."
    drift = compare_rows([row("a"), row("b")], [row("b", sha="c" * 64), row("c")])
    assert [(d.path, d.state, d.flags) for d in drift] == [
        ("a", "missing", ""),
        ("b", "changed", ".5.."),
        ("c", "extra", ""),
    ]
