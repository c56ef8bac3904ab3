"""Host profiles: valid ones load, every problem names the file and the field."""

from __future__ import annotations

import re
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
exclude = ["pip._vendor.*", "*.sphinxext"]
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
    assert profile.smoke_exclude == ("pip._vendor.*", "*.sphinxext")
    assert not profile.is_local


@pytest.mark.parametrize(
    ("value", "seconds"), [("0", 0), ('"0s"', 0), ("90", 90), ('"5m"', 300), ('"1h"', 3600)]
)
def test_ssh_persist_takes_seconds_or_a_duration(tmp_path: Path, value: str, seconds: int) -> None:
    profile = load_profile(_ws(tmp_path, "h", f'venv = "/v"\nssh = "h"\nssh_persist = {value}\n'), "h")
    assert profile.ssh_persist == seconds


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
        ('venv = "/v"\n[smoke]\nexclude = "tests"', "smoke.exclude: expected a list of strings"),
        ('venv = "/v"\n[smoke]\nexclude = ["ok.*", 3]', "smoke.exclude[1]: expected a non-empty string"),
        (
            'venv = "/v"\n[smoke]\nexclude = ["site-packages/pip/*.py"]',
            'smoke.exclude[0]: expected a module name pattern like "pip._vendor.*"',
        ),
        ('venv = "/v"\n[smoke]\nexclud = ["x"]', "smoke.exclud: unknown field (known: checks, exclude)"),
        ('venv = "/v"\ngpu = "12.0"', "gpu: expected a table"),
        ('venv = "/v"\nssh_persist = "forever"', 'ssh_persist: expected seconds like 60 or "60s"'),
        ('venv = "/v"\nssh_persist = -1', "ssh_persist: expected seconds"),
        ('venv = "/v"\nssh_persist = "25h"', "at most 24h"),
        ('venv = "/v"\nssh_persist = true', "ssh_persist: expected seconds"),
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


@pytest.mark.parametrize(
    "args",
    [
        ["-oProxyCommand=touch /tmp/x"],
        ["-o", "ProxyCommand=touch /tmp/x"],
        ["-o", "proxycommand touch /tmp/x"],
        ["-o", "PROXYCOMMAND = touch /tmp/x"],
        ["-oProxyCommand touch /tmp/x"],
        ["-vo", "ProxyCommand=x"],
        ["-v", "-oLocalCommand=x"],
        ["-o", "PermitLocalCommand=yes"],
        ["-o", "KnownHostsCommand=/bin/x"],
        ["-o", "Match exec x"],
        ["-o", '"ProxyCommand" x'],
    ],
)
def test_ssh_options_that_run_commands_are_refused(tmp_path: Path, args: list[str]) -> None:
    quoted = ", ".join(f"'{a}'" for a in args)
    ws = _ws(tmp_path, "h", f'venv = "/v"\nssh = "h"\nssh_args = [{quoted}]\n')
    with pytest.raises(ProfileError, match=r"hosts/h\.toml: ssh_args\[\d\]: ssh option .* runs a command"):
        load_profile(ws, "h")
    (tmp_path / "hosts" / "h.toml").write_text(
        f'venv = "/v"\nssh = "h"\nallow_ssh_commands = true\nssh_args = [{quoted}]\n'
    )
    assert load_profile(ws, "h").ssh_args == tuple(args)


@pytest.mark.parametrize(
    "args",
    [
        ["-J", "jump"],
        ["-o", "ProxyJump=jump"],
        ["-oPort=2222", "-i", "/keys/id", "-p", "22"],
        ["-o", "StrictHostKeyChecking=no", "-v"],
        ["-F", "none"],
        ["-4", "-o", "User=x"],
    ],
)
def test_ordinary_ssh_options_load(tmp_path: Path, args: list[str]) -> None:
    quoted = ", ".join(f"'{a}'" for a in args)
    ws = _ws(tmp_path, "h", f'venv = "/v"\nssh = "h"\nssh_args = [{quoted}]\n')
    assert load_profile(ws, "h").ssh_args == tuple(args)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["evilhost"], "ssh_args[0]: expected an ssh option"),
        (["-o", "User=x", "--"], "ssh_args[2]: expected an ssh option"),
        (["-Z"], "ssh_args[0]: unknown ssh option -Z"),
    ],
)
def test_ssh_args_are_options_only(tmp_path: Path, args: list[str], needle: str) -> None:
    quoted = ", ".join(f"'{a}'" for a in args)
    ws = _ws(tmp_path, "h", f'venv = "/v"\nssh = "h"\nssh_args = [{quoted}]\n')
    with pytest.raises(ProfileError, match=re.escape(needle)):
        load_profile(ws, "h")


@pytest.mark.parametrize(
    "line",
    [
        "  ProxyCommand nc %h %p",
        "LocalCommand id",
        'Match exec "test -f /x"',
        "Include ~/.ssh/other",
        "Match host x !exec y",
    ],
)
def test_ssh_config_named_by_F_is_checked(tmp_path: Path, line: str) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host h\n  HostName 127.0.0.1\n{line}\n")
    ws = _ws(tmp_path, "h", f'venv = "/v"\nssh = "h"\nssh_args = ["-F", "{config}"]\n')
    with pytest.raises(ProfileError, match=r"ssh_args\[0\]: .*ssh_config:3: .* can run a command"):
        load_profile(ws, "h")
    config.write_text("Host h\n  HostName 127.0.0.1\n  Port 22\nMatch host h\n  User root\n")
    assert load_profile(ws, "h").ssh_args == ("-F", str(config))


def test_proxy_command_in_a_profile_never_runs(tmp_path: Path) -> None:
    """Through the real CLI: the profile is refused before ssh could start the command."""
    import subprocess

    from helpers import run_envlock

    marker = tmp_path / "pwned"
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "h.toml").write_text(
        f'venv = "/opt/v"\nssh = "h"\nssh_args = ["-oProxyCommand=touch {marker}", "-oBatchMode=yes"]\n'
    )
    proc = run_envlock(root, "capture", "h")
    assert isinstance(proc, subprocess.CompletedProcess)
    assert not marker.exists()  # ssh would have run it while connecting
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "hosts/h.toml: ssh_args[0]" in proc.stderr


@pytest.mark.parametrize("value", ["soon", "-5", "90d", "25h"])
def test_a_bad_ssh_persist_in_the_environment_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from envlock.errors import EnvlockError
    from envlock.transport.sshcontrol import persist_seconds

    profile = load_profile(_ws(tmp_path, "h", 'venv = "/v"\nssh = "h"\nssh_persist = 30\n'), "h")
    assert persist_seconds(profile) == 30
    monkeypatch.setenv("ENVLOCK_SSH_PERSIST", "2m")
    assert persist_seconds(profile) == 120  # the environment wins over the profile
    monkeypatch.setenv("ENVLOCK_SSH_PERSIST", value)
    with pytest.raises(EnvlockError, match=rf"^ENVLOCK_SSH_PERSIST='{re.escape(value)}': expected seconds"):
        persist_seconds(profile)
