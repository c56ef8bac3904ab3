"""Inputs the rows share: the GPU venv (built elsewhere, waited for, never rebuilt here), a small .so."""

from __future__ import annotations

import sys
import sysconfig
import time
from pathlib import Path

# How long a row waits for another process still building the GPU venv.
GPU_VENV_WAIT_S = 1800


def gpu_venv_ready(work: Path, wait_s: float = GPU_VENV_WAIT_S) -> Path | None:
    """The shared GPU venv once its completion marker exists; None if there is none to wait for.

    ``common.gpu_venv`` removes and rebuilds a venv without the marker, which
    would break a build in progress; the whole-process rows only wait.
    """
    venv = work / "gpu-venv"
    marker = venv / ".envlock-bench-complete"
    deadline = time.monotonic() + wait_s
    while not marker.exists():
        if not venv.exists() or time.monotonic() > deadline:
            return None
        print(f"waiting for {marker}", file=sys.stderr, flush=True)
        time.sleep(30)
    return venv


def small_extension() -> Path:
    """A small compiled extension of this interpreter's standard library (tens of KB)."""
    found = sorted(Path(sysconfig.get_config_var("DESTSHARED")).glob("math.*.so"))
    if not found:
        raise SystemExit("no math extension .so in this interpreter's lib-dynload")
    return found[0]
