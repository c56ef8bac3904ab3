"""Run the sdist's PEP 517 backend in the build environment, streaming its output to a log.

The frontend is a few lines run by the build venv's own Python (``-I``: no
user site, no PYTHONPATH), so nothing of envlock's environment leaks into the
build; ``backend-path`` entries are put first on ``sys.path`` as PEP 517 says.
Every output line goes to the log as it comes and to the reporter (the
progress line); the wheel's name comes back on a ``@wheel`` line.

The arch is passed the ways build systems read it: ``TORCH_CUDA_ARCH_LIST``
(torch.utils.cpp_extension), ``CMAKE_CUDA_ARCHITECTURES`` and ``CUDAARCHS``
(CMake), and ``NVCC_APPEND_FLAGS`` (``-gencode``, read by nvcc itself, so
even a hand-written nvcc call gets it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from envlock.buildrecord import Toolchain
from envlock.errors import EnvlockError

FRONTEND = r"""
import importlib, os, sys
backend, out = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.abspath(p) for p in sys.argv[3:]]
module, _, attrs = backend.partition(":")
hooks = importlib.import_module(module)
for attr in filter(None, attrs.split(".")):
    hooks = getattr(hooks, attr)
name = hooks.build_wheel(out)
print("@wheel " + name, flush=True)
"""

# Variables of the caller's environment a build may need (the compiler, parallelism,
# certificates, the locale); everything else is envlock's, and recorded.
PASSED_THROUGH = ("HOME", "LANG", "LC_ALL", "TMPDIR", "CC", "CXX", "MAX_JOBS", "SSL_CERT_FILE", "TERM")


class BuildFailed(EnvlockError):
    """The backend failed; the build directory is kept and the log named."""


def arch_flags(ccs: tuple[str, ...]) -> dict[str, str]:
    """``("12.0",)`` -> the variables build systems read the arch from."""
    sms = [cc.replace(".", "") for cc in ccs]
    return {
        "TORCH_CUDA_ARCH_LIST": ";".join(ccs),
        "CMAKE_CUDA_ARCHITECTURES": ";".join(sms),
        "CUDAARCHS": ";".join(sms),
        "NVCC_APPEND_FLAGS": " ".join(f"-gencode=arch=compute_{sm},code=sm_{sm}" for sm in sms),
    }


def build_env(venv: Path, toolchain: Toolchain, flags: dict[str, str]) -> dict[str, str]:
    """The environment of the build: the venv and the toolkit first on PATH, the arch flags."""
    nvcc_dir = os.path.dirname(toolchain.nvcc)
    env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
    env.update(flags)
    env.update(
        {
            "PATH": os.pathsep.join([str(venv / "bin"), nvcc_dir, os.environ.get("PATH", "/usr/bin:/bin")]),
            "CUDA_HOME": toolchain.cuda_home,
            "CUDA_PATH": toolchain.cuda_home,
            "VIRTUAL_ENV": str(venv),
            "PYTHONNOUSERSITE": "1",
            "PIP_NO_INDEX": "1",  # a backend that tries to fetch something fails instead
            "SOURCE_DATE_EPOCH": "315532800",  # 1980-01-01: zip's first date, for repeatable wheels
        }
    )
    env.setdefault("MAX_JOBS", str(min(os.cpu_count() or 1, 8)))
    return env


def run_backend(
    *,
    venv: Path,
    tree: Path,
    backend: str,
    backend_path: tuple[str, ...],
    out: Path,
    env: dict[str, str],
    log: Path,
    on_line: Callable[[int, str], None],
) -> Path:
    """Build the wheel into ``out``; its path. Raises BuildFailed naming the log."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    argv = [str(venv / "bin" / "python"), "-I", "-u", "-c", FRONTEND, backend, str(out), *backend_path]
    wheel = None
    count = 0
    with open(log, "a", encoding="utf-8") as stream:
        stream.write(f"$ cd {tree} && python -I -c <PEP 517 frontend> {backend} {out}\n")
        stream.flush()
        proc = subprocess.Popen(
            argv,
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            stream.write(line)
            stream.flush()
            count += 1
            if line.startswith("@wheel "):
                wheel = line[len("@wheel ") :].strip()
            on_line(count, line.rstrip("\n"))
        code = proc.wait()
    if code != 0 or wheel is None:
        raise BuildFailed(f"the build failed (exit {code}); build directory kept, log: {log}")
    path = out / wheel
    if os.path.basename(wheel) != wheel or not path.is_file():
        raise BuildFailed(f"the backend named {wheel!r}, which is not a file in {out}; log: {log}")
    return path
