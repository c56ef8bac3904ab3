"""What in a venv is payload, what is installer bookkeeping, what is scaffold.

One definition for both sides: capture (controller) builds the manifest with
it, apply (agent, on the host) verifies a staged venv with it.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Set

# Written by installers into a .dist-info; excluded from digests.
BOOKKEEPING = frozenset({"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"})

# Written by venv creators (python -m venv, uv venv, virtualenv), not by any wheel.
SCAFFOLD = (
    "pyvenv.cfg",
    "lib64",
    ".lock",
    ".gitignore",
    "CACHEDIR.TAG",
    "bin/python",
    "bin/activate",
    "bin/Activate.ps1",
    "bin/deactivate",
    "bin/pydoc",
)
_SCAFFOLD_EXACT = frozenset(SCAFFOLD[:5])
_SCAFFOLD_PREFIXES = SCAFFOLD[5:]


def is_scaffold(rel: str) -> bool:
    """``rel`` is relative to the venv root, POSIX style."""
    return rel in _SCAFFOLD_EXACT or rel.startswith(_SCAFFOLD_PREFIXES)


def is_bookkeeping(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] in BOOKKEEPING


def is_bytecode(rel: str) -> bool:
    return rel.endswith(".pyc") or "/__pycache__/" in "/" + rel


_SHEBANG = re.compile(rb"^#!.*?/bin/python[0-9.]*[ \t]*(\r?\n)")


def unshebang(data: bytes) -> bytes:
    """``#!/venv/bin/python3`` -> ``#!python``, which installers rewrite for the target."""
    return _SHEBANG.sub(lambda m: b"#!python" + m.group(1), data, count=1)


def relocate(data: bytes, old: str, new: str) -> bytes:
    """Point a script's interpreter line at venv ``new`` instead of ``old``."""
    head, tail = data[:512], data[512:]
    return head.replace(old.encode() + b"/bin/", new.encode() + b"/bin/") + tail


def is_library_name(name: str) -> bool:
    """A shared library's file name (``libx.so``, ``libx.so.1``, ``_ext.cpython-311-x86_64-linux-gnu.so``)."""
    return name.endswith(".so") or ".so." in name


def import_names(site_paths: Iterable[str]) -> List[str]:
    """Top-level import names from paths relative to site-packages (for dists without top_level.txt)."""
    names: Set[str] = set()
    for path in site_paths:
        parts = path.split("/")
        head = parts[0]
        if head in ("", "..", "__pycache__") or head.startswith("."):
            continue
        if head.endswith((".dist-info", ".data", ".pth", ".egg-info")):
            continue
        if len(parts) == 1:
            if head.endswith(".py"):
                names.add(head[:-3])
            elif head.endswith(".so"):
                names.add(head.split(".", 1)[0])
        else:
            names.add(head)
    return sorted(n for n in names if n.isidentifier())
