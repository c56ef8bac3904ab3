"""Damaged bytecode: a ``.pyc`` that the interpreter would load and fail on.

A ``.pyc`` is derived, so the lock does not record it, but the interpreter
trusts one whose header matches its source: a file truncated by a full disk
(``importlib`` writes it with one unchecked ``write``) then breaks every
import of its module. A file is damaged when it names this interpreter's
cache tag and its header or its marshalled code cannot be read back. Files
for other interpreters (another cache tag) are never loaded here and are
left alone.

Loading every ``.pyc`` costs seconds on a large venv (13,000 files, 224 MB:
about 4 s), so the stat keys of the files found sound are remembered
(``~/.cache/envlock/agent/bytecode-<venv key>.json``): a later check loads
only files that are new or changed since. A write to a file changes its
ctime, so a file damaged after the check is never taken for the one checked.
When every file was sound, the fingerprint of all their keys
(``envlock.agent.treescan``) is remembered beside it (``.sum``): a later
check whose files have that very fingerprint has nothing new to load and
skips reading the 13,000 remembered keys back.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import sys
from typing import Dict, List, Optional, Tuple

from envlock.agent.snapshot import default_cache_path
from envlock.agent.treescan import StatKey, digest_lines, key_line, scan

HEADER = 16  # magic, flags, source mtime or hash, source size (PEP 552)


def damaged_bytecode(
    venv: str, remember: bool = True, found: Optional[List[Tuple[str, StatKey]]] = None
) -> List[Tuple[str, str]]:
    """``(path relative to venv, why)`` of every damaged ``.pyc`` for this interpreter.

    ``found``: the ``.pyc`` files and their stat keys, when a walk of the venv
    already listed them (``treescan.scan``).
    """
    tag = sys.implementation.cache_tag
    if tag is None:
        return []
    if found is None:
        found = scan(venv, ".%s.pyc" % tag).bytecode
    memo_path = _memo_path(venv) if remember else None
    everything = _fingerprint(found)
    if memo_path is not None and _read_sum(memo_path) == everything:
        return []  # exactly the files all found sound last time, none written since
    checked = _load(memo_path)
    sound: Dict[str, List[int]] = {}
    damaged = []
    for rel, key in found:
        why = None if checked.get(rel) == key else pyc_problem(os.path.join(venv, rel))
        if why is None:
            sound[rel] = key
        else:
            damaged.append((rel, why))
    if memo_path is not None:
        if sound != checked:
            _save(memo_path, sound)
        _save_sum(memo_path, None if damaged else everything)
    return sorted(damaged)


def _fingerprint(found: List[Tuple[str, StatKey]]) -> str:
    return digest_lines([key_line(rel, key) for rel, key in found])


def _read_sum(memo_path: str) -> Optional[str]:
    try:
        with open(memo_path + ".sum") as stream:
            return stream.read().strip()
    except (OSError, ValueError):  # ValueError: not text (a damaged file); no sum then
        return None


def _save_sum(memo_path: str, fingerprint: Optional[str]) -> None:
    """Best effort, like the memo; written after it, and removed while any file is damaged."""
    path = memo_path + ".sum"
    try:
        if fingerprint is None:
            if os.path.lexists(path):
                os.unlink(path)
            return
        if _read_sum(memo_path) == fingerprint:
            return
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as out:
            out.write(fingerprint + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def _memo_path(venv: str) -> Optional[str]:
    stat_cache = default_cache_path(venv)
    if stat_cache is None:
        return None
    return os.path.join(
        os.path.dirname(stat_cache), os.path.basename(stat_cache).replace("stat-", "bytecode-", 1)
    )


def _load(path: Optional[str]) -> Dict[str, List[int]]:
    if path is None:
        return {}
    try:
        with open(path) as stream:
            data = json.load(stream)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: str, sound: Dict[str, List[int]]) -> None:
    """Best effort: a memo that cannot be written only costs the next check its shortcut."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as out:
            json.dump(sound, out)
        os.replace(tmp, path)
    except OSError:
        pass


def pyc_problem(path: str) -> Optional[str]:
    """Why the interpreter could not load ``path``; None when it could."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        return "unreadable: %s" % exc.strerror
    if len(data) < HEADER:
        return "truncated: %d bytes, shorter than the header" % len(data)
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return "bad magic number for this interpreter"
    try:
        marshal.loads(data[HEADER:])
    except (EOFError, ValueError, TypeError) as exc:
        return "truncated or corrupt code (%s)" % exc
    return None
