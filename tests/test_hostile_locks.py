"""Hostile and malformed locks and manifests through the real CLI: exit 2, one line, nothing touched.

Every lock here is a real capture of the session's reference venv, edited
the way an attacker or a careless hand would. Each case runs every command
that reads the lock (apply, verify, diff, review) and checks that each
refuses with exit 2, one line on stderr naming the lock file and the field,
no traceback, and that nothing was written: no target venv, no file outside,
the locks unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import tomli_w

from conftest import Reference, write_profile
from helpers import copy_lock, run_envlock

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Path:
    """A workspace with ct129 captured from the reference venv, as a git repository."""
    root = tmp_path_factory.mktemp("hostile") / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return root


def _fleet(tmp_path: Path, captured: Path) -> tuple[Path, Path]:
    """A copy of the captured workspace; ct200 (target venv not yet there) holds ct129's lock, committed."""
    root = tmp_path / "fleet"
    shutil.copytree(captured, root, symlinks=True)
    target = tmp_path / "target-venv"
    write_profile(root, "ct200", target, None)
    copy_lock(root, "ct129", "ct200")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    return root, target


def _package(doc: Doc, name: str) -> Doc:
    table: Doc = next(p for p in doc["packages"] if p["name"] == name)
    return table


def _index(doc: Doc, name: str) -> int:
    return next(i for i, p in enumerate(doc["packages"]) if p["name"] == name)


def _edit_lock(root: Path, edit: Callable[[Doc], None]) -> None:
    path = root / "locks" / "pylock.ct200.toml"
    doc = tomllib.loads(path.read_text())
    edit(doc)
    path.write_text(tomli_w.dumps(doc))


def _script_key(key: str) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        scripts = _package(doc, "alpha")["tool"]["envlock"]["scripts"]
        scripts[key] = next(iter(scripts.values()))

    return edit


def _set(name: str, path: tuple[Any, ...], value: object) -> Callable[[Doc], None]:
    def edit(doc: Doc) -> None:
        table = _package(doc, name) if name else doc
        for key in path[:-1]:
            table = table[key]
        if value is None:
            del table[path[-1]]
        else:
            table[path[-1]] = value

    return edit


# (case id, edit, the field the message must name)
CASES: list[tuple[str, Callable[[Doc], None], str]] = [
    ("script-key-dotdot", _script_key("bin/../../victim.txt"), "scripts.'bin/../../victim.txt'"),
    ("script-key-absolute", _script_key("@VICTIM@"), "absolute path"),
    ("script-key-not-bin", _script_key("lib/python3/site.py"), "expected bin/<name>"),
    (
        "script-value-int",
        lambda doc: _package(doc, "alpha")["tool"]["envlock"]["scripts"].update({"bin/alpha": 5}),
        "scripts.'bin/alpha': missing or not a sha256",
    ),
    (
        "pyvenv-home-int",
        _set("", ("tool", "envlock", "pyvenv", "home"), 5),
        "tool.envlock.pyvenv.home: expected str",
    ),
    (
        "source-tree-no-sha",
        _set("editpkg", ("tool", "envlock", "source-tree", "sha256"), None),
        "source-tree.sha256: missing",
    ),
    (
        "source-tree-system-dir",
        _set("editpkg", ("tool", "envlock", "source-tree", "path"), "/etc"),
        "source-tree.path: '/etc': a system directory",
    ),
    (
        "source-tree-elsewhere",
        _set("editpkg", ("tool", "envlock", "source-tree", "path"), "@VICTIM@"),
        "is not the editable install's",
    ),
    (
        "wheel-sha-path",
        _set("six", ("wheels", 0, "hashes", "sha256"), "../../../../" + "a" * 52),
        "wheels[0].hashes.sha256: missing or not a sha256",
    ),
    (
        "wheel-name-path",
        _set("six", ("wheels", 0, "name"), "../../six-1.17.0-py2.py3-none-any.whl"),
        "wheels[0]",  # packaging.pylock refuses it first
    ),
    (
        "native-path-dotdot",
        lambda doc: _package(doc, "beta")["tool"]["envlock"]["native"][0].update({"path": "../../libx.so"}),
        "native[0].path: '../../libx.so'",
    ),
]


def _resolve(value: object, victim: Path) -> object:
    return str(victim) if value == "@VICTIM@" else value


