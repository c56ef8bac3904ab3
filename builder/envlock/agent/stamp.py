"""The no-op check: is the venv exactly what the last apply of a lock left?

After a swap the agent writes ``<venv>.envlock/applied.json``: the lock
digest and the stat key (size, mtime, inode, ctime) of every file. A later
apply of the same lock walks the venv and compares stat keys, no hashing.
Bytecode is not in the stamp (the interpreter writes it on first use, which
must not turn a no-op into a rebuild), but a damaged ``.pyc`` for the host's
interpreter makes the venv not match (see ``envlock.agent.bytecode``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from envlock.agent.bytecode import damaged_bytecode
from envlock.agent.journal import StateDir, write_atomic
from envlock.agent.protocol import AGENT_PROTOCOL, AppliedAnswer
from envlock.agent.snapshot import walk
from envlock.agent.venvguard import managed, path_refusal, replace_refusal


def _stat_keys(venv: str) -> Tuple[Dict[str, List[int]], Dict[str, str]]:
    """Stat key of every file (bytecode aside) and target of every symlink, in one walk."""
    files, links = walk(venv)
    return {rel: [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns] for rel, st in files}, links


def write_stamp(state: StateDir, digest: str) -> None:
    keys, links = _stat_keys(state.venv)
    write_atomic(state.stamp, {"digest": digest, "at": _now(), "files": keys, "links": links})


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
    try:
        with open(state.slots) as stream:
            slots: Dict[str, Any] = json.load(stream)
    except (OSError, ValueError):
        return {"live": None, "previous": None, "last": None, "at": None}
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
    try:
        with open(state.stamp) as stream:
            stamp: Dict[str, Any] = json.load(stream)
    except (OSError, ValueError):
        return None
    return stamp


def stamp_matches(state: StateDir, digest: str, stamp: Optional[Dict[str, Any]]) -> bool:
    if stamp is None or stamp.get("digest") != digest or not os.path.isdir(state.venv):
        return False
    keys, links = _stat_keys(state.venv)
    return bool(keys == stamp.get("files") and links == stamp.get("links"))


def applied(venv: str, digest: str, force: bool = False) -> AppliedAnswer:
    """What the controller needs before an apply: may it replace ``venv``, is it a no-op?

    ``refused`` says why apply must not touch the path (nothing else is
    looked at then); ``matches`` is the no-op answer; ``dists`` (for the
    plan) is read only when it is not; ``stamp_digest`` is the digest of the
    lock last applied here; ``bytecode`` lists damaged ``.pyc`` files (looked
    for only in a venv that otherwise matches its stamp).
    """
    refused = path_refusal(venv)
    if refused is not None:
        return {
            "protocol": AGENT_PROTOCOL,
            "refused": refused,
            "exists": os.path.lexists(venv),
            "matches": False,
            "dists": None,
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
    }
    if result["refused"] is not None and not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return result
    # An unfinished apply is never a no-op: the next apply finishes it. Bytecode
    # is looked at last, only when all else says "no-op" (it costs the most).
    if result["exists"] and not os.path.lexists(state.journal) and stamp_matches(state, digest, stamp):
        result["bytecode"] = damaged_bytecode(venv)
        result["matches"] = not result["bytecode"]
    if result["exists"] and not result["matches"]:
        try:
            from envlock.agent.snapshot import describe_venv

            result["dists"] = sorted((d["name"], d["version"]) for d in describe_venv(venv)["dists"])
        except Exception:  # a broken venv is exactly what apply is for
            result["dists"] = None
    return result
