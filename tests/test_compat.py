"""Compatibility decisions: the CUDA.md rules as tables, on real builds and real loader behaviour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cuda_helpers import (
    GPUS,
    VARIANTS,
    cuda_libs,  # noqa: F401  (session fixture)
    loads_for_real,
    patched,
    replace_string,
)
from envlock.binary import compat
from envlock.binary.compat import Gpu
from envlock.binary.fatbin import FatbinEntry
from envlock.inspect import inspect_path

CUDA_LIB = Path("/usr/local/cuda/lib64")


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_verdict_table(name: str, cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    """Each build on CC 9.0, 10.0, 12.0 and 12.1, as CUDA.md decides it."""
    got = tuple(inspect_path(cuda_libs[name], gpu).libraries[0].verdict for gpu in GPUS)
    assert got == VARIANTS[name].verdicts


def entry(kind: str, sm: int, suffix: str = "", isa: tuple[int, int] = (9, 0)) -> FatbinEntry:
    return FatbinEntry(0, 0, kind, sm, suffix, isa, 0x11, "none", 64, 100, 0, 0)


@pytest.mark.parametrize(
    ("sm", "suffix", "gpus"),
    [
        (120, "", {"12.0", "12.1"}),
        (120, "a", {"12.0"}),
        (120, "f", {"12.0", "12.1"}),
        (100, "", {"10.0", "10.3"}),
        (100, "a", {"10.0"}),
        (100, "f", {"10.0", "10.3"}),
        (90, "", {"9.0"}),
        (90, "a", {"9.0"}),
        (86, "", {"8.6", "8.9"}),
        (121, "", {"12.1"}),
    ],
)
def test_sass_rules(sm: int, suffix: str, gpus: set[str]) -> None:
    every = ("8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
    assert {g for g in every if compat.sass_runs(entry("elf", sm, suffix), Gpu.parse(g))} == gpus


@pytest.mark.parametrize(
    ("sm", "suffix", "gpus"),
    [
        (90, "", {"9.0", "10.0", "10.3", "11.0", "12.0", "12.1"}),
        (120, "", {"12.0", "12.1"}),
        (120, "a", {"12.0"}),
        (100, "f", {"10.0", "10.3"}),
        (80, "", {"8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"}),
    ],
)
def test_ptx_rules(sm: int, suffix: str, gpus: set[str]) -> None:
    every = ("8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
    assert {g for g in every if compat.ptx_runs(entry("ptx", sm, suffix), Gpu.parse(g))} == gpus


def test_driver_tables() -> None:
    assert compat.ptx_driver((8, 7)) == "570.26"
    assert compat.ptx_driver((8, 8)) == "575.51.03"
    assert compat.ptx_driver((9, 0)) == "580.65.06"
    assert compat.ptx_driver((8, 6)) == "570.26"  # between known ISAs: the next one's driver
    assert compat.ptx_driver((9, 9)) is None
    assert compat.gpu_driver(Gpu(12, 0)) == "570.26"
    assert compat.RUNTIME_DRIVER[12] == "525.60.13" and compat.RUNTIME_DRIVER[13] == "580"
    assert compat.parse_driver("580.65.06") > compat.parse_driver("580")
    assert Gpu.parse("sm_120") == Gpu.parse("12.0") == Gpu.parse("120") == Gpu(12, 0)
    for bad in ("13", "twelve", "12.10", ""):
        with pytest.raises(ValueError):
            Gpu.parse(bad)


@pytest.mark.parametrize(
    ("name", "gpu", "driver", "verdict", "reason"),
    [
        ("ptx90", "12.0", "580.65.06", "jit", "JIT from PTX compute_90"),
        ("ptx90", "12.0", "575.51.03", "no-image", "PTX ISA 9.0 needs driver >= 580.65.06"),
        ("ptx90", "9.0", "575.51.03", "native", "sm_90: 3/3 containers native"),
        ("sm120", "12.0", "565.57.01", "wont-load", "sm_120 GPUs need driver >= 570.26"),
        ("sm120", "12.0", "570.26", "native", "sm_120: 2/2 containers native"),
        ("sm120", "12.1", "570.26", "wont-load", "sm_121 GPUs need driver >= 575.51.03"),
    ],
)
def test_driver_decides(
    name: str,
    gpu: str,
    driver: str,
    verdict: str,
    reason: str,
    cuda_libs: dict[str, Path],  # noqa: F811
) -> None:
    library = inspect_path(cuda_libs[name], gpu, driver).libraries[0]
    assert library.verdict == verdict
    assert reason in library.reason


# --- loading: checked against the real dynamic loader where it can run here --------------

PROVIDER = """
namespace c10 {
int check(int x) { return x + 1; }
#ifndef WITHOUT_SYMBOL
int device_count() { return 0; }
#endif
}
"""
EXTENSION = """
namespace c10 { int check(int); int device_count(); }
extern "C" int envlock_ext() { return c10::check(1) + c10::device_count(); }
"""


def gxx(out: Path, source: str, *args: str) -> Path:
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, cwd=out.parent)
    return out


@pytest.fixture
def torch_like(tmp_path: Path) -> Path:
    """An extension linked against a "libc10.so", which a test then rebuilds without a symbol."""
    gxx(tmp_path / "libc10.so", PROVIDER)
    gxx(tmp_path / "ext.so", EXTENSION, "-L.", "-lc10", "-Wl,-rpath,$ORIGIN")
    return tmp_path


def test_extension_against_changed_library(torch_like: Path) -> None:
    ext = torch_like / "ext.so"
    assert loads_for_real(ext) == (True, "")
    before = inspect_path(ext, "12.0").libraries[0]
    assert (before.verdict, before.reason) == ("native", "no device code")
    assert before.load is not None and before.load.resolved["libc10.so"] == str(torch_like / "libc10.so")

    gxx(torch_like / "libc10.so", PROVIDER, "-DWITHOUT_SYMBOL")
    real_ok, real_error = loads_for_real(ext)
    assert not real_ok and "undefined symbol: _ZN3c1012device_countEv" in real_error
    after = inspect_path(ext, "12.0")
    library = after.libraries[0]
    assert library.verdict == "wont-load" and not after.ok
    assert library.reason.startswith("undefined symbol c10::device_count()")
    assert library.load is not None and library.load.missing_symbols == ("_ZN3c1012device_countEv",)


def test_symbol_shown_mangled_without_cxxfilt(torch_like: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gxx(torch_like / "libc10.so", PROVIDER, "-DWITHOUT_SYMBOL")
    monkeypatch.setenv("PATH", "/nonexistent")
    library = inspect_path(torch_like / "ext.so", "12.0").libraries[0]
    assert library.reason.startswith("undefined symbol _ZN3c1012device_countEv")


def test_missing_cuda_runtime_major(tmp_path: Path) -> None:
    """A cu12 extension where only CUDA 13 exists: needs libcudart.so.12, nothing provides it."""
    if not (CUDA_LIB / "libcudart.so.13").exists():
        pytest.fail(f"{CUDA_LIB}/libcudart.so.13 is missing: the CUDA 13 toolkit is part of the test rig")
    cu13 = gxx(
        tmp_path / "ext13.so",
        'extern "C" int cudaGetDeviceCount(int*);\nint f(int* n) { return cudaGetDeviceCount(n); }\n',
        f"-L{CUDA_LIB}",
        "-lcudart",
    )
    assert inspect_path(cu13, "12.0", "580.65.06").libraries[0].verdict == "native"
    old = inspect_path(cu13, "12.0", "575.51.03").libraries[0]
    assert (old.verdict, old.reason) == ("wont-load", "CUDA 13 runtime needs driver >= 580")

    cu12 = patched(
        cu13, tmp_path / "ext12.so", lambda d: replace_string(d, b"libcudart.so.13", b"libcudart.so.12")
    )
    real_ok, real_error = loads_for_real(cu12)
    assert not real_ok and "libcudart.so.12" in real_error
    library = inspect_path(cu12, "12.0").libraries[0]
    assert library.verdict == "wont-load"
    assert library.reason.startswith("needs the CUDA 12 runtime (libcudart.so.12)")
    assert library.load is not None and library.load.cuda_runtime == 12


@pytest.mark.parametrize(
    ("old", "new", "family"),
    [(b"GLIBC_2.2.5", b"GLIBC_9.2.5", "GLIBC_"), (b"GLIBCXX_3.4", b"GLIBCXX_9.9", "GLIBCXX_")],
)
def test_symbol_versions_newer_than_the_host(old: bytes, new: bytes, family: str, tmp_path: Path) -> None:
    built = gxx(
        tmp_path / "libv.so",
        "#include <string>\n#include <cstring>\n"
        "std::string f(const char* s) { return std::string(s, strlen(s)); }\n",
    )
    assert inspect_path(built, "12.0").libraries[0].verdict == "native"
    newer = patched(built, tmp_path / "libnewer.so", lambda d: replace_string(d, old, new))
    real_ok, real_error = loads_for_real(newer)
    assert not real_ok and new.decode() in real_error
    library = inspect_path(newer, "12.0").libraries[0]
    assert library.verdict == "wont-load"
    assert library.reason.startswith(f"needs {new.decode()}")  # GLIBCXX_3.4.21 became GLIBCXX_9.9.21
    assert " from lib" in library.reason
    assert f"provides up to {family}" in library.reason


def test_dependency_found_through_inherited_rpath(tmp_path: Path) -> None:
    """ld.so searches a dependency's dependencies with the loader's DT_RPATH too."""
    sub = tmp_path / "sub"
    sub.mkdir()
    gxx(sub / "libc.so.9", "int leaf() { return 1; }\n")
    gxx(sub / "libb.so", "int leaf();\nint mid() { return leaf(); }\n", "-L.", "-l:libc.so.9")
    top = gxx(
        tmp_path / "liba.so",
        "int mid();\nint top() { return mid(); }\n",
        "-Lsub",
        "-lb",
        "-Wl,--disable-new-dtags,-rpath,$ORIGIN/sub",
    )
    assert loads_for_real(top) == (True, "")
    library = inspect_path(top, "12.0").libraries[0]
    assert library.verdict == "native", library.reason
    assert library.load is not None and library.load.resolved["libc.so.9"] == str(sub / "libc.so.9")
    # With RUNPATH instead, ld.so does not pass it on: libb.so's libc.so.9 is not found.
    top = gxx(
        tmp_path / "liba.so",
        "int mid();\nint top() { return mid(); }\n",
        "-Lsub",
        "-lb",
        "-Wl,--enable-new-dtags,-rpath,$ORIGIN/sub",
    )
    real_ok, real_error = loads_for_real(top)
    assert not real_ok and "libc.so.9" in real_error
    library = inspect_path(top, "12.0").libraries[0]
    assert library.verdict == "wont-load" and library.reason.startswith("needs libc.so.9 (needed by libb.so)")


def test_driver_library_is_assumed(tmp_path: Path) -> None:
    """libcuda.so.1 comes with the driver: absent from this host, it is assumed, with its cu* symbols."""
    stub = tmp_path / "stub"
    stub.mkdir()
    gxx(stub / "libcuda.so", 'extern "C" int cuInit(unsigned) { return 0; }\n', "-Wl,-soname,libcuda.so.1")
    built = gxx(
        tmp_path / "libdrv.so",
        'extern "C" int cuInit(unsigned);\nint f() { return cuInit(0); }\n',
        "-Lstub",
        "-lcuda",
    )
    (stub / "libcuda.so").unlink()
    library = inspect_path(built, "12.0").libraries[0]
    assert library.verdict == "native", library.reason
    assert library.load is not None
    where = library.load.resolved["libcuda.so.1"]
    # The real loader's cache decides which answer is right on this host: a
    # host with the driver installed resolves the real file, one without
    # (these CPU machines) gets the driver assumption.
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    installed = [
        line.split("=> ")[-1] for line in cache.splitlines() if line.strip().startswith("libcuda.so.1 ")
    ]
    if installed:
        assert Path(where).name.startswith("libcuda.so"), where
    else:
        assert where == compat.DRIVER == "driver"
