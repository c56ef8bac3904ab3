"""Parsed TOML remembered per file content, so a warm command imports no TOML parser.

A warm ``envlock lock`` reads one small profile; importing ``tomllib`` (with
``datetime`` and its regular expressions) and parsing cost more than the
rest of reading it. The parsed tables are kept as JSON under
``~/.cache/envlock/toml``, one entry per file path, valid only for the exact
bytes they were parsed from (their sha256 is in the entry). Callers validate
what comes back exactly as they validate a fresh parse: the memo replaces
the parser, never the checks.

Only tables that JSON gives back unchanged are kept (no dates or times).
An entry that is not ours, not in a private directory, not valid JSON or
for other bytes is ignored, never trusted. Written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any

from envlock.tmpname import private_sibling_path


def _root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envlock", "toml")


def _entry(path: str) -> str:
    return os.path.join(_root(), hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:32] + ".json")


def _private(st: os.stat_result, kind: int) -> bool:
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0


def remembered(path: str, text: str) -> dict[str, Any] | None:
    """The tables last parsed from ``path`` when it held ``text``; None when there are none to trust."""
    entry = _entry(path)
    try:
        if not _private(os.lstat(_root()), stat.S_IFDIR):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as stream:
            if not _private(os.fstat(stream.fileno()), stat.S_IFREG):
                return None
            memo = json.loads(stream.read())
    except (OSError, ValueError):
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()
    if not isinstance(memo, dict) or memo.get("sha256") != digest or not isinstance(memo.get("tables"), dict):
        return None
    tables: dict[str, Any] = memo["tables"]
    return tables


def remember(path: str, text: str, tables: dict[str, Any]) -> None:
    """Keep ``tables`` (parsed from ``text``) for the next run, when JSON holds them exactly."""
    try:
        encoded = json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "tables": tables})
    except (TypeError, ValueError):
        return  # a date or time: not representable, parse it every time
    if json.loads(encoded)["tables"] != tables:
        return
    root, entry = _root(), _entry(path)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        if not _private(os.lstat(root), stat.S_IFDIR):
            return
        tmp = private_sibling_path(entry)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(encoded)
        os.replace(tmp, entry)
    except OSError:
        pass  # only a slower next run
