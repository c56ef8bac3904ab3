"""The fatbin reader against NVIDIA's own cuobjdump, on libraries nvcc built in this session."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cuda_helpers import (
    VARIANTS,
    cuda_libs,  # noqa: F401  (session fixture)
    cuobjdump,
    cuobjdump_extract,
    cuobjdump_listing,
    oracle_name,
    patched,
    section,
)
from envlock.binary import cuda
from envlock.binary.elf import read_bytes_at, read_link_facts, read_section_table
from envlock.binary.fatbin import (
    FatbinContainer,
    container_has_kernels,
    cubin_facts,
    read_cubin,
    read_fatbin_sections,
    read_payload,
    read_ptx,
)
from envlock.fatbin_codecs import MAX_IMAGE_BYTES, decompress_image

ROOT = Path(__file__).resolve().parent.parent
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def containers_of(path: Path) -> list[FatbinContainer]:
    with open(path, "rb") as stream:
        facts = read_link_facts(stream)
        return read_fatbin_sections(
            stream, [(s.name, s.offset, s.size) for s in facts.sections], facts.file_size
        )


def listing(containers: list[FatbinContainer], executable_only: bool = False) -> list[tuple[str, str]]:
    return [
        (e.kind, oracle_name(e.kind, e.sm, e.suffix))
        for c in containers
        if not (executable_only and c.relocatable)
        for e in c.entries
    ]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_listing_equals_cuobjdump(name: str, cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    path = cuda_libs[name]
    containers = containers_of(path)
    assert all(c.error is None for c in containers)
    assert listing(containers) == cuobjdump_listing(path, all_fatbin=True)
    assert listing(containers, executable_only=True) == cuobjdump_listing(path, all_fatbin=False)


def test_entry_headers(cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    plain = [e for c in containers_of(cuda_libs["ptx90"]) for e in c.entries]
    ptx = [e for e in plain if e.kind == "ptx"]
    # nvcc 13.0 emits PTX ISA 9.0 and compresses PTX even without -compress-all.
    assert {e.ptx_isa for e in ptx} == {"9.0"} and {e.arch for e in ptx} == {"compute_90"}
    assert {e.compression for e in plain if e.kind == "elf"} == {"none"}
    assert all(e.compressed_size == 0 and e.uncompressed_size == 0 for e in plain if e.kind == "elf")
    assert all(e.header_size >= 64 and e.payload_size > 0 for e in plain)

    zipped = [e for c in containers_of(cuda_libs["fatz"]) for e in c.entries]
    assert {e.compression for e in zipped} == {"zstd"}
    assert all(0 < e.compressed_size <= e.payload_size < e.uncompressed_size for e in zipped)
    assert {e.arch for e in zipped} == {"sm_90", "sm_100a", "sm_120"}

    assert {e.compression for c in containers_of(cuda_libs["lz4"]) for e in c.entries} == {"lz4"}
    family = {e.arch for c in containers_of(cuda_libs["family"]) for e in c.entries}
    assert family == {"sm_100f", "compute_120f"}
    containers = containers_of(cuda_libs["rdc"])
    assert [c.section for c in containers] == [".nv_fatbin", "__nv_relfatbin", "__nv_relfatbin"]
    assert [c.index for c in containers] == [0, 1, 2]


@pytest.mark.parametrize("name", ["fatz", "lz4", "mix", "rdc", "family"])
def test_payloads_equal_cuobjdump_extract(name: str, cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """Decompression (zstandard and lz4, on the controller) gives the bytes cuobjdump extracts."""
    path = cuda_libs[name]
    extracted = cuobjdump_extract(path, tmp_path)
    seen = {"elf": 0, "ptx": 0}
    with open(path, "rb") as stream:
        for container in containers_of(path):
            for entry in container.entries:
                seen[entry.kind] += 1
                data = read_payload(stream, entry, decompress_image)
                assert data is not None, entry
                want = extracted[(entry.kind, seen[entry.kind])]
                if entry.kind == "ptx":  # the payload is NUL-padded text
                    data, want = data.rstrip(b"\0"), want.rstrip(b"\0")
                assert data == want, (entry.arch, entry.compression)
    assert sum(seen.values()) == len(extracted)


@pytest.mark.parametrize("name", ["mix", "mixz"])
def test_device_link_container_has_no_kernels(name: str, cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    path = cuda_libs[name]
    containers = containers_of(path)
    with open(path, "rb") as stream:
        kernels = [container_has_kernels(stream, c, decompress_image) for c in containers]
    # nvcc -shared: the device-link container first, then one per translation unit.
    assert kernels == [False] + [True] * (len(containers) - 1)


def test_loose_cubins_and_ptx(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """cuobjdump's extracted files read as loose device code; ``a`` and ``f`` come from
    .nv.compat and .note.nv.tkinfo, since CUDA 13 leaves them out of e_flags."""
    arches = set()
    for name in ("sm120a", "family", "sm90a"):
        out = tmp_path / name
        cuobjdump_extract(cuda_libs[name], out)
        for file in sorted(out.iterdir()):
            with open(file, "rb") as stream:
                container = read_cubin(stream) if file.suffix == ".cubin" else read_ptx(stream.read())
            assert container.error is None, file
            (entry,) = container.entries
            arches.add(entry.arch)
            if entry.kind == "ptx":
                assert entry.ptx_isa == "9.0"
    assert arches == {"sm_120a", "sm_100f", "compute_120f", "sm_90a"}


def test_cubin_e_flags_of_the_older_abi(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """ABI version 7 (CUDA 12) keeps the sm in the low byte and ``a`` in bit 11."""
    cuobjdump_extract(cuda_libs["sm90"], tmp_path)
    # The largest one: the device-link cubin comes first and holds no kernel.
    cubin = max((p for p in tmp_path.iterdir() if p.suffix == ".cubin"), key=lambda p: p.stat().st_size)
    data = bytearray(cubin.read_bytes())
    data[8] = 7
    struct.pack_into("<I", data, 48, 0x005A0500 | 90 | 0x800)
    facts = cubin_facts(bytes(data))
    assert facts is not None and (facts.sm, facts.suffix, facts.has_kernels) == (90, "a", True)
    assert cubin_facts(b"\x7fELF" + bytes(60)) is None


def _pyelftools_sections(data: bytes) -> list[tuple[str, str, int, int]]:
    import importlib
    import io

    elffile: Any = importlib.import_module("elftools.elf.elffile")  # pyelftools is untyped
    return [
        (s.name, s["sh_type"], s["sh_offset"], s["sh_size"])
        for s in elffile.ELFFile(io.BytesIO(data)).iter_sections()
    ]


def test_one_section_table_reader(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """``read_section_table`` reads shared libraries, cubins from a fatbin and 32-bit objects
    as pyelftools does; a cubin whose section runs past its end is not read at all."""
    cuobjdump_extract(cuda_libs["sm120"], tmp_path)
    source = tmp_path / "t32.c"
    source.write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-m32", "-c", "-o", str(tmp_path / "t32.o"), str(source)], check=True)
    files = [cuda_libs["sm120"], tmp_path / "t32.o", *sorted(tmp_path.glob("*.cubin"))]
    for path in files:
        data = path.read_bytes()
        ours = [
            (s.name, s.type, s.offset, s.size)
            for s, _link in read_section_table(read_bytes_at(data), len(data))
        ]
        theirs = _pyelftools_sections(data)
        assert [(n, o, z) for n, _t, o, z in ours] == [(n, o, z) for n, _t, o, z in theirs], path
        # Where envlock names a type it is pyelftools' name; others stay numeric (0x6ffffff6).
        assert all(a[1] == b[1] or a[1].startswith("0x") for a, b in zip(ours, theirs, strict=True)), path
    cubin = max(tmp_path.glob("*.cubin"), key=lambda p: p.stat().st_size)
    data = cubin.read_bytes()
    facts = cubin_facts(data)
    assert facts is not None and facts.has_kernels
    # A .text section whose size runs past the end of the file: damage, not "no kernels".
    table = read_section_table(read_bytes_at(data), len(data))
    index = next(i for i, (s, _link) in enumerate(table) if s.name.startswith(".text."))
    (shoff,) = struct.unpack_from("<Q", data, 40)
    (entry_size,) = struct.unpack_from("<H", data, 58)
    damaged = bytearray(data)
    struct.pack_into("<Q", damaged, shoff + index * entry_size + 32, len(data))  # sh_size
    assert cubin_facts(bytes(damaged)) is None


# --- damaged device code: "unknown", never a crash, never "native" ---------------------


def _damage(kind: str) -> Callable[[bytearray, int, int, int], None]:
    def edit(data: bytearray, offset: int, size: int, header: int) -> None:
        if kind == "zero-filled":
            data[offset : offset + size] = bytes(size)
        elif kind == "garbage":
            data[offset : offset + size] = (b"\x13\x37\xc0\xde" * size)[:size]
        elif kind == "zero-tail":  # the first container intact, the others wiped
            first = 16 + struct.unpack_from("<Q", data, offset + 8)[0]
            data[offset + first : offset + size] = bytes(size - first)
        elif kind == "truncated":
            struct.pack_into("<Q", data, header + 32, size - 40)  # sh_size cut mid-entry
        elif kind == "container-size":
            struct.pack_into("<Q", data, offset + 8, size * 4)
        elif kind == "entry-header-size":
            struct.pack_into("<I", data, offset + 16 + 4, 8)
        elif kind == "entry-kind":
            struct.pack_into("<H", data, offset + 16, 7)
        elif kind == "compression":
            flags = struct.unpack_from("<Q", data, offset + 16 + 40)[0]
            struct.pack_into("<Q", data, offset + 16 + 40, flags | 0x2000 | 0x8000)
        elif kind == "flags":
            flags = struct.unpack_from("<Q", data, offset + 16 + 40)[0]
            struct.pack_into("<Q", data, offset + 16 + 40, flags | 0x400000)

    return edit


DAMAGE = [
    "zero-filled",
    "zero-tail",
    "garbage",
    "truncated",
    "container-size",
    "entry-header-size",
    "entry-kind",
    "compression",
    "flags",
]


@pytest.mark.parametrize("kind", DAMAGE)
def test_damaged_fatbin_is_unknown(kind: str, cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    # sm120: one container per translation unit plus the device-link one, all sm_120.
    source = cuda_libs["sm120"]
    offset, size, header = section(source, ".nv_fatbin")
    damaged = patched(source, tmp_path / "libdamaged.so", lambda d: _damage(kind)(d, offset, size, header))
    containers = containers_of(damaged)
    report = cuda.judge_images(containers, cuda.Gpu(12, 0), None)
    assert report.verdict == "unknown", (kind, report)
    assert report.counts["native"] < len(containers_of(source))
    from envlock.inspect import inspect_path

    result = inspect_path(damaged, "12.0")
    assert result.verdict == "unknown" and not result.ok


def test_reads_the_same_on_python_38(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """binary/ also runs inside target venvs: same listing and verdict on CPython 3.8.

    The agent carries no codec: there, as here without one, a compressed image
    cannot be opened, an uncompressed one can (mix's device-link container)."""
    found = sorted(PYENV.glob("3.8.*/bin/python3.8"))
    if not found:
        pytest.fail(f"CPython 3.8 is not installed under {PYENV}")
    import elftools

    (tmp_path / "envlock").mkdir()
    (tmp_path / "envlock" / "__init__.py").write_text("")
    (tmp_path / "envlock" / "binary").symlink_to(ROOT / "builder" / "envlock" / "binary")
    (tmp_path / "elftools").symlink_to(Path(elftools.__file__).parent)
    code = (
        "import json, sys\n"
        "from envlock.binary.elf import read_link_facts\n"
        "from envlock.binary.fatbin import read_fatbin_sections, container_has_kernels\n"
        "from envlock.binary.cuda import Gpu, judge_images\n"
        "from envlock.binary.loader import Loader, system_library_dirs\n"
        "with open(sys.argv[1], 'rb') as s:\n"
        "    f = read_link_facts(s)\n"
        "    cs = read_fatbin_sections(s, [(x.name, x.offset, x.size) for x in f.sections], f.file_size)\n"
        "    r = judge_images(cs, Gpu(12, 0), None, lambda c: container_has_kernels(s, c))\n"
        "print(json.dumps([[e.kind, e.arch, e.compression] for c in cs for e in c.entries] + [r.verdict]))\n"
    )
    verdicts = {}
    for name in ("mix", "mixz"):
        path = cuda_libs[name]
        done = subprocess.run(
            [
                str(found[-1]),
                "-I",
                "-c",
                f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + code,
                str(path),
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        containers = containers_of(path)
        with open(path, "rb") as stream:
            verdict = cuda.judge_images(
                containers, cuda.Gpu(12, 0), None, lambda c: container_has_kernels(stream, c)
            ).verdict
        expected = [[e.kind, e.arch, e.compression] for c in containers for e in c.entries] + [verdict]
        assert json.loads(done.stdout) == expected
        verdicts[name] = verdict
    # Without a codec mixz's compressed device-link container counts as having kernels.
    assert verdicts == {"mix": "jit", "mixz": "no-image"}


def test_decompression_is_bounded(cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    """Against bombs: an image may declare at most MAX_IMAGE_BYTES, and decoding stops one byte
    past its declared size whatever the zstd frame claims."""
    import tracemalloc

    import zstandard

    path = cuda_libs["mixz"]
    entry = containers_of(path)[0].entries[0]  # the device-link cubin, zstd
    with open(path, "rb") as stream:
        stream.seek(entry.offset + entry.header_size)
        payload = stream.read(entry.compressed_size)
    assert entry.compression == "zstd" and decompress_image(entry, payload) is not None
    assert decompress_image(entry._replace(uncompressed_size=MAX_IMAGE_BYTES + 1), payload) is None
    assert decompress_image(entry._replace(uncompressed_size=entry.uncompressed_size - 1), payload) is None

    squeeze = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(1 << 20)
    bomb = b"".join(squeeze.compress(chunk) for _ in range(512)) + squeeze.flush()  # 512 MiB of zeros
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    try:
        assert decompress_image(entry._replace(uncompressed_size=1 << 20), bomb) is None
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"decoding a bomb used {peak} bytes"


def test_cuobjdump_is_the_registry_package() -> None:
    assert "/site-packages/nvidia/" in cuobjdump()
