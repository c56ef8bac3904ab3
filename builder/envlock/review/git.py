"""Read lock files at git revisions: the plumbing behind ``envlock review --base REV``.

Only argument lists reach git, and every path is given relative to the
workspace (``REV:./locks/...``), so a workspace that is a subdirectory of
a larger repository works too. Renames are not followed: a renamed lock
is a different host's lock.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from envlock.errors import EnvlockError, LockError

LOCK_DIR = "locks"


class GitError(EnvlockError):
    """git could not answer: not a repository, unknown revision."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True)
    except OSError as exc:
        raise GitError(f"cannot run git: {exc.strerror}") from exc
    if check and proc.returncode != 0:
        message = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])}: {message[-1] if message else f'exit {proc.returncode}'}")
    return proc


def resolve(root: Path, rev: str) -> str:
    """The commit ``rev`` names; GitError when it names none."""
    if rev.startswith("-"):
        raise GitError(f"{rev!r} is not a git revision")
    inside = _git(root, "rev-parse", "--is-inside-work-tree", check=False)
    if inside.returncode != 0 or inside.stdout.strip() != b"true":
        raise GitError(f"{root}: not inside a git work tree")
    proc = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise GitError(f"unknown git revision {rev!r}")
    return proc.stdout.decode().strip()


def changed_locks(root: Path, base: str, head: str | None) -> list[str]:
    """``locks/*.toml`` paths (relative to ``root``) that differ between base and head.

    ``head`` None: the working tree, untracked new locks included.
    """
    spec = f"{LOCK_DIR}/"
    revs = [base] if head is None else [base, head]
    proc = _git(root, "diff", "--name-only", "--no-renames", "--relative", *revs, "--", spec)
    names = set(proc.stdout.decode("utf-8").splitlines())
    if head is None:
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", spec)
        names.update(untracked.stdout.decode("utf-8").splitlines())
    return sorted(n for n in names if _is_lock(n))


def _is_lock(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and parts[0] == LOCK_DIR and parts[1].endswith(".toml")


def read_at(root: Path, rev: str | None, path: str, limit: int) -> bytes | None:
    """The file's bytes at ``rev`` (None: the working tree); None when it does not exist there.

    A file over ``limit`` bytes is refused before it is read.
    """
    shown = f"{rev}:{path}" if rev is not None else path
    too_big = LockError(f"{shown}: over {limit >> 20} MiB; not a file envlock wrote (refusing to read it)")
    if rev is None:
        try:
            with open(root / path, "rb") as stream:
                data = stream.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise EnvlockError(f"{path}: cannot read: {exc.strerror}") from exc
        if len(data) > limit:
            raise too_big
        return data
    spec = f"{rev}:./{path}"
    if _git(root, "cat-file", "-e", spec, check=False).returncode != 0:
        return None
    if int(_git(root, "cat-file", "-s", spec).stdout) > limit:
        raise too_big
    return _git(root, "cat-file", "blob", spec).stdout
