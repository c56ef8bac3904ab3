"""``envlock inspect`` end to end: a .so, a wheel, a venv, through the real CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from cuda_helpers import (
    NVCC,
    cuda_libs,  # noqa: F401  (session fixture)
    cuobjdump,
    cuobjdump_extract,
    cuobjdump_listing,
    oracle_name,
)
from envlock.inspect import inspect_path
from helpers import ENVLOCK, make_venv, make_wheel

CUDA_LIB = Path("/usr/local/cuda/lib64")


def envlock_inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVLOCK, "inspect", *args], capture_output=True, text=True)


def gxx(out: Path, source: str, *args: str) -> Path:
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, cwd=out.parent)
    src.unlink()
    return out


# --- bad input: exit 2, one line naming the path ---------------------------------------


@pytest.mark.parametrize("kind", ["not-elf", "truncated-elf", "not-zip-wheel", "missing", "empty-so"])
def test_bad_input(kind: str, cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    if kind == "not-elf":
        path = tmp_path / "libnotelf.so"
        path.write_text("INPUT(-lc)\n")  # a linker script is no ELF
    elif kind == "truncated-elf":
        path = tmp_path / "libcut.so"
        path.write_bytes(cuda_libs["sm120"].read_bytes()[:4096])
    elif kind == "not-zip-wheel":
        path = tmp_path / "broken-1.0-py3-none-any.whl"
        path.write_bytes(b"PK\x03\x04 this is not a zip")
    elif kind == "empty-so":
        path = tmp_path / "libempty.so"
        path.write_bytes(b"")
    else:
        path = tmp_path / "nothing-here.so"
    done = envlock_inspect(str(path))
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"envlock: error: {path}: "), done.stderr


def test_bad_options() -> None:
    done = envlock_inspect("/", "--gpu", "twelve")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "twelve" in done.stderr
    done = envlock_inspect("/", "--driver", "latest")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "latest" in done.stderr


# --- one library ------------------------------------------------------------------


def test_library_text_and_exit_codes(cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    done = envlock_inspect(str(cuda_libs["sm120"]), "--gpu", "12.0", "--driver", "580.65.06")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "library" in out and "containers" in out and "arches" in out and "verdict" in out and "reason" in out
    )
    assert "sm_120: 2/2 containers native" in out
    assert "verdict: native" in out

    done = envlock_inspect(str(cuda_libs["sm120a"]), "--gpu", "12.1")
    assert done.returncode == 1
    assert "no-image" in done.stdout and "no image for sm_121 (SASS sm_120a; no PTX)" in done.stdout

    done = envlock_inspect(str(cuda_libs["ptx120z"]), "--gpu", "sm_121")
    assert done.returncode == 0 and "verdict: jit" in done.stdout


def test_json_envelope_has_every_fact(cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    path = cuda_libs["rdc"]
    done = envlock_inspect(str(path), "--gpu", "12.1", "--format", "json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    assert (data["schema_version"], data["command"], data["ok"]) == (2, "inspect", False)
    result = data["result"]
    assert result["gpu"] == {"cc": "12.1", "sm": "sm_121"} and result["verdict"] == "no-image"
    (library,) = result["libraries"]
    assert library["verdict"] == "no-image" and library["load"]["verdict"] == "ok"
    sections = [c["section"] for c in library["containers"]]
    assert sections == [".nv_fatbin", "__nv_relfatbin", "__nv_relfatbin"]
    assert [c["verdict"] for c in library["containers"]] == ["no-image", "relocatable", "relocatable"]
    entries = [e for c in library["containers"] for e in c["entries"]]
    assert [(e["kind"], oracle_name(e["kind"], e["sm"], e["suffix"])) for e in entries] == cuobjdump_listing(
        path
    )
    keys = {
        "offset", "kind", "arch", "sm", "suffix", "ptx_isa", "version", "flags", "compression",
        "header_size", "payload_size", "compressed_size", "uncompressed_size", "error",
    }  # fmt: skip
    assert all(set(e) == keys for e in entries)
    ptx = [e for e in entries if e["kind"] == "ptx"]
    assert ptx and all(e["ptx_isa"] == "9.0" and e["compression"] == "zstd" for e in ptx)


# --- a compressed container far larger than the old 1 MiB image budget ----------------------

KERNEL = """
__global__ void scale(float* x, float f) { x[threadIdx.x] *= f; }
extern "C" void launch_scale(float* x) { scale<<<1, 32>>>(x, 2.0f); }
"""
# No kernel: a 4 MiB initialised device table that host code reaches by symbol.
TABLE = """
__device__ unsigned int table[1 << 20] = {1u, 2u, 3u};
extern "C" void* table_address() { void* p = 0; cudaGetSymbolAddress(&p, table); return p; }
"""


def nvcc_object(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".cu")
    src.write_text(source)
    subprocess.run([NVCC, "-c", "-Xcompiler", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return out


def cuobjdump_functions(path: Path) -> list[tuple[str, bool]]:
    """Per cubin, in cuobjdump's order: (arch, whether it defines a function), from its
    resource-usage dump, which lists each cubin's functions."""
    done = subprocess.run(
        [cuobjdump(), "--all-fatbin", "--dump-resource-usage", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    cubins: list[tuple[str, bool]] = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("arch = "):
            cubins.append((line.split(" = ", 1)[1], False))
        elif line.startswith("Function ") and cubins:
            cubins[-1] = (cubins[-1][0], True)
    return cubins


@pytest.mark.parametrize(("codec", "mode"), [("zstd", ()), ("lz4", ("-compress-mode=speed",))])
def test_large_compressed_container_is_opened(codec: str, mode: tuple[str, ...], tmp_path: Path) -> None:
    """A container with no image for the GPU is opened to see whether it has kernels, however
    large its image: here 4 MiB (under 20 KB compressed) of data and no kernel, beside an sm_120
    container with the kernel. cuobjdump says which cubins define functions."""
    squeeze = ("-Xfatbin", "-compress-all", *mode)
    kernel = nvcc_object(tmp_path / "kernel.o", KERNEL, "-gencode", "arch=compute_120,code=sm_120", *squeeze)
    arches = [("-gencode", f"arch=compute_{sm},code=sm_{sm}") for sm in (75, 80, 90)]
    table = nvcc_object(tmp_path / "table.o", TABLE, *(flag for pair in arches for flag in pair), *squeeze)
    library = tmp_path / "libtable.so"
    subprocess.run(
        ["g++", "-shared", "-o", str(library), str(kernel), str(table), f"-L{CUDA_LIB}", "-lcudart"],
        check=True,
    )
    assert cuobjdump_functions(library) == [
        ("sm_120", True),
        ("sm_75", False),
        ("sm_80", False),
        ("sm_90", False),
    ]

    done = envlock_inspect(str(library), "--gpu", "12.0", "--format", "json")
    (result,) = json.loads(done.stdout)["result"]["libraries"]
    entries = [e for c in result["containers"] for e in c["entries"]]
    assert {e["compression"] for e in entries} == {codec}
    assert all(e["uncompressed_size"] > 1 << 22 for e in result["containers"][1]["entries"])
    # As cuobjdump says: the kernel has SASS for sm_120, the other container no kernel at all.
    assert [c["verdict"] for c in result["containers"]] == ["native", "no-kernels"]
    assert (result["verdict"], done.returncode) == ("native", 0), result["reason"]


# --- a wheel, read from the zip ----------------------------------------------------------


def test_wheel_listing_equals_the_library(cuda_libs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    library = cuda_libs["fatz"]
    cubins = tmp_path / "cubins"
    cuobjdump_extract(cuda_libs["sm120a"], cubins)
    members = {"kern/_kern.abi3.so": library.read_bytes(), "kern/__init__.py": b""}
    for file in sorted(cubins.iterdir()):
        members[f"kern/cubins/{file.name}"] = file.read_bytes()
    wheel = make_wheel(tmp_path / "dist", "kern", "1.0", members, tag="cp311-abi3-linux_x86_64")
    assert not (tmp_path / "dist" / "kern").exists()

    result = inspect_path(wheel, "12.0")
    assert result.source == "wheel"
    by_path = {lib.path: lib for lib in result.libraries}
    shared = by_path["kern/_kern.abi3.so"]
    got = [(e.kind, oracle_name(e.kind, e.sm, e.suffix)) for c in shared.containers for e in c.entries]
    assert got == cuobjdump_listing(library)
    direct = inspect_path(library, "12.0").libraries[0]
    assert (shared.verdict, shared.reason) == (direct.verdict, direct.reason) == ("native", direct.reason)
    bundle = by_path[f"kern/cubins/ ({len(list(cubins.iterdir()))} device code files)"]
    assert bundle.kind == "device-code" and bundle.verdict == "native"
    assert {e.arch for c in bundle.containers for e in c.entries} == {"sm_120a"}
    assert result.ok

    done = envlock_inspect(str(wheel), "--gpu", "10.0")
    assert done.returncode == 1  # the loose cubins are sm_120a only


def test_wheel_dependency_from_another_wheel_is_unknown(tmp_path: Path) -> None:
    dep = gxx(tmp_path / "libdep.so", "int dep() { return 1; }\n")
    ext = gxx(tmp_path / "ext.so", "int dep();\nint f() { return dep(); }\n", "-L.", "-ldep")
    wheel = make_wheel(tmp_path / "dist", "needsdep", "1.0", {"needsdep/_ext.abi3.so": ext.read_bytes()})
    dep.unlink()
    library = inspect_path(wheel, "12.0").libraries[0]
    assert library.verdict == "unknown" and library.reason.startswith("needs libdep.so:")


# --- a venv ----------------------------------------------------------------------------


@pytest.fixture
def gpu_venv(cuda_libs: dict[str, Path], tmp_path: Path) -> Path:  # noqa: F811
    """A real venv with torch-like wheels' layout: an extension, nvidia/*/lib, torch/lib, loose cubins."""
    venv = make_venv(tmp_path / "venv")
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "kern" / "cubins").mkdir(parents=True)
    # torch/lib/libc10.so; an extension that links it without any RPATH (torch loads it first).
    gxx(site / "torch" / "lib" / "libc10.so", "namespace c10 { int check(int x) { return x; } }\n")
    gxx(
        site / "kern" / "_ops.cpython-311-x86_64-linux-gnu.so",
        "namespace c10 { int check(int); }\nint f() { return c10::check(1); }\n",
        f"-L{site / 'torch' / 'lib'}",
        "-lc10",
    )
    shutil.copy(cuda_libs["fatz"], site / "kern" / "_cuda.abi3.so")
    cuobjdump_extract(cuda_libs["sm120a"], site / "kern" / "cubins")
    # A plugin its package dlopens on demand, needing a host library this host lacks.
    stub = tmp_path / "stub"
    stub.mkdir()
    gxx(stub / "libabsent.so", "int ibv() { return 0; }\n", "-Wl,-soname,libenvlock_absent.so.1")
    gxx(site / "nvidia" / "cu13" / "lib" / "transport_ib.so.3", "int ibv();\nint t() { return ibv(); }\n",
        f"-L{stub}", "-labsent")  # fmt: skip
    return venv


def test_venv(gpu_venv: Path) -> None:
    done = envlock_inspect(str(gpu_venv), "--gpu", "12.0", "--format", "json")
    assert done.returncode == 0, done.stdout[-2000:]
    result = json.loads(done.stdout)["result"]
    assert result["source"] == "venv" and result["verdict"] == "native"
    by_path = {lib["path"]: lib for lib in result["libraries"]}
    assert by_path["kern/_ops.cpython-311-x86_64-linux-gnu.so"]["verdict"] == "native"
    assert by_path["kern/_cuda.abi3.so"]["images"]["summary"] == "sm_120: 3/3 containers native"
    plugin = by_path["nvidia/cu13/lib/transport_ib.so.3"]
    assert plugin["verdict"] == "wont-load" and plugin["optional"]
    assert plugin["load"]["missing_library"] == "libenvlock_absent.so.1"
    cubins = len(list((gpu_venv / "lib").glob("python*/site-packages/kern/cubins/*")))
    assert by_path[f"kern/cubins/ ({cubins} device code files)"]["verdict"] == "native"

    done = envlock_inspect(str(gpu_venv), "--gpu", "12.1")
    assert done.returncode == 1  # sm_120a cubins only; fatz has sm_120 SASS, fine on 12.1
    assert "kern/cubins/ (" in done.stdout and "no-image" in done.stdout


def test_venv_extension_built_against_another_torch(gpu_venv: Path) -> None:
    site = next((gpu_venv / "lib").glob("python*/site-packages"))
    gxx(site / "torch" / "lib" / "libc10.so", "namespace c10 { int check(long x) { return x; } }\n")
    done = envlock_inspect(str(gpu_venv), "--gpu", "12.0")
    assert done.returncode == 1
    row = next(line for line in done.stdout.splitlines() if line.startswith("kern/_ops"))
    assert "wont-load" in row and "undefined symbol c10::check(int)" in row
