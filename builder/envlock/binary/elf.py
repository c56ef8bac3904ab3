"""ELF facts of a shared library through pyelftools.

Only what deciding "will this load there" needs: SONAME, DT_NEEDED,
RPATH/RUNPATH, the highest versioned symbol needed from each family (GLIBC_,
GLIBCXX_, CXXABI_, ...), and which CUDA device-code sections are present.
Reading touches headers and small sections only, never the whole file.
"""

from __future__ import annotations

import re
from typing import IO, Any, Dict, List, Optional, Tuple

ELF_MAGIC = b"\x7fELF"
CUDA_SECTIONS = (".nv_fatbin", "__nv_relfatbin", ".nvFatBinSegment")
_VERSION_NAME = re.compile(r"^([A-Z_]+?)_(\d+(?:\.\d+)*)$")


class ElfError(Exception):
    """The file is not a readable ELF shared object."""


def is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


def _version_key(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def highest_versions(names: List[str]) -> Dict[str, str]:
    """``["GLIBC_2.17", "GLIBC_2.34", "GLIBCXX_3.4.21"]`` -> ``{"GLIBC": "2.34", ...}``."""
    best: Dict[str, str] = {}
    for name in names:
        match = _VERSION_NAME.match(name)
        if not match:
            continue
        family, version = match.group(1), match.group(2)
        if family not in best or _version_key(version) > _version_key(best[family]):
            best[family] = version
    return dict(sorted(best.items()))


def read_elf_facts(stream: IO[bytes]) -> Dict[str, Any]:
    """Facts of one ELF file; raises ElfError when it cannot be parsed."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    try:
        elf = ELFFile(stream)
        soname: Optional[str] = None
        needed: List[str] = []
        rpath: List[str] = []
        runpath: List[str] = []
        version_needs: List[str] = []
        cuda: Dict[str, int] = {}
        for section in elf.iter_sections():
            if section.name in CUDA_SECTIONS:
                cuda[section.name] = section["sh_size"]
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif kind == "DT_SONAME":
                        soname = tag.soname
                    elif kind == "DT_RPATH":
                        rpath.extend(p for p in tag.rpath.split(":") if p)
                    elif kind == "DT_RUNPATH":
                        runpath.extend(p for p in tag.runpath.split(":") if p)
            elif isinstance(section, GNUVerNeedSection):
                for _verneed, auxiliaries in section.iter_versions():
                    version_needs.extend(aux.name for aux in auxiliaries)
        return {
            "machine": elf["e_machine"],
            "type": elf["e_type"],
            "soname": soname,
            "needed": needed,
            "rpath": rpath,
            "runpath": runpath,
            "version_needs": highest_versions(version_needs),
            "cuda_sections": dict(sorted(cuda.items())),
        }
    except (ELFError, ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise ElfError(str(exc) or type(exc).__name__) from exc
    except Exception as exc:  # pyelftools raises construct errors on truncation
        if type(exc).__module__.startswith("elftools"):
            raise ElfError(str(exc) or type(exc).__name__) from exc
        raise
