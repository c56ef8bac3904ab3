"""Export a lock's pins to other tools' formats."""

from __future__ import annotations

from pathlib import Path

from envlock.lock.model import Lock


def to_requirements(lock: Lock, lock_dir: Path) -> str:
    """A hash-pinned requirements file that pip --require-hashes and pip-sync accept.

    Index packages are pinned with ``==`` and restricted to their one wheel
    by its hash; store and direct wheels are direct references (``name @
    file:///...``) so no index is asked for them.
    """
    lines = [f"# Exported by envlock from the lock of host {lock.host}; do not edit."]
    if lock.indexes:
        lines.append(f"--index-url {lock.indexes[0]}")
        lines += [f"--extra-index-url {url}" for url in lock.indexes[1:]]
    lines += [f"--find-links {location}" for location in lock.find_links]
    for pkg in sorted(lock.packages, key=lambda p: p.name):
        wheel = pkg.wheel
        if pkg.source == "index":
            requirement = f"{pkg.name}=={pkg.version}"
        elif wheel.path is not None:
            requirement = f"{pkg.name} @ {(lock_dir / wheel.path).resolve().as_uri()}"
        else:
            requirement = f"{pkg.name} @ {wheel.url}"
        lines.append(f"{requirement} \\\n    --hash=sha256:{wheel.sha256}")
    return "\n".join(lines) + "\n"
