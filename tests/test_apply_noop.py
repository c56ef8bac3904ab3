"""The no-op apply's shortcuts stay proofs: the stamp's fingerprint, the bytecode sum, the lock
facts memo, and the base interpreter vouched for by its own answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from envlock.agent import bytecode
from envlock.agent.journal import StateDir
from envlock.agent.stamp import applied, write_stamp
from envlock.agent.treescan import scan
from envlock.errors import LockError
from envlock.lock.digest import lock_digest, tree_digest
from envlock.workspace import Workspace
from helpers import ENVLOCK, copy_lock, run_envlock
from lockfactory import make_lock, pkg, rows_for, with_manifest, write_lock_files

DIGEST = "sha256:" + "a" * 64
TAG = sys.implementation.cache_tag


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "lib" / "pkg" / "__pycache__").mkdir(parents=True)
    (venv / "lib" / "pkg" / "m.py").write_text("M = 1\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # apply only stamps a venv
    os.symlink("lib/pkg/m.py", venv / "link")
    StateDir(str(venv)).create()
    write_stamp(StateDir(str(venv)), DIGEST)
    return venv


def test_the_stamp_is_one_fingerprint_and_any_added_or_removed_file_breaks_it(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    stamp = json.loads(Path(f"{venv}.envlock/applied.json").read_text())
    assert set(stamp) == {"digest", "at", "fingerprint"}
    assert applied(str(venv), DIGEST)["matches"]
    (venv / "lib" / "pkg" / "new.py").write_text("")
    assert not applied(str(venv), DIGEST)["matches"]
    (venv / "lib" / "pkg" / "new.py").unlink()
    assert applied(str(venv), DIGEST)["matches"]  # exactly the stamped tree again
    (venv / "lib" / "pkg" / "m.py").rename(venv / "lib" / "pkg" / "n.py")
    assert not applied(str(venv), DIGEST)["matches"]
    (venv / "lib" / "pkg" / "n.py").rename(venv / "lib" / "pkg" / "m.py")
    assert not applied(str(venv), DIGEST)["matches"]  # a rename sets the file's ctime
    write_stamp(StateDir(str(venv)), DIGEST)
    # Bytecode is the interpreter's to write: a new .pyc is not a change.
    (venv / "lib" / "pkg" / "__pycache__" / "m.other-tag.pyc").write_bytes(b"")
    assert applied(str(venv), DIGEST)["matches"]


def test_a_stamp_an_older_agent_wrote_is_still_compared_key_by_key(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    found = scan(str(venv), None)
    old = {
        "digest": DIGEST,
        "at": "2026-11-29T00:00:00Z",
        "files": dict(found.files),
        "links": dict(found.links),
    }
    Path(f"{venv}.envlock/applied.json").write_text(json.dumps(old))
    assert applied(str(venv), DIGEST)["matches"]
    (venv / "lib" / "pkg" / "m.py").write_text("M = 2\n")
    assert not applied(str(venv), DIGEST)["matches"]


def _compiled(venv: Path) -> Path:
    pyc = venv / "lib" / "pkg" / "__pycache__" / f"m.{TAG}.pyc"
    import py_compile

    py_compile.compile(str(venv / "lib" / "pkg" / "m.py"), cfile=str(pyc), doraise=True)
    return pyc


def test_the_bytecode_sum_skips_loading_only_files_exactly_as_found_sound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    venv = _venv(tmp_path)
    pyc = _compiled(venv)
    assert bytecode.damaged_bytecode(str(venv)) == []
    memo = bytecode._memo_path(str(venv))
    assert memo is not None and Path(memo + ".sum").is_file()

    loaded: list[str] = []
    real = bytecode.pyc_problem

    def spy(path: str) -> str | None:
        loaded.append(path)
        return real(path)

    monkeypatch.setattr(bytecode, "pyc_problem", spy)
    assert bytecode.damaged_bytecode(str(venv)) == [] and loaded == []  # nothing new: nothing loaded
    pyc.write_bytes(pyc.read_bytes()[:20])  # damaged after the check: its ctime moved
    rel = str(pyc.relative_to(venv))
    assert [r for r, _why in bytecode.damaged_bytecode(str(venv))] == [rel] and loaded == [str(pyc)]
    assert not Path(memo + ".sum").exists()  # no sum while a file is damaged
    assert [r for r, _why in bytecode.damaged_bytecode(str(venv))] == [rel]
    assert not applied(str(venv), DIGEST)["matches"]


# ------------------------------------------------------------------ the lock facts memo


def _workspace(tmp_path: Path) -> tuple[Workspace, Path]:
    packages = [pkg("numpy", "2.2.6"), pkg("six", "1.17.0", files=2)]
    rows = rows_for(packages)
    packages = [replace(p, tree_digest=tree_digest(r for r in rows if r.owner == p.name)) for p in packages]
    lock, manifest = with_manifest(make_lock("ct200", packages), rows)
    lock = replace(lock, digest=lock_digest(lock))
    workspace = Workspace(tmp_path / "fleet")
    return workspace, write_lock_files(workspace.locks_dir, lock, manifest)


def test_lock_facts_are_remembered_per_content_and_an_edit_is_checked_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    workspace, path = _workspace(tmp_path)
    lock = workspace.read_lock("ct200")
    first = workspace.read_lock_head("ct200")
    assert (first.digest, first.python, first.pyvenv, first.role) == (
        lock.digest, lock.interpreter.version, dict(lock.pyvenv), lock.role,
    )  # fmt: skip
    (memo,) = (tmp_path / "cache" / "envlock" / "lockheads").glob("*.json")
    assert workspace.read_lock_head("ct200") == first  # from the memo
    text = path.read_text()
    digest = tomllib.loads(text)["tool"]["envlock"]["digest"]
    path.write_text(text.replace(digest, "sha256:" + "0" * 64))
    with pytest.raises(LockError, match=r"tool\.envlock\.digest does not match"):
        workspace.read_lock_head("ct200")
    path.write_text(text)
    memo.write_text(json.dumps({"digest": "forged", "python": "3.0.0", "pyvenv": [], "role": "target"}))
    assert workspace.read_lock_head("ct200") == first  # a damaged memo is read again from the lock


# ------------------------------------------------------------------ the base interpreter, asked once


def _profile(root: Path, host: str, venv: Path, python: str) -> None:
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / f"{host}.toml").write_text(f'venv = "{venv}"\npython = "{python}"\n')


def test_a_no_op_apply_runs_no_interpreter_search(tmp_path: Path, reference: Reference) -> None:
    """The lock's interpreter answers the no-op question itself; the search (a POSIX sh script
    trying candidates) is not run. A logging ``sh`` first on PATH shows whether it ran."""
    spy = tmp_path / "spy"
    spy.mkdir()
    log = tmp_path / "sh.log"
    (spy / "sh").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec /bin/sh "$@"\n')
    (spy / "sh").chmod(0o755)
    root = tmp_path / "fleet"
    target = tmp_path / "target-venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    assert run_envlock(root, "capture", "ct129").returncode == 0
    copy_lock(root, "ct129", "ct200")
    env = {**os.environ, "PATH": f"{spy}:{os.environ['PATH']}"}
    command = [ENVLOCK, "apply", "ct200", "--root", str(root), "--format", "json"]
    first = subprocess.run(command, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    log.write_text("")
    again = subprocess.run(command, capture_output=True, text=True, env=env)
    assert json.loads(again.stdout)["result"]["noop"] is True, again.stdout + again.stderr
    assert log.read_text() == ""


def test_a_profile_interpreter_of_another_version_is_refused_as_before(
    tmp_path: Path, reference: Reference
) -> None:
    """Asked first, the profile's interpreter answers with its version; the search then says why."""
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    pythons = sorted((Path.home() / ".pyenv" / "versions").glob(f"{other}.*/bin/python{other}"))
    assert pythons, f"CPython {other} missing"
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    _profile(root, "ct200", tmp_path / "target", str(pythons[-1]))
    assert run_envlock(root, "capture", "ct129").returncode == 0
    copy_lock(root, "ct129", "ct200")
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    version = ".".join(map(str, sys.version_info[:3]))
    made_for = (
        f"envlock: error: locks/pylock.ct200.toml: made for Python {version}, but host ct200 has {other}."
    )
    assert proc.stderr.startswith(made_for), proc.stderr
    assert "(hosts/ct200.toml: python)" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "target").exists()

    _profile(root, "ct200", tmp_path / "target", "/nonexistent/python3")
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "no Python at /nonexistent/python3 (hosts/ct200.toml: python)" in proc.stderr, proc.stderr
