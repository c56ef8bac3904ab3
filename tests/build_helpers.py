"""Real sdists for ``envlock build`` tests: written here, built by setuptools, nvcc and torch."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path

MIRROR = Path("/opt/pypi/files")
SETUPTOOLS = "setuptools-84.0.0-py3-none-any.whl"
NINJA = "ninja-1.13.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
CACHE = Path.home() / ".cache" / "envlock-tests"


def registry_wheel(filename: str) -> Path:
    """A wheel from the machine's registry mirror, else ``pip download``-ed into the test cache."""
    if (MIRROR / filename).is_file():
        return MIRROR / filename
    cached = CACHE / "wheels" / filename
    if not cached.is_file():
        name, version = filename.split("-")[:2]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cached.parent),
             f"{name}=={version}"],
            check=True,
        )  # fmt: skip
    return cached


def write_sdist(out_dir: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """A PEP 625 sdist (``name-version.tar.gz``, one top directory, PKG-INFO), with fixed times."""
    dist = re.sub(r"[-_.]+", "_", name).lower()
    top = f"{dist}-{version}"
    members = {"PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", **files}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{top}.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for rel, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


PYPROJECT = """[build-system]
requires = [{requires}]
build-backend = "setuptools.build_meta"
"""

# A plain nvcc library: setup.py runs nvcc itself, with -gencode for each arch in
# CUDAARCHS, into a shared library the package loads with ctypes.
NVCC_SETUP = """import os, subprocess
from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class BuildKernel(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "{pkg}", "_k.so")
        archs = {archs}
        gencode = ["-gencode=arch=compute_%s,code=sm_%s" % (a, a) for a in archs]
        env = dict(os.environ)
        {env_edit}
        subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", *gencode, "-o", out, "kern.cu"],
                       check=True, env=env)


setup(name="{name}", version="{version}", packages=["{pkg}"],
      cmdclass={{"build_py": BuildKernel}}, distclass=BinaryDistribution)
"""

KERNEL = """__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }
extern "C" int kern_version() { return 7; }
"""

INIT = """import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_k.so"))
def version():
    return _lib.kern_version()
"""


def nvcc_sdist(
    out_dir: Path,
    name: str,
    version: str,
    *,
    kernel: str = KERNEL,
    hardcoded_arch: str | None = None,
) -> Path:
    """``hardcoded_arch``: the setup.py ignores the requested arch and builds only this one
    (and keeps nvcc from appending envlock's -gencode), like a build system that pins its arch."""
    pkg = name.replace("-", "_")
    if hardcoded_arch:
        archs, env_edit = repr([hardcoded_arch]), 'env.pop("NVCC_APPEND_FLAGS", None)'
    else:
        archs, env_edit = 'os.environ.get("CUDAARCHS", "90").split(";")', "pass"
    setup = NVCC_SETUP.format(pkg=pkg, name=name, version=version, archs=archs, env_edit=env_edit)
    return write_sdist(
        out_dir,
        name,
        version,
        {
            "pyproject.toml": PYPROJECT.format(requires='"setuptools>=61"'),
            "setup.py": setup,
            "kern.cu": kernel,
            f"{pkg}/__init__.py": INIT,
        },
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cuobjdump_elf_arches(library: Path) -> list[str]:
    """``cuobjdump --list-elf``: the SASS arches NVIDIA's own tool finds in a library."""
    from cuda_helpers import cuobjdump

    out = subprocess.run(
        [cuobjdump(), "--list-elf", str(library)], capture_output=True, text=True, check=True
    )
    return sorted(set(re.findall(r"\.(sm_\d+a?)\.cubin", out.stdout)))


# A torch.utils.cpp_extension CUDAExtension: one tiny kernel, one binding that takes a tensor.
TORCH_SETUP = """from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="tinyext",
    version="0.1",
    packages=["tinyext"],
    ext_modules=[CUDAExtension("tinyext._C", ["csrc/ext.cpp", "csrc/kern.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
"""

TORCH_EXT_CPP = """#include <torch/extension.h>
void launch_scale(float *x, int n, float a);
torch::Tensor scale(torch::Tensor x, double a) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "a float CUDA tensor");
  launch_scale(x.data_ptr<float>(), static_cast<int>(x.numel()), static_cast<float>(a));
  return x;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); }
"""

TORCH_EXT_CU = """__global__ void scale_kernel(float *x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
void launch_scale(float *x, int n, float a) { scale_kernel<<<(n + 255) / 256, 256>>>(x, n, a); }
"""


INIT_TORCH = "import torch  # noqa: F401  (libc10, libtorch first)\nfrom tinyext._C import scale\n"


def torch_extension_sdist(out_dir: Path) -> Path:
    return write_sdist(
        out_dir,
        "tinyext",
        "0.1",
        {
            "pyproject.toml": PYPROJECT.format(requires='"setuptools>=61", "torch", "ninja"'),
            "setup.py": TORCH_SETUP,
            "csrc/ext.cpp": TORCH_EXT_CPP,
            "csrc/kern.cu": TORCH_EXT_CU,
            "tinyext/__init__.py": INIT_TORCH,
        },
    )
