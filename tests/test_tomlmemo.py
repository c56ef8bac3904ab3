"""Profile tables remembered per file bytes (``envlock.tomlmemo``): used only when intact and ours.

Real files in a private XDG_CACHE_HOME; each poisoned entry below would
change the tables a command sees if it were trusted (the control case shows
a well-formed forged entry is believed when nothing is wrong with it).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path

import pytest

from envlock import tomlmemo

TEXT = 'venv = "/srv/venv"\nreference = "ct129"\n'


@pytest.fixture
def profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "hosts" / "ct1.toml"
    path.parent.mkdir()
    path.write_text(TEXT)
    tomlmemo.remember(str(path), TEXT, {"venv": "/srv/venv", "reference": "ct129"})
    return path


def entry(path: Path) -> Path:
    return Path(tomlmemo._entry(str(path)))


def forged(text: str) -> str:
    return json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "tables": {"venv": "/evil"}})


def test_remembered_for_the_same_bytes_only(profile: Path) -> None:
    assert tomlmemo.remembered(str(profile), TEXT) == {"venv": "/srv/venv", "reference": "ct129"}
    assert tomlmemo.remembered(str(profile), TEXT + "# edited\n") is None
    assert entry(profile).stat().st_mode & 0o777 == 0o600
    assert entry(profile).parent.stat().st_mode & 0o777 == 0o700


def test_dates_are_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tomlmemo.remember(str(tmp_path / "p.toml"), "x = 1979-05-27\n", {"x": datetime.date(1979, 5, 27)})
    assert tomlmemo.remembered(str(tmp_path / "p.toml"), "x = 1979-05-27\n") is None


@pytest.mark.parametrize(
    "poison", ["trusted-control", "other-bytes", "foreign-owner", "symlink", "shared-dir", "garbage"]
)
def test_poisoned_memo_is_never_trusted(profile: Path, poison: str, tmp_path: Path) -> None:
    memo = entry(profile)
    memo.write_text(forged(TEXT + "x" if poison == "other-bytes" else TEXT))
    if poison == "foreign-owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(memo, 65534, 65534)
    elif poison == "symlink":
        memo.rename(tmp_path / "elsewhere.json")
        memo.symlink_to(tmp_path / "elsewhere.json")
    elif poison == "shared-dir":
        memo.parent.chmod(0o755)
    elif poison == "garbage":
        memo.write_bytes(b"\\xff{not json")
    seen = tomlmemo.remembered(str(profile), TEXT)
    if poison == "trusted-control":
        assert seen == {"venv": "/evil"}
    else:
        assert seen is None
