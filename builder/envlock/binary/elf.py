"""ELF facts of a shared library, unpacked with ``struct``.

Only what deciding "will this load there" needs: SONAME, DT_NEEDED,
RPATH/RUNPATH, the highest versioned symbol needed from each family (GLIBC_,
GLIBCXX_, CXXABI_, ...), and which CUDA device-code sections are present
(``read_elf_facts``, recorded in locks); plus, for ``envlock inspect``, the
dynamic symbols and every version needed and defined (``read_link_facts``).
Reading touches headers, the dynamic symbol table and small sections only,
never code or data.

Everything here is a fixed gABI layout read with ``struct``: pyelftools
(kept as the oracle the tests compare with, and for the names of rare
machine types) costs ~0.1 s to import and builds a ``construct`` parser per
file, which made start-up and capture's hashing threads (which read every
library while holding the GIL) slower than the work itself.
"""

from __future__ import annotations

import re
import struct
from typing import IO, Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

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
    try:
        elf = _read_elf(stream, symbols=False)
    except (ValueError, KeyError, IndexError, struct.error) as exc:
        raise ElfError(str(exc) or type(exc).__name__) from exc
    cuda: Dict[str, int] = {}
    device_sections: List[Tuple[str, int, int]] = []
    for info, _link, _count in elf.headers:
        if info.name in CUDA_SECTIONS:
            cuda[info.name] = info.size
            device_sections.append((info.name, info.offset, info.size))
    return {
        "machine": elf.machine,
        "type": elf.type,
        "soname": elf.soname,
        "needed": elf.needed,
        "rpath": elf.rpath,
        "runpath": elf.runpath,
        "version_needs": highest_versions([n for names in elf.version_needs.values() for n in names]),
        "cuda_sections": dict(sorted(cuda.items())),
        "cuda_images": device_code_summary(stream, device_sections) if device_sections else None,
    }


def device_code_summary(stream: IO[bytes], sections: List[Tuple[str, int, int]]) -> Dict[str, Any]:
    """Headers-only digest of a library's device code, for the lock.

    ``images`` counts, per arch (``sm_90``, ``sm_120a``, ``compute_120``),
    the executable containers holding it; the CUDA verdict for a given GPU
    follows from these by the rules in docs/cuda.md (``envlock inspect``
    gives the full, per-container decision).
    """
    from envlock.binary.fatbin import read_fatbin_sections

    stream.seek(0, 2)
    containers = read_fatbin_sections(stream, sections, stream.tell())
    images: Dict[str, int] = {}
    executable = [c for c in containers if not c.relocatable]
    broken = 0
    for container in executable:
        if container.error or any(not e.usable for e in container.entries):
            broken += 1
        for arch in sorted({e.arch for e in container.entries if e.usable}):
            images[arch] = images.get(arch, 0) + 1
    return {
        "containers": len(executable),
        "relocatable": len(containers) - len(executable),
        "unreadable": broken,
        "images": dict(sorted(images.items())),
    }


# --- link facts: what deciding "will ld.so load this" needs ------------------

# st_info binding and st_other visibility values (ELF gABI).
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STV_DEFAULT, _STV_PROTECTED = 0, 3
_STT_SECTION, _STT_FILE = 3, 4


class SectionInfo(NamedTuple):
    """One section header: enough to read a section's bytes without pyelftools."""

    name: str
    type: str
    offset: int
    size: int


