"""CUDA device code in a file: fatbin containers, loose cubins and loose PTX.

NVIDIA does not document the fatbin container, so this reader keeps to the
fields whose meaning was checked against nvcc 13.0 builds and torch's
libtorch_cuda.so (docs/cuda.md has the layout and the evidence). Anything
it cannot explain becomes an entry or container with ``error`` set, never a
guess: the compatibility decision treats those as "unknown".

Listing reads headers only (16 bytes per container, 64 per entry) with
``seek``/``read`` on the caller's stream, so listing the 475 containers of a
500 MB library reads about 200 KB. Payloads are read only when a caller
asks, see ``container_has_kernels``; compressed ones need the caller's
``Decompress`` (the controller's codecs, ``envlock.fatbin_codecs``): this
package runs in the agent on a bare Python and carries no codec.
"""

from __future__ import annotations

import os
import re
import struct
from typing import IO, Callable, Iterable, List, NamedTuple, Optional, Tuple

from envlock.binary.elf import ElfError, read_bytes_at, read_section_table

FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
EXECUTABLE_SECTION = ".nv_fatbin"
CONTAINER_MAGIC = 0xBA55ED50
EM_CUDA = 190

# magic, version, header size, size of the entries that follow
_CONTAINER = struct.Struct("<IHHQ")
# kind, ?, header size, payload size, compressed size, options offset,
# minor, major, sm, ?, ?, flags, ?, uncompressed size
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")
_MAX_ENTRY_HEADER = 1024
# Containers are 8-byte aligned and the linker pads between input sections:
# a longer run of zeros is damage, not padding.
_MAX_PADDING = 64

KIND_PTX, KIND_ELF, KIND_UNKNOWN = "ptx", "elf", "unknown"
_KINDS = {1: KIND_PTX, 2: KIND_ELF}

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2
FLAG_LINUX = 0x10
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_LTO = 0x10000
FLAG_ARCH_SPECIFIC = 0x100000  # the "a" of sm_90a
FLAG_FAMILY = 0x200000  # the "f" of sm_100f
FLAG_OPTIONS = 0x1000000  # header carries an options block (sm_100 and later)
KNOWN_FLAGS = (
    FLAG_64BIT
    | FLAG_DEBUG
    | FLAG_LINUX
    | FLAG_LZ4
    | FLAG_ZSTD
    | FLAG_LTO
    | FLAG_ARCH_SPECIFIC
    | FLAG_FAMILY
    | FLAG_OPTIONS
)


class FatbinEntry(NamedTuple):
    """One image in a container: a cubin (SASS for one sm) or PTX (for one compute_).

    A named tuple rather than a frozen dataclass: libraries hold tens of
    thousands of entries, and a tuple is several times cheaper to make.
    """

    container: int
    offset: int
    kind: str
    sm: int
    suffix: str
    version: Tuple[int, int]
    flags: int
    compression: str
    header_size: int
    payload_size: int
    compressed_size: int
    uncompressed_size: int
    error: Optional[str] = None

    @property
    def arch(self) -> str:
        """``sm_90a`` for a cubin, ``compute_120`` for PTX, as nvcc's -gencode spells them."""
        prefix = "compute_" if self.kind == KIND_PTX else "sm_"
        return f"{prefix}{self.sm}{self.suffix}" if self.sm else "unknown"

    @property
    def ptx_isa(self) -> Optional[str]:
        """PTX ISA version (``"9.0"``) of a PTX entry; None for cubins."""
        return f"{self.version[0]}.{self.version[1]}" if self.kind == KIND_PTX else None

    @property
    def unexplained_flags(self) -> int:
        return self.flags & ~KNOWN_FLAGS

    @property
    def usable(self) -> bool:
        """Whether every field that decides compatibility was understood."""
        return (
            self.error is None
            and self.kind != KIND_UNKNOWN
            and self.compression != "unknown"
            and not self.unexplained_flags
        )


# (entry, its compressed bytes) -> the image, or None when it cannot be decoded.
Decompress = Callable[[FatbinEntry, bytes], Optional[bytes]]


class FatbinContainer(NamedTuple):
    """One fatbin container (one translation unit or one device-link step).

    ``section`` is the ELF section it was found in, or ``"cubin"``/``"ptx"``/
    ``"fatbin"`` for a loose file, which is treated as a container of one.
    ``error`` says why the container could not be read to its end; the
    entries read before the damage are kept. A NamedTuple, not a dataclass,
    as every type ``envlock inspect`` loads: importing ``dataclasses`` and
    building fourteen of them cost start-up ~35 ms; ``index`` shadows
    ``tuple.index``, which nothing here calls.
    """

    index: int  # type: ignore[assignment]
    section: str
    offset: int
    size: int
    entries: Tuple[FatbinEntry, ...]
    error: Optional[str] = None

    @property
    def relocatable(self) -> bool:
        """Relocatable device code (``-rdc``): input for a device link, never loaded."""
        return self.section == "__nv_relfatbin"


