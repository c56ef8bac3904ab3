"""capture end to end through the real CLI, on real venvs built from real wheels."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from conftest import Reference
from envlock.lock.io import read_lock
from envlock.lock.manifest import read_manifest
from helpers import UV, make_venv, run_envlock, uv_install, walk_payload


def capture(root: Path, *extra: str) -> dict[str, Any]:
    proc = run_envlock(root, "capture", "ct129", "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    return result


def test_capture_records_every_provenance(workspace: Path) -> None:
    result = capture(workspace)
    packages = {p["name"]: p for p in result["packages"]}
    assert set(packages) == {"alpha", "beta", "six", "idna", "localpkg", "editpkg", "gamma"}
    for name in ("alpha", "beta", "six", "idna"):
        assert packages[name]["source"] == "index", packages[name]
    assert packages["gamma"]["source"] == "direct"
    assert packages["localpkg"]["source"] == "repacked"
    assert "built locally" in packages["localpkg"]["reason"]
    assert packages["editpkg"]["source"] == "repacked"
    assert "editable" in packages["editpkg"]["reason"]

    lock = read_lock(workspace / "locks" / "pylock.ct129.toml")
    six = lock.package("six")
    assert six is not None and six.wheel.filename == "six-1.17.0-py2.py3-none-any.whl"
    assert six.wheel.url is not None and six.wheel.url.endswith("/files/six-1.17.0-py2.py3-none-any.whl")
    beta = lock.package("beta")
    assert beta is not None
    (lib,) = beta.native
    assert lib.soname == "libenvtest.so.1"
    assert "libm.so.6" in lib.needed
    assert "GLIBC" in lib.version_needs
    alpha = lock.package("alpha")
    assert alpha is not None and "bin/alpha" in alpha.scripts
    assert alpha.requires_dist == ("beta>=2",)
    assert lock.interpreter.abi == "cp311"
    assert "manylinux_2_17_x86_64" in lock.platform.platform_tags
    editpkg = lock.package("editpkg")
    assert editpkg is not None and editpkg.editable


def test_capture_is_canonical_and_warm_run_uses_cache(workspace: Path) -> None:
    capture(workspace)
    lock_bytes = (workspace / "locks" / "pylock.ct129.toml").read_bytes()
    manifest_bytes = (workspace / "locks" / "pylock.ct129.files.tsv").read_bytes()
    warm = capture(workspace)
    assert warm["changed"] is False
    assert warm["stats"]["hashed"] == 0 and warm["stats"]["cached"] > 0
    cold = capture(workspace, "--no-cache")
    assert cold["stats"]["hashed"] > 0
    assert (workspace / "locks" / "pylock.ct129.toml").read_bytes() == lock_bytes
    assert (workspace / "locks" / "pylock.ct129.files.tsv").read_bytes() == manifest_bytes


def test_manifest_matches_lock(workspace: Path) -> None:
    capture(workspace)
    lock = read_lock(workspace / "locks" / "pylock.ct129.toml")
    rows = read_manifest(workspace / "locks" / "pylock.ct129.files.tsv", lock.manifest_sha256)
    owners = {row.owner for row in rows}
    assert {"alpha", "six", ":venv"} <= owners
    assert sum(1 for r in rows if r.owner == "six") == lock.package("six").file_count  # type: ignore[union-attr]


def test_round_trip_uv_pip_sync_reproduces_payload(
    workspace: Path, tmp_path: Path, reference: Reference
) -> None:
    capture(workspace)
    target = make_venv(tmp_path / "rebuilt")
    lock_path = workspace / "locks" / "pylock.ct129.toml"
    proc = subprocess.run(
        [
            UV,
            "pip",
            "sync",
            "--python",
            str(target / "bin" / "python"),
            "--offline",
            str(lock_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    expected = walk_payload(reference.venv)
    got = walk_payload(target)
    assert got.keys() == expected.keys()
    assert {k for k in got if got[k] != expected[k]} == set()


def test_hand_patched_file_is_flagged_and_kept(tmp_path: Path, reference: Reference, copy_venv) -> None:  # type: ignore[no-untyped-def]
    from conftest import write_profile

    venv = make_venv(tmp_path / "patched")
    uv_install(venv, "--index-url", reference.index.url, "six==1.17.0")
    six_py = next(venv.glob("lib/python*/site-packages/six.py"))
    six_py.write_text(six_py.read_text() + "\nPATCHED = True\n")
    root = tmp_path / "fleet"
    write_profile(root, "ct129", venv, reference.index.url)
    result = capture(root)
    (six,) = result["packages"]
    assert six["source"] == "repacked"
    assert six["modified"] == ["site-packages/six.py"]
    lock = read_lock(root / "locks" / "pylock.ct129.toml")
    pkg = lock.package("six")
    assert pkg is not None and pkg.origin is not None
    assert pkg.origin.filename == "six-1.17.0-py2.py3-none-any.whl"
    target = make_venv(tmp_path / "rebuilt")
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
    rebuilt = next(target.glob("lib/python*/site-packages/six.py"))
    assert rebuilt.read_bytes() == six_py.read_bytes()


def test_deleted_file_is_reported_missing(tmp_path: Path, reference: Reference) -> None:
    from conftest import write_profile

    venv = make_venv(tmp_path / "v")
    uv_install(venv, "--index-url", reference.index.url, "idna==3.20")
    next(venv.glob("lib/python*/site-packages/idna/codec.py")).unlink()
    root = tmp_path / "fleet"
    write_profile(root, "ct129", venv, reference.index.url)
    (idna,) = capture(root)["packages"]
    assert idna["missing"] == ["site-packages/idna/codec.py"]
    assert idna["source"] == "repacked" and idna["reason"] == "hand-patched: 1 file(s) missing"
    target = make_venv(tmp_path / "rebuilt")
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


def test_top_level_names_are_importable_names() -> None:
    from envlock.capture.files import top_level_names

    top_level = ["nvidia/cusparselt", "_cffi_backend", "bad-name", ""]
    assert top_level_names(top_level, []) == ("_cffi_backend", "nvidia.cusparselt")
