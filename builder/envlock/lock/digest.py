"""Payload digests (rules ``envlock-payload-1``, see docs/lock-format.md).

A package's tree digest is the sha256 of its sorted manifest rows
``path<TAB>sha256<TAB>size<TAB>kind``. The venv digest is the sha256 of the
sorted ``name==version<TAB>tree digest`` lines, plus the venv's Python line.
Excluded by rule: installer bookkeeping (INSTALLER, REQUESTED, RECORD,
direct_url.json, uv_cache.json), ``__pycache__``, and the venv scaffold that
venv creators write (``:venv`` rows: pyvenv.cfg, bin/python*, bin/activate*).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from envlock.lock.model import FileEntry


def _sha(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def tree_digest(entries: Iterable[FileEntry]) -> str:
    rows = sorted(entries, key=lambda e: e.path)
    return _sha(f"{e.path}\t{e.sha256}\t{e.size}\t{e.kind}\n" for e in rows)


def venv_digest(python: str, packages: Iterable[tuple[str, str, str]]) -> str:
    """``packages``: (name, version, tree digest) triples."""
    lines = [f"python\t{python}\n"]
    lines += [f"{name}=={version}\t{tree}\n" for name, version, tree in sorted(packages)]
    return _sha(lines)
