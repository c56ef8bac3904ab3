"""The environment a lock is resolved for: never the interpreter envlock runs on.

From the profile's ``[target]`` table when present (lock offline, before the
host exists), else probed on the host by the agent in its base interpreter.
GPU facts come from the profile's ``[gpu]``.
"""

from __future__ import annotations

import platform as _platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envlock.errors import EnvlockError
from envlock.hosts import HostProfile

if TYPE_CHECKING:
    from packaging import tags as _tags


@dataclass(frozen=True, slots=True)
class TargetEnv:
    python: str  # full version, "3.12.1"
    implementation: str  # "cpython"
    machine: str
    libc: str  # "glibc"
    libc_version: str
    gpu_cc: tuple[str, ...]
    driver: str | None
    # The base interpreter found on the host (None for an offline [target] lock).
    python_path: str | None = None
    python_realpath: str | None = None

    @property
    def major_minor(self) -> str:
        return ".".join(self.python.split(".")[:2])

    @property
    def interpreter(self) -> dict[str, Any]:
        return {"implementation": self.implementation, "version": self.python}

    @property
    def platform(self) -> dict[str, Any]:
        return {"machine": self.machine, "libc": self.libc, "libc_version": self.libc_version}

    def tags(self) -> list[_tags.Tag]:
        from envlock.tags import interpreter_tags  # packaging.tags: resolving only, not a warm lock

        return interpreter_tags(self.interpreter, self.platform)

    def platform_tags(self) -> list[str]:
        from envlock.tags import platform_tags

        return platform_tags(self.machine, self.libc, self.libc_version)

    def markers(self) -> dict[str, str]:
        """PEP 508 marker environment of the target."""
        impl = {"cpython": "CPython", "pypy": "PyPy"}.get(self.implementation, self.implementation)
        return {
            "implementation_name": self.implementation,
            "implementation_version": self.python,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": impl,
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": self.python,
            "python_version": self.major_minor,
            "sys_platform": "linux",
            "extra": "",
        }


def target_env(
    profile: HostProfile, reference_libc: Callable[[], str], probe: Any | None = None
) -> TargetEnv:
    """``probe``: a callable returning the agent's interpreter and platform facts, used when
    the profile has no ``[target]`` table; ``reference_libc``: the reference lock's glibc
    version, asked only when ``[target]`` names none."""
    gpu_cc = profile.gpu.cc if profile.gpu else ()
    driver = profile.gpu.driver if profile.gpu else None
    if profile.target is not None:
        facts = profile.target
        return TargetEnv(
            python=facts.python,
            implementation=facts.implementation,
            machine=facts.machine,
            libc="glibc",
            libc_version=facts.glibc or reference_libc(),
            gpu_cc=gpu_cc,
            driver=driver,
        )
    if probe is None:
        raise EnvlockError(f"{profile.path}: no [target] table and no way to probe {profile.name}")
    found = probe()
    interp, plat = found["interpreter"], found["platform"]
    return TargetEnv(
        python=interp["version"],
        implementation=interp["implementation"],
        machine=plat["machine"] or _platform.machine(),
        libc=plat.get("libc") or "glibc",
        libc_version=plat.get("libc_version") or "",
        gpu_cc=tuple(g["cc"] for g in found.get("gpu") or []) or gpu_cc,
        driver=((found.get("gpu") or [{}])[0].get("driver")) or driver,
        python_path=found.get("python"),
        python_realpath=interp.get("executable_realpath") or found.get("python"),
    )


def describe(env: TargetEnv) -> str:
    gpu = f", GPU {'/'.join('sm_' + cc.replace('.', '') for cc in env.gpu_cc)}" if env.gpu_cc else ""
    driver = f", driver {env.driver}" if env.driver else ""
    platform = f"{env.machine} {env.libc} {env.libc_version}"
    return f"Python {env.python} ({env.implementation}) on {platform}{gpu}{driver}"
