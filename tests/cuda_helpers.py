"""Real CUDA device code for tests: tiny kernels built by nvcc, and NVIDIA's cuobjdump as oracle.

Every variant is built once per test run and shared by the xdist workers:
each worker takes a per-variant file lock, so two workers build different
variants at the same time instead of the same one twice.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
GPUS = ("9.0", "10.0", "12.0", "12.1")

KERNELS = {
    "scale.cu": """
__global__ void scale(float* x, float f) { x[threadIdx.x] *= f; }
extern "C" void launch_scale(float* x) { scale<<<1, 32>>>(x, 2.0f); }
""",
    "bump.cu": """
__global__ void bump(int* x) { atomicAdd(x + threadIdx.x, 1); }
extern "C" void launch_bump(int* x) { bump<<<1, 32>>>(x); }
""",
}


@dataclass(frozen=True)
class Variant:
    """One nvcc build: its flags and the verdict CUDA.md gives per GPU (9.0, 10.0, 12.0, 12.1)."""

    flags: tuple[str, ...]
    verdicts: tuple[str, str, str, str]
    sources: tuple[str, ...] = ("scale.cu",)


TWO = ("scale.cu", "bump.cu")  # two translation units: two containers plus the device-link one


def _gencode(arch: str, code: str) -> tuple[str, ...]:
    return ("-gencode", f"arch={arch},code={code}")


ZIP = ("-Xfatbin", "-compress-all")
VARIANTS: dict[str, Variant] = {
    "sm90": Variant(_gencode("compute_90", "sm_90"), ("native", "no-image", "no-image", "no-image")),
    "sm90a": Variant(_gencode("compute_90a", "sm_90a"), ("native", "no-image", "no-image", "no-image")),
    "sm100a": Variant(_gencode("compute_100a", "sm_100a"), ("no-image", "native", "no-image", "no-image")),
    "sm120": Variant(_gencode("compute_120", "sm_120"), ("no-image", "no-image", "native", "native")),
    "sm120a": Variant(_gencode("compute_120a", "sm_120a"), ("no-image", "no-image", "native", "no-image")),
    # SASS for Hopper plus compute_90 PTX: every later GPU JITs.
    "ptx90": Variant(_gencode("compute_90", "[sm_90,compute_90]"), ("native", "jit", "jit", "jit"), TWO),
    # PTX only, compressed: nothing before Blackwell consumer parts.
    "ptx120z": Variant(_gencode("compute_120", "compute_120") + ZIP, ("no-image", "no-image", "jit", "jit")),
    "fatz": Variant(
        _gencode("compute_90", "sm_90")
        + _gencode("compute_100a", "sm_100a")
        + _gencode("compute_120", "sm_120")
        + ZIP,
        ("native", "native", "native", "native"),
        TWO,
    ),
    # The device-link container nvcc adds holds SASS for three generations and
    # no kernel: on 12.x it has no image, which is harmless; the rest JITs.
    "mix": Variant(
        _gencode("compute_75", "sm_75")
        + _gencode("compute_80", "sm_80")
        + _gencode("compute_90", "sm_90")
        + _gencode("compute_120", "compute_120"),
        ("native", "no-image", "jit", "jit"),
        TWO,
    ),
    "mixz": Variant(
        _gencode("compute_75", "sm_75")
        + _gencode("compute_80", "sm_80")
        + _gencode("compute_90", "sm_90")
        + _gencode("compute_120", "compute_120")
        + ZIP,
        ("native", "no-image", "jit", "jit"),
    ),
    # LZ4 instead of zstd.
    "lz4": Variant(
        _gencode("compute_90", "[sm_90,compute_90]") + ZIP + ("-compress-mode=speed",),
        ("native", "jit", "jit", "jit"),
    ),
    # Family-specific: sm_100f SASS, compute_120f PTX.
    "family": Variant(
        _gencode("compute_100f", "sm_100f") + _gencode("compute_120f", "compute_120f"),
        ("no-image", "native", "jit", "jit"),
    ),
    # -rdc: the linked executable container holds sm_90 and sm_120a SASS; the
    # PTX stays in __nv_relfatbin, which is never loaded, so 12.1 has nothing.
    "rdc": Variant(
        ("-rdc=true", *_gencode("compute_90", "sm_90"), *_gencode("compute_120a", "[sm_120a,compute_120a]")),
        ("native", "no-image", "native", "no-image"),
        TWO,
    ),
}


def _lock(path: Path, blocking: bool) -> int | None:
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _build(root: Path, name: str) -> None:
    out = root / f"lib{name}.so"
    if out.exists():
        return
    work = root / f"build-{name}"
    work.mkdir(exist_ok=True)
    sources = []
    for file in VARIANTS[name].sources:
        (work / file).write_text(KERNELS[file])
        sources.append(str(work / file))
    tmp = work / out.name
    cmd = [NVCC, "-shared", "-Xcompiler", "-fPIC", *VARIANTS[name].flags, "-o", str(tmp), *sources]
    subprocess.run(cmd, check=True, cwd=work, capture_output=True)
    tmp.rename(out)


def build_variants(root: Path, names: list[str]) -> dict[str, Path]:
    """Each variant as ``root/lib<name>.so``, built unless another worker already did."""
    root.mkdir(parents=True, exist_ok=True)
    pending = list(names)

    def attempt(name: str, blocking: bool) -> None:
        fd = _lock(root / f"{name}.lock", blocking)
        if fd is None:
            return
        try:
            _build(root, name)
            pending.remove(name)
        finally:
            os.close(fd)

    # Alone, use both cores; under xdist each worker is one of them already.
    jobs = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
    for blocking in (False, True):
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(attempt, list(pending), [blocking] * len(pending)))
    return {name: root / f"lib{name}.so" for name in names}


def shared_root(factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory every xdist worker of this run shares (the per-run temp root)."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / name


@pytest.fixture(scope="session")
def cuda_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not Path(NVCC).exists():
        pytest.fail("nvcc is not installed: these tests build real CUDA device code")
    return build_variants(shared_root(tmp_path_factory, "cuda-libs"), list(VARIANTS))


# --- the oracle ------------------------------------------------------------------


def cuobjdump() -> str:
    """NVIDIA's cuobjdump from the nvidia-cuda-cuobjdump wheel in this venv."""
    site = Path(sysconfig.get_paths()["purelib"])
    found = sorted(site.glob("nvidia/*/bin/cuobjdump"))
    if not found:
        pytest.fail(
            f"cuobjdump not found under {site}/nvidia: pip install nvidia-cuda-cuobjdump (a dev extra)"
        )
    return str(found[-1])


