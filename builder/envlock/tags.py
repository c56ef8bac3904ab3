"""Wheel tags a host supports, computed from its facts, never from the running interpreter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging import tags

_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def platform_tags(machine: str, libc: str | None, libc_version: str | None) -> list[str]:
    """``manylinux_2_X_<arch>`` down to 2.5 (with legacy aliases), then ``linux_<arch>``."""
    result: list[str] = []
    if libc == "glibc" and libc_version:
        major, minor = (int(p) for p in libc_version.split(".")[:2])
        for m in range(minor, 4, -1):
            result.append(f"manylinux_{major}_{m}_{machine}")
            legacy = _LEGACY.get((major, m))
            if legacy:
                result.append(f"{legacy}_{machine}")
    result.append(f"linux_{machine}")
    return result


def interpreter_tags(interpreter: Mapping[str, Any], platform: Mapping[str, Any]) -> list[tags.Tag]:
    """Every tag the host interpreter accepts, most preferred first."""
    major, minor = (int(p) for p in str(interpreter["version"]).split(".")[:2])
    plats = platform_tags(platform["machine"], platform.get("libc"), platform.get("libc_version"))
    abi = abi_tag(interpreter)
    if interpreter.get("implementation") != "cpython":
        return list(tags.compatible_tags((major, minor), platforms=plats))
    return list(tags.cpython_tags((major, minor), abis=[abi], platforms=plats)) + list(
        tags.compatible_tags((major, minor), f"cp{major}{minor}", plats)
    )


def abi_tag(interpreter: Mapping[str, Any]) -> str:
    major, minor = (int(p) for p in str(interpreter["version"]).split(".")[:2])
    threaded = "t" if interpreter.get("py_gil_disabled") else ""
    return f"cp{major}{minor}{threaded}"
