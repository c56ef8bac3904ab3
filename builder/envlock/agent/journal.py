"""Where envlock keeps a venv's state on the host, and the apply journal.

Everything apply keeps for a venv lives in one directory beside it,
``<venv>.envlock/`` (same parent, so the same filesystem, which the atomic
swap needs)::

    lock          flock held by the running apply or rollback (holds its pid)
    journal.json  the step an apply is in; absent when none is unfinished
    applied.json  the stamp: lock digest and stat keys of the applied venv
    staging/      the venv being built
    previous/     the venv the last apply replaced (for rollback)
    failed/       a staged venv that failed verify or smoke, kept to examine

The journal is written (temporary file, fsync, rename, fsync of the
directory) before each step starts, so after a ``kill -9`` the next apply
or rollback knows which step may have been cut short. Directories are told
apart by identity (device and inode, recorded in the journal before the
swap), never by a marker file inside them: a rename keeps a directory's
inode, so recovery sees which directory sits where after any interruption.

``ENVLOCK_FAULT`` makes the agent fail at an exact point, for the fault
tests: a comma-separated list of ``ACTION:WHEN:STEP``, ACTION ``kill``
(SIGKILL itself), ``stop`` (SIGSTOP itself, for a test to act and then
SIGCONT it) or an errno name (``EBUSY``, ``ENOSPC``: raise that OSError),
WHEN ``before`` or ``after``, STEP one of ``FAULT_POINTS``.
"""

from __future__ import annotations

import errno
import json
import os
import signal
from typing import Any, Dict, List, Optional

from envlock.agent.steps import STEPS

FAULT_POINTS = ("stage", "install", "verify", "smoke", "swap", "keep", "cleanup", "stamp")

Ident = List[int]  # [st_dev, st_ino] of a directory


class StateDir:
    """The paths of ``<venv>.envlock/``."""

    def __init__(self, venv: str) -> None:
        self.venv = venv
        self.root = venv + ".envlock"
        self.lock = os.path.join(self.root, "lock")
        self.journal = os.path.join(self.root, "journal.json")
        self.stamp = os.path.join(self.root, "applied.json")
        self.slots = os.path.join(self.root, "slots.json")  # which lock each venv came from
        self.staging = os.path.join(self.root, "staging")
        self.previous = os.path.join(self.root, "previous")
        self.failed = os.path.join(self.root, "failed")

    def create(self) -> None:
        os.makedirs(self.root, mode=0o755, exist_ok=True)


def ident(path: str) -> Optional[Ident]:
    """Identity of the directory at ``path`` (not following a symlink), None if absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino]


def write_atomic(path: str, data: Dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON so that a crash leaves the old or the new file."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as out:
        out.write(json.dumps(data, sort_keys=True))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(state: StateDir) -> Optional[Dict[str, Any]]:
    """The unfinished apply's journal, or None. A journal that cannot be read is an error:
    guessing the step is what loses venvs."""
    try:
        with open(state.journal) as stream:
            entry: Dict[str, Any] = json.load(stream)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise JournalError(
            "%s cannot be read (%s): look at %s and %s by hand before applying again"
            % (state.journal, exc, state.staging, state.previous)
        ) from exc
    if entry.get("step") not in STEPS:
        raise JournalError("%s names an unknown step %r" % (state.journal, entry.get("step")))
    return entry


def record(state: StateDir, step: str, **facts: Any) -> Dict[str, Any]:
    """Write the journal: ``step`` is about to start. Facts of earlier steps are kept."""
    entry = dict(read(state) or {})
    entry.update(facts)
    entry["step"] = step
    entry["pid"] = os.getpid()
    write_atomic(state.journal, entry)
    return entry


def sweep(state: StateDir) -> None:
    """Remove temporary files a killed ``write_atomic`` left (the caller holds the lock)."""
    for name in os.listdir(state.root):
        if name.endswith(".tmp") and name.split(".", 1)[0] in ("journal", "applied", "slots"):
            os.unlink(os.path.join(state.root, name))


def clear(state: StateDir) -> None:
    if os.path.lexists(state.journal):
        os.unlink(state.journal)
        fsync_dir(state.root)


class JournalError(Exception):
    """The journal or the directories beside the venv are not in a state envlock can explain."""


def fault(when: str, point: str) -> None:
    """Fail here if ``ENVLOCK_FAULT`` asks for it (see the module docstring)."""
    spec = os.environ.get("ENVLOCK_FAULT")
    if not spec:
        return
    for item in spec.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or parts[1] != when or parts[2] != point:
            continue
        action = parts[0]
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif hasattr(errno, action):
            code = getattr(errno, action)
            raise OSError(code, "%s (injected by ENVLOCK_FAULT)" % os.strerror(code))
