"""diff, review and show on plain PEP 751 locks other tools wrote (issue 14, item 2).

The locks are real: ``pip lock`` and ``uv pip compile`` (pylock output)
resolve from the package registry. What they hold is compared (versions,
artifacts and hashes); each report says which envlock facts were not there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers import GIT_ENV, UV, run_envlock

pytestmark = pytest.mark.slow
PYTHON = str(Path(UV).with_name("python"))


def _run(*args: str, cwd: Path) -> None:
    proc = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(pip's lock of six 1.16.0 and idna 3.10, uv's lock of six 1.17.0 and idna 3.10)."""
    base = tmp_path_factory.mktemp("foreign")
    pip_lock = base / "pip" / "pylock.toml"
    pip_lock.parent.mkdir()
    _run(PYTHON, "-m", "pip", "lock", "-q", "six==1.16.0", "idna==3.10", "-o", str(pip_lock), cwd=base)
    uv_lock = base / "uv" / "pylock.toml"
    uv_lock.parent.mkdir()
    (base / "uv" / "requirements.in").write_text("six==1.17.0\nidna==3.10\n")
    _run(UV, "pip", "compile", "-q", "requirements.in", "-o", "pylock.toml", cwd=base / "uv")
    assert 'created-by = "pip"' in pip_lock.read_text() and 'created-by = "uv"' in uv_lock.read_text()
    return pip_lock, uv_lock


def test_diff_compares_what_plain_locks_hold(tmp_path: Path, foreign: tuple[Path, Path]) -> None:
    pip_lock, uv_lock = foreign
    proc = run_envlock(tmp_path, "diff", str(pip_lock), str(uv_lock))
    assert proc.returncode == 1, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert "six 1.16.0 -> 1.17.0 (upgrade)" in lines
    # Same wheel and hash; uv also lists the sdist, pip does not.
    assert "idna 3.10: same version, other artifacts: +idna-3.10.tar.gz" in lines
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 2 and "created by pip" in notes[0] and "created by uv" in notes[1]
    assert all("not available: interpreter, platform and GPU" in note for note in notes)

    data = json.loads(run_envlock(tmp_path, "diff", str(pip_lock), str(uv_lock), "--format", "json").stdout)
    result = data["result"]
    assert [(c["package"], c["kind"]) for c in result["changes"]] == [
        ("idna", "artifact"),
        ("six", "upgrade"),
    ]
    assert result["environment"] == [] and len(result["notes"]) == 2

    same = run_envlock(tmp_path, "diff", str(uv_lock), str(uv_lock))
    assert same.returncode == 0, same.stdout + same.stderr

    # Same wheel name, other hash: the artifact change is named.
    tampered = tmp_path / "pylock.toml"
    tampered.write_text(_tamper(uv_lock.read_text(), "six-1.17.0-py2.py3-none-any.whl"))
    other = run_envlock(tmp_path, "diff", str(uv_lock), str(tampered))
    assert other.returncode == 1
    assert "six 1.17.0: same version, other bytes: six-1.17.0-py2.py3-none-any.whl sha256 " in other.stdout


def _tamper(text: str, wheel: str) -> str:
    """The lock with ``wheel``'s sha256 replaced (a rebuilt or tampered artifact)."""
    line = next(line for line in text.splitlines() if f"/{wheel}" in line)
    digest = re.search(r'sha256 = "([0-9a-f]{64})"', line)
    assert digest is not None
    return text.replace(line, line.replace(digest.group(1), "0" * 64))


def test_uv_export_of_the_same_pins_is_identical(tmp_path: Path, foreign: tuple[Path, Path]) -> None:
    """``uv export --format pylock.toml`` of a project pinning what ``uv pip compile`` pinned."""
    _, uv_lock = foreign
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "0.1.0"\nrequires-python = ">=3.9"\n'
        'dependencies = ["six==1.17.0", "idna==3.10"]\n'
    )
    _run(UV, "lock", "-q", cwd=project)
    _run(UV, "export", "-q", "--format", "pylock.toml", "--no-emit-project", "-o", "pylock.toml", cwd=project)
    proc = run_envlock(tmp_path, "diff", str(project / "pylock.toml"), str(uv_lock))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical (2 packages)" in proc.stdout.splitlines()[0]