def _assert_refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize(("case", "edit", "field"), CASES, ids=[c[0] for c in CASES])
def test_hostile_lock_is_refused_by_every_command(
    tmp_path: Path, captured: Path, case: str, edit: Callable[[Doc], None], field: str
) -> None:
    root, target = _fleet(tmp_path, captured)
    victim = tmp_path / "victim.txt"

    def hostile(doc: Doc) -> None:
        edit(doc)
        # "@VICTIM@" stands for a path outside the workspace, known only now.
        text = tomli_w.dumps(doc).replace("@VICTIM@", str(victim))
        doc.clear()
        doc.update(tomllib.loads(text))

    _edit_lock(root, hostile)
    before = {p: p.read_bytes() for p in (root / "locks").iterdir()}
    field = field.replace("@VICTIM@", str(victim))
    for argv in (
        ["apply", "ct200"],
        ["verify", "ct200"],
        ["diff", "ct129", "ct200"],
        ["review", "--base", "HEAD", "--no-index"],
    ):
        proc = run_envlock(root, *argv)
        _assert_refused(proc, "pylock.ct200.toml", field)
    assert not target.exists()
    assert not victim.exists()
    assert not (tmp_path / "victim.txt").exists()
    assert {p: p.read_bytes() for p in (root / "locks").iterdir()} == before


def test_binary_manifest_is_refused(tmp_path: Path, captured: Path) -> None:
    root, target = _fleet(tmp_path, captured)
    manifest = root / "locks" / "pylock.ct200.files.tsv"
    manifest.write_bytes(b"\xff\xfe\x00binary\x80\n" * 100)
    # The lock must point at these bytes, or the sha256 check refuses first.
    import hashlib

    sha = hashlib.sha256(manifest.read_bytes()).hexdigest()
    _edit_lock(root, _set("", ("tool", "envlock", "manifest", "sha256"), sha))
    proc = run_envlock(root, "apply", "ct200")
    _assert_refused(proc, "pylock.ct200.files.tsv", "not UTF-8")
    assert not target.exists()


def test_manifest_row_leaving_the_venv_is_refused(tmp_path: Path, captured: Path) -> None:
    root, target = _fleet(tmp_path, captured)
    manifest = root / "locks" / "pylock.ct200.files.tsv"
    text = manifest.read_text()
    row = next(line for line in text.splitlines() if line.startswith("six\t"))
    owner, path, *rest = row.split("\t")
    manifest.write_text(text.replace(row, "\t".join([owner, "../../" + path, *rest])))
    import hashlib

    sha = hashlib.sha256(manifest.read_bytes()).hexdigest()
    _edit_lock(root, _set("", ("tool", "envlock", "manifest", "sha256"), sha))
    proc = run_envlock(root, "apply", "ct200")
    _assert_refused(proc, "pylock.ct200.files.tsv:", "'../../site-packages/")
    assert not target.exists()


def test_oversized_lock_is_refused_unread(tmp_path: Path, captured: Path) -> None:
    root, target = _fleet(tmp_path, captured)
    lock = root / "locks" / "pylock.ct200.toml"
    with open(lock, "r+b") as stream:  # sparse: 65 MiB of apparent size, no disk
        stream.truncate(65 << 20)
    for argv in (
        ["apply", "ct200"],
        ["verify", "ct200"],
        ["diff", "ct129", "ct200"],
        ["review", "--base", "HEAD", "--no-index"],
    ):
        _assert_refused(run_envlock(root, *argv), "pylock.ct200.toml", "over 64 MiB")
    assert not target.exists()


# ---------------------------------------------------------------- digest coverage

DIGEST_EDITS: list[tuple[str, Callable[[Doc], None], str]] = [
    (
        "script-bytes",
        lambda doc: _package(doc, "alpha")["tool"]["envlock"]["scripts"].update({"bin/alpha": "e" * 64}),
        "bin/ files differ: ~bin/alpha",
    ),
    ("script-added", _script_key("bin/sneaky"), "bin/ files differ: +bin/sneaky"),
    (
        "source-tree-archive",
        _set("editpkg", ("tool", "envlock", "source-tree", "sha256"), "d" * 64),
        "editable source tree differs",
    ),
    ("pyvenv-home", _set("", ("tool", "envlock", "pyvenv", "home"), "/somewhere/else/bin"), "pyvenv"),
]


