"""The CUDA toolkit and C++ compiler a build runs with, checked before anything is built.

nvcc is looked for where build systems look: ``$CUDA_HOME/bin/nvcc``, then
``PATH``. The toolkit's root comes from nvcc itself (``--dryrun`` prints its
``TOP``), since ``/usr/local/bin/nvcc`` is often a wrapper script. A build is
refused (exit 2, naming what is missing) when there is no nvcc, when that nvcc
cannot generate code for the GPU, when its CUDA major version is not the one
the lock's CUDA wheels are for, or when there is no C++ compiler.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from envlock.buildrecord import Toolchain
from envlock.errors import EnvlockError
from envlock.lock.model import Lock


class ToolchainError(EnvlockError):
    """No nvcc, a CUDA toolkit that cannot build for the GPU or does not match the lock, no compiler."""


def find_toolchain(sms: tuple[str, ...], lock: Lock, lock_shown: str) -> Toolchain:
    """The toolchain for building ``sms`` (``("120",)``) against ``lock``'s CUDA wheels."""
    nvcc = _find_nvcc()
    version = _run([nvcc, "--version"], "nvcc --version")
    found = re.search(r"release (\d+\.\d+), V(\d+(?:\.\d+)+)", version)
    if found is None:
        raise ToolchainError(f"{nvcc}: `nvcc --version` says no CUDA release: {version.strip()[:200]}")
    cuda, full = found.group(1), found.group(2)
    known = set(_run([nvcc, "--list-gpu-code"], "nvcc --list-gpu-code").split())
    for sm in sms:
        if f"sm_{sm}" not in known:
            newest = max((int(k[3:]) for k in known if re.fullmatch(r"sm_\d+", k)), default=0)
            raise ToolchainError(
                f"{nvcc} (CUDA {cuda}) cannot generate code for sm_{sm} (it knows up to sm_{newest}): "
                "install a CUDA toolkit that does and put its nvcc first on PATH (or set CUDA_HOME)"
            )
    wanted = lock_cuda_major(lock)
    if wanted is not None and wanted[0] != cuda.split(".")[0]:
        raise ToolchainError(
            f"{lock_shown} pins CUDA {wanted[0]} wheels ({wanted[1]}) but {nvcc} is CUDA {cuda}: "
            f"install the CUDA {wanted[0]} toolkit and put its nvcc first on PATH (or set CUDA_HOME)"
        )
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler or not shutil.which(compiler):
        raise ToolchainError("no C++ compiler: nvcc needs one (install g++, or set CXX)")
    first = _run([compiler, "--version"], f"{compiler} --version").splitlines()
    return Toolchain(
        nvcc=nvcc,
        nvcc_version=full,
        cuda_version=cuda,
        cuda_home=_cuda_home(nvcc),
        compiler=first[0].strip() if first else compiler,
        compiler_path=shutil.which(compiler) or compiler,
    )


def lock_cuda_major(lock: Lock) -> tuple[str, str] | None:
    """The CUDA major version the lock's wheels are built for, and the package that says so.

    The CUDA runtime wheel names it (``nvidia-cuda-runtime`` 13.0.96, or the
    ``-cu12`` names); else torch's local label (``+cu128``). None: no CUDA wheel.
    """
    for pkg in lock.packages:
        named = re.fullmatch(r"nvidia-cuda-runtime(?:-cu(\d+))?", pkg.name)
        if named:
            return named.group(1) or pkg.version.split(".")[0], f"{pkg.name} {pkg.version}"
    torch = lock.package("torch")
    if torch is not None:
        label = re.search(r"\+cu(\d+?)(\d)$", torch.version)
        if label:
            return label.group(1), f"torch {torch.version}"
    return None


def _find_nvcc() -> str:
    home = os.environ.get("CUDA_HOME")
    if home:
        candidate = Path(home) / "bin" / "nvcc"
        if not os.access(candidate, os.X_OK):
            raise ToolchainError(f"CUDA_HOME={home}: no nvcc in {candidate.parent}")
        return str(candidate)
    found = shutil.which("nvcc")
    if found is None:
        raise ToolchainError(
            "nvcc not found: no CUDA_HOME and no nvcc on PATH; install the CUDA toolkit "
            "(nvcc) and put it on PATH, or set CUDA_HOME"
        )
    return found


def _cuda_home(nvcc: str) -> str:
    """The toolkit root: nvcc's own ``TOP`` (a wrapper script on PATH is not the toolkit)."""
    try:
        proc = subprocess.run(
            [nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=60,
        )
        top = re.search(r"^#\$ TOP=(.+)$", proc.stderr + proc.stdout, re.MULTILINE)
    except (OSError, subprocess.TimeoutExpired):
        top = None
    if top:
        return os.path.realpath(top.group(1).strip())
    return str(Path(os.path.realpath(nvcc)).parent.parent)


def _run(argv: list[str], what: str) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"`{what}` did not run: {exc}") from exc
    if proc.returncode != 0:
        raise ToolchainError(f"`{what}` failed (exit {proc.returncode}): {proc.stderr.strip()[:200]}")
    return proc.stdout
