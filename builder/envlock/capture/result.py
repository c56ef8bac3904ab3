"""Options in, result out: the plain data of a capture."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envlock.lock.model import FileEntry, Lock


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    use_cache: bool = True
    allow_unreachable_index: bool = False
    jobs: int = 0
    # False: build the lock of the live venv without writing it (verify, diff live:HOST).
    write: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class CaptureResult:
    lock: Lock
    lock_path: Path
    manifest_path: Path
    changed: bool
    stats: dict[str, int]
    warnings: tuple[str, ...] = field(default=())
    # The manifest rows, when the lock was built in this run (empty on the unchanged-venv path).
    manifest_rows: tuple[FileEntry, ...] = field(default=())