class LinkFacts(NamedTuple):
    """Everything the dynamic loader looks at when it maps one shared object.

    ``exported`` and ``undefined`` come from ``.dynsym`` (the only symbol
    table ld.so uses); ``undefined`` holds strong (STB_GLOBAL) references
    only, since a weak one that stays unresolved is not an error.
    """

    machine: str
    elf_class: int
    type: str
    soname: Optional[str]
    needed: Tuple[str, ...]
    rpath: Tuple[str, ...]
    runpath: Tuple[str, ...]
    version_needs: Dict[str, Tuple[str, ...]]
    version_defs: Tuple[str, ...]
    exported: FrozenSet[str]
    undefined: Tuple[str, ...]
    sections: Tuple[SectionInfo, ...]
    file_size: int
    # With ``symbol_versions=True`` only (ABI facts, docs/lock-format.md): ``undefined``
    # again with each versioned reference spelled ``name@VERSION``, and every
    # versioned definition as ``name@VERSION`` (default and hidden alike).
    undefined_versioned: Tuple[str, ...] = ()
    exported_versioned: FrozenSet[str] = frozenset()
    # The library each needed version comes from (``GLIBCXX_3.4.21`` -> libstdc++.so.6);
    # a fresh dict per read, never mutated after it.
    version_files: Dict[str, Tuple[str, ...]] = {}  # noqa: RUF012

    def section(self, name: str) -> Optional[SectionInfo]:
        for section in self.sections:
            if section.name == name:
                return section
        return None


def read_link_facts(stream: IO[bytes], symbol_versions: bool = False) -> LinkFacts:
    """Link facts of one ELF file; raises ElfError when it cannot be parsed.

    The symbol table is unpacked straight from the section bytes: an object
    per symbol would cost seconds on libtorch-sized tables (75,000 symbols
    and more). ``symbol_versions`` also reads ``.gnu.version`` to spell versioned
    symbols ``name@VERSION`` (``undefined_versioned``, ``exported_versioned``).
    """
    try:
        elf = _read_elf(stream, symbols=True, versions=symbol_versions)
    except (ValueError, KeyError, IndexError, struct.error) as exc:
        raise ElfError(str(exc) or type(exc).__name__) from exc
    return LinkFacts(
        machine=elf.machine,
        elf_class=elf.elf_class,
        type=elf.type,
        soname=elf.soname,
        needed=tuple(elf.needed),
        rpath=tuple(elf.rpath),
        runpath=tuple(elf.runpath),
        version_needs=elf.version_needs,
        version_defs=tuple(elf.version_defs),
        exported=elf.exported,
        undefined=elf.undefined,
        sections=tuple(info for info, _link, _count in elf.headers),
        file_size=elf.file_size,
        undefined_versioned=elf.undefined_versioned,
        exported_versioned=elf.exported_versioned,
        version_files=elf.version_files if symbol_versions else {},
    )


# e_machine and e_type as pyelftools names them (the lock records these
# strings); a value not listed here is looked up in pyelftools' own table.
_MACHINES = {
    0: "EM_NONE",
    3: "EM_386",
    8: "EM_MIPS",
    20: "EM_PPC",
    21: "EM_PPC64",
    22: "EM_S390",
    40: "EM_ARM",
    43: "EM_SPARCV9",
    62: "EM_X86_64",
    183: "EM_AARCH64",
    190: "EM_CUDA",
    243: "EM_RISCV",
    258: "EM_LOONGARCH",
}
_TYPES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
_DT_NULL, _DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 0, 1, 14, 15, 29
_SHT_DYNAMIC, _SHT_DYNSYM, _SHT_VERDEF, _SHT_VERNEED = 6, 11, 0x6FFFFFFD, 0x6FFFFFFE


def _enum_name(value: int, known: Dict[int, str], table: str) -> Any:
    """pyelftools' name of an ELF header value (its raw number when it has none)."""
    if value in known:
        return known[value]
    from elftools.elf import enums  # rare machine types only: importing it costs ~0.1 s

    for name, number in getattr(enums, table).items():
        if number == value and name != "_default_":
            return name
    return value


class _Elf:
    """What one pass over an ELF file's headers and small sections yields (filled in as read)."""

    def __init__(
        self,
        machine: Any,
        type: Any,
        elf_class: int,
        file_size: int,
        headers: List[Tuple[SectionInfo, int, int]],
    ) -> None:
        self.machine, self.type, self.elf_class, self.file_size = machine, type, elf_class, file_size
        self.headers = headers
        self.soname: Optional[str] = None
        self.needed: List[str] = []
        self.rpath: List[str] = []
        self.runpath: List[str] = []
        self.version_needs: Dict[str, Tuple[str, ...]] = {}
        self.version_defs: List[str] = []
        self.exported: FrozenSet[str] = frozenset()
        self.undefined: Tuple[str, ...] = ()
        self.undefined_versioned: Tuple[str, ...] = ()
        self.exported_versioned: FrozenSet[str] = frozenset()
        self.version_files: Dict[str, Tuple[str, ...]] = {}


