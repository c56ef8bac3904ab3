"""One walk of a venv for the no-op check: a stat fingerprint and this interpreter's bytecode.

The no-op check (``envlock.agent.stamp``) and the damaged-bytecode check
(``envlock.agent.bytecode``) both need every file's stat key; one
``scandir`` walk gives them both (two walks cost twice the directory reads
and Python loop). The payload's keys are folded into one sha256, the
*fingerprint*: comparing it with the one the stamp recorded after the swap
is the same test as comparing every key, without parsing 22,000 recorded
keys back.

A stat key is (size, mtime, inode, ctime). Any write to a file's bytes sets
its ctime to now, and ctime cannot be set back by a user (only by changing
the system clock, which needs root, and root may change anything anyway);
replacing a file gives a new inode; adding, removing or renaming a file adds
or drops a line. So an unchanged fingerprint means no file was written,
added, removed or replaced since the stamp was taken.
"""

from __future__ import annotations

import hashlib
import os
from typing import List, Optional, Tuple

StatKey = List[int]


def key_of(st: os.stat_result) -> StatKey:
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


class Scan:
    """What one walk found: payload lines (files and symlinks, ``__pycache__`` aside), and the
    stat keys of the ``.pyc`` files named for ``suffix`` inside ``__pycache__`` directories."""

    def __init__(self) -> None:
        self.files: List[Tuple[str, StatKey]] = []
        self.links: List[Tuple[str, str]] = []
        self.bytecode: List[Tuple[str, StatKey]] = []

    def fingerprint(self) -> str:
        return digest_lines(
            ["f\0" + key_line(rel, key) for rel, key in self.files]
            + ["l\0%s\0%s" % (rel, target) for rel, target in self.links]
        )


def key_line(rel: str, key: StatKey) -> str:
    return "%s\0%d\0%d\0%d\0%d" % (rel, key[0], key[1], key[2], key[3])


def digest_lines(lines: List[str]) -> str:
    """sha256 of the sorted lines (walk order is not part of what is compared)."""
    lines.sort()
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def scan(venv: str, suffix: Optional[str]) -> Scan:
    """Walk ``venv`` once, not following symlinks; ``suffix``: ``.cpython-312.pyc`` (None: no bytecode)."""
    found = Scan()
    stack = [("", False)]  # (directory relative to venv, inside a __pycache__ tree)
    while stack:
        rel_dir, cached = stack.pop()
        with os.scandir(os.path.join(venv, rel_dir) if rel_dir else venv) as entries:
            for entry in entries:
                rel = rel_dir + "/" + entry.name if rel_dir else entry.name
                if entry.is_dir(follow_symlinks=False):
                    inside = cached or entry.name == "__pycache__"
                    if suffix is not None or not inside:
                        stack.append((rel, inside))
                elif cached:
                    in_pycache = os.path.basename(rel_dir) == "__pycache__"
                    if suffix is not None and in_pycache and entry.name.endswith(suffix):
                        found.bytecode.append((rel, key_of(entry.stat(follow_symlinks=False))))
                elif entry.is_symlink():
                    found.links.append((rel, os.readlink(entry.path)))
                elif entry.is_file(follow_symlinks=False):
                    found.files.append((rel, key_of(entry.stat(follow_symlinks=False))))
    return found
