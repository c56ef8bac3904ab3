"""What apply may replace: a venv envlock built (or --force for another tool's), a new or empty path.

Every refusal is exit 2 with one line, and nothing is moved, deleted or
written: the directory tree around the target is compared, file by file,
before and after, and no ``.envlock`` state appears anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from helpers import ENVLOCK, content_listing, copy_lock, make_venv, run_envlock


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Path:
    """A workspace whose ct200 lock is the reference's (captured as ct129)."""
    root = tmp_path_factory.mktemp("guard") / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    copy_lock(root, "ct129", "ct200")
    return root


def apply_to(
    root: Path, venv: Path | str, *extra: str, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    write_profile(root, "ct200", Path(venv), None, "[index]\nurls = []\n")
    env = dict(os.environ)
    if home is not None:
        env["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
        env["HOME"] = str(home)
    return subprocess.run(
        [ENVLOCK, "apply", "ct200", *extra, "--root", str(root)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )


@pytest.mark.parametrize("venv", ["/", "/usr", "/usr/local", "/etc", "/opt", "/var", "/home"])
def test_system_directories_are_refused(locked: Path, venv: str) -> None:
    proc = apply_to(locked, venv, "--force")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"venv {venv} is a system directory" in proc.stderr, proc.stderr
    assert not Path(venv.rstrip("/") + ".envlock").exists()
    assert not list(locked.glob("*.envlock*")) and not list(locked.glob(".envlock*"))


def test_the_agent_refuses_system_directories_on_its_own(tmp_path: Path) -> None:
    """The host does not rely on the controller: the agent checks before it writes a lock file."""
    for command in (["rollback", "--venv", "/"], ["applied", "--venv", "/usr", "--digest", "x"]):
        proc = subprocess.run(
            [str(Path(ENVLOCK).parent / "python"), "-m", "envlock.agent", *command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        if command[0] == "rollback":
            assert proc.returncode == 2 and "venv / is a system directory" in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0 and "/usr is a system directory" in proc.stdout, proc.stdout
    for venv in ("/", "/usr", str(Path.home())):
        proc = subprocess.run(
            [str(Path(ENVLOCK).parent / "python"), "-m", "envlock.agent", "apply"],
            input=json.dumps({"venv": venv, "uv": "/nonexistent/uv", "force": True}),
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and f"venv {venv} is " in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == [] and not Path("/.envlock").exists()
    assert not Path("/usr.envlock").exists() and not Path(f"{Path.home()}.envlock").exists()


def test_home_and_above_are_refused(locked: Path, tmp_path: Path) -> None:
    home = tmp_path / "users" / "alice"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret\n")
    (home / "pyvenv.cfg").write_text("home = /usr/bin\n")  # even one that looks like a venv
    before = content_listing(tmp_path)
    for venv in (home, home.parent):
        proc = apply_to(locked, venv, "--force", home=home)
        assert proc.returncode == 2
        assert "is the home directory" in proc.stderr and "or above it" in proc.stderr, proc.stderr
    assert content_listing(tmp_path) == before


def test_a_directory_that_is_not_a_venv_is_never_replaced(locked: Path, tmp_path: Path) -> None:
    documents = tmp_path / "Documents"
    (documents / "taxes").mkdir(parents=True)
    (documents / "taxes" / "2025.pdf").write_bytes(b"%PDF-1.7\n")
    before = content_listing(tmp_path)
    for extra in ((), ("--force",)):
        proc = apply_to(locked, documents, *extra)
        assert proc.returncode == 2
        assert f"{documents} is not a venv (no pyvenv.cfg) and not empty" in proc.stderr, proc.stderr
    assert content_listing(tmp_path) == before


def test_a_symlinked_venv_is_refused(locked: Path, tmp_path: Path) -> None:
    real = make_venv(tmp_path / "real-venv")
    (tmp_path / "venv").symlink_to(real)
    before = content_listing(tmp_path)
    proc = apply_to(locked, tmp_path / "venv", "--force")
    assert proc.returncode == 2 and "is a symlink" in proc.stderr, proc.stderr
    assert content_listing(tmp_path) == before


def test_another_tools_venv_needs_force_and_is_then_kept(locked: Path, tmp_path: Path) -> None:
    theirs = make_venv(tmp_path / "venv")
    (theirs / "notes.txt").write_text("mine\n")
    before = content_listing(theirs)
    proc = apply_to(locked, theirs)
    assert proc.returncode == 2
    assert "is a venv that envlock did not build" in proc.stderr and "--force" in proc.stderr
    assert content_listing(theirs) == before and not (tmp_path / "venv.envlock").exists()
    proc = apply_to(locked, theirs, "--force")
    assert proc.returncode == 0, proc.stderr
    assert content_listing(tmp_path / "venv.envlock" / "previous") == before
    # Once envlock has built the venv, no --force is needed.
    (locked / "locks" / "pylock.ct200.toml").touch()
    proc = apply_to(locked, theirs)
    assert proc.returncode == 0, proc.stderr


def test_an_empty_directory_is_a_fresh_venv(locked: Path, tmp_path: Path) -> None:
    (tmp_path / "venv").mkdir()
    proc = apply_to(locked, tmp_path / "venv")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "venv" / "pyvenv.cfg").is_file()
