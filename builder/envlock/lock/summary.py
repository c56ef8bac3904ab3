"""One-line descriptions of a lock's host, shared by diff, review and show."""

from __future__ import annotations

from envlock.lock.model import Lock


def gpu_summary(lock: Lock) -> str:
    if lock.gpu is None or not lock.gpu.ccs:
        return ""
    drivers = lock.gpu.drivers
    text = "cc " + ", ".join(lock.gpu.ccs)
    return text + (f", driver {', '.join(drivers)}" if drivers else "")


def platform_summary(lock: Lock) -> str:
    plat = lock.platform
    return " ".join((plat.machine, plat.libc, plat.libc_version)).strip()