def _read_elf(stream: IO[bytes], symbols: bool, versions: bool = False) -> _Elf:
    stream.seek(0, 2)
    file_size = stream.tell()

    def read(offset: int, size: int) -> bytes:
        return _read_at(stream, offset, size)

    headers = _section_headers(read, file_size)  # checks the magic, class and byte order
    ident = read(0, 20)
    order = "<" if ident[5] == 1 else ">"
    elf_class = 64 if ident[4] == 2 else 32
    e_type, e_machine = struct.unpack_from(order + "HH", ident, 16)
    elf = _Elf(
        machine=_enum_name(e_machine, _MACHINES, "ENUM_E_MACHINE"),
        type=_enum_name(e_type, _TYPES, "ENUM_E_TYPE"),
        elf_class=elf_class,
        file_size=file_size,
        headers=headers,
    )

    def linked(link: int) -> bytes:
        """The string table a section's sh_link names."""
        if not 0 < link < len(headers):
            raise ElfError(f"string table index {link} out of range ({len(headers)} sections)")
        strings = headers[link][0]
        return read(strings.offset, strings.size) if strings.type != "SHT_NOBITS" else b""

    for info, link, count in headers:
        kind = _SECTION_NUMBERS.get(info.type)
        if kind == _SHT_DYNAMIC:
            _dynamic(elf, read(info.offset, info.size), linked(link), order, elf_class)
        elif kind == _SHT_VERNEED:
            data = read(info.offset, info.size)
            for file, names in _versions(data, linked(link), count, order, need=True):
                elf.version_needs[file] = elf.version_needs.get(file, ()) + tuple(names)
                for name in names:
                    elf.version_files[name] = (*elf.version_files.get(name, ()), file)
        elif kind == _SHT_VERDEF:
            data = read(info.offset, info.size)
            for _none, names in _versions(data, linked(link), count, order, need=False):
                elf.version_defs.extend(names)
        elif kind == _SHT_DYNSYM and symbols and 0 < link < len(headers):
            table, strings = read(info.offset, info.size), linked(link)
            elf.exported, elf.undefined = _dynamic_symbols(table, strings, elf_class, order == "<")
            if versions:
                pairs = [(section, to) for section, to, _count in headers]
                elf.undefined_versioned, elf.exported_versioned = _versioned_symbols(
                    read, pairs, table, strings, elf_class, order == "<"
                )
    return elf


def _string(table: bytes, offset: int) -> str:
    """A NUL-terminated name from a string table section (pyelftools' decoding: UTF-8, replaced)."""
    if offset >= len(table):
        raise ElfError(f"string offset {offset} past the end of a {len(table)}-byte string table")
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def _dynamic(elf: _Elf, data: bytes, strings: bytes, order: str, elf_class: int) -> None:
    """SONAME, NEEDED, RPATH and RUNPATH from a dynamic section, up to its DT_NULL."""
    layout = struct.Struct(order + ("qQ" if elf_class == 64 else "iI"))
    usable = len(data) - len(data) % layout.size
    for tag, value in layout.iter_unpack(data[:usable]):
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            elf.needed.append(_string(strings, value))
        elif tag == _DT_SONAME:
            elf.soname = _string(strings, value) or elf.soname
        elif tag == _DT_RPATH:
            elf.rpath.extend(p for p in _string(strings, value).split(":") if p)
        elif tag == _DT_RUNPATH:
            elf.runpath.extend(p for p in _string(strings, value).split(":") if p)


