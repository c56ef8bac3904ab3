"""Names for the temporary file beside a file being written atomically (write, then rename).

A fleet runs several hosts' work in threads of one process, and two of them
may write the same store object or cache file at once: a name keyed by the
process id alone would be shared, so one thread would truncate, rename or
delete the other's half-written file. The thread id makes it private.

The name also carries random characters, and ``create_exclusive`` opens it
with ``O_EXCL | O_NOFOLLOW``: a store may be a directory other people write
to (a shared NFS store, a cache), and a name they can predict is a name they
can plant a symlink at, so that ``open(tmp, "wb")`` would truncate and
overwrite the file it points at (docs/testing.md, red-team notes).
"""

from __future__ import annotations

import os
import threading
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path  # annotations only: os.path callers (inspect) never import pathlib


def private_sibling(path: Path, suffix: str = ".tmp") -> Path:
    """``.NAME.<pid>-<thread>-<random>SUFFIX`` beside ``path``: no other writer uses it at the same time.

    The leading dot keeps it out of listings that skip partial writes (gc, the store)."""
    return path.with_name(_private_name(path.name, suffix))


def private_sibling_path(path: str, suffix: str = ".tmp") -> str:
    """``private_sibling`` for an ``os.path`` string."""
    head, name = os.path.split(path)
    return os.path.join(head, _private_name(name, suffix))


def _private_name(name: str, suffix: str) -> str:
    token = os.urandom(4).hex()  # not ``secrets``: its imports cost start-up, the bytes are the same
    return f".{name}.{os.getpid()}-{threading.get_native_id()}-{token}{suffix}"


def create_exclusive(path: Path | str, mode: int = 0o644) -> IO[bytes]:
    """A new file at ``path`` opened for writing; refused (``FileExistsError``) when anything,
    a symlink included, is already there. For temporary names in directories others can write."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(path, flags, mode), "wb")
