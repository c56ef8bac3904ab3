"""Is the built wheel what was asked for? The CUDA reader's verdict, and the loader's symbols.

The wheel is installed into its own build environment (beside the torch it
was compiled against) and each of its shared libraries is inspected there,
as ``envlock inspect`` would on the host: it must have the requested arch as
SASS, or PTX the driver JITs (``native`` or ``jit``), and every undefined
symbol must be exported by what it loads (torch's ``libc10``/``libtorch*``,
the CUDA runtime). Anything else fails the build, with the library, verdict
and reason, and nothing is put in the store.
"""

from __future__ import annotations

import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from envlock.binary.cuda import JIT, NATIVE
from envlock.build.env import uv_binary
from envlock.errors import EnvlockError
from envlock.inspect import inspect_path


class BuildCheckError(EnvlockError):
    """The built wheel has no image for the GPU, or a library that would not load."""


@dataclass(frozen=True, slots=True)
class LibraryVerdict:
    path: str  # in the wheel
    gpu: str
    verdict: str
    reason: str
    arches: tuple[str, ...]
    device_code: bool


def check_wheel(wheel: Path, venv: Path, ccs: tuple[str, ...], log: Path) -> list[LibraryVerdict]:
    with open(log, "a", encoding="utf-8") as out:
        argv = [str(uv_binary()), "pip", "install", "-q", "--no-deps", "--offline", "--no-index",
                "--reinstall", "--python", str(venv / "bin" / "python"), str(wheel)]  # fmt: skip
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise BuildCheckError(f"{wheel.name}: would not install into its build environment; log: {log}")
    site = sorted(venv.glob("lib/python*/site-packages"))[0]
    found: list[LibraryVerdict] = []
    problems: list[str] = []
    for member, installed in _libraries(wheel, site, venv):
        for cc in ccs:
            result = inspect_path(installed, gpu=cc)
            for lib in result.libraries:
                found.append(LibraryVerdict(member, cc, lib.verdict, lib.reason, lib.arches, lib.device_code))
                if lib.verdict not in (NATIVE, JIT):
                    problems.append(f"{member}: {lib.verdict} on {cc}: {lib.reason}")
    if problems:
        raise BuildCheckError(f"{wheel.name} does not run on the GPU: {'; '.join(problems)}; log: {log}")
    return found


def _libraries(wheel: Path, site: Path, venv: Path) -> list[tuple[str, Path]]:
    """Shared libraries in the wheel, and where the install put each."""
    found = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            base = name.rsplit("/", 1)[-1]
            if not (base.endswith(".so") or ".so." in base):
                continue
            head, _, rest = name.partition("/")
            if head.endswith(".data"):
                scheme, _, inner = rest.partition("/")
                target = site / inner if scheme in ("purelib", "platlib") else venv / inner
            else:
                target = site / name
            if target.is_file():
                found.append((name, target))
    return found
