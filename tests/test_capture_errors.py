"""Bad input: one clear line naming what and where, exit 2, no lock written or touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Reference, write_profile
from helpers import make_venv, run_envlock, uv_install


def _assert_fails(root: Path, host: str, *needles: str, extra: tuple[str, ...] = ()) -> None:
    lock = root / "locks" / f"pylock.{host}.toml"
    before = lock.read_bytes() if lock.exists() else None
    proc = run_envlock(root, "capture", host, *extra)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    after = lock.read_bytes() if lock.exists() else None
    assert after == before


@pytest.fixture
def small_venv(tmp_path: Path, reference: Reference) -> Path:
    venv = make_venv(tmp_path / "small")
    uv_install(venv, "--index-url", reference.index.url, "six==1.17.0")
    return venv


def test_unknown_host(workspace: Path) -> None:
    _assert_fails(workspace, "ct999", "hosts/ct999.toml", "unknown host", "ct129")


def test_missing_venv(tmp_path: Path) -> None:
    write_profile(tmp_path, "ct129", tmp_path / "nowhere", None)
    _assert_fails(tmp_path, "ct129", "nowhere", "no such directory")


def test_not_a_venv(tmp_path: Path) -> None:
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    write_profile(tmp_path, "ct129", tmp_path / "plain", None)
    _assert_fails(tmp_path, "ct129", "plain", "not a venv")


def test_invalid_profile_names_field(tmp_path: Path) -> None:
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "ct200.toml").write_text('venv = "relative"\n[gpu]\ncc = [12.0]\ncolour = "x"\n')
    _assert_fails(
        tmp_path,
        "ct200",
        "hosts/ct200.toml",
        "venv: must be an absolute path",
        "gpu.cc[0]",
        "gpu.colour",
    )


def test_corrupt_record(tmp_path: Path, small_venv: Path, reference: Reference) -> None:
    record = next(small_venv.glob("lib/python*/site-packages/six-*.dist-info/RECORD"))
    record.write_text(record.read_text() + "broken,row\n")
    write_profile(tmp_path, "ct129", small_venv, reference.index.url)
    _assert_fails(tmp_path, "ct129", str(record), "corrupt RECORD", "expected 3 fields")


def test_corrupt_metadata(tmp_path: Path, small_venv: Path, reference: Reference) -> None:
    metadata = next(small_venv.glob("lib/python*/site-packages/six-*.dist-info/METADATA"))
    metadata.write_text("Metadata-Version: 2.1\nSummary: no name here\n")
    write_profile(tmp_path, "ct129", small_venv, reference.index.url)
    _assert_fails(tmp_path, "ct129", str(metadata), "corrupt METADATA", "no Name")


def test_unreachable_index(tmp_path: Path, small_venv: Path) -> None:
    write_profile(tmp_path, "ct129", small_venv, "http://127.0.0.1:9/simple")
    _assert_fails(tmp_path, "ct129", "index http://127.0.0.1:9/simple", "unreachable", "six")
    proc = run_envlock(tmp_path, "capture", "ct129", "--allow-unreachable-index")
    assert proc.returncode == 0, proc.stderr
    assert "index hash unknown" in proc.stdout


def test_failed_recapture_keeps_previous_lock(tmp_path: Path, small_venv: Path, reference: Reference) -> None:
    write_profile(tmp_path, "ct129", small_venv, reference.index.url)
    assert run_envlock(tmp_path, "capture", "ct129").returncode == 0
    record = next(small_venv.glob("lib/python*/site-packages/six-*.dist-info/RECORD"))
    record.write_text("garbage,\n")
    _assert_fails(tmp_path, "ct129", "corrupt RECORD")
    assert (tmp_path / "locks" / "pylock.ct129.files.tsv").exists()
