"""A live venv against its lock: the comparison ``verify`` reports and ``apply`` checks
for hand edits before it replaces a venv (docs/apply.md, "Drift").

The locked side is ``locks/pylock.<host>.toml`` and its manifest, whose
sha256 must be the one the lock records (a manifest edited by hand is an
error, not drift). The live side is the agent's snapshot turned into
manifest rows by capture's own functions (``capture.live``), so an
untouched file gives the identical row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envlock.capture.live import LiveVenv
from envlock.lock.compare import DistDrift, FileDrift, compare_dists, compare_rows
from envlock.lock.manifest import parse_manifest
from envlock.lock.model import Lock


@dataclass(frozen=True, slots=True)
class VerifyResult:
    host: str
    venv: str
    lock_path: Path
    files_checked: int
    dists: tuple[DistDrift, ...]
    files: tuple[FileDrift, ...]
    python_locked: str
    python_live: str
    stats: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    bytecode: tuple[tuple[str, str], ...] = ()  # damaged .pyc files (path, why): imports would fail

    @property
    def clean(self) -> bool:
        return not (self.dists or self.files or self.bytecode or self.python_locked != self.python_live)


def compare(lock: Lock, manifest: bytes, live: LiveVenv, lock_path: Path) -> VerifyResult:
    live_sha, live_dists, live_python = live.digest
    dists = compare_dists({p.name: p.version for p in lock.packages}, live_dists)
    if live_sha == lock.manifest_sha256:
        files: tuple[FileDrift, ...] = ()
        warnings: tuple[str, ...] = ()
    else:
        locked_rows = parse_manifest(manifest, str(lock_path.with_name(lock_path.stem + ".files.tsv")))
        # The venv creator's own files (":venv": pyvenv.cfg, bin/python*,
        # activate scripts) sit outside the digest rules: they differ by
        # creator and host, and a resolved target lock does not record them.
        files = compare_rows(
            [r for r in locked_rows if r.owner != ":venv"], [r for r in live.rows if r.owner != ":venv"]
        )
        warnings = live.warnings
    return VerifyResult(
        host=live.host,
        venv=lock.venv,
        lock_path=lock_path,
        files_checked=lock.manifest_files,
        dists=dists,
        files=files,
        python_locked=lock.interpreter.version,
        python_live=live_python,
        stats=live.stats,
        warnings=warnings,
        bytecode=live.bytecode,
    )
