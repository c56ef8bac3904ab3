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

from envlock.agent.pathguard import PathError, check_absolute_dir, is_inside, safe_join

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "build", "dist", ".tox", ".nox",
             ".mypy_cache", ".pytest_cache", ".ruff_cache"}  # fmt: skip
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
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
    """Unpack beside ``target`` and rename into place: never a half-written tree.

    Members are written one by one, not with ``extractall`` (Python 3.8 has
    no extraction filters): every path goes through ``safe_join``, so no
    member is written through a symlink (``evil -> /outside`` then
    ``evil/file``), and files are opened with ``O_NOFOLLOW | O_EXCL``.
    Symlinks are recreated only when their target stays inside the tree: a
    project may hold ``README -> docs/README.md``, and ``pack_source`` never
    descends into a link, so a link inside the tree is data, not a way out.
    Hard links, devices and FIFOs are refused.
    """
    try:
        check_absolute_dir(target, "source-tree.path")
    except PathError as exc:
        raise SourceError(str(exc)) from exc
    parent = os.path.dirname(target.rstrip("/")) or "/"
    os.makedirs(parent, exist_ok=True)
    tmp = target.rstrip("/") + ".envlock-unpack"
    if os.path.lexists(tmp):
        import shutil

        shutil.rmtree(tmp)
    os.mkdir(tmp, 0o755)
    with tarfile.open(archive_path, mode="r:gz") as archive:
        for member in archive:
            _extract(archive, member, tmp, archive_path)
    os.rename(tmp, target)


def _extract(archive: tarfile.TarFile, member: tarfile.TarInfo, root: str, archive_path: str) -> None:
    name = member.name
    try:
        path = safe_join(root, name, "%s: member" % archive_path, strict=False)
        if member.issym() and not is_inside(root, os.path.dirname(name), member.linkname):
            raise PathError(
                "%s: member %r links to %r, outside the tree" % (archive_path, name, member.linkname)
            )
    except PathError as exc:
        raise SourceError(str(exc)) from exc
    if member.isdir():
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif member.issym():
        os.symlink(member.linkname, path)
    elif member.isreg():
        stream = archive.extractfile(member)
        assert stream is not None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            while True:
                chunk = stream.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
        os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)
    else:
        raise SourceError("%s: member %r is a hard link, device or FIFO; refusing it" % (archive_path, name))