def read_containers(
    stream: IO[bytes], section: str, offset: int, size: int, file_size: int, first_index: int = 0
) -> List[FatbinContainer]:
    """Every container in ``size`` bytes at ``offset``: back to back, zero padded.

    Never raises on bad data: damage ends the walk with a container whose
    ``error`` says what was found where.
    """
    containers: List[FatbinContainer] = []

    def fail(at: int, message: str) -> List[FatbinContainer]:
        where = f"{section}+{at:#x}"
        containers.append(
            FatbinContainer(
                first_index + len(containers), section, offset + at, 0, (), where + ": " + message
            )
        )
        return containers

    if offset + size > file_size:
        return fail(0, f"section runs {offset + size - file_size} bytes past the end of the file")
    pos = 0
    while pos < size:
        head = _read(stream, offset + pos, min(_CONTAINER.size, size - pos))
        if not head.strip(b"\0"):
            zeros = _zero_run(stream, offset + pos, size - pos)
            if zeros > _MAX_PADDING:
                return fail(pos, f"{zeros} zero bytes where a container should start")
            pos += zeros
            continue
        if len(head) < _CONTAINER.size:
            return fail(pos, f"truncated container header ({len(head)} bytes)")
        magic, version, header_size, entries_size = _CONTAINER.unpack(head)
        if magic != CONTAINER_MAGIC:
            return fail(pos, f"bad magic {magic:#010x} (expected {CONTAINER_MAGIC:#010x})")
        if version != 1 or header_size != _CONTAINER.size:
            return fail(pos, f"container version {version} with header size {header_size} not understood")
        if pos + header_size + entries_size > size:
            return fail(
                pos,
                f"container declares {entries_size} bytes, the section holds {size - pos - header_size} more",
            )
        index = first_index + len(containers)
        entries, error = _read_entries(stream, index, offset + pos + header_size, entries_size)
        containers.append(FatbinContainer(index, section, offset + pos, entries_size, entries, error))
        pos += header_size + entries_size
    if size and not containers:
        return fail(0, f"no container in a {size}-byte section")
    return containers


def _read_entries(
    stream: IO[bytes], container: int, start: int, size: int
) -> Tuple[Tuple[FatbinEntry, ...], Optional[str]]:
    entries: List[FatbinEntry] = []
    pos = 0
    while pos < size:
        at = start + pos
        head = _read(stream, at, min(_ENTRY.size, size - pos))
        problem = None
        if len(head) < _ENTRY.size:
            problem = f"truncated entry header ({len(head)} of {_ENTRY.size} bytes)"
        else:
            fields = _ENTRY.unpack(head)
            header_size, payload_size, compressed_size = fields[2], fields[3], fields[4]
            if not _ENTRY.size <= header_size <= _MAX_ENTRY_HEADER:
                problem = f"entry header size {header_size} out of range"
            elif pos + header_size + payload_size > size:
                overrun = pos + header_size + payload_size - size
                problem = f"entry of {header_size + payload_size} bytes overruns its container by {overrun}"
            elif compressed_size > payload_size:
                problem = f"compressed size {compressed_size} exceeds payload size {payload_size}"
        if problem is not None:
            message = f"entry at {at:#x}: {problem}"
            entries.append(_broken_entry(container, at, message))
            return tuple(entries), message
        entries.append(_entry(container, at, fields))
        pos += header_size + payload_size
    return tuple(entries), None


def _entry(container: int, at: int, fields: Tuple[int, ...]) -> FatbinEntry:
    (
        kind_code,
        _,
        header_size,
        payload_size,
        compressed_size,
        _,
        minor,
        major,
        sm,
        _,
        _,
        flags,
        _,
        uncompressed,
    ) = fields
    kind = _KINDS.get(kind_code, KIND_UNKNOWN)
    error = None if kind != KIND_UNKNOWN else f"entry kind {kind_code} not understood"
    return FatbinEntry(
        container=container,
        offset=at,
        kind=kind,
        sm=sm,
        suffix=_suffix(flags),
        version=(major, minor),
        flags=flags,
        compression=_compression(flags, compressed_size),
        header_size=header_size,
        payload_size=payload_size,
        compressed_size=compressed_size,
        uncompressed_size=uncompressed,
        error=error,
    )


