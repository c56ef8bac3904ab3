"""Build the agent zipapp: this package, ``envlock.binary`` and pyelftools.

The bundle is cached by content, so a run builds it at most once per envlock
version and it can be sent over SSH as one file.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

MAIN = b"import runpy, sys\nsys.exit(runpy.run_module('envlock.agent', run_name='__main__'))\n"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def _sources() -> list[tuple[str, Path]]:
    import elftools

    import envlock

    pkg_root = Path(envlock.__file__).parent
    items: list[tuple[str, Path]] = [("envlock/__init__.py", pkg_root / "__init__.py")]
    for sub in ("agent", "binary"):
        for path in sorted((pkg_root / sub).glob("*.py")):
            items.append((f"envlock/{sub}/{path.name}", path))
    elf_root = Path(elftools.__file__).parent
    for path in sorted(elf_root.rglob("*.py")):
        items.append((f"elftools/{path.relative_to(elf_root).as_posix()}", path))
    return items


def build_bundle() -> bytes:
    """The zipapp bytes; identical for identical sources."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("__main__.py", _FIXED_TIME), MAIN)
        for arcname, path in _sources():
            info = zipfile.ZipInfo(arcname, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def bundle_path(cache: Path) -> Path:
    """Write the bundle into ``cache`` (once) and return its path."""
    data = build_bundle()
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = cache / f"envlock-agent-{digest}.pyz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path
