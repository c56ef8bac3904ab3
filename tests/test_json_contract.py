"""The JSON contract: every command's --format json is one envelope (docs/json.md).

Modelled on pipx's test_result_contract.py: the command list comes from the
CLI's own parser, so a command added without a case here fails
``test_every_command_has_a_case``. Each case runs the real console script on a
real small workspace (the session's reference venv, captured) and checks the
output against docs/envelope.schema.json, once answering and once refusing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from build_helpers import PYPROJECT, SETUPTOOLS, registry_wheel, sha256, write_sdist
from conftest import Reference, write_profile
from devpirig import Devpi
from envlock.cli import command_names
from helpers import ENVLOCK, GIT_ENV, ROOT, build_simple_index, copy_lock, make_venv

SCHEMA = json.loads((ROOT / "docs" / "envelope.schema.json").read_text())


def envlock(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, cwd=cwd)


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Path:
    """ct129 (the reference venv) captured; ct300 locked from it; a git history where ct200's lock appears."""
    root = tmp_path_factory.mktemp("contract") / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    assert envlock(root, "capture", "ct129").returncode == 0
    (root / "hosts" / "ct300.toml").write_text(
        f'venv = "{root}/venv-ct300"\nreference = "ct129"\n[target]\npython = "3.11.7"\n'
        f'[index]\nurls = ["{reference.index.url}"]\n'
    )
    (root / "wheels").mkdir()
    shutil.copy(reference.index.wheels["beta"], root / "wheels")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "ct129")
    copy_lock(root, "ct129", "ct200")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "ct200")
    return root


def _diff_case(root: Path) -> list[str]:
    """The reference against its target (locked here, whatever order the cases run in)."""
    if not (root / "locks" / "pylock.ct300.toml").is_file():
        assert envlock(root, "lock", "ct300").returncode == 0
    return ["diff", "ct129", "ct300"]


def _apply_case(root: Path) -> list[str]:
    """A host whose venv does not exist yet: apply builds it."""
    write_profile(root, "ct201", root / "venv-ct201", None)
    copy_lock(root, "ct129", "ct201")
    return ["apply", "ct201"]


def _rollback_case(root: Path) -> list[str]:
    """A venv uv made, replaced by apply --force: rollback brings it back."""
    venv = make_venv(root / "venv-ct202")
    write_profile(root, "ct202", venv, None)
    copy_lock(root, "ct129", "ct202")
    assert envlock(root, "apply", "ct202", "--force").returncode == 0
    return ["rollback", "ct202"]


def _build_case(root: Path) -> list[str]:
    """A pure sdist on an index of its own, built for ct400's sm_120 (pinned by ct129's lock)."""
    sdist = write_sdist(
        root / "sdists",
        "plainpkg",
        "1.0",
        {
            "pyproject.toml": PYPROJECT.format(requires='"setuptools>=61"'),
            "setup.py": "from setuptools import setup\nsetup(name='plainpkg', version='1.0')\n",
        },
    )
    url = build_simple_index(root / "sdist-index", [registry_wheel(SETUPTOOLS)])
    shutil.copy(sdist, root / "sdist-index" / "files")
    page = root / "sdist-index" / "simple" / "plainpkg"
    page.mkdir(parents=True, exist_ok=True)
    link = f'<a href="../../files/{sdist.name}#sha256={sha256(sdist)}">{sdist.name}</a>'
    (page / "index.html").write_text(f"<html><body>{link}</body></html>\n")
    (root / "hosts" / "ct400.toml").write_text(
        f'venv = "{root}/venv-ct400"\nreference = "ct129"\n[gpu]\ncc = ["12.0"]\n[index]\nurls = ["{url}"]\n'
    )
    return ["build", "plainpkg", "--host", "ct400"]


# command -> (how to set the case up, the exit status it answers with); the
# setup returns the arguments after `envlock` (--format json and --root are added)
CASES: dict[str, tuple[Callable[[Path], list[str]], int]] = {
    "capture": (lambda root: ["capture", "ct129"], 0),
    "lock": (lambda root: ["lock", "ct300"], 0),
    "build": (_build_case, 0),
    "apply": (_apply_case, 0),
    "rollback": (_rollback_case, 0),
    "verify": (lambda root: ["verify", "ct129"], 0),
    "smoke": (lambda root: ["smoke", "ct129"], 0),
    "diff": (_diff_case, 1),
    "review": (lambda root: ["review", "--base", "HEAD~1", "--head", "HEAD", "--no-index"], 0),
    "inspect": (lambda root: ["inspect", str(next((root / "wheels").glob("beta-*.whl")))], 0),
    "export": (lambda root: ["export", "ct129"], 0),
    # --dry-run: the fleet's lock stays as captured for the other cases; the index comes
    # from envlock.toml, written by the test for this case only (it needs a devpi-server)
    "publish": (lambda root: ["publish", "ct129", "--dry-run"], 0),
    "show": (lambda root: ["show", "ct129"], 0),
    "git-setup": (lambda root: ["git-setup"], 0),
    "gc": (lambda root: ["gc", "--dry-run"], 0),
    "bundle": (lambda root: ["bundle", "ct129", "-o", str(root.parent / "ct129.bundle")], 0),
}

