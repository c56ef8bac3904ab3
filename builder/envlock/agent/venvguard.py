"""What ``apply`` may replace, and what it must never touch.

Apply moves the directory a profile's ``venv`` names out of the way and
later deletes it as an old rollback copy, so a wrong ``venv`` (``/``, a home
directory, ``/usr``) would lose somebody's files. The rules, checked on the
host before anything there is written (the per-venv state directory beside
the venv included) and by the controller before it connects:

- the path is absolute and normalized, and neither it nor its real path is
  ``/``, a system prefix, the user's home or a directory above it;
- the venv itself is not a symlink (the swap would move the link, not the
  venv behind it);
- the venv is not a mount point (the swap renames it);
- an existing directory is empty, or a venv (``pyvenv.cfg``) that envlock
  built (its state directory says so) or that ``--force`` lets apply
  replace; a non-empty directory that is not a venv is never replaced.

Shared by the agent (Python 3.8) and the controller: stdlib only.
"""

from __future__ import annotations

import os
from typing import Optional

# Never a venv: the filesystem's own top-level directories and the common
# system prefixes. Deeper paths (/opt/venv, /usr/local/venv) stay allowed.
SYSTEM_PATHS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/nix",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/snap",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/include",
        "/usr/lib",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/sbin",
        "/usr/share",
        "/usr/src",
        "/var",
        "/var/lib",
        "/var/tmp",
    }
)

# What a venv's state directory (see envlock.agent.journal) holds when envlock built it.
MANAGED_EVIDENCE = ("applied.json", "journal.json", "previous")


def path_refusal(venv: str, home: Optional[str] = None, local: bool = True) -> Optional[str]:
    """Why ``venv`` can never be an apply target, judging by the path alone; None if it can.

    ``local=False`` (the controller, for a path on another host): the path's
    spelling only; the host checks its real path and its user's home.
    """
    if not venv or not venv.startswith("/"):
        return "venv %r is not an absolute path" % venv
    if os.path.normpath(venv) != venv or venv.startswith("//"):
        return "venv %s is not a normalized path (no trailing /, no . or .. parts)" % venv
    if not local:
        return "venv %s is a system directory" % venv if venv in SYSTEM_PATHS else None
    home = os.path.normpath(home if home is not None else os.path.expanduser("~"))
    candidates = [venv]
    real = os.path.realpath(venv)
    if real != venv:
        candidates.append(real)
    for path in candidates:
        shown = venv if path == venv else "%s (really %s)" % (venv, path)
        if path in SYSTEM_PATHS:
            return "venv %s is a system directory: apply replaces the whole directory" % shown
        if path == home or home.startswith(path.rstrip("/") + "/"):
            return "venv %s is the home directory %s or above it: apply replaces the whole directory" % (
                shown,
                home,
            )
    return None


def replace_refusal(venv: str, state_dir: str, force: bool) -> Optional[str]:
    """Why the directory now at ``venv`` must not be replaced; None if it may be (or is absent)."""
    if os.path.islink(venv):
        return "venv %s is a symlink (to %s): set venv to the directory itself" % (
            venv,
            os.readlink(venv),
        )
    if not os.path.lexists(venv):
        return None
    if not os.path.isdir(venv):
        return "venv %s exists and is not a directory: apply will not replace it" % venv
    if os.path.ismount(venv):
        return (
            "%s is a mount point: envlock swaps a venv in by renaming its directory; "
            "make the venv a directory inside the mounted volume" % venv
        )
    if not os.listdir(venv):
        return None
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return (
            "%s is not a venv (no pyvenv.cfg) and not empty: apply will not replace it "
            "(name a new or empty directory, or a venv)" % venv
        )
    if force or managed(state_dir):
        return None
    return (
        "%s is a venv that envlock did not build (no %s): pass --force to replace it "
        "(it is kept as the rollback copy)" % (venv, os.path.join(state_dir, "applied.json"))
    )


def managed(state_dir: str) -> bool:
    """Did envlock build (or replace) the venv this state directory belongs to?"""
    return any(os.path.lexists(os.path.join(state_dir, name)) for name in MANAGED_EVIDENCE)
