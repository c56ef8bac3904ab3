"""The ld.so model (binary/loader.py), checked against the real dynamic loader where it can run here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cuda_helpers import loads_for_real, patched, replace_string
from envlock.inspect import inspect_path

CUDA_LIB = Path("/usr/local/cuda/lib64")


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


@pytest.mark.parametrize(
    ("soname", "symbol"),
    [
        ("libcuda.so.1", "cuInit"),
        ("libnvidia-ml.so.1", "nvmlInit_v2"),
        ("libnvcuvid.so.1", "cuvidCreateDecoder"),
    ],
)
def test_driver_library_is_assumed(soname: str, symbol: str, tmp_path: Path) -> None:
    """Driver libraries (binary/driver.py) come with the driver: absent from this host, each
    is assumed, with the symbols its family exports."""
    stub = tmp_path / "stub"
    stub.mkdir()
    link_name = soname.rsplit(".", 1)[0]  # libcuda.so
    gxx(stub / link_name, f'extern "C" int {symbol}(unsigned) {{ return 0; }}\n', f"-Wl,-soname,{soname}")
    built = gxx(
        tmp_path / "libdrv.so",
        f'extern "C" int {symbol}(unsigned);\nint f() {{ return {symbol}(0); }}\n',
        "-Lstub",
        f"-l:{link_name}",
    )
    (stub / link_name).unlink()
    library = inspect_path(built, "12.0").libraries[0]
    assert library.verdict == "native", library.reason
    assert library.load is not None
    where = library.load.resolved[soname]
    # The real loader's cache decides which answer is right on this host: a
    # host with the driver installed resolves the real file, one without
    # (these CPU machines) gets the driver assumption.
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    installed = [line for line in cache.splitlines() if line.strip().startswith(soname + " ")]
    if installed:
        assert Path(where).name.startswith(link_name), where
    else:
        assert where == "driver"