_LISTED = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(cubin|ptx)$")


def cuobjdump_listing(path: Path, all_fatbin: bool = True) -> list[tuple[str, str]]:
    """``[("elf", "sm_90"), ("ptx", "sm_120"), ...]`` in cuobjdump's order."""
    cmd = [cuobjdump(), *(["--all-fatbin"] if all_fatbin else []), "--list-elf", "--list-ptx", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    listing = []
    for line in done.stdout.splitlines():
        match = _LISTED.match(line.strip())
        if match:
            listing.append(("elf" if match.group(1) == "ELF" else "ptx", match.group(2)))
    return listing


def oracle_name(kind: str, sm: int, suffix: str) -> str:
    """cuobjdump's spelling: PTX as ``sm_120``; a family cubin without its ``f`` (its
    name comes from the cubin's own ELF header, which does not carry it)."""
    if kind == "elf" and suffix == "f":
        suffix = ""
    return f"sm_{sm}{suffix}"


def cuobjdump_extract(path: Path, out: Path) -> dict[tuple[str, int], bytes]:
    """Every image cuobjdump extracts, keyed by (kind, ordinal within its kind)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [cuobjdump(), "--all-fatbin", "--extract-elf", "all", "--extract-ptx", "all", str(path)],
        cwd=out,
        check=True,
        capture_output=True,
    )
    images = {}
    for file in out.iterdir():
        match = re.match(r".*\.(\d+)\.sm_\d+[af]?\.(cubin|ptx)$", file.name)
        if match:
            images[("elf" if match.group(2) == "cubin" else "ptx", int(match.group(1)))] = file.read_bytes()
    return images


# --- patching built files -------------------------------------------------------------


def section(path: Path, name: str) -> tuple[int, int, int]:
    """(sh_offset, sh_size, file offset of the section header) of section ``name``."""
    data = path.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for i, (name_at, _type, _flags, _addr, offset, size) in enumerate(headers):
        end = data.index(b"\0", names_at + name_at)
        if data[names_at + name_at : end].decode() == name:
            return offset, size, shoff + i * shentsize
    raise KeyError(name)


def patched(src: Path, dst: Path, edit: Callable[[bytearray], None]) -> Path:
    data = bytearray(src.read_bytes())
    edit(data)
    dst.write_bytes(bytes(data))
    return dst


def replace_string(data: bytearray, old: bytes, new: bytes) -> None:
    """Same-length replacement of every occurrence (a DT_NEEDED name, a version name)."""
    assert len(old) == len(new) and old in data, (old, new)
    data[:] = data.replace(old, new)


def run_python(code: str, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-c", code, *args], capture_output=True, text=True)


def loads_for_real(path: Path) -> tuple[bool, str]:
    """The dynamic loader's own answer: dlopen with RTLD_NOW in a fresh process."""
    code = "import ctypes, os, sys\nctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)"
    done = run_python(code, str(path))
    return done.returncode == 0, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