@pytest.mark.parametrize(("case", "edit", "shown"), DIGEST_EDITS, ids=[c[0] for c in DIGEST_EDITS])
def test_edit_outside_the_digest_is_noticed(
    tmp_path: Path, captured: Path, case: str, edit: Callable[[Doc], None], shown: str
) -> None:
    """Scripts, source trees, pyvenv are in the digest: apply, verify refuse; review blocks; diff shows."""
    root, target = _fleet(tmp_path, captured)
    _edit_lock(root, edit)
    for argv in (["apply", "ct200"], ["verify", "ct200"]):
        _assert_refused(run_envlock(root, *argv), "pylock.ct200.toml", "tool.envlock.digest does not match")
    assert not target.exists()
    review = run_envlock(root, "review", "--base", "HEAD", "--no-index", "--format", "json")
    assert review.returncode == 1, review.stderr
    import json

    findings = json.loads(review.stdout)["result"]["locks"][0]["findings"]
    assert {"code": "digest-mismatch", "severity": "block"}.items() <= findings[0].items(), findings
    diff = run_envlock(root, "diff", "ct129", "ct200")
    assert diff.returncode == 1, diff.stderr  # differences found
    assert shown in diff.stdout, diff.stdout


def test_lock_with_old_digest_rules_is_refused(tmp_path: Path, captured: Path) -> None:
    root, target = _fleet(tmp_path, captured)
    _edit_lock(root, _set("", ("tool", "envlock", "digest-rules"), "envlock-payload-1"))
    _assert_refused(
        run_envlock(root, "apply", "ct200"), "pylock.ct200.toml", "digest-rules is 'envlock-payload-1'"
    )
    assert not target.exists()


def test_capture_refuses_a_file_name_that_is_not_utf8(tmp_path: Path, reference: Reference) -> None:
    venv = tmp_path / "venv"
    shutil.copytree(reference.venv, venv, symlinks=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    bad = os.fsencode(site) + b"/stray\xff.py"
    with open(bad, "wb") as stream:
        stream.write(b"X = 1\n")
    root = tmp_path / "fleet"
    write_profile(root, "odd", venv, reference.index.url)
    proc = run_envlock(root, "capture", "odd")
    _assert_refused(proc, "stray\\xff.py", "not UTF-8")
    assert not (root / "locks").exists() or not list((root / "locks").iterdir())


def test_lock_refuses_a_hand_edited_reference(tmp_path: Path, captured: Path) -> None:
    """`envlock lock` would give an edited reference's facts a fresh, valid digest: it refuses instead."""
    root, _target = _fleet(tmp_path, captured)
    path = root / "locks" / "pylock.ct129.toml"
    doc = tomllib.loads(path.read_text())
    _package(doc, "alpha")["tool"]["envlock"]["scripts"]["bin/alpha"] = "e" * 64
    path.write_text(tomli_w.dumps(doc))
    (root / "hosts" / "ct300.toml").write_text(
        f'venv = "{tmp_path}/ct300"\nreference = "ct129"\n[target]\npython = "3.11.7"\n'
    )
    _assert_refused(
        run_envlock(root, "lock", "ct300"), "pylock.ct129.toml", "tool.envlock.digest does not match"
    )
    assert not (root / "locks" / "pylock.ct300.toml").exists()


def test_host_refuses_a_bin_file_outside_the_venv_even_if_the_controller_did_not(tmp_path: Path) -> None:
    """Defence in depth: a plan that reaches the agent with a hostile key writes nothing."""
    from envlock.agent.apply import place_bin_files
    from envlock.agent.pathguard import PathError
    from envlock.agent.protocol import ApplyPlan

    staging = tmp_path / "venv.envlock-staging"
    (staging / "bin").mkdir(parents=True)
    blob = tmp_path / "blob"
    blob.write_bytes(b"#!/bin/sh\necho owned\n")
    victim = tmp_path / "victim.txt"
    for key in ("bin/../../victim.txt", str(victim), "lib/evil"):
        plan = {
            "venv": str(tmp_path / "venv"),
            "source_venv": "/ref",
            "bin_files": {key: {"path": str(blob), "executable": True}},
        }
        with pytest.raises(PathError):
            place_bin_files(cast(ApplyPlan, plan), str(staging))
    assert not victim.exists()
    # A bin/ that is a symlink to elsewhere is not written through.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (staging / "bin").rmdir()
    (staging / "bin").symlink_to(elsewhere)
    plan = {
        "venv": str(tmp_path / "venv"),
        "source_venv": "/ref",
        "bin_files": {"bin/tool": {"path": str(blob), "executable": True}},
    }
    with pytest.raises(PathError):
        place_bin_files(cast(ApplyPlan, plan), str(staging))
    assert list(elsewhere.iterdir()) == []
