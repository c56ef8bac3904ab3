"""The few facts of a lock a no-op apply needs, without parsing the whole lock every run.

``envlock apply`` asks the host whether its venv already is the lock before
anything else; for that it needs the lock's digest, its interpreter version,
its pyvenv.cfg keys and its role, nothing of its packages. Parsing and
checking a 58-package, 5,000-line lock takes about 0.1 s, a third of a
no-op apply. So the facts of a lock that parsed and passed its digest check
are remembered under the sha256 of the lock file's bytes
(``~/.cache/envlock/lockheads/<sha256>.json``): the same bytes give the same
facts and pass the same check, so reading them back is as sound as parsing
again. A lock edited by one byte has another sha256 and is parsed and
checked in full. The key also covers the source of the modules that parse
and check a lock (``lock/io.py``, ``lock/model.py``, ``lock/digest.py``):
an envlock whose checks changed does not trust what an older one found.
The memo sits in the user's own cache, beside the agent bundles envlock
runs, so whoever could forge it could already change what envlock runs.
That holds only while the cache is the user's: a memo is trusted when its
directory is the user's and private and the file is the user's and nobody
else can write it (``envlock.privatecache``, the rule of every per-user
memo; ``XDG_CACHE_HOME`` pointing at a shared directory, a memo planted by
another user, a symlink: parsed in full instead, and not written there).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.privatecache import UNWRITABLE_BY_OTHERS, NotPrivate, private_dir, read_private, write_private

if TYPE_CHECKING:  # not imported on a memo hit: the model's classes cost more than the lookup
    from envlock.lock.model import Lock

HEAD_FORMAT = b"lockhead-1"
CHECKING_CODE = ("io.py", "model.py", "digest.py")


@dataclass(frozen=True, slots=True)
class LockHead:
    digest: str
    python: str  # the interpreter version, "3.12.1"
    pyvenv: dict[str, str]
    role: str  # reference | target


def head_of(lock: Lock) -> LockHead:
    return LockHead(lock.digest, lock.interpreter.version, dict(lock.pyvenv), lock.role)


def content_key(data: bytes) -> str:
    """The memo key of a lock file's bytes, for this envlock's lock-checking code."""
    digest = hashlib.sha256(HEAD_FORMAT)
    here = Path(__file__).parent
    for name in CHECKING_CODE:
        digest.update(b"\0" + (here / name).read_bytes())
    digest.update(b"\0" + data)
    return digest.hexdigest()


def recall(memo_dir: Path, key: str) -> LockHead | None:
    """The remembered facts of the lock whose bytes have ``key``; None when unknown or unreadable,
    or when the memo or its directory is not this user's alone (see the module docstring)."""
    if not private_dir(memo_dir):
        return None
    try:
        raw = read_private(memo_dir / f"{key}.json", mask=UNWRITABLE_BY_OTHERS)
        if raw is None:
            return None
        data = json.loads(raw)
        pyvenv = data["pyvenv"]
        if not isinstance(pyvenv, dict) or not all(isinstance(v, str) for v in pyvenv.values()):
            return None
        facts = (data["digest"], data["python"], data["role"])
        if not all(isinstance(fact, str) for fact in facts) or not data["digest"].startswith("sha256:"):
            return None  # not what remember() writes: unknown, parsed again
        head = LockHead(data["digest"], data["python"], pyvenv, data["role"])
    except (NotPrivate, ValueError, KeyError, TypeError):
        return None
    return head


def remember(memo_dir: Path, key: str, head: LockHead) -> None:
    """Best effort: a memo that cannot be written costs the next run a parse, nothing else."""
    facts = {"digest": head.digest, "python": head.python, "pyvenv": head.pyvenv, "role": head.role}
    write_private(memo_dir, memo_dir / f"{key}.json", json.dumps(facts).encode())
