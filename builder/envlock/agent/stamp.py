"""The no-op check: is the venv exactly what the last apply of a lock left?

After a swap the agent writes ``<venv>.envlock/applied.json``: the lock
digest and the *fingerprint* of the venv, one sha256 over the stat key
(size, mtime, inode, ctime) of every file and the target of every symlink
(``envlock.agent.treescan``, which says why that is a proof that nothing was
written). A later apply of the same lock walks the venv once and compares
the fingerprint, no hashing. Stamps of older agents list every file's key
instead (``files``, ``links``); they are compared key by key.

Bytecode is not in the stamp (the interpreter writes it on first use, which
must not turn a no-op into a rebuild), but a damaged ``.pyc`` for the host's
interpreter makes the venv not match (see ``envlock.agent.bytecode``); the
same walk gives its stat keys.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Optional

from envlock.agent.bytecode import damaged_bytecode
from envlock.agent.journal import StateDir, write_atomic
from envlock.agent.protocol import AGENT_PROTOCOL, AppliedAnswer, RunningPython
from envlock.agent.treescan import Scan, scan
from envlock.agent.venvguard import managed, path_refusal, replace_refusal


def bytecode_suffix() -> Optional[str]:
    """``.cpython-312.pyc``: the bytecode this interpreter loads (None: it writes none)."""
    tag = sys.implementation.cache_tag
    return None if tag is None else ".%s.pyc" % tag


def write_stamp(state: StateDir, digest: str) -> None:
    found = scan(state.venv, None)
    write_atomic(state.stamp, {"digest": digest, "at": _now(), "fingerprint": found.fingerprint()})


def forget_stamp(state: StateDir) -> None:
    if os.path.lexists(state.stamp):
        os.unlink(state.stamp)


# ------------------------------------------------------------------ slots
#
# ``<venv>.envlock/slots.json`` says which lock each of the two venvs (the
# live one, ``previous/``) was built from and when, and whether the last
# exchange was an apply or a rollback, so rollback can say what it swaps and
# refuse to toggle back silently. Each slot: ``{"digest", "at", "ident"}``
# (``ident``: the directory's device and inode, which an exchange keeps).
# None: a venv envlock did not build, or one swapped before slots existed.


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_slots(state: StateDir) -> Dict[str, Any]:
    """The slots; unknown ones (absent, or damaged: not what ``write_atomic`` writes) are None."""
    unknown: Dict[str, Any] = {"live": None, "previous": None, "last": None, "at": None}
    try:
        with open(state.slots) as stream:
            slots = json.load(stream)
    except (OSError, ValueError):
        return unknown
    if not isinstance(slots, dict):
        return unknown
    for name in ("live", "previous"):
        if not isinstance(slots.get(name), dict):
            slots[name] = None
    return slots


def record_apply(state: StateDir, entry: Dict[str, Any]) -> None:
    """The journaled apply ``entry`` put its venv live (idempotent: recovery may run it twice)."""
    slots = read_slots(state)
    live = slots.get("live")
    if live is not None and live.get("ident") == entry["new"]:
        return
    if entry["old"] is None:
        previous = slots.get("previous")  # a fresh venv replaced nothing; previous/ is unchanged
    elif live is not None and live.get("ident") == entry["old"]:
        previous = live
    else:  # slots from before this venv: the stamp still names the replaced venv's lock
        stamp = read_stamp(state)
        digest = stamp.get("digest") if stamp else None
        previous = {"digest": digest, "at": stamp.get("at") if stamp else None, "ident": entry["old"]}
    new = {"digest": entry["digest"], "at": _now(), "ident": entry["new"]}
    write_atomic(state.slots, {"live": new, "previous": previous, "last": "apply", "at": new["at"]})


def record_rollback(state: StateDir, slots: Dict[str, Any]) -> Dict[str, Any]:
    """previous/ and the venv were exchanged: the slots trade places. Returns what is written."""
    swapped = {"live": slots.get("previous"), "previous": slots.get("live"), "last": "rollback", "at": _now()}
    write_atomic(state.slots, swapped)
    return swapped


def read_stamp(state: StateDir) -> Optional[Dict[str, Any]]:
    """The stamp, or None: absent, or damaged (truncated, not a table), it proves nothing."""
    try:
        with open(state.stamp) as stream:
            stamp = json.load(stream)
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("digest"), str):
        return None
    return stamp


def stamp_matches(
    state: StateDir, digest: str, stamp: Optional[Dict[str, Any]], found: Optional[Scan] = None
) -> bool:
    """Is the venv what the apply of ``digest`` left (``found``: its walk, when already taken)?"""
    if stamp is None or stamp.get("digest") != digest or not os.path.isdir(state.venv):
        return False
    found = found or scan(state.venv, None)
    if "fingerprint" in stamp:
        return bool(stamp["fingerprint"] == found.fingerprint())
    # A stamp an older agent wrote: every file's key and every link's target.
    keys = {rel: key for rel, key in found.files}
    return bool(keys == stamp.get("files") and dict(found.links) == stamp.get("links"))


def applied(venv: str, digest: str, force: bool = False) -> AppliedAnswer:
    """What the controller needs before an apply: may it replace ``venv``, is it a no-op?

    ``refused`` says why apply must not touch the path (nothing else is
    looked at then); ``matches`` is the no-op answer; ``dists`` (for the
    plan) is read only when it is not; ``stamp_digest`` is the digest of the
    lock last applied here; ``bytecode`` lists damaged ``.pyc`` files (looked
    for only in a venv that otherwise matches its stamp).
    """
    refused = path_refusal(venv)
    python: RunningPython = {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3]}
    if refused is not None:
        return {
            "protocol": AGENT_PROTOCOL,
            "refused": refused,
            "exists": os.path.lexists(venv),
            "matches": False,
            "dists": None,
            "python": python,
        }
    state = StateDir(venv)
    stamp = read_stamp(state)
    result: AppliedAnswer = {
        "protocol": AGENT_PROTOCOL,
        "refused": replace_refusal(venv, state.root, force),
        "exists": os.path.isdir(venv),
        "managed": managed(state.root),
        # Refused only because another tool built it: --force, or being the lock's own venv, lets
        # apply replace it.
        "foreign": replace_refusal(venv, state.root, True) is None and not managed(state.root),
        "stamp_digest": stamp.get("digest") if stamp else None,
        "matches": False,
        "dists": None,
        "bytecode": [],
        "python": python,
    }
    if result["refused"] is not None and not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return result
    # An unfinished apply is never a no-op: the next apply finishes it. Bytecode
    # is looked at last, only when all else says "no-op" (it costs the most).
    if result["exists"] and not os.path.lexists(state.journal) and stamp is not None:
        # One walk for both checks; the bytecode is looked at only when the rest matches.
        found = scan(venv, bytecode_suffix()) if stamp.get("digest") == digest else None
        if found is not None and stamp_matches(state, digest, stamp, found):
            result["bytecode"] = damaged_bytecode(venv, found=found.bytecode)
            result["matches"] = not result["bytecode"]
    if result["exists"] and not result["matches"]:
        try:
            from envlock.agent.snapshot import describe_venv

            result["dists"] = sorted((d["name"], d["version"]) for d in describe_venv(venv)["dists"])
        except Exception:  # a broken venv is exactly what apply is for
            result["dists"] = None
    return result