# Elf_Verneed (vn_version, vn_cnt, vn_file, vn_aux, vn_next) and Elf_Verdef
# (vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, vd_aux, vd_next): the same
# size in both ELF classes; then their auxiliaries' (name, next) fields.
_VERNEED, _VERDEF = "HHIII", "HHHHIII"
_VERNAUX, _VERDAUX = "8xII", "II"


def _versions(data: bytes, strings: bytes, count: int, order: str, need: bool) -> List[Tuple[str, List[str]]]:
    """(file, names) per entry of a verneed section, or ("", names) of a verdef; ``count`` is sh_info.

    Entries and their auxiliaries are chained by byte offsets, as ld.so and
    pyelftools follow them; an entry without auxiliaries is malformed.
    """
    entry_layout = struct.Struct(order + (_VERNEED if need else _VERDEF))
    aux_layout = struct.Struct(order + (_VERNAUX if need else _VERDAUX))
    result = []
    at = 0
    for _ in range(count):
        fields = entry_layout.unpack_from(data, at)
        if need:
            _version, aux_count, file_at, aux_at, next_at = fields
            file = _string(strings, file_at)
        else:
            _version, _flags, _index, aux_count, _hash, aux_at, next_at = fields
            file = ""
        if aux_count <= 0:
            raise ElfError("a version entry without auxiliary entries")
        names = []
        aux = at + aux_at
        for _ in range(aux_count):
            name_at, aux_next = aux_layout.unpack_from(data, aux)
            names.append(_string(strings, name_at))
            aux += aux_next
        result.append((file, names))
        at += next_at
    return result


_SECTION_TYPES = {
    0: "SHT_NULL",
    1: "SHT_PROGBITS",
    2: "SHT_SYMTAB",
    3: "SHT_STRTAB",
    6: "SHT_DYNAMIC",
    7: "SHT_NOTE",
    8: "SHT_NOBITS",
    11: "SHT_DYNSYM",
    0x6FFFFFFD: "SHT_GNU_verdef",
    0x6FFFFFFE: "SHT_GNU_verneed",
    0x6FFFFFFF: "SHT_GNU_versym",
}
_SECTION_NUMBERS = {name: number for number, name in _SECTION_TYPES.items()}


def read_section_table(read: Callable[[int, int], bytes], file_size: int) -> List[Tuple[SectionInfo, int]]:
    """(section, sh_link) for every section header of an ELF file, unpacked with ``struct``.

    ``read(offset, size)`` returns exactly ``size`` bytes of the file or
    raises ElfError: a stream for a shared library, a bytes object for a
    cubin opened from a fatbin.
    """
    return [(info, link) for info, link, _count in _section_headers(read, file_size)]


