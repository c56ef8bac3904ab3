"""Text helpers every renderer shares: sizes, aligned tables and the JSON envelope.

Pure string formatting, below both ``cli/`` (which prints) and ``review/``
(whose renderers return text), so neither imports the other for it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any, TextIO

# The versioned JSON envelope every command's --format json shares (docs/json.md,
# docs/envelope.schema.json). 2: review's keys moved under "result", errors are
# {"message", "code"} objects, and "ok" is false on findings (exit 1) as on errors.
SCHEMA_VERSION = 2

# Terminal styling: off unless the CLI turns it on for a terminal (see color_wanted).
_style = {"color": False}
_BOLD, _RESET = "\033[1m", "\033[0m"


def color_wanted(stream: TextIO, no_color: bool = False) -> bool:
    """Style ``stream``? Only a terminal, and never with --no-color, NO_COLOR (no-color.org) or TERM=dumb."""
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def set_color(enabled: bool) -> None:
    _style["color"] = enabled


def bold(text: str) -> str:
    return f"{_BOLD}{text}{_RESET}" if _style["color"] and text else text


def error_code(exc: Exception) -> str:
    """A stable slug for an error's kind: ``ProfileError`` -> ``profile``, ``IndexError_`` -> ``index``."""
    name = type(exc).__name__.rstrip("_")
    name = name.removesuffix("Error") or "error"
    if name == "Envlock":
        return "error"
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def plural(n: int, word: str, many: str | None = None) -> str:
    """``plural(1, "check")`` -> ``"1 check"``, ``plural(0, "library", "libraries")`` -> ``"0 libraries"``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


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
    return "\n".join([bold(line(headers)), rule, *(line(r) for r in rows)])


def envelope(command: str, ok: bool, payload: dict[str, Any]) -> str:
    """A command's JSON output: ``schema_version``, ``command``, ``ok`` and its payload."""
    return json.dumps(
        {"schema_version": SCHEMA_VERSION, "command": command, "ok": ok, **payload},
        indent=2,
        sort_keys=True,
    )
