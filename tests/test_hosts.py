"""Host profiles: valid ones load, every problem names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.errors import ProfileError
from envlock.hosts import load_profile
from envlock.workspace import Workspace

FULL = """
venv = "/opt/venv_sglang211"
ssh = "root@ct200"
ssh_args = ["-F", "ssh_config"]
reference = "ct129"
[gpu]
cc = ["12.0"]
driver = "575.57.08"
[index]
urls = ["https://pypi.org/simple", "file:///srv/wheels/simple"]
[smoke]
checks = ["from xgrammar import StructuralTag"]
"""


def _ws(tmp_path: Path, name: str, text: str) -> Workspace:
    (tmp_path / "hosts").mkdir(exist_ok=True)
    (tmp_path / "hosts" / f"{name}.toml").write_text(text)
    return Workspace(tmp_path)


def test_full_profile_loads(tmp_path: Path) -> None:
    profile = load_profile(_ws(tmp_path, "ct200", FULL), "ct200")
    assert profile.venv == "/opt/venv_sglang211"
    assert profile.ssh == "root@ct200" and profile.ssh_args == ("-F", "ssh_config")
    assert profile.gpu is not None and profile.gpu.cc == ("12.0",) and profile.gpu.driver == "575.57.08"
    assert profile.index is not None and len(profile.index.urls) == 2
    assert profile.smoke_checks == ("from xgrammar import StructuralTag",)
    assert not profile.is_local


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "venv: missing"),
        ('venv = "opt/venv"', "venv: must be an absolute path"),
        ('venv = "/v"\nssh = "-oProxyCommand=x"', "ssh: must be [user@]host"),
        ('venv = "/v"\nssh_args = ["-F", 3]', "ssh_args[1]: expected a non-empty string"),
        (
            'venv = "/v"\n[gpu]\ncc = ["sm_120"]',
            'gpu.cc[0]: expected a compute capability like "12.0"',
        ),
        ('venv = "/v"\n[gpu]\ndriver = "new"', "gpu.driver: expected a driver version"),
        (
            'venv = "/v"\n[index]\nurls = ["ftp://x"]',
            "index.urls[0]: expected an http(s):// or file:// URL",
        ),
        ('venv = "/v"\nvenvv = "/typo"', "venvv: unknown field"),
        ('venv = "/v"\ngpu = "12.0"', "gpu: expected a table"),
        ("venv = ", "not valid TOML"),
    ],
)
def test_problems_name_file_and_field(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(_ws(tmp_path, "ct200", text), "ct200")
    message = str(info.value)
    assert message.startswith("hosts/ct200.toml: ")
    assert needle in message
    assert "\n" not in message


def test_all_problems_are_collected(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile(_ws(tmp_path, "x", 'venv = "rel"\n[gpu]\ncc = ["a"]\ndriver = "b"'), "x")
    assert str(info.value).count(";") == 2


def test_unknown_host_lists_known(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "ct129", 'venv = "/v"')
    with pytest.raises(ProfileError, match=r"unknown host 'ct200'.*known hosts: ct129"):
        load_profile(ws, "ct200")
    with pytest.raises(ProfileError, match="not a host name"):
        load_profile(ws, "../etc")
