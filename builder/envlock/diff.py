"""``envlock diff A B``: what differs between two locks, or a lock and a live venv.

Each side is a lock file, a host name (its lock), or ``live:HOST`` (a fresh
capture that writes nothing); the comparison itself is ``envlock.changes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envlock.changes import LockDiff, diff_pair
from envlock.errors import EnvlockError
from envlock.lock.io import read_lock_text
from envlock.lock.model import Lock
from envlock.lockpair import LockText, pair_from_locks, pair_from_texts, parse_whole
from envlock.workspace import Workspace

# ---------------------------------------------------------------- sides


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a diff, as the user named it."""

    spec: str
    source: str  # shown in messages
    text: str | None = None  # a lock file's text
    lock: Lock | None = None  # a live capture


def open_side(workspace: Workspace, spec: str) -> Side:
    """``live:HOST``, a path to a lock file, or a host name (its lock)."""
    if spec.startswith("live:"):
        host = spec[len("live:") :]
        if not host:
            raise EnvlockError("live: needs a host name, like live:ct129")
        from envlock.capture import CaptureOptions, capture

        return Side(spec, spec, lock=capture(workspace, host, CaptureOptions(write=False)).lock)
    path = Path(spec)
    if not (path.suffix == ".toml" or "/" in spec or path.is_file()):
        path = workspace.lock_path(spec)
    elif not path.is_absolute() and not path.exists():
        path = workspace.root / spec
    shown = workspace.shown(path)
    return Side(spec, shown, text=read_lock_text(path, shown))


def diff_sides(a: Side, b: Side) -> LockDiff:
    if a.text is not None and b.text is not None:
        pair = pair_from_texts(a.text, a.source, b.text, b.source)
    else:
        pair = pair_from_locks(_whole(a), _whole(b))
    a_label, b_label = _label(a, pair.a), _label(b, pair.b)
    if a_label == b_label:
        a_label, b_label = a.spec, b.spec
    return diff_pair(pair, a_label, b_label)


def _whole(side: Side) -> Lock:
    if side.lock is not None:
        return side.lock
    assert side.text is not None
    return parse_whole(LockText(side.source, side.text))


def _label(side: Side, lock: Lock) -> str:
    return side.spec if side.lock is not None else lock.host


def diff(workspace: Workspace, a: str, b: str) -> LockDiff:
    """``envlock diff A B``."""
    return diff_sides(open_side(workspace, a), open_side(workspace, b))
