"""The swap, its recovery after a kill, and rollback (host side).

The swap is three journaled steps (see ``envlock.agent.journal``)::

    swap     exchange staging/ and <venv>      (renameat2 RENAME_EXCHANGE)
    keep     exchange staging/ and previous/   (the replaced venv becomes the
             rollback copy; the older copy lands in staging/)
    cleanup  delete staging/ (the older rollback copy)
    stamp    write applied.json

Before ``swap`` the journal records the identity (device, inode) of the new
venv, the live one and the rollback copy. ``<venv>`` is always a whole venv
(the old or the new one) and ``previous/`` always the last good venv before
the live one; recovery reads the identities of what sits where and finishes
the step that was cut short. A directory is deleted only when its identity
proves it is the staging venv (before the swap) or the older rollback copy
(after it); anything unexplained stops the apply with the paths to look at.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from typing import Any, Dict, Optional

from envlock.agent import journal
from envlock.agent.journal import JournalError, StateDir, fault, ident
from envlock.agent.protocol import RollbackAnswer, RolledSlot
from envlock.agent.stamp import forget_stamp, read_slots, record_apply, record_rollback, write_stamp

RENAME_EXCHANGE = 2
AT_FDCWD = -100


class SwapError(Exception):
    """The swap could not be done; the message says why and what was left where."""


def exchange(a: str, b: str) -> None:
    """Swap two paths atomically (Linux renameat2); refuse rather than fake it."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise SwapError("this host's libc has no renameat2: cannot swap atomically")
    if renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a, None, b)


def swap_in(state: StateDir, digest: str) -> Optional[str]:
    """Put staging/ at the venv; the replaced venv becomes previous/. Returns its path, if any."""
    entry = journal.record(
        state,
        "swap",
        digest=digest,
        new=ident(state.staging),
        old=ident(state.venv),
        prev=ident(state.previous),
    )
    try:
        fault("before", "swap")
        if entry["old"] is None:
            os.rename(state.staging, state.venv)
        else:
            exchange(state.staging, state.venv)
    except OSError as exc:
        raise SwapError(_why_not_swapped(state, exc)) from exc
    journal.fsync_dir(os.path.dirname(state.venv) or "/")
    fault("after", "swap")
    _finish(state, journal.record(state, "keep"))
    return state.previous if entry["old"] is not None else None


def _why_not_swapped(state: StateDir, exc: OSError) -> str:
    why = exc.strerror or str(exc)
    if exc.errno == errno.EBUSY:
        why += " (%s is a mount point or in use: envlock swaps by renaming the directory)" % state.venv
    return "cannot swap the new venv into %s: %s" % (state.venv, why)


def _finish(state: StateDir, entry: Dict[str, Any]) -> None:
    """Steps keep, cleanup and stamp from wherever ``entry`` says; each is idempotent."""
    if entry["step"] == "keep":
        fault("before", "keep")
        _keep(state, entry)
        fault("after", "keep")
        entry = journal.record(state, "cleanup")
    if entry["step"] == "cleanup":
        fault("before", "cleanup")
        if os.path.lexists(state.staging):
            if ident(state.staging) != entry["prev"]:
                raise _unexplained(state, "%s is not the older rollback copy" % state.staging)
            shutil.rmtree(state.staging)
        fault("after", "cleanup")
        entry = journal.record(state, "stamp")
    fault("before", "stamp")
    record_apply(state, entry)
    write_stamp(state, entry["digest"])
    fault("after", "stamp")
    journal.clear(state)


def _keep(state: StateDir, entry: Dict[str, Any]) -> None:
    """The replaced venv (now at staging/) becomes previous/; the older copy goes to staging/."""
    if entry["old"] is None or ident(state.previous) == entry["old"]:
        return  # a fresh venv replaced nothing, or this step is done
    if ident(state.staging) != entry["old"]:
        where = (state.staging, state.previous)
        raise _unexplained(state, "the replaced venv is neither at %s nor at %s" % where)
    if ident(state.previous) is None:
        os.rename(state.staging, state.previous)
    elif ident(state.previous) == entry["prev"]:
        exchange(state.staging, state.previous)
    else:
        raise _unexplained(state, "%s is not the rollback copy this apply found" % state.previous)
    journal.fsync_dir(state.root)


