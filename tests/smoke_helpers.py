"""Broken packages for the import smoke: one real wheel per way an import fails.

Native cases are real ELF libraries built with ``cc``: an extension whose
NEEDED library was deleted after linking, one linked against a newer
``libdep`` than the one it ships (undefined symbol), one linked against a
stub ``libcuda.so.1`` that is then removed (needs the GPU driver), and one
that needs a library another package ships where the loader cannot see it.
The extensions never reach ``PyInit``: the loader fails first, as it does
for a real extension built against the wrong libraries.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import make_wheel

NATIVE = "py3-none-linux_x86_64"


def cc(out: Path, source: str, *args: str) -> Path:
    """Compile C ``source`` into the shared library ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.c"
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True)
    src.unlink()
    return out


def _library(build: Path, soname: str, source: str) -> Path:
    return cc(build / soname, source, f"-Wl,-soname,{soname}")


def _linked(build: Path, name: str, library: Path, call: str, *extra: str) -> bytes:
    """An extension whose code calls ``call`` from ``library`` (NEEDED by its SONAME)."""
    source = f"extern int {call}(void);\nint envlock_use(void) {{ return {call}(); }}\n"
    out = cc(build / name, source, f"-L{library.parent}", f"-l:{library.name}", *extra)
    return out.read_bytes()


def native_wheels(out: Path, build: Path) -> list[Path]:
    """nativeext (NEEDED library deleted), abiext (undefined symbol), gpuext (libcuda.so.1
    deleted), shipext (needs shiplib's library but has no RPATH to it) and shiplib."""
    gone = _library(build / "gone", "libgone.so.1", "int gone_fn(void) { return 1; }\n")
    nativeext = _linked(build, "nativeext.so", gone, "gone_fn")
    gone.unlink()  # linked against it, and now it is nowhere

    dep_v2 = _library(
        build / "v2", "libdep.so.1", "int dep_fn(void){return 1;}\nint dep_v2_fn(void){return 2;}\n"
    )
    dep_v1 = _library(build / "v1", "libdep.so.1", "int dep_fn(void) { return 1; }\n")
    abiext = _linked(build, "abiext.so", dep_v2, "dep_v2_fn", "-Wl,-rpath,$ORIGIN")

    cuda = _library(build / "cuda", "libcuda.so.1", "int cuInit(unsigned f) { return 0; }\n")
    gpuext = _linked(build, "gpuext.so", cuda, "cuInit")
    cuda.unlink()

    shipped = _library(build / "ship", "libshipped.so.1", "int shipped_fn(void) { return 3; }\n")
    shipext = _linked(build, "shipext.so", shipped, "shipped_fn")

    def ext(name: str, lib: bytes, extra: dict[str, bytes] | None = None) -> Path:
        files = {f"{name}/__init__.py": f"from {name} import _core\n".encode(), f"{name}/_core.abi3.so": lib}
        return make_wheel(out, name, "1.0", {**files, **(extra or {})}, tag=NATIVE)

    return [
        ext("nativeext", nativeext),
        ext("abiext", abiext, {"abiext/libdep.so.1": dep_v1.read_bytes()}),
        ext("gpuext", gpuext),
        ext("shipext", shipext),
        make_wheel(
            out,
            "shiplib",
            "1.0",
            {"shiplib/__init__.py": b"", "shiplib/lib/libshipped.so.1": shipped.read_bytes()},
            tag=NATIVE,
        ),
    ]


def python_wheels(out: Path) -> list[Path]:
    """The xgrammar story (servekit needs a name only xgram 0.1.32 has), a dependency that
    will be uninstalled (llguid), one no lock provides, a segfault, a hang, ctypes on
    libcuda.so.1, a plain error, and one that imports fine."""

    def w(name: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
        return make_wheel(out, name, version, files, requires=requires)

    return [
        w("xgram", "0.1.10", {"xgram/__init__.py": b"VERSION = '0.1.10'\n"}),
        w("xgram", "0.1.32", {"xgram/__init__.py": b"VERSION = '0.1.32'\nclass StructuralTag:\n    pass\n"}),
        w(
            "servekit",
            "1.0",
            {
                "servekit/__init__.py": b"from servekit import grammar\n",
                "servekit/grammar.py": b"from xgram import StructuralTag\n",
            },
            requires=("xgram>=0.1.32",),
        ),
        w("llguid", "1.0", {"llguid/__init__.py": b"X = 1\n"}),
        w("usesllguid", "1.0", {"usesllguid/__init__.py": b"import llguid\n"}, requires=("llguid",)),
        w("soundish", "1.0", {"soundish/__init__.py": b"import os\nimport soundfile_missing\n"}),
        w("crashy", "1.0", {"crashy/__init__.py": b"import ctypes\nctypes.string_at(0)\n"}),
        w("hangs", "1.0", {"hangs/__init__.py": b"import time\ntime.sleep(3600)\n"}),
        w("gpuctypes", "1.0", {"gpuctypes.py": b"import ctypes\nctypes.CDLL('libcuda.so.1')\n"}),
        w("raiser", "1.0", {"raiser/__init__.py": b"raise RuntimeError('CUDA_HOME is not set')\n"}),
        w("fine", "1.0", {"fine/__init__.py": b"OK = True\n"}),
    ]


def deep_wheels(out: Path) -> list[Path]:
    """A package with submodules (one broken, a __main__ that must not run, a data
    directory and a shipped library the walk must skip) and an order-dependent pair."""
    lib = cc(out / "build" / "libhelper.so", "int helper(void) { return 0; }\n").read_bytes()
    deep = make_wheel(
        out,
        "deeppkg",
        "1.0",
        {
            "deeppkg/__init__.py": b"",
            "deeppkg/a.py": b"A = 1\n",
            "deeppkg/sub/__init__.py": b"",
            "deeppkg/sub/broken.py": b"import deep_missing_dep\n",
            "deeppkg/__main__.py": b"raise SystemExit(3)\n",
            "deeppkg/data/x.py": b"raise RuntimeError('data, not code')\n",
            "deeppkg/libhelper.so": lib,
        },
        tag=NATIVE,
    )
    poison = make_wheel(
        out, "aaa-poison", "1.0", {"aaa_poison.py": b"import builtins\nbuiltins.POISON = 1\n"}
    )
    victim = make_wheel(
        out,
        "bbb-orderdep",
        "1.0",
        {"bbb_orderdep.py": b"import builtins\nassert not hasattr(builtins, 'POISON'), 'poisoned'\n"},
    )
    return [deep, poison, victim]