def _broken_entry(container: int, at: int, message: str) -> FatbinEntry:
    return FatbinEntry(container, at, KIND_UNKNOWN, 0, "", (0, 0), 0, "unknown", 0, 0, 0, 0, message)


def _suffix(flags: int) -> str:
    # Both bits set has not been seen; "a" is the stricter reading.
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    return "f" if flags & FLAG_FAMILY else ""


def _compression(flags: int, compressed_size: int) -> str:
    lz4_flag, zstd_flag = bool(flags & FLAG_LZ4), bool(flags & FLAG_ZSTD)
    if lz4_flag and zstd_flag:
        return "unknown"
    if lz4_flag:
        return "lz4" if compressed_size else "unknown"
    if zstd_flag:
        return "zstd" if compressed_size else "unknown"
    return "none" if not compressed_size else "unknown"


def _read(stream: IO[bytes], offset: int, size: int) -> bytes:
    # pread on a real file: a buffered seek + read refills 8 KB around every
    # 64-byte header (libtorch_cuda.so: 3,000 headers spread over 330 MB).
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        stream.seek(offset)
        return stream.read(size)
    return os.pread(fd, size, offset)


def _zero_run(stream: IO[bytes], offset: int, limit: int) -> int:
    """Length of the run of zero bytes at ``offset`` (looks at most _MAX_PADDING + 1 bytes)."""
    window = _read(stream, offset, min(limit, _MAX_PADDING + 1))
    stripped = window.lstrip(b"\0")
    return len(window) - len(stripped)


# --- whole files --------------------------------------------------------------


def read_fatbin_sections(
    stream: IO[bytes], sections: Iterable[Tuple[str, int, int]], file_size: int
) -> List[FatbinContainer]:
    """Containers of every (name, offset, size) fatbin section, numbered across sections.

    Executable containers come first, then relocatable ones, whatever the
    file order: the order ``cuobjdump --all-fatbin`` lists them in.
    """
    ordered = sorted(
        (s for s in sections if s[0] in FATBIN_SECTIONS), key=lambda s: FATBIN_SECTIONS.index(s[0])
    )
    containers: List[FatbinContainer] = []
    for name, offset, size in ordered:
        containers.extend(read_containers(stream, name, offset, size, file_size, len(containers)))
    return containers


def read_fatbin_file(stream: IO[bytes]) -> List[FatbinContainer]:
    """A loose ``.fatbin`` file: containers from its first byte."""
    stream.seek(0, 2)
    size = stream.tell()
    return read_containers(stream, "fatbin", 0, size, size)


_PTX_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.M)
_PTX_TARGET = re.compile(rb"^\s*\.target\s+sm_(\d+)([af]?)\b", re.M)


def read_ptx(head: bytes) -> FatbinContainer:
    """A loose PTX file, from its first few KB: ``.version`` and ``.target`` lines."""
    version = _PTX_VERSION.search(head)
    target = _PTX_TARGET.search(head)
    error = None
    if not version or not target:
        error = "no .version and .target sm_XX lines: not PTX"
    entry = FatbinEntry(
        container=0,
        offset=0,
        kind=KIND_PTX if error is None else KIND_UNKNOWN,
        sm=int(target.group(1)) if target else 0,
        suffix=target.group(2).decode() if target else "",
        version=(int(version.group(1)), int(version.group(2))) if version else (0, 0),
        flags=0,
        compression="none",
        header_size=0,
        payload_size=len(head),
        compressed_size=0,
        uncompressed_size=len(head),
        error=error,
    )
    return FatbinContainer(0, "ptx", 0, len(head), (entry,), error)


# --- cubins (loose, or a payload read on request) -----------------------------

# e_flags, ABI version 7 and older: sm in bits 0-7, "a" is EF_CUDA_ACCELERATORS_V1.
# ABI version 8 (CUDA 13): sm in bits 8-15, "a" is bit 3, which nvcc 13.0
# does not set; .nv.compat and .note.nv.tkinfo still say it.
_EF_ACCEL_V1, _EF_ACCEL_V2 = 0x800, 0x8
_TKINFO_ARCH = re.compile(rb"-arch[= ]+sm_(\d+)([af]?)")
_COMPAT_ARCH_SPECIFIC = 9  # .nv.compat attribute: 1 on sm_90a / sm_120a cubins


class CubinFacts(NamedTuple):
    """What a cubin's own ELF headers say: arch, suffix and whether it has kernels."""

    sm: int
    suffix: str
    has_kernels: bool
    sections: Tuple[str, ...]


def is_cubin(head: bytes) -> bool:
    return len(head) >= 20 and head[:4] == b"\x7fELF" and struct.unpack_from("<H", head, 18)[0] == EM_CUDA


