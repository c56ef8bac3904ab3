"""Damaged bytecode: a ``.pyc`` that the interpreter would load and fail on.

A ``.pyc`` is derived, so the lock does not record it, but the interpreter
trusts one whose header matches its source: a file truncated by a full disk
(``importlib`` writes it with one unchecked ``write``) then breaks every
import of its module. A file is damaged when it names this interpreter's
cache tag and its header or its marshalled code cannot be read back. Files
for other interpreters (another cache tag) are never loaded here and are
left alone.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from typing import List, Optional, Tuple

HEADER = 16  # magic, flags, source mtime or hash, source size (PEP 552)


def damaged_bytecode(venv: str) -> List[Tuple[str, str]]:
    """``(path relative to venv, why)`` of every damaged ``.pyc`` for this interpreter."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return []
    suffix = ".%s.pyc" % tag
    found = []
    for top, dirs, files in os.walk(venv):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        if os.path.basename(top) != "__pycache__":
            continue
        for name in files:
            if name.endswith(suffix):
                path = os.path.join(top, name)
                why = pyc_problem(path)
                if why is not None:
                    found.append((os.path.relpath(path, venv), why))
    return sorted(found)


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
