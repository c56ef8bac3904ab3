"""Text helpers every renderer shares: sizes, aligned tables and the JSON envelope.

Pure string formatting, below both ``cli/`` (which prints) and ``review/``
(whose renderers return text), so neither imports the other for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# The versioned JSON envelope every command's --format json shares.
SCHEMA_VERSION = 1


def human_size(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as disk tools show them)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell, a rule under the headers; ``right`` aligns columns right."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()

    rule = "  ".join("─" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def envelope(command: str, ok: bool, payload: dict[str, Any]) -> str:
    """A command's JSON output: ``schema_version``, ``command``, ``ok`` and its payload."""
    return json.dumps(
        {"schema_version": SCHEMA_VERSION, "command": command, "ok": ok, **payload},
        indent=2,
        sort_keys=True,
    )
