"""Edges of the round trip that the corpus does not reach: interpreter search, names, tags, store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from envlock.apply import plan_changes
from envlock.errors import EnvlockError
from envlock.hostpython import find_base_python
from envlock.hosts import parse_profile
from envlock.provenance import expand_tags, tags_match
from envlock.pyvenv import derive_target_pyvenv
from envlock.transport.local import LocalTransport
from helpers import run_envlock
from lockfactory import make_lock, pkg


def _profile(tmp_path: Path, **extra: str) -> object:
    data = {"venv": str(tmp_path / "no-venv-yet"), **extra}
    return parse_profile("fresh", data, tmp_path / "hosts/fresh.toml")


def test_no_interpreter_found_lists_what_was_tried(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    with pytest.raises(EnvlockError) as caught:
        find_base_python(LocalTransport("fresh"), profile, want="3.99")  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("host fresh: no base interpreter for ")
    assert "Python 3.99 not found" in message
    assert "python3.99 on PATH" in message and "~/.pyenv/versions/3.99*/bin/python3.99" in message
    assert message.endswith("set `python` in " + str(tmp_path / "hosts/fresh.toml"))


def test_profile_python_is_the_only_candidate(tmp_path: Path) -> None:
    profile = _profile(tmp_path, python="/nonexistent/python3.11")
    with pytest.raises(EnvlockError, match=r"no Python at /nonexistent/python3.11 \(.*fresh.toml: python\)"):
        find_base_python(LocalTransport("fresh"), profile, want="3.11")  # type: ignore[arg-type]


def test_venv_own_interpreter_wins_over_the_wanted_version(tmp_path: Path, reference: Reference) -> None:
    """For lock, an existing venv's Python is the target's, whatever the reference runs."""
    profile = parse_profile("ref", {"venv": str(reference.venv)}, tmp_path / "hosts/ref.toml")
    found = find_base_python(LocalTransport("ref"), profile, want="3.99")
    assert found.how == f"{reference.venv}/pyvenv.cfg home"
    assert found.version.startswith("3.")
    with pytest.raises(EnvlockError):
        find_base_python(LocalTransport("ref"), profile, want="3.99", venv_decides=False)


def test_plan_names_are_canonical_and_counts_add_up() -> None:
    lock = make_lock(
        "tgt", [pkg("pyyaml", "6.0.3"), pkg("typing-extensions", "4.15.0"), pkg("rich", "15.0.0")]
    )
    live = [("PyYAML", "6.0.3"), ("typing_extensions", "4.15.0"), ("Rich", "14.0.0")]
    changes = {c.name: c.kind for c in plan_changes(lock, live)}
    assert changes == {"pyyaml": "rebuilt", "typing-extensions": "rebuilt", "rich": "upgrade"}


def test_compressed_wheel_tags_are_expanded() -> None:
    compressed = ["cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64"]
    assert expand_tags(compressed) == {"cp39-abi3-manylinux_2_17_x86_64", "cp39-abi3-manylinux2014_x86_64"}
    name = "llguidance-1.3.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert tags_match(name, compressed)
    assert tags_match(name, ["cp39-abi3-manylinux2014_x86_64", "cp39-abi3-manylinux_2_17_x86_64"])
    assert not tags_match(name, ["cp39-abi3-manylinux_2_17_x86_64"])  # one tag short
    assert not tags_match(name, ["cp39-abi3-manylinux_2_17_x86_64.manylinux_2_28_x86_64"])


def test_target_pyvenv_follows_the_target_interpreter() -> None:
    ref = {
        "home": "/usr/bin",
        "include-system-site-packages": "false",
        "version": "3.11.7",
        "executable": "/usr/bin/python3.11",
        "command": "/usr/bin/python3.11 -m venv --copies /opt/ref",
    }
    out = derive_target_pyvenv(
        ref,
        reference_venv="/opt/ref",
        venv="/srv/tgt",
        python="/opt/py/bin/python3.12",
        python_realpath="/opt/py/bin/python3.12",
        version="3.12.1",
    )
    assert list(out.items()) == [
        ("home", "/opt/py/bin"),
        ("include-system-site-packages", "false"),
        ("version", "3.12.1"),
        ("executable", "/opt/py/bin/python3.12"),
        ("command", "/opt/py/bin/python3.12 -m venv --copies /srv/tgt"),
    ]
    older = derive_target_pyvenv(
        ref,
        reference_venv="/opt/ref",
        venv="/srv/tgt",
        python="/p/python3.8",
        python_realpath=None,
        version="3.8.18",
    )
    assert list(older) == ["home", "include-system-site-packages", "version"]


def test_fresh_clone_without_store_says_what_is_missing(tmp_path: Path, reference: Reference) -> None:
    """A workspace cloned without store/: one line naming the object and the package, exit 2."""
    root = tmp_path / "ws"
    write_profile(root, "ref", reference.venv, reference.index.url)
    assert run_envlock(root, "capture", "ref").returncode == 0
    clone = tmp_path / "clone"
    shutil.copytree(root / "hosts", clone / "hosts")
    shutil.copytree(root / "locks", clone / "locks")
    (clone / "hosts/tgt.toml").write_text(f'venv = "{tmp_path / "tgt"}"\nreference = "ref"\n')
    proc = run_envlock(clone, "lock", "tgt")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "alpha bin/alpha" in line and "is not in the store" in line
    assert not (clone / "locks/pylock.tgt.toml").exists()


def test_diff_of_locks_for_other_venv_paths_ignores_repointed_interpreter_lines() -> None:
    """A target lock re-points bin/ scripts at its venv: not a change, when the tree digest
    (scripts hashed with the interpreter line normalised) is the same."""
    from dataclasses import replace

    from envlock.changes import diff_locks
    from lockfactory import sha

    tool = replace(pkg("tool", "1.0"), scripts={"bin/tool": sha("#!/opt/ref/bin/python")})
    ref = make_lock("ref", [tool])
    repointed = replace(tool, scripts={"bin/tool": sha("#!/srv/tgt/bin/python")})
    target = replace(make_lock("tgt", [repointed]), venv="/srv/tgt")
    assert diff_locks(ref, target).changes == ()
    # At the same path, other script bytes are a change.
    (change,) = diff_locks(ref, replace(target, venv=ref.venv)).changes
    assert change.kind == "artifact" and "bin/ files differ" in change.describe("ref", "tgt")
    # Another script name is a change whatever the paths.
    renamed = replace(tool, scripts={"bin/other": sha("#!/srv/tgt/bin/python")})
    assert diff_locks(ref, replace(make_lock("tgt", [renamed]), venv="/srv/tgt")).changes != ()
