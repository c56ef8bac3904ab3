"""Names for the temporary file beside a file being written atomically (write, then rename).

A fleet runs several hosts' work in threads of one process, and two of them
may write the same store object or cache file at once: a name keyed by the
process id alone would be shared, so one thread would truncate, rename or
delete the other's half-written file. The thread id makes it private.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path  # annotations only: os.path callers (inspect) never import pathlib


def private_sibling(path: Path, suffix: str = ".tmp") -> Path:
    """``.NAME.<pid>-<thread>SUFFIX`` beside ``path``: no other writer uses it at the same time.

    The leading dot keeps it out of listings that skip partial writes (gc, the store)."""
    return path.with_name(_private_name(path.name, suffix))


def private_sibling_path(path: str, suffix: str = ".tmp") -> str:
    """``private_sibling`` for an ``os.path`` string."""
    head, name = os.path.split(path)
    return os.path.join(head, _private_name(name, suffix))


def _private_name(name: str, suffix: str) -> str:
    return f".{name}.{os.getpid()}-{threading.get_native_id()}{suffix}"
