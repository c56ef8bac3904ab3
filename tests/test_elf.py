"""binary/elf.py reads ELF with struct; pyelftools, which it replaced on the hot path, is the oracle.

Real files only: this interpreter's extension modules and the system's C
and C++ runtime libraries, compared field by field with what pyelftools
reads from the same bytes.
"""

from __future__ import annotations

import glob
import importlib
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from envlock.binary.elf import ElfError, highest_versions, read_elf_facts, read_link_facts

# pyelftools is untyped: reached through importlib, as test_fatbin does
_elffile: Any = importlib.import_module("elftools.elf.elffile")
_dynamic: Any = importlib.import_module("elftools.elf.dynamic")
_versions: Any = importlib.import_module("elftools.elf.gnuversions")


def _libraries() -> list[Path]:
    found = sorted(Path(sysconfig.get_config_var("DESTSHARED")).glob("*.so"))
    for pattern in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6*"):
        found += [Path(p).resolve() for p in glob.glob(pattern)]
    return sorted(set(found))


def _oracle(path: Path) -> dict[str, Any]:
    with open(path, "rb") as stream:
        elf = _elffile.ELFFile(stream)
        facts: dict[str, Any] = {"needed": [], "rpath": [], "runpath": [], "soname": None}
        needs: dict[str, tuple[str, ...]] = {}
        defs: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, _dynamic.DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        facts["needed"].append(tag.needed)
                    elif kind == "DT_SONAME":
                        facts["soname"] = tag.soname
                    elif kind in ("DT_RPATH", "DT_RUNPATH"):
                        value = tag.rpath if kind == "DT_RPATH" else tag.runpath
                        facts[kind[3:].lower()].extend(p for p in value.split(":") if p)
            elif isinstance(section, _versions.GNUVerNeedSection):
                for verneed, auxiliaries in section.iter_versions():
                    needs[verneed.name] = needs.get(verneed.name, ()) + tuple(a.name for a in auxiliaries)
            elif isinstance(section, _versions.GNUVerDefSection):
                for _verdef, auxiliaries in section.iter_versions():
                    defs.extend(a.name for a in auxiliaries)
        facts.update(machine=elf["e_machine"], type=elf["e_type"], version_needs=needs, version_defs=defs)
        return facts


def test_link_facts_match_pyelftools_on_real_libraries() -> None:
    libraries = _libraries()
    assert len(libraries) > 30, libraries  # the interpreter's extension modules, libc, libstdc++
    checked = {"needed": 0, "version_defs": 0, "runpath_or_rpath": 0}
    for path in libraries:
        theirs = _oracle(path)
        with open(path, "rb") as stream:
            ours = read_link_facts(stream)
            stream.seek(0)
            summary = read_elf_facts(stream)
        assert (ours.machine, ours.type, ours.soname) == (theirs["machine"], theirs["type"], theirs["soname"])
        assert list(ours.needed) == theirs["needed"], path
        assert (list(ours.rpath), list(ours.runpath)) == (theirs["rpath"], theirs["runpath"]), path
        assert ours.version_needs == theirs["version_needs"], path
        assert list(ours.version_defs) == theirs["version_defs"], path
        flat = [name for names in theirs["version_needs"].values() for name in names]
        assert summary["version_needs"] == highest_versions(flat), path
        assert (summary["needed"], summary["soname"], summary["machine"]) == (
            theirs["needed"],
            theirs["soname"],
            theirs["machine"],
        )
        checked["needed"] += bool(ours.needed)
        checked["version_defs"] += bool(ours.version_defs)
        checked["runpath_or_rpath"] += bool(ours.rpath or ours.runpath)
    # the comparison covered every kind of fact, not just empty ones
    assert checked["needed"] > 10 and checked["version_defs"] >= 1, checked


@pytest.mark.parametrize("cut", [20, 64, 4096])
def test_a_truncated_library_is_an_elf_error(tmp_path: Path, cut: int) -> None:
    data = Path(sorted(_libraries())[0]).read_bytes()
    damaged = tmp_path / "cut.so"
    damaged.write_bytes(data[:cut])
    for read in (read_link_facts, read_elf_facts):
        with open(damaged, "rb") as stream, pytest.raises(ElfError):
            read(stream)


_EXPORTING = ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS")


def _oracle_symbols(path: Path) -> tuple[frozenset[str], tuple[str, ...]]:
    """(exported, strong undefined) from ``.dynsym`` through pyelftools' symbol objects."""
    with open(path, "rb") as stream:
        elf = _elffile.ELFFile(stream)
        table = elf.get_section_by_name(".dynsym")
        exported: list[str] = []
        undefined: list[str] = []
        for symbol in table.iter_symbols() if table is not None else ():
            if not symbol.name:
                continue
            bind, kind = symbol["st_info"]["bind"], symbol["st_info"]["type"]
            if symbol["st_shndx"] == "SHN_UNDEF":
                if bind == "STB_GLOBAL":
                    undefined.append(symbol.name)
            elif (
                bind in _EXPORTING
                and symbol["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED")
                and kind not in ("STT_SECTION", "STT_FILE")
            ):
                exported.append(symbol.name)
        return frozenset(exported), tuple(undefined)


def test_dynamic_symbols_match_pyelftools() -> None:
    """libc (thousands of exports, versioned) and a few extension modules (undefined names)."""
    libraries = [p for p in _libraries() if p.name.startswith("libc.so")] + _libraries()[:6]
    assert any(p.name.startswith("libc.so") for p in libraries)
    sizes = []
    for path in libraries:
        with open(path, "rb") as stream:
            ours = read_link_facts(stream)
        exported, undefined = _oracle_symbols(path)
        assert ours.exported == exported, path
        assert ours.undefined == undefined, path
        sizes.append((len(exported), len(undefined)))
    assert sizes[0][0] > 1000 and any(n for _e, n in sizes[1:]), sizes  # libc exports; extensions import