def test_show_reads_a_plain_lock(tmp_path: Path, foreign: tuple[Path, Path]) -> None:
    pip_lock, _ = foreign
    proc = run_envlock(tmp_path, "show", str(pip_lock))
    assert proc.returncode == 0, proc.stderr
    assert "created by pip" in proc.stdout.splitlines()[0]
    assert re.search(r"^six\s+1\.16\.0\s+foreign\s+six-1\.16\.0-py2\.py3-none-any\.whl", proc.stdout, re.M)
    data: dict[str, Any] = json.loads(run_envlock(tmp_path, "show", str(pip_lock), "--format", "json").stdout)
    assert {p["name"]: p["version"] for p in data["result"]["packages"]} == {"six": "1.16.0", "idna": "3.10"}
    assert "not available" in data["result"]["notes"][0]


def test_not_a_pep751_lock_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pylock.toml"
    bad.write_text('created-by = "x"\n[[packages]]\nname = "six"\n')
    proc = run_envlock(tmp_path, "diff", str(bad), str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "pylock.toml: not a valid PEP 751 lock: " in proc.stderr


def test_review_over_git_on_plain_locks(tmp_path: Path, foreign: tuple[Path, Path]) -> None:
    pip_lock, uv_lock = foreign
    root = tmp_path / "fleet"
    (root / "locks").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    lock = root / "locks" / "pylock.app.toml"
    lock.write_bytes(pip_lock.read_bytes())
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "pip's lock")
    lock.write_bytes(uv_lock.read_bytes())
    _git(root, "commit", "-q", "-am", "uv's lock")

    proc = run_envlock(root, "review", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", "--no-index")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    data = data.get("result", data)
    assert [(c["package"], c["kind"]) for c in data["changes"]] == [("idna", "artifact"), ("six", "upgrade")]
    assert not [f for lk in data["locks"] for f in lk["findings"] if f["code"] == "digest-mismatch"]
    notes = [n for n in data["notes"] if "plain PEP 751 lock" in n]
    assert len(notes) == 2 and all("not available" in n for n in notes)

    lock.write_text(_tamper(uv_lock.read_text(), "six-1.17.0-py2.py3-none-any.whl"))
    _git(root, "commit", "-q", "-am", "six rebuilt")
    proc = run_envlock(root, "review", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", "--no-index")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    data = data.get("result", data)
    (six,) = [c for c in data["changes"] if c["package"] == "six"]
    first = six["findings"][0]
    assert (first["code"], first["severity"]) == ("same-name-different-bytes", "block")


def test_an_envlock_lock_against_a_plain_one(tmp_path: Path) -> None:
    """Mixed: envlock's one wheel per package must be among the plain lock's artifacts, same hash."""
    from envlock.lock.io import render_lock
    from lockfactory import make_lock, pkg

    six, idna = pkg("six", "1.17.0"), pkg("idna", "3.10")
    ours = tmp_path / "pylock.ours.toml"
    ours.write_bytes(render_lock(make_lock("ours", [six, idna])))

    def entry(p: Any, sha256: str) -> str:
        wheel = (
            f'{{ name = "{p.wheel.filename}", url = "{p.wheel.url}", hashes = {{ sha256 = "{sha256}" }} }}'
        )
        url = f"https://files.example/{p.name}-{p.version}.tar.gz"
        sdist = f'{{ url = "{url}", hashes = {{ sha256 = "{"1" * 64}" }} }}'
        return (
            f'[[packages]]\nname = "{p.name}"\nversion = "{p.version}"\nsdist = {sdist}\nwheels = [{wheel}]\n'
        )

    theirs = tmp_path / "pylock.toml"
    theirs.write_text(
        'lock-version = "1.0"\ncreated-by = "hand"\n' + entry(six, six.wheel.sha256) + entry(idna, "2" * 64)
    )
    proc = run_envlock(tmp_path, "diff", str(ours), str(theirs))
    assert proc.returncode == 1, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert not any(line.startswith("six") for line in lines)  # its wheel and hash are listed there
    assert "idna 3.10: same version, idna-3.10-py3-none-any.whl: other hash in the plain lock " in " ".join(
        lines
    )
    assert not any(line.startswith("environment") for line in lines)
    assert sum(line.startswith("note: ") for line in lines) == 1
