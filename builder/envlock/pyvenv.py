"""``pyvenv.cfg``: the one venv file that apply writes from the lock.

Venv creators write it with the path they were given, which for apply is the
staging directory; and the lock must say which interpreter a target's venv
is built on. So the lock records pyvenv.cfg's keys in file order, re-pointed
for the target (its interpreter, its venv path), and apply writes exactly
these lines. Capturing the applied venv reads them back unchanged.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping

# Keys that name the interpreter; derived for a target, never copied.
_INTERPRETER_KEYS = ("home", "executable", "command", "version", "version_info")


def derive_target_pyvenv(
    reference: Mapping[str, str],
    *,
    reference_venv: str,
    venv: str,
    python: str | None,
    python_realpath: str | None,
    version: str,
) -> dict[str, str]:
    """The target's pyvenv.cfg from the reference's, for the interpreter at ``python``.

    ``python`` None (an offline lock from a ``[target]`` table): no ``home``,
    ``executable`` or ``command``; apply fills ``home`` from the interpreter
    it finds.
    """
    out: dict[str, str] = {}
    if python is not None:
        out["home"] = posixpath.dirname(python)
    for key, value in reference.items():
        if key == "home":
            continue
        if key in ("version", "version_info"):
            out[key] = version
        elif key == "executable":
            if python_realpath is not None:
                out[key] = python_realpath
        elif key == "command":
            if python is not None:
                out[key] = _repoint_command(value, reference_venv, venv, python)
        else:
            out[key] = value
    if "uv" not in reference and python is not None:
        _as_python_m_venv_writes(out, venv, python, python_realpath or python, version)
    return out


def _as_python_m_venv_writes(
    out: dict[str, str], venv: str, python: str, realpath: str, version: str
) -> None:
    """``executable`` and ``command`` exist from Python 3.11 on: add or drop them
    as the target's own ``python -m venv`` would (a 3.8 reference has neither)."""
    major, minor = (int(p) for p in version.split(".")[:2])
    if (major, minor) >= (3, 11):
        out.setdefault("executable", realpath)
        out.setdefault("command", f"{python} -m venv {venv}")
    else:
        out.pop("executable", None)
        out.pop("command", None)


def _repoint_command(command: str, reference_venv: str, venv: str, python: str) -> str:
    """``/ref/python3.11 -m venv /opt/ref`` -> ``/tgt/python3.12 -m venv /opt/tgt``."""
    _exe, sep, rest = command.partition(" -m venv ")
    if not sep:
        return command
    if rest == reference_venv or rest.endswith(" " + reference_venv):
        rest = rest[: len(rest) - len(reference_venv)] + venv
    return f"{python} -m venv {rest}"


def with_home(pyvenv: Mapping[str, str], python: str) -> dict[str, str]:
    """An offline lock's pyvenv, completed with the interpreter apply found."""
    if pyvenv.get("home"):
        return dict(pyvenv)
    return {"home": posixpath.dirname(python), **pyvenv}


def render_pyvenv(pyvenv: Mapping[str, str]) -> bytes:
    """The file's bytes, as ``python -m venv`` and ``uv venv`` write it: ``key = value`` lines."""
    return "".join(f"{key} = {value}\n" for key, value in pyvenv.items()).encode("utf-8")


def interpreter_paths(pyvenv: Mapping[str, str], version: str) -> list[str]:
    """Where a lock says its interpreter is: ``executable``, then ``home``/pythonX.Y."""
    minor = ".".join(version.split(".")[:2])
    paths = []
    if pyvenv.get("executable"):
        paths.append(pyvenv["executable"])
    if pyvenv.get("home"):
        paths.append(os.path.join(pyvenv["home"], f"python{minor}"))
    return paths
