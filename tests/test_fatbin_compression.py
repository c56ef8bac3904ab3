"""A fatbin entry's compression is read from its flag AND its compressed size, never guessed.

An entry whose header gives a compressed size but no compression flag is
damaged or of a format envlock does not know: reading its payload as
uncompressed device code would judge garbage. It must come out "unknown".
"""

from __future__ import annotations

import struct
from pathlib import Path

from cuda_helpers import cuda_libs, patched, section  # noqa: F401  (session fixture)
from envlock.binary import cuda
from envlock.binary.elf import read_link_facts
from envlock.binary.fatbin import FLAG_LZ4, FLAG_ZSTD, FatbinContainer, read_fatbin_sections

ENTRY = 16  # the first entry follows the 16-byte container header
PAYLOAD_SIZE, COMPRESSED_SIZE, FLAGS = 8, 16, 40  # field offsets inside an entry header


def _containers(path: Path) -> list[FatbinContainer]:
    with open(path, "rb") as stream:
        facts = read_link_facts(stream)
        return read_fatbin_sections(
            stream, [(s.name, s.offset, s.size) for s in facts.sections], facts.file_size
        )


def test_plain_entries_read_as_uncompressed(cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    (first, *_rest) = _containers(cuda_libs["sm120"])
    entry = first.entries[0]
    assert entry.compressed_size == 0 and not entry.flags & (FLAG_LZ4 | FLAG_ZSTD)
    assert entry.compression == "none"


def test_compressed_size_without_a_flag_is_unknown(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    source = cuda_libs["sm120"]
    offset, _size, _header = section(source, ".nv_fatbin")

    def edit(data: bytearray) -> None:
        at = offset + ENTRY
        payload = struct.unpack_from("<Q", data, at + PAYLOAD_SIZE)[0]
        struct.pack_into("<I", data, at + COMPRESSED_SIZE, payload // 2)

    damaged = patched(source, tmp_path / "libnoflag.so", edit)
    containers = _containers(damaged)
    entry = containers[0].entries[0]
    assert entry.compressed_size > 0 and not entry.flags & (FLAG_LZ4 | FLAG_ZSTD)
    assert entry.compression == "unknown" and not entry.usable
    report = cuda.judge_images(containers, cuda.Gpu(12, 0), None)
    assert report.verdict == "unknown", report


def test_a_flag_without_a_compressed_size_is_unknown(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    source = cuda_libs["sm120"]
    offset, _size, _header = section(source, ".nv_fatbin")
    for flag in (FLAG_LZ4, FLAG_ZSTD):

        def edit(data: bytearray, flag: int = flag) -> None:
            at = offset + ENTRY + FLAGS
            struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] | flag)

        entry = _containers(patched(source, tmp_path / f"libflag{flag}.so", edit))[0].entries[0]
        assert entry.compressed_size == 0 and entry.compression == "unknown", flag