def _section_headers(read: Callable[[int, int], bytes], file_size: int) -> List[Tuple[SectionInfo, int, int]]:
    """(section, sh_link, sh_info) for every section header of an ELF file.

    ``read(offset, size)`` returns exactly ``size`` bytes of the file or
    raises ElfError: a stream for a shared library, a bytes object for a
    cubin opened from a fatbin. The one place that parses the section header
    table (a fixed gABI layout, 32 or 64-bit, either byte order).
    """
    ident = read(0, 16)
    if ident[:4] != ELF_MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfError("not an ELF file of a known class and byte order")
    elf_class, order = (64 if ident[4] == 2 else 32), ("<" if ident[5] == 1 else ">")
    # e_shoff, then e_shentsize, e_shnum, e_shstrndx
    shoff_at, sizes_at = (40, 58) if elf_class == 64 else (32, 46)
    (shoff,) = struct.unpack(order + ("Q" if elf_class == 64 else "I"), read(shoff_at, elf_class // 8))
    entry_size, count, names_index = struct.unpack(order + "HHH", read(sizes_at, 6))
    if not shoff:
        return []
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    layout = struct.Struct(order + ("IIQQQQIIQQ" if elf_class == 64 else "IIIIIIIIII"))
    if entry_size < layout.size:
        raise ElfError(f"section header size {entry_size} is too small")
    if not count:  # 65,280 sections or more: the real count is in section 0's sh_size
        count = layout.unpack(read(shoff, layout.size))[5]
    if count * entry_size > file_size:
        raise ElfError(f"{count} section headers do not fit in a {file_size}-byte file")
    table = read(shoff, count * entry_size)
    raw = [layout.unpack_from(table, i * entry_size) for i in range(count)]
    if names_index == 0xFFFF:  # SHN_XINDEX: the real index is in section 0's sh_link
        names_index = raw[0][6]
    if names_index >= count:
        raise ElfError(f"section name table index {names_index} out of range ({count} sections)")
    names = read(raw[names_index][4], raw[names_index][5]) if names_index else b""
    result = []
    for index, (name_at, kind, _f, _a, offset, size, link, info, _al, _es) in enumerate(raw):
        end = names.find(b"\0", name_at)
        name = names[name_at : end if end >= 0 else len(names)].decode("utf-8", "replace")
        type_name = _SECTION_TYPES.get(kind, hex(kind))
        if kind not in (0, 8) and offset + size > file_size:
            raise ElfError(f"section {name or '#' + str(index)} runs past the end of the file")
        result.append((SectionInfo(name, type_name, offset, size), link, info))
    return result


def read_bytes_at(data: bytes) -> Callable[[int, int], bytes]:
    """``read(offset, size)`` over an ELF image in memory, for ``read_section_table``."""

    def read(offset: int, size: int) -> bytes:
        chunk = data[offset : offset + size]
        if len(chunk) != size:
            raise ElfError(f"truncated: wanted {size} bytes at offset {offset}, got {len(chunk)}")
        return chunk

    return read


def _read_at(stream: IO[bytes], offset: int, size: int) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise ElfError(f"truncated: wanted {size} bytes at offset {offset}, got {len(data)}")
    return data


def _dynamic_symbols(
    table: bytes, strings: bytes, elf_class: int, little_endian: bool
) -> Tuple[FrozenSet[str], Tuple[str, ...]]:
    """(exported names, strong undefined names) from raw .dynsym/.dynstr bytes.

    Names are ASCII in practice; latin-1 maps any other byte to the same
    character in every library, so names still compare exactly.
    """
    order = "<" if little_endian else ">"
    # name, info, other, shndx; value and size skipped
    layout = struct.Struct(order + ("IBBH16x" if elf_class == 64 else "I8xBBH"))
    usable = len(table) - len(table) % layout.size
    # One latin-1 decode of the whole table, then str slices: the same names as
    # decoding each one, a fifth less time over libtorch-sized tables.
    text = strings.decode("latin-1")
    find = text.find
    exported: List[str] = []
    undefined: List[str] = []
    export, undefine = exported.append, undefined.append
    for name_at, info, other, shndx in layout.iter_unpack(table[:usable]):
        if not name_at:
            continue
        bind = info >> 4
        if shndx == 0:  # SHN_UNDEF
            if bind == _STB_GLOBAL:
                undefine(text[name_at : find("\0", name_at)])
        elif (
            bind in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
            and other & 3 in (_STV_DEFAULT, _STV_PROTECTED)
            and info & 0xF not in (_STT_SECTION, _STT_FILE)
        ):
            export(text[name_at : find("\0", name_at)])
    return frozenset(exported), tuple(undefined)


# --- symbol versions: ``name@VERSION`` as ld.so binds them --------------------

_VER_NDX_GLOBAL = 1
_VERSYM_HIDDEN = 0x8000


def symbol_key(name: str, version: Optional[str]) -> str:
    """``name@VERSION`` for a versioned symbol, the bare name otherwise."""
    return name + "@" + version if version else name


def _c_string(strings: bytes, at: int) -> str:
    end = strings.find(b"\0", at)
    return strings[at : end if end >= 0 else len(strings)].decode("latin-1")


def _version_names(
    read: Callable[[int, int], bytes], headers: List[Tuple[SectionInfo, int]], order: str
) -> Dict[int, str]:
    """Version index -> name, from SHT_GNU_verdef (definitions) and SHT_GNU_verneed (needs).

    Unpacked with ``struct`` (gABI layouts); every walk is bounded by its
    section's size, so a hostile ``vd_next`` cannot loop.
    """
    names: Dict[int, str] = {}
    for info, link in headers:
        if info.type not in ("SHT_GNU_verdef", "SHT_GNU_verneed") or not 0 < link < len(headers):
            continue
        data = read(info.offset, info.size)
        strtab = headers[link][0]
        strings = read(strtab.offset, strtab.size)
        at, budget = 0, info.size // 16 + 1
        while at >= 0 and at + 16 <= len(data) and budget > 0:
            budget -= 1
            if info.type == "SHT_GNU_verdef":
                _v, flags, ndx, count, _h, aux, following = struct.unpack_from(order + "HHHHIII", data, at)
                if count and not flags & 1 and at + aux + 8 <= len(data):  # VER_FLG_BASE: the file itself
                    names[ndx] = _c_string(strings, struct.unpack_from(order + "I", data, at + aux)[0])
            else:
                _v, count, _file, aux, following = struct.unpack_from(order + "HHIII", data, at)
                where = at + aux
                for _ in range(min(count, info.size // 16 + 1)):
                    if where + 16 > len(data):
                        break
                    _hash, _flags, other, name_at, step = struct.unpack_from(order + "IHHII", data, where)
                    names[other] = _c_string(strings, name_at)
                    if not step:
                        break
                    where += step
            if not following:
                break
            at += following
    return names


def _versioned_symbols(
    read: Callable[[int, int], bytes],
    headers: List[Tuple[SectionInfo, int]],
    table: bytes,
    strings: bytes,
    elf_class: int,
    little_endian: bool,
) -> Tuple[Tuple[str, ...], FrozenSet[str]]:
    """(strong undefined symbols, versioned definitions), each spelled ``name@VERSION``
    when ``.gnu.version`` gives it one; the same selection as ``_dynamic_symbols``."""
    order = "<" if little_endian else ">"
    versym = next((info for info, _link in headers if info.type == "SHT_GNU_versym"), None)
    indexes: Tuple[int, ...] = ()
    names: Dict[int, str] = {}
    if versym is not None:
        raw = read(versym.offset, versym.size)
        indexes = struct.unpack(f"{order}{len(raw) // 2}H", raw[: len(raw) - len(raw) % 2])
        names = _version_names(read, headers, order)
    layout = struct.Struct(order + ("IBBH16x" if elf_class == 64 else "I8xBBH"))
    usable = len(table) - len(table) % layout.size
    find = strings.find
    undefined: List[str] = []
    defined: List[str] = []
    for position, (name_at, info, other, shndx) in enumerate(layout.iter_unpack(table[:usable])):
        if not name_at:
            continue
        bind = info >> 4
        index = (indexes[position] & ~_VERSYM_HIDDEN) if position < len(indexes) else _VER_NDX_GLOBAL
        version = names.get(index) if index > _VER_NDX_GLOBAL else None
        if shndx == 0:
            if bind == _STB_GLOBAL:
                undefined.append(
                    symbol_key(strings[name_at : find(b"\0", name_at)].decode("latin-1"), version)
                )
        elif (
            version
            and bind in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE)
            and other & 3 in (_STV_DEFAULT, _STV_PROTECTED)
            and info & 0xF not in (_STT_SECTION, _STT_FILE)
        ):
            defined.append(symbol_key(strings[name_at : find(b"\0", name_at)].decode("latin-1"), version))
    return tuple(undefined), frozenset(defined)


def binds(
    reference: str, exported: FrozenSet[str], exported_versioned: FrozenSet[str], versioned: bool
) -> bool:
    """Does a library with these exports satisfy ``reference`` (``name`` or ``name@VERSION``)?

    As ld.so: a versioned reference needs that version defined, unless the
    library defines no versions at all (``versioned`` False: ld.so binds the
    plain name); a plain reference binds any definition of the name.
    """
    name, _at, version = reference.partition("@")
    if not version:
        return name in exported
    if versioned:
        return reference in exported_versioned
    return name in exported
