"""The workspace: a directory holding hosts/ and locks/, like a git repo of a fleet."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import EnvlockError


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path

    @property
    def hosts_dir(self) -> Path:
        return self.root / "hosts"

    @property
    def locks_dir(self) -> Path:
        return self.root / "locks"

    @property
    def store_dir(self) -> Path:
        # ENVLOCK_STORE lets a fleet share one store; the default keeps the
        # workspace self-contained (and git-ignored, see .gitignore).
        env = os.environ.get("ENVLOCK_STORE")
        return Path(env) if env else self.root / "store"

    def lock_path(self, host: str) -> Path:
        return self.locks_dir / f"pylock.{host}.toml"

    def manifest_path(self, host: str) -> Path:
        return self.locks_dir / f"pylock.{host}.files.tsv"

    def profile_path(self, host: str) -> Path:
        return self.hosts_dir / f"{host}.toml"


def open_workspace(root: str | os.PathLike[str] | None) -> Workspace:
    path = Path(root) if root is not None else Path.cwd()
    if not path.is_dir():
        raise EnvlockError(f"{path}: workspace directory does not exist")
    return Workspace(root=path.resolve())


def cache_dir() -> Path:
    """Per-user cache on the controller (index answers, agent bundles)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "envlock"
