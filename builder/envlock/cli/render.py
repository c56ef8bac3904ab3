"""Terminal rendering: progress bars, tables, sizes, and the JSON envelope."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

SCHEMA_VERSION = 1


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
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
    return json.dumps(
        {"schema_version": SCHEMA_VERSION, "command": command, "ok": ok, **payload},
        indent=2,
        sort_keys=True,
    )


class ProgressBar:
    """A one-line bar on stderr, redrawn at most 10 times a second; silent when not a TTY."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def update(self, done: int, total: int, detail: str = "") -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        width = 30
        frac = done / total if total else 1.0
        filled = int(width * frac)
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0
        bar = "━" * filled + "╺" + " " * (width - filled - 1) if filled < width else "━" * width
        text = f"\r{self.label:<8} {bar} {human_size(done)}/{human_size(total)} {human_size(rate)}/s {detail}"
        self.stream.write(text[:120].ljust(80))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()
