"""The terminal progress bar for long transfers (stderr, only on a TTY)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from envlock.render import human_size


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
