"""What in a venv is payload, what is installer bookkeeping, what is scaffold.

One definition for both sides: capture (controller) builds the manifest with
it, apply (agent, on the host) verifies a staged venv with it.
"""

from __future__ import annotations

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
