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
from typing import Any

from envlock.privatecache import NotPrivate, private_dir, read_private, write_private


def _root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envlock", "toml")


def _entry(path: str) -> str:
    return os.path.join(_root(), hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:32] + ".json")


def remembered(path: str, text: str) -> dict[str, Any] | None:
    """The tables last parsed from ``path`` when it held ``text``; None when there are none to trust."""
    if not private_dir(_root()):
        return None
    try:
        data = read_private(_entry(path))
        if data is None:
            return None
        memo = json.loads(data)
    except (NotPrivate, ValueError):
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
    write_private(_root(), _entry(path), encoded.encode("utf-8"))
