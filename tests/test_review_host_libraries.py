"""Review rates a library no package ships by the host's facts (issue 14, item 1).

A real venv (``python -m venv`` and pip, on Python 3.8 so the agent's host
search runs on its oldest Python) gets PyYAML built from its sdist against
the host's libyaml, then an extension that needs a library nowhere on the
host. Each state is captured and committed; ``envlock review`` over the git
revisions rates the first INFO (the host has ``libyaml-0.so.2``), the
second BLOCK (the host's loader finds no such library), and a lock without
the facts (as older envlocks wrote it) WARN.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envlock.lock.io import read_lock
from helpers import GIT_ENV, make_wheel, run_envlock

pytestmark = pytest.mark.slow
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
PRIVATE = "libenvtest-private.so.1"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


def _pip(venv: Path, *args: str) -> None:
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def _capture_and_commit(root: Path, message: str) -> None:
    proc = run_envlock(root, "capture", "box")
    assert proc.returncode == 0, proc.stderr
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)


def _review(root: Path, *revs: str) -> tuple[int, dict[str, tuple[str, str, str]]]:
    """Exit code, and per finding code: (severity, package, detail) of the one lock's findings."""
    proc = run_envlock(root, "review", *revs, "--format", "json", "--no-index")
    assert proc.returncode in (0, 1), proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    data = data.get("result", data)  # the review JSON, enveloped or not
    found: dict[str, tuple[str, str, str]] = {}
    for lock in data["locks"]:
        for finding in lock["findings"]:
            found[finding["code"]] = (finding["severity"], finding.get("package") or "", finding["detail"])
    for change in data["changes"]:
        for finding in change["findings"]:
            found[finding["code"]] = (finding["severity"], change["package"], finding["detail"])
    return proc.returncode, found


def _private_extension(tmp: Path) -> Path:
    """A wheel whose extension needs a library that is built here but installed nowhere."""
    tmp.mkdir()
    lib = tmp / PRIVATE
    (tmp / "private.c").write_text("int envlock_private(void) { return 7; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp / "private.c"), f"-Wl,-soname,{PRIVATE}"],
        check=True,
    )
    (tmp / "ext.c").write_text("int envlock_private(void);\nint ext(void) { return envlock_private(); }\n")
    ext = tmp / "_ext.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(ext), str(tmp / "ext.c"), str(lib)], check=True)
    return make_wheel(
        tmp / "dist", "privext", "1.0", {"privext/_ext.so": ext.read_bytes()}, tag="py3-none-any"
    )


def test_review_rates_unshipped_libraries_by_the_host_facts(tmp_path: Path) -> None:
    python = sorted(PYENV.glob("3.8.*/bin/python3.8"))[-1]
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
    _pip(venv, "install", "six")
    root = tmp_path / "fleet"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "box.toml").write_text(f'venv = "{venv}"\n')
    _git(root, "init", "-q", "-b", "main")
    _capture_and_commit(root, "six")

    _pip(venv, "install", "--no-binary", "pyyaml", "pyyaml")
    _capture_and_commit(root, "pyyaml from its sdist")
    lock = read_lock(root / "locks" / "pylock.box.toml")
    assert lock.host_libraries is not None
    assert re.fullmatch(r"/.*/libyaml-0\.so\.2", lock.host_libraries.found["libyaml-0.so.2"])
    code, found = _review(root, "--base", "HEAD~1", "--head", "HEAD")
    severity, package, detail = found["host-library"]
    assert (severity, package) == ("info", "pyyaml") and "libyaml-0.so.2" in detail
    assert "native-unloadable" not in found and "host-library-unknown" not in found
    assert code == 0  # nothing at or above --fail-on block

    # The same commit as an older envlock wrote it: no facts, so not known either way.
    path = root / "locks" / "pylock.box.toml"
    text = path.read_text()
    path.write_text(re.sub(r"\n\[tool\.envlock\.host-libraries(\.found)?\]\n(?:[^\[].*\n|\n)*", "\n", text))
    assert read_lock(path).host_libraries is None
    code, found = _review(root, "--base", "HEAD~1")  # head: the working tree
    assert found["host-library-unknown"][:2] == ("warn", "pyyaml") and "host-library" not in found
    assert code == 0
    _git(root, "checkout", "--", "locks")

    _pip(venv, "install", str(_private_extension(tmp_path / "build")))
    _capture_and_commit(root, "privext, needing a library the host lacks")
    lock = read_lock(root / "locks" / "pylock.box.toml")
    assert lock.host_libraries is not None and PRIVATE in lock.host_libraries.missing
    code, found = _review(root, "--base", "HEAD~1", "--head", "HEAD")
    severity, package, detail = found["native-unloadable"]
    assert (severity, package) == ("block", "privext") and PRIVATE in detail
    assert code == 1
