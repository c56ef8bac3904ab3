"""Copy-on-write clones (``FICLONE``) where the host's filesystem has them (XFS, btrfs, ...).

apply installs by copying every file from uv's cache of unpacked wheels into
the staging venv: uv's default, hard links, would make the live venv, the
rollback copy and the cache one set of inodes, so a hand patch of the live
venv would patch the other two. A reflink clone is a new inode that shares
the source's blocks until either side writes; the first write copies the
block. So the venv gets the speed of a link and the safety of a copy: no
writable block is shared.

``clone_probe`` answers whether two directories can clone between them:
the filesystem must support it and both must be on the same one (otherwise
``EXDEV``, ``EOPNOTSUPP``, ``EINVAL`` or ``ENOTTY``). It clones one small
temporary file and removes both files, so the answer is the filesystem's,
not a guess from its name.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from typing import Optional

FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h


def clone_file(source: str, target: str) -> None:
    """``target`` becomes a clone of ``source`` (created, mode 0644 before umask); OSError when
    the filesystem cannot."""
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.ioctl(fd, FICLONE, src.fileno())
        except OSError:
            os.close(fd)
            os.unlink(target)
            raise
        os.close(fd)


def clone_probe(source_dir: str, target_dir: str) -> Optional[str]:
    """None when files in ``source_dir`` can be cloned into ``target_dir``; else why not."""
    try:
        fd, source = tempfile.mkstemp(prefix=".envlock-clone-", dir=source_dir)
    except OSError as exc:
        return "cannot write in %s (%s)" % (source_dir, exc.strerror)
    target = os.path.join(target_dir, os.path.basename(source) + ".clone")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(b"envlock reflink probe\n")
        clone_file(source, target)
        os.unlink(target)
        return None
    except OSError as exc:
        return "no reflinks from %s to %s (%s)" % (source_dir, target_dir, exc.strerror or exc)
    finally:
        os.unlink(source)