def cubin_facts(data: bytes) -> Optional[CubinFacts]:
    """Arch and kernels of a whole cubin in memory; None when it is not one we can read."""
    if not is_cubin(data) or len(data) < 64 or data[4] != 2 or data[5] != 1:
        return None  # cubins are 64-bit little-endian ELF
    abi_version = data[8]
    (e_flags,) = struct.unpack_from("<I", data, 48)
    if abi_version >= 8:
        sm, suffix = (e_flags >> 8) & 0xFF, "a" if e_flags & _EF_ACCEL_V2 else ""
    else:
        sm, suffix = e_flags & 0xFF, "a" if e_flags & _EF_ACCEL_V1 else ""
    try:
        sections = _cubin_sections(data)
    except (ElfError, struct.error):
        return None
    if not any(name for name, _body in sections):
        return None  # no section names: nothing to tell kernels from data
    for name, body in sections:
        if name == ".nv.compat" and _compat_attribute(body, _COMPAT_ARCH_SPECIFIC) == 1:
            suffix = "a"
        elif name == ".note.nv.tkinfo":
            match = _TKINFO_ARCH.search(body)
            if match and int(match.group(1)) == sm and suffix != "a":
                suffix = match.group(2).decode()
    names = tuple(name for name, _body in sections)
    return CubinFacts(sm, suffix, any(n.startswith(".text.") for n in names), names)


def read_cubin(stream: IO[bytes]) -> FatbinContainer:
    """A loose cubin file as a container of one ELF entry."""
    stream.seek(0, 2)
    size = stream.tell()
    data = _read(stream, 0, size)
    facts = cubin_facts(data)
    error = None if facts else "cubin headers could not be read"
    entry = FatbinEntry(
        container=0,
        offset=0,
        kind=KIND_ELF if facts else KIND_UNKNOWN,
        sm=facts.sm if facts else 0,
        suffix=facts.suffix if facts else "",
        version=(0, 0),
        flags=0,
        compression="none",
        header_size=0,
        payload_size=size,
        compressed_size=0,
        uncompressed_size=size,
        error=error,
    )
    return FatbinContainer(0, "cubin", 0, size, (entry,), error)


def _cubin_sections(data: bytes) -> List[Tuple[str, bytes]]:
    """(name, bytes) of every section of a cubin in memory; raises ElfError when damaged."""
    table = read_section_table(read_bytes_at(data), len(data))
    # SHT_NOBITS has no bytes in the file
    return [(s.name, b"" if s.type == "SHT_NOBITS" else data[s.offset : s.offset + s.size]) for s, _ in table]


def _compat_attribute(body: bytes, wanted: int) -> Optional[int]:
    """A value from .nv.compat: 4-byte records (format, attribute, value), format 4 sized."""
    pos = 0
    while pos + 4 <= len(body):
        fmt, attribute = body[pos], body[pos + 1]
        if fmt == 4:
            (length,) = struct.unpack_from("<H", body, pos + 2)
            pos += 4 + length
            continue
        if attribute == wanted:
            return body[pos + 2]
        pos += 4
    return None


# --- payloads -----------------------------------------------------------------


def read_payload(
    stream: IO[bytes], entry: FatbinEntry, decompress: Optional[Decompress] = None
) -> Optional[bytes]:
    """The entry's image; None when unreadable, or compressed and no ``decompress`` is given."""
    if not entry.usable:
        return None
    data = _read(stream, entry.offset + entry.header_size, entry.payload_size)
    if len(data) != entry.payload_size:
        return None
    if entry.compression == "none":
        return data
    return decompress(entry, data[: entry.compressed_size]) if decompress is not None else None


def container_has_kernels(
    stream: IO[bytes], container: FatbinContainer, decompress: Optional[Decompress] = None
) -> Optional[bool]:
    """Whether the container's code defines any kernel; None when no image could be read.

    nvcc 13 puts a device-link container into every ``-shared`` build; it
    usually holds no kernel, so having no image for a GPU is harmless there.
    The smallest cubin answers for the container (all images of a container
    come from the same source); a PTX image answers by its ``.entry`` lines.
    """
    candidates = sorted(
        (e for e in container.entries if e.usable),
        key=lambda e: (e.kind != KIND_ELF, e.compression != "none", e.uncompressed_size or e.payload_size),
    )
    for entry in candidates:
        data = read_payload(stream, entry, decompress)
        if data is None:
            continue
        if entry.kind == KIND_ELF:
            facts = cubin_facts(data)
            if facts is not None:
                return facts.has_kernels
        else:
            return re.search(rb"^\s*\.(visible\s+|weak\s+)*\.entry\s", data, re.M) is not None
    return None
