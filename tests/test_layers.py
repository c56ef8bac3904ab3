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


# The use cases behind the commands (docs/design.md, "Module map"). Each imports
# shared modules (lock/, changes, drift, smokereport, capture's snapshot engine,
# inspect's CUDA engine, transport, store, ...), never another use case.
USE_CASES = {
    "envlock.apply": "apply.py",
    "envlock.verify": "verify.py",
    "envlock.smoke": "smoke.py",
    "envlock.diff": "diff.py",
    "envlock.export": "export.py",
    "envlock.review": "review",
    "envlock.resolve": "resolve",
    "envlock.gc": "gc.py",
    "envlock.build": "build",
    "envlock.publish": "publish",
}


def _files(rel: str) -> list[Path]:
    path = PACKAGE / rel
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def test_use_cases_never_import_each_other() -> None:
    sideways = {}
    for module, rel in USE_CASES.items():
        others = [m for m in USE_CASES if m != module]
        for path in _files(rel):
            hits = sorted(
                n for n in imported_modules(path) if any(n == o or n.startswith(o + ".") for o in others)
            )
            if hits:
                sideways[str(path.relative_to(PACKAGE))] = hits
    assert sideways == {}


def test_cli_commands_never_import_each_other() -> None:
    commands = {p.stem for p in (PACKAGE / "cli").glob("*_cmd.py")}
    sideways = {
        path.name: sorted(n for n in imported_modules(path) if n.split(".")[-1] in commands - {path.stem})
        for path in (PACKAGE / "cli").glob("*_cmd.py")
    }
    assert {k: v for k, v in sideways.items() if v} == {}


def test_the_agent_imports_nothing_from_the_controller() -> None:
    """The agent runs in the host venv's own Python: envlock.agent and envlock.binary only."""
    outside = {
        str(path.relative_to(PACKAGE)): sorted(
            n
            for n in imported_modules(path)
            if n.startswith("envlock.") and not n.startswith(("envlock.agent", "envlock.binary"))
        )
        for path in (PACKAGE / "agent").glob("*.py")
    }
    assert {k: v for k, v in outside.items() if v} == {}


# The agent's pure modules (no I/O at import, no ctypes or fcntl): its rules and its
# wire protocol (typed messages), what both sides must agree on. Controller-only
# code lives outside agent/.
AGENT_RULES = {"layout", "pathguard", "venvguard", "steps", "protocol"}


def test_the_controller_imports_only_the_agents_rule_modules() -> None:
    agent_modules = {p.stem for p in (PACKAGE / "agent").glob("*.py")} - {"__init__"}

    def reaches(name: str) -> bool:
        parts = name.split(".")
        return (
            parts[:2] == ["envlock", "agent"] and len(parts) > 2 and parts[2] in agent_modules - AGENT_RULES
        )

    reaching = {
        str(path.relative_to(PACKAGE)): sorted(n for n in imported_modules(path) if reaches(n))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "agent"
    }
    assert {k: v for k, v in reaching.items() if v} == {}
