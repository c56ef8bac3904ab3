"""Files in a per-user cache directory, trusted only when they are this user's alone.

Three memos skip work on a warm run: link facts (``linkcache``), parsed
TOML (``tomlmemo``) and lock facts (``lock.head``). A memo is input from
disk like any other: whoever can write it decides what envlock believes.
So one rule for all three: the directory must be a real directory (not a
symlink) owned by this user with no group or other access (0700), an entry
a regular file owned by this user with no group or other access, opened
``O_NOFOLLOW``. Anything else is not read (``NotPrivate``), and the caller
computes afresh. Entries are written atomically with a private,
unpredictable temporary name opened ``O_EXCL | O_NOFOLLOW``, mode 0600; a
cache that cannot be written costs only a slower next run.

``os.path`` strings or path-likes, no pathlib: ``inspect`` reads the link
cache at start-up.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Union

from envlock.tmpname import private_sibling_path

PathArg = Union[str, "os.PathLike[str]"]


class NotPrivate(Exception):
    """There is an entry, but not one this user alone can have written (or a symlink)."""


# Mode bits a private file or directory must not have: no access for group or others.
PRIVATE = 0o077
# Only: nobody else may write it (for an entry whose bytes are no secret, ``lock.head``'s).
UNWRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def _private(st: os.stat_result, kind: int, mask: int = PRIVATE) -> bool:
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid() and st.st_mode & mask == 0


def private_dir(directory: PathArg) -> bool:
    """``directory`` exists, is a real directory, this user's and private."""
    try:
        return _private(os.lstat(directory), stat.S_IFDIR)
    except OSError:
        return False


def read_private(path: PathArg, mask: int = PRIVATE) -> bytes | None:
    """The bytes of the entry at ``path``; None when there is none or it cannot be read.

    Raises ``NotPrivate`` for a symlink, or a file not owned by this user or with any
    ``mask`` mode bit set. The caller checks the directory (``private_dir``) first.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink where an entry belongs
            raise NotPrivate(os.fspath(path)) from exc
        return None
    with os.fdopen(fd, "rb") as stream:
        try:
            if not _private(os.fstat(stream.fileno()), stat.S_IFREG, mask):
                raise NotPrivate(os.fspath(path))
            return stream.read()
        except OSError:
            return None


def write_private(directory: PathArg, path: PathArg, data: bytes) -> None:
    """Best effort: ``data`` at ``path`` (inside ``directory``), atomically, mode 0600; nothing
    is written when ``directory`` is another user's or shared."""
    tmp = private_sibling_path(os.fspath(path))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if not private_dir(directory):
            return  # recall would not trust it either
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError:
        import contextlib  # a failed write only

        with contextlib.suppress(OSError):
            os.unlink(tmp)
