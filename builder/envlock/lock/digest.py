"""Payload digests (rules ``envlock-payload-2``, see docs/lock-format.md).

A package's tree digest is the sha256 of its sorted manifest rows
``path<TAB>sha256<TAB>size<TAB>kind``. The lock digest covers everything
``apply`` acts on, so no edit to a lock goes unnoticed by apply, verify or
review: the Python version, the source venv path (scripts are relocated from
it), the pyvenv.cfg facts, and per package its name, version, tree digest,
wheel (file name and sha256), bin/ scripts (path and blob sha256) and
editable source tree (path and archive sha256). Each fact is one JSON array
per line, so no path can forge a line boundary; the lines are sorted.
Excluded by rule: installer bookkeeping (INSTALLER, REQUESTED, RECORD,
direct_url.json, uv_cache.json), ``__pycache__``, and the venv scaffold that
venv creators write (``:venv`` rows: pyvenv.cfg, bin/python*, bin/activate*).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from envlock.errors import LockError
from envlock.lock.model import DIGEST_RULES, FileEntry, Lock


def _sha(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def tree_digest(entries: Iterable[FileEntry]) -> str:
    rows = sorted(entries, key=lambda e: e.path)
    return _sha(f"{e.path}\t{e.sha256}\t{e.size}\t{e.kind}\n" for e in rows)


def _line(*fields: object) -> str:
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")) + "\n"


def lock_digest(lock: Lock) -> str:
    """The digest a lock must record in ``tool.envlock.digest`` (its ``digest`` field is ignored)."""
    lines = [
        _line("python", lock.interpreter.version),
        _line("venv", lock.venv),
    ]
    lines += sorted(_line("pyvenv", key, str(value)) for key, value in lock.pyvenv.items())
    for pkg in lock.packages:
        lines.append(
            _line("package", pkg.name, pkg.version, pkg.tree_digest, pkg.wheel.filename, pkg.wheel.sha256)
        )
        lines += [_line("script", pkg.name, rel, sha) for rel, sha in pkg.scripts.items()]
        if pkg.source_tree is not None:
            tree = pkg.source_tree
            lines.append(_line("source-tree", pkg.name, tree.path, tree.sha256))
    return _sha(sorted(lines))


def digest_problem(lock: Lock) -> str | None:
    """Why the lock's recorded digest cannot be trusted, or None when it matches its contents."""
    if lock.digest_rules != DIGEST_RULES:
        return (
            f"tool.envlock.digest-rules is {lock.digest_rules!r}; this envlock checks {DIGEST_RULES!r} "
            "(capture or lock it again with this envlock)"
        )
    if lock_digest(lock) != lock.digest:
        return (
            "tool.envlock.digest does not match its packages, scripts, source trees or pyvenv facts "
            "(edited by hand? capture or lock it again)"
        )
    return None


def check_lock_digest(lock: Lock, shown: str) -> None:
    """Refuse a lock whose digest does not cover what it says (``LockError`` naming the file)."""
    problem = digest_problem(lock)
    if problem is not None:
        raise LockError(f"{shown}: {problem}")
