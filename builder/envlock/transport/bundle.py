"""Build the agent zipapp: ``envlock.agent``, ``envlock.binary`` and pyelftools.

Controller-only: it lives outside ``envlock.agent`` so the bundle does not
carry it.

The bundle is cached by content, so a run builds it at most once per envlock
version and it can be sent over SSH as one file.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from envlock.codekey import code_key  # noqa: F401  (re-exported: its callers import it from here)
from envlock.tmpname import private_sibling

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


def bundle_dir(cache: Path) -> Path:
    """The bundle unpacked into ``cache`` (once), runnable as ``python -I DIR``.

    Run from a directory rather than the zip, Python can keep bytecode in
    ``__pycache__`` beside the sources; from a zip it recompiles pyelftools
    and the agent on every start (about 0.15 s, most of a warm capture).
    """
    archive = bundle_path(cache)
    target = archive.with_suffix("")
    if not (target / "__main__.py").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=cache))
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another run unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _sources_key() -> str:
    """Cheap identity of the bundle's sources: names, sizes and mtimes."""
    digest = hashlib.sha256()
    for arcname, path in _sources():
        st = path.stat()
        digest.update(f"{arcname}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def bundle_path(cache: Path) -> Path:
    """Write the bundle into ``cache`` (once per source change) and return its path."""
    path = cache / f"envlock-agent-{_sources_key()}.pyz"
    if not path.exists():
        data = build_bundle()
        cache.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(path)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path
