"""Pack the source tree of an editable install, so the lock can rebuild it elsewhere.

An editable install's payload is a ``.pth`` (or finder) pointing at a
directory outside the venv; a venv rebuilt on another host imports nothing
unless that directory exists there too. The archive is deterministic (sorted
members, zero times and owners, gzip without a timestamp), so the same tree
packs to the same sha256. Build output and tool caches are left out.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
from typing import BinaryIO, List

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "build", "dist", ".tox", ".nox",
             ".mypy_cache", ".pytest_cache", ".ruff_cache"}  # fmt: skip
LIMIT = 512 << 20  # a source tree bigger than this is not what an editable install means


class SourceError(Exception):
    pass


def _members(root: str) -> List[str]:
    found: List[str] = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        rel_base = os.path.relpath(base, root)
        for name in sorted(dirs + files):
            found.append(name if rel_base == "." else rel_base + "/" + name)
    return sorted(found)


def pack_source(root: str, out: BinaryIO) -> int:
    """Write the tar.gz of ``root`` to ``out``; return the number of members."""
    if not os.path.isdir(root):
        raise SourceError("%s: the editable install's source directory does not exist" % root)
    buffer = io.BytesIO()
    total = 0
    members = _members(root)
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for rel in members:
            path = os.path.join(root, rel)
            st = os.lstat(path)
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                archive.addfile(info)
            elif stat.S_ISDIR(st.st_mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & 0o111 else 0o644
                total += st.st_size
                if total > LIMIT:
                    raise SourceError("%s: source tree over %d MB; not packing it" % (root, LIMIT >> 20))
                with open(path, "rb") as stream:
                    archive.addfile(info, stream)
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
        packed.write(buffer.getvalue())
    return len(members)


def unpack_source(archive_path: str, target: str) -> None:
    """Unpack beside ``target`` and rename into place: never a half-written tree."""
    parent = os.path.dirname(target.rstrip("/")) or "/"
    os.makedirs(parent, exist_ok=True)
    tmp = target.rstrip("/") + ".envlock-unpack"
    if os.path.exists(tmp):
        import shutil

        shutil.rmtree(tmp)
    with tarfile.open(archive_path, mode="r:gz") as archive:
        for member in archive.getmembers():
            name = member.name
            if name.startswith("/") or ".." in name.split("/") or member.islnk() or member.isdev():
                raise SourceError("%s: unsafe member %r in a source archive" % (archive_path, name))
        archive.extractall(tmp)  # members checked above (3.8 has no extraction filters)
    os.rename(tmp, target)