def _unexplained(state: StateDir, what: str) -> JournalError:
    return JournalError(
        "%s; nothing was deleted: compare %s, %s and %s by hand, then remove %s"
        % (what, state.venv, state.staging, state.previous, state.journal)
    )


def recover(state: StateDir) -> Optional[str]:
    """Finish or undo an apply that was killed; say what was done, if anything."""
    journal.sweep(state)
    entry = journal.read(state)
    if entry is None:
        if os.path.lexists(state.staging):
            raise _unexplained(state, "%s exists but no apply journal explains it" % state.staging)
        return None
    step = entry["step"]
    if step in ("stage", "verify"):
        # The journal was written before staging/ was created: what is
        # there now is this apply's own unfinished venv.
        _drop_own_staging(state, entry)
        journal.clear(state)
        return "an earlier apply was interrupted at %s, before the swap: the live venv was untouched" % step
    if step == "swap":
        live = ident(state.venv)
        if live != entry["new"]:
            if live != entry["old"]:
                raise _unexplained(state, "%s is neither the venv before nor after the swap" % state.venv)
            _drop_own_staging(state, entry)
            journal.clear(state)
            return "an earlier apply was interrupted just before the swap: the live venv was untouched"
        entry = journal.record(state, "keep")
    _finish(state, entry)
    return "an earlier apply was interrupted after the swap: finished it (the replaced venv is kept)"


def _drop_own_staging(state: StateDir, entry: Dict[str, Any]) -> None:
    """Delete staging/ when the journal vouches it is the interrupted apply's own build.

    Before step verify its identity was not recorded yet; then it is the
    apply's own because staging/ must be absent when an apply writes its
    first journal entry (``recover`` refuses otherwise).
    """
    if not os.path.lexists(state.staging):
        return
    if entry.get("new") is not None and ident(state.staging) != entry["new"]:
        raise _unexplained(state, "%s is not the venv the interrupted apply built" % state.staging)
    shutil.rmtree(state.staging)


def rollback(state: StateDir, again: bool = False) -> RollbackAnswer:
    """Exchange the live venv and previous/ (the caller holds the lock and has recovered).

    When the last exchange was itself a rollback, a second one swaps back the
    venv just rolled away from: refused unless ``again``, so running the
    command twice by mistake does not silently undo it.
    """
    if not os.path.isdir(state.previous) or os.path.islink(state.previous):
        raise SwapError("no previous venv to roll back to (%s does not exist)" % state.previous)
    slots = read_slots(state)
    if slots.get("last") == "rollback" and not again:
        raise SwapError(
            "the last change to %s was a rollback (at %s); rolling back again swaps back in %s: "
            "pass --again to do that" % (state.venv, slots.get("at"), describe_slot(slots.get("previous")))
        )
    try:
        if os.path.lexists(state.venv):
            exchange(state.previous, state.venv)
        else:
            os.rename(state.previous, state.venv)
    except OSError as exc:
        raise SwapError(_why_not_swapped(state, exc).replace("the new venv", "the previous venv")) from exc
    journal.fsync_dir(os.path.dirname(state.venv) or "/")
    # The stamp named the venv just swapped out; its inodes no longer match
    # anyway, but an absent stamp says so plainly.
    forget_stamp(state)
    swapped = record_rollback(state, slots)
    answer: RollbackAnswer = {
        "venv": state.venv,
        "restored_from": state.previous,
        "restored": _public(swapped["live"]),
        "replaced": _public(swapped["previous"]),
        "again": slots.get("last") == "rollback",
    }
    return answer


def _public(slot: Optional[Dict[str, Any]]) -> Optional[RolledSlot]:
    if slot is None or not slot.get("digest"):
        return None  # a venv envlock did not build, or one from before slots were kept
    return {"digest": slot["digest"], "at": slot.get("at")}


def describe_slot(slot: Optional[Dict[str, Any]]) -> str:
    """A slot in words: the venv of lock sha256:0123456789ab (applied 2026-11-30T22:00:00Z)."""
    if slot is None or not slot.get("digest"):
        return "a venv envlock has no lock for"
    return "the venv of lock %s (applied %s)" % (
        str(slot["digest"])[:19],
        slot.get("at") or "at an unknown time",
    )
