"""Will a venv's native libraries load? Judged from the ELF facts a lock records.

Two reasons a library will not load that a lock can show without the host:

- a ``DT_NEEDED`` entry that nothing provides: no library in the venv has
  that SONAME or file name, and it is not one the host's system or GPU
  driver provides (a cu12 extension in a cu13 venv needs ``libcudart.so.12``).
  Whether the host has it is a fact capture records (``Lock.host_libraries``):
  each such problem carries the host's answer, ``missing``, ``present``
  (an sdist build linking the host's ``libyaml-0.so.2``) or ``unknown``
  (a lock without the facts), and review rates it by that answer;
- a ``GLIBC_`` symbol version newer than the host's glibc.

Resolution is by name, across the whole venv, not by following
RPATH/RUNPATH: wheels find each other's libraries through ``$ORIGIN``
paths into sibling packages (``nvidia/*/lib``) or because torch loads them
first, so "some package of this venv ships it" is the question that
separates the seed-case failure from a working venv. Torch ABI symbols
(``_ZN3c10...``) are the lock's ABI facts, checked by ``envlock.abi``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from envlock.binary.driver import driver_library
from envlock.lock.model import HostLibraries, Lock, NativeLib, Package

# What a manylinux wheel may link against (PEP 600 policies, as auditwheel
# lists them) plus the loader: present on every glibc host.
SYSTEM_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "librt.so.1",
        "libpthread.so.0",
        "libutil.so.1",
        "libnsl.so.1",
        "libcrypt.so.1",
        "libresolv.so.2",
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "libz.so.1",
        "libexpat.so.1",
        "libX11.so.6",
        "libXext.so.6",
        "libXrender.so.1",
        "libICE.so.6",
        "libSM.so.6",
        "libGL.so.1",
        "libgobject-2.0.so.0",
        "libgthread-2.0.so.0",
        "libglib-2.0.so.0",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "ld-linux.so.2",
    }
)


def is_host_library(name: str) -> bool:
    """A library the host itself provides (system, loader, interpreter, GPU driver)."""
    return name in SYSTEM_LIBRARIES or name.startswith("libpython3") or driver_library(name) is not None


def provided_names(packages: Iterable[Package]) -> set[str]:
    """SONAMEs and file names of every library the packages ship."""
    names: set[str] = set()
    for pkg in packages:
        for lib in pkg.native:
            names.add(posixpath.basename(lib.path))
            if lib.soname:
                names.add(lib.soname)
    return names


def library_label(path: str) -> str:
    """``site-packages/sgl_kernel/common_ops.abi3.so`` -> ``sgl_kernel common_ops``."""
    parts = path.removeprefix("site-packages/").split("/")
    stem = parts[-1].split(".", 1)[0]
    return f"{parts[0]} {stem}" if len(parts) > 1 else stem


def _version_key(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def version_newer(needed: str, have: str) -> bool:
    return _version_key(needed) > _version_key(have)


HostState = Literal["present", "missing", "unknown"]


@dataclass(frozen=True, slots=True, order=True)
class LoadProblem:
    """One reason one library will not load."""

    package: str
    library: str  # path in the manifest's terms (site-packages/...)
    kind: Literal["needed", "glibc"]
    what: str  # the missing library, or "GLIBC_2.38"
    have: str = ""  # for glibc: the host's version
    # For "needed": what the lock's host facts say about the library. Not part of
    # the comparison: a lock without facts and a capture with them (apply's round
    # trip) hold the same problems; only how serious they are differs.
    host: HostState = field(default="unknown", compare=False)
    found: str = field(default="", compare=False)  # where the host has it, when "present"

    def describe(self) -> str:
        label = library_label(self.library)
        if self.kind == "needed":
            head = f"{label}: needs {self.what}, which nothing in the venv provides"
            if self.host == "present":
                return f"{head}; the host has it: {self.found}"
            if self.host == "missing":
                return f"{head}, nor does the host"
            return f"{head} (the lock does not say whether the host has it)"
        return f"{label}: needs {self.what}, newer than the host's glibc {self.have}"


def host_glibc(lock: Lock) -> str | None:
    """The glibc version the lock's host has, or None (musl, unknown)."""
    if lock.platform.libc.lower() != "glibc":
        return None
    return lock.platform.libc_version or None


def library_problems(
    pkg: Package, lib: NativeLib, provided: set[str], glibc: str | None, host: HostLibraries | None = None
) -> list[LoadProblem]:
    problems = []
    for needed in lib.needed:
        if needed not in provided and not is_host_library(needed):
            state = host.state(needed) if host is not None else "unknown"
            found = host.found.get(needed, "") if host is not None else ""
            problems.append(
                LoadProblem(
                    package=pkg.name, library=lib.path, kind="needed", what=needed, host=state, found=found
                )
            )
    wanted = lib.version_needs.get("GLIBC")
    if glibc and wanted and version_newer(str(wanted), glibc):
        problems.append(
            LoadProblem(package=pkg.name, library=lib.path, kind="glibc", what=f"GLIBC_{wanted}", have=glibc)
        )
    return problems


def load_problems(lock: Lock) -> set[LoadProblem]:
    """Every load problem of every library in ``lock`` (against the lock's own venv and host)."""
    provided = provided_names(lock.packages)
    glibc = host_glibc(lock)
    problems: set[LoadProblem] = set()
    for pkg in lock.packages:
        for lib in pkg.native:
            problems.update(library_problems(pkg, lib, provided, glibc, lock.host_libraries))
    return problems
