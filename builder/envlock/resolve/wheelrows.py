"""Predict the manifest rows a wheel installs, without installing it.

A target lock must say which bytes apply will find, for packages whose
artifact differs from the reference's. The rows follow the installer's
layout for a venv: root and ``.data/purelib|platlib`` into site-packages,
``.data/scripts`` into bin/ (``#!python`` rewritten by the installer, so the
normalised hash is the wheel's own), ``.data/data`` to the venv root,
``.data/headers`` to ``include/site/pythonX.Y/<dist>/``. Entry points are
generated here from a fixed template and their bytes kept as blobs, so apply
writes exactly these bytes whatever installer runs on the host.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from envlock.abi import Exports
from envlock.agent.layout import is_bookkeeping, is_library_name, unshebang
from envlock.binary.elf import ElfError, is_elf, read_elf_facts, read_link_facts
from envlock.capture.files import native_lib, top_level_names
from envlock.lock.model import FileEntry, NativeLib

ENTRY_POINT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import {import_name}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({call}())
"""


@dataclass(frozen=True, slots=True)
class WheelLayout:
    rows: tuple[FileEntry, ...]
    native: tuple[NativeLib, ...]
    scripts: dict[str, bytes]  # bin/<name> -> exact bytes envlock writes
    top_level: tuple[str, ...]
    requires_dist: tuple[str, ...]
    requires_python: str | None
    wheel_tags: tuple[str, ...]
    exports: tuple[Exports, ...] = ()  # with ``exports=True`` only: ABI facts (envlock.abi)


def entry_point_script(venv: str, spec: str) -> bytes:
    """``pkg.mod:obj.attr`` -> the script bytes, with the interpreter of ``venv``."""
    module, _, attr = spec.partition(":")
    attr = attr.strip() or "main"
    head = attr.split(".")[0]
    return ENTRY_POINT.format(
        python=f"{venv}/bin/python", module=module.strip(), import_name=head, call=attr
    ).encode()


def wheel_layout(path: Path, owner: str, venv: str, python_mm: str, exports: bool = False) -> WheelLayout:
    """The rows, native facts, scripts and metadata a wheel installs; ``exports``: also
    each library's exported symbols (what a kept extension may take from it)."""
    rows: list[FileEntry] = []
    native: list[NativeLib] = []
    exported: list[Exports] = []
    scripts: dict[str, bytes] = {}
    with zipfile.ZipFile(path) as archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        dist_info = next(
            i.filename.split("/")[0] for i in infos if i.filename.split("/")[0].endswith(".dist-info")
        )
        dist_name = dist_info[: -len(".dist-info")].rsplit("-", 1)[0]
        for info in infos:
            data = archive.read(info)
            executable = bool((info.external_attr >> 16) & 0o111)
            target = _target_path(info.filename, dist_name, python_mm)
            if target is None or is_bookkeeping(target):
                continue
            if target.startswith("bin/"):
                data = unshebang(data)
                executable = True
            sha = hashlib.sha256(data).hexdigest()
            rows.append(
                FileEntry(
                    owner=owner, path=target, sha256=sha, size=len(data), kind="x" if executable else "f"
                )
            )
            if is_library_name(target) and is_elf(data[:4]):
                native.append(_native(target, sha, data))
                if exports:
                    exported.extend(_exports(target, data))
        metadata = archive.read(f"{dist_info}/METADATA").decode("utf-8")
        wheel_text = archive.read(f"{dist_info}/WHEEL").decode("utf-8")
        entry_points = _read_optional(archive, f"{dist_info}/entry_points.txt")
        top_level_text = _read_optional(archive, f"{dist_info}/top_level.txt")
    for name, spec in _console_scripts(entry_points):
        data = entry_point_script(venv, spec)
        scripts[f"bin/{name}"] = data
        plain = unshebang(data)
        rows.append(
            FileEntry(
                owner=owner,
                path=f"bin/{name}",
                sha256=hashlib.sha256(plain).hexdigest(),
                size=len(plain),
                kind="x",
            )
        )
    message = HeaderParser().parsestr(metadata)
    tags = tuple(
        sorted(line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:"))
    )
    listed = top_level_text.splitlines() if top_level_text else None
    top = top_level_names(listed, rows)
    return WheelLayout(
        rows=tuple(rows),
        native=tuple(native),
        scripts=scripts,
        top_level=top,
        requires_dist=tuple(v.strip() for v in message.get_all("Requires-Dist") or []),
        requires_python=(message.get("Requires-Python") or "").strip() or None,
        wheel_tags=tags,
        exports=tuple(exported),
    )


def _exports(path: str, data: bytes) -> list[Exports]:
    try:
        facts = read_link_facts(io.BytesIO(data), symbol_versions=True)
    except ElfError:
        return []  # unreadable: it provides nothing, and its native facts say why
    return [
        Exports(
            path=path,
            exported=facts.exported,
            versioned=facts.exported_versioned,
            undefined=frozenset(facts.undefined_versioned),
        )
    ]


def _native(path: str, sha: str, data: bytes) -> NativeLib:
    try:
        facts = read_elf_facts(io.BytesIO(data))
    except ElfError as exc:
        facts = {"error": str(exc)}
    return native_lib(path, sha, facts)


def _target_path(member: str, dist_name: str, python_mm: str) -> str | None:
    head, _, rest = member.partition("/")
    if head.endswith(".data"):
        scheme, _, inner = rest.partition("/")
        if scheme in ("purelib", "platlib"):
            return f"site-packages/{inner}"
        if scheme == "scripts":
            return f"bin/{inner}"
        if scheme == "data":
            return inner
        if scheme == "headers":
            return f"include/site/python{python_mm}/{dist_name}/{inner}"
        return None
    return f"site-packages/{member}"


def _read_optional(archive: zipfile.ZipFile, name: str) -> str | None:
    try:
        return archive.read(name).decode("utf-8")
    except KeyError:
        return None


def _console_scripts(text: str | None) -> list[tuple[str, str]]:
    if not text:
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read_string(text)
    found = []
    for section in ("console_scripts", "gui_scripts"):
        if parser.has_section(section):
            found += [(name, spec) for name, spec in parser.items(section)]
    return sorted(found)