# command -> arguments it cannot run with (exit 2, an error envelope)
REFUSALS: dict[str, list[str]] = {
    "capture": ["capture", "nosuch"],
    "lock": ["lock", "nosuch"],
    "build": ["build", "anything", "--host", "nosuch"],
    "apply": ["apply", "nosuch"],
    "rollback": ["rollback", "nosuch"],
    "verify": ["verify", "nosuch"],
    "smoke": ["smoke", "nosuch"],
    "diff": ["diff", "nosuch.toml", "ct129"],
    "review": ["review", "--base", "no-such-revision"],
    "inspect": ["inspect", "/nonexistent/libx.so"],
    "export": ["export", "nosuch"],
    "publish": ["publish", "nosuch", "--index", "http://127.0.0.1:9/team/prod/"],
    "show": ["show", "nosuch"],
    "git-setup": ["git-setup"],  # run where there is no git repository
    "gc": ["gc", "--dry-run"],  # run where a lock cannot be read: gc deletes nothing then
    "bundle": ["bundle", "nosuch", "-o", "/nonexistent/x.bundle"],
}


def _envelope(proc: subprocess.CompletedProcess[str], command: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["command"] == command
    assert data["ok"] is (proc.returncode == 0), data
    return data


def test_every_command_has_a_case() -> None:
    names = set(command_names())
    assert names, "no commands found in the parser"
    assert set(CASES) == names, f"commands without a contract case: {sorted(names - set(CASES))}"
    assert set(REFUSALS) == names, f"commands without a refusal case: {sorted(names - set(REFUSALS))}"
    assert set(SCHEMA["properties"]["command"]["enum"]) == names | {"envlock"}


@pytest.mark.parametrize("command", command_names())
def test_command_answers_in_the_envelope(command: str, fleet: Path, request: pytest.FixtureRequest) -> None:
    if command not in CASES:
        pytest.fail(f"no contract case for `envlock {command}`")
    setup, status = CASES[command]
    config = fleet / "envlock.toml"
    if command == "publish":  # the one case that needs a server: started only when it runs
        devpi: Devpi = request.getfixturevalue("devpi")
        config.write_text(f'[publish]\nindex = "{devpi.index("contract", "dev").url}"\n')
    try:
        proc = envlock(fleet, *setup(fleet), "--format", "json")
    finally:
        config.unlink(missing_ok=True)
    assert proc.returncode == status, proc.stderr
    data = _envelope(proc, command)
    assert "result" in data and "error" not in data
    assert proc.stderr.count("error") == 0, proc.stderr


@pytest.mark.parametrize("command", command_names())
def test_command_refuses_in_the_envelope(command: str, fleet: Path, tmp_path: Path) -> None:
    if command not in REFUSALS:
        pytest.fail(f"no refusal case for `envlock {command}`")
    root = tmp_path if command in ("git-setup", "gc") else fleet
    if command in ("git-setup", "gc"):
        (root / "hosts").mkdir()
    if command == "gc":
        (root / "locks").mkdir()
        (root / "locks" / "pylock.bad.toml").write_text("lock-version = [")
    proc = envlock(root, *REFUSALS[command], "--format", "json")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    data = _envelope(proc, command)
    assert data["ok"] is False and "result" not in data
    message = data["error"]["message"]
    # the same one line on stderr, never a traceback
    assert proc.stderr.strip().splitlines()[-1] == f"envlock: error: {message}", proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_usage_error_is_an_envelope_too(fleet: Path) -> None:
    proc = envlock(fleet, "verify", "ct129", "--format", "json", "--no-such-option")
    assert proc.returncode == 2
    data = _envelope(proc, "verify")
    assert data["error"]["code"] == "usage" and "--no-such-option" in data["error"]["message"]
    assert "usage: envlock" in proc.stderr


def test_review_keys_are_under_result(fleet: Path) -> None:
    proc = envlock(fleet, "review", "--base", "HEAD~1", "--head", "HEAD", "--no-index", "--format", "json")
    data = _envelope(proc, "review")
    assert set(data) == {"schema_version", "command", "ok", "result"}
    assert [lock["status"] for lock in data["result"]["locks"]] == ["added"]


def test_export_json_carries_the_requirements_text(fleet: Path) -> None:
    text = envlock(fleet, "export", "ct129").stdout
    data = _envelope(envlock(fleet, "export", "ct129", "--format", "json"), "export")
    assert data["result"]["text"] == text and "--hash=sha256:" in text
    same = envlock(fleet, "export", "ct129", "--format", "requirements")
    assert same.stdout == text  # the format export took first still works


@pytest.mark.parametrize("argv", [["--format", "json"], ["frobnicate", "--format=json"]])
def test_no_command_or_an_unknown_one_is_an_envelope(argv: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([ENVLOCK, *argv], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    data = _envelope(proc, "envlock")
    assert data["error"]["code"] == "usage", data
