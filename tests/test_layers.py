"""Import rules read from the source: rendering runs downward, binary/ stays agent-safe."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "builder" / "envlock"


def imported_modules(path: Path) -> set[str]:
    """Absolute module names a file imports (``from x import y`` counts as ``x`` and ``x.y``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_only_cli_imports_cli() -> None:
    """cli/ sits on top: review/ and the commands share envlock.render, never cli."""
    upward = {
        str(path.relative_to(PACKAGE)): sorted(
            n for n in imported_modules(path) if n.startswith("envlock.cli")
        )
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ("cli", "__main__.py")
    }
    assert {path: names for path, names in upward.items() if names} == {}


def test_binary_needs_no_third_party_package() -> None:
    """binary/ runs in the agent on a bare Python 3.8: stdlib, pyelftools and itself only
    (the fatbin codecs live on the controller, in envlock.fatbin_codecs)."""
    allowed = set(sys.stdlib_module_names) | {"elftools", "envlock"}
    outside = {
        str(path.relative_to(PACKAGE)): sorted(
            n
            for n in imported_modules(path)
            if n.split(".")[0] not in allowed
            or (n.startswith("envlock.") and not n.startswith("envlock.binary"))
        )
        for path in (PACKAGE / "binary").glob("*.py")
    }
    assert {path: names for path, names in outside.items() if names} == {}
