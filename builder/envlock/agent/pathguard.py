"""One guard for every path that comes from a lock, manifest, archive or profile.

A lock is data that other people write and commit; nothing it says may make
envlock write outside the directory it is building. So a relative path from
a lock (a ``bin/`` script key, a manifest row, a native library, an archive
member) is checked as text first (``check_relative``: relative, POSIX,
already normalized, no ``..``), and joined to its root only through
``safe_join``, which also refuses a symlink anywhere between the root and
the file: ``bin`` pointing at ``/etc`` would otherwise carry a correct-looking
``bin/tool`` outside.

Absolute paths that name a directory envlock creates or replaces (an
editable install's source tree) go through ``check_absolute_dir``.

Runs on the target's Python 3.8+ (the agent) as well as on the controller;
standard library only.
"""

import os
import stat

# Directories that are never an editable source tree, a venv, or anything
# else envlock may create or replace: the system's own prefixes. A path
# *under* /usr/local, /opt or /srv is fine; these themselves are not.
SYSTEM_DIRS = (
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin",
    "/usr/lib", "/usr/lib64", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/tmp",
)  # fmt: skip
# Trees envlock never writes into at all, whatever the depth.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/sbin", "/sys", "/usr/bin", "/usr/lib", "/usr/lib64", "/usr/sbin", "/usr/share")  # fmt: skip


class PathError(ValueError):
    """A path from a lock, manifest, archive or profile that could leave its root."""


def check_relative(rel: object, what: str, strict: bool = True) -> str:
    """``rel`` if it is a plain relative POSIX path that stays inside its root.

    Refused: non-strings, empty, absolute, ``..`` or ``.`` components, empty
    components (``a//b``, trailing ``/``), backslashes (a Windows separator
    on one side is a file name on the other), NUL and other control
    characters (they end C strings and hide in terminals). ``strict=False``
    lets backslashes and control characters other than NUL through: file
    names that a venv or a source tree really holds, and that the manifest
    escapes, but that envlock never writes from a lock.
    """
    if (
        isinstance(rel, str)
        and rel
        and rel[0] != "/"
        and rel[-1] != "/"
        and "/." not in "/" + rel
        and "//" not in rel
        and "\x00" not in rel
        and (not strict or (rel.isprintable() and "\\" not in rel))
    ):
        return rel  # the common case, in one pass of C string searches (manifests have ~30,000 rows)
    if not isinstance(rel, str):
        raise PathError("%s: expected a path string, got %s" % (what, type(rel).__name__))
    if not rel:
        raise PathError("%s: empty path" % what)
    if "\x00" in rel:
        raise PathError("%s: %r: NUL in path" % (what, rel))
    if strict and any(ord(ch) < 32 or ch == "\x7f" for ch in rel):
        raise PathError("%s: %r: control character in path" % (what, rel))
    if strict and "\\" in rel:
        raise PathError("%s: %r: backslash in path" % (what, rel))
    if rel.startswith("/"):
        raise PathError("%s: %r: absolute path, expected one relative to its root" % (what, rel))
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            raise PathError("%s: %r: not a normalized relative path (%r component)" % (what, rel, part))
    return rel


def check_script_key(rel: object, what: str) -> str:
    """A ``bin/<name>`` path: the only place a lock's scripts map may write."""
    rel = check_relative(rel, what)
    parts = rel.split("/")
    if len(parts) != 2 or parts[0] != "bin":
        raise PathError("%s: %r: expected bin/<name>" % (what, rel))
    return rel


def safe_join(root: str, rel: object, what: str, strict: bool = True) -> str:
    """``root/rel`` after ``check_relative``, refusing a symlink on the way.

    Every existing component between ``root`` and the last one is lstat'ed:
    a symlink or non-directory there is refused. The last component may be
    anything (the caller is about to replace it with ``os.replace``, which
    replaces a symlink rather than following it). ``root`` itself is the
    caller's; it is not checked.
    """
    rel = check_relative(rel, what, strict)
    parts = rel.split("/")
    current = root
    for part in parts[:-1]:
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            continue  # the rest does not exist yet: nothing to follow
        if stat.S_ISLNK(mode):
            raise PathError("%s: %r: %s is a symlink; refusing to write through it" % (what, rel, current))
        if not stat.S_ISDIR(mode):
            raise PathError("%s: %r: %s is not a directory" % (what, rel, current))
    return os.path.join(root, *parts)


def is_inside(root: str, rel_dir: str, target: str) -> bool:
    """Whether a symlink at ``root/rel_dir/<name>`` pointing at ``target`` stays inside ``root``.

    Decided on the text: ``target`` joined to the link's directory and
    normalized must not leave ``root``; an absolute target never stays.
    """
    if not target or target.startswith("/") or "\x00" in target:
        return False
    joined = os.path.normpath(os.path.join(rel_dir, target)) if rel_dir else os.path.normpath(target)
    return joined != ".." and not joined.startswith("../") and not os.path.isabs(joined)


def check_absolute_dir(path: object, what: str) -> str:
    """An absolute, normalized directory path that is not a system directory or a home itself."""
    if not isinstance(path, str):
        raise PathError("%s: expected a path string, got %s" % (what, type(path).__name__))
    if not path.startswith("/"):
        raise PathError("%s: %r: expected an absolute path" % (what, path))
    if any(ord(ch) < 32 or ch == "\x7f" for ch in path) or "\\" in path:
        raise PathError("%s: %r: control character or backslash in path" % (what, path))
    if os.path.normpath(path) != path or path.startswith("//"):
        raise PathError("%s: %r: not a normalized path" % (what, path))
    if path in SYSTEM_DIRS or _is_home(path):
        raise PathError("%s: %r: a system directory or a home directory itself" % (what, path))
    if any(path.startswith(tree + "/") for tree in SYSTEM_TREES):
        raise PathError("%s: %r: inside a system directory" % (what, path))
    return path


def _is_home(path: str) -> bool:
    """``/home/<user>``, ``/root`` or the running user's home: never a tree to create or replace."""
    if os.path.dirname(path) == "/home":
        return True
    home = os.path.expanduser("~")
    return home not in ("", "/", "~") and os.path.normpath(home) == path
