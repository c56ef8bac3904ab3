"""Content-addressed artifact drop on the host: ``have`` and ``receive``.

Final names are ``DIR/<sha256>/<file name>`` and are created only by a
rename after the bytes hashed right, so a final name always holds good bytes
and ``have`` can trust existence. Each transfer writes its partial files in
its own ``DIR/.incoming/<host>-<pid>-<random>/`` and removes only that
directory: two applies to different venvs on one host share the drop, and
one must never delete the other's partial file. A transfer cut off midway
(killed, so it could not clean up) leaves its directory behind; a later
``receive`` removes it when its process is gone (same host name, no such
pid) or, whatever it is, once it is a day old. The host name is in the
name because a home directory on NFS is shared by hosts whose pids mean
nothing to each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
from typing import IO, List

from envlock.agent.protocol import ReceivedArtifact

CHUNK = 1 << 20
STALE_AFTER = 24 * 3600  # seconds; an incoming directory this old belongs to no live transfer
_HEX = frozenset("0123456789abcdef")


class ReceiveError(Exception):
    pass


def _final(directory: str, sha: str, name: str) -> str:
    if "/" in name or "\x00" in name or name in ("", ".", "..") or len(sha) != 64 or not _HEX.issuperset(sha):
        raise ReceiveError("refusing artifact name %r (sha256 %r)" % (name, sha))
    return os.path.join(directory, sha, name)


def have(directory: str, wanted: List[str]) -> List[str]:
    """The ``sha256/name`` entries of ``wanted`` already present."""
    directory = os.path.expanduser(directory)
    present = []
    for item in wanted:
        sha, _, name = item.partition("/")
        if os.path.isfile(_final(directory, sha, name)):
            present.append(item)
    return present


def _prefix() -> str:
    return "%s-%d-" % (socket.gethostname().replace("-", "_"), os.getpid())


def _owner_gone(name: str) -> bool:
    """Whether the directory's transfer ran on this host in a process that no longer exists."""
    host, _, rest = name.partition("-")
    pid = rest.partition("-")[0]
    if host != socket.gethostname().replace("-", "_") or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's
    return False


def _remove_stale(incoming: str, now: float) -> None:
    """Remove what killed transfers left behind: their process is gone, or it is a day old."""
    for entry in os.scandir(incoming):
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime >= STALE_AFTER
            if not old and not (entry.is_dir(follow_symlinks=False) and _owner_gone(entry.name)):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)  # a *.part of an older envlock
        except OSError:
            pass  # another receive got there first


def receive(directory: str, stream: IO[bytes]) -> List[ReceivedArtifact]:
    """Read ``{"sha256","name","size"}\\n`` + bytes frames until EOF."""
    directory = os.path.expanduser(directory)
    incoming = os.path.join(directory, ".incoming")
    os.makedirs(incoming, exist_ok=True)
    _remove_stale(incoming, time.time())
    own = tempfile.mkdtemp(prefix=_prefix(), dir=incoming)
    try:
        return _receive_into(directory, own, stream)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _receive_into(directory: str, own: str, stream: IO[bytes]) -> List[ReceivedArtifact]:
    received: List[ReceivedArtifact] = []
    while True:
        line = stream.readline()
        if not line:
            break
        header = json.loads(line)
        sha, name, size = header["sha256"], header["name"], int(header["size"])
        final = _final(directory, sha, name)
        part = os.path.join(own, sha + ".part")
        digest = hashlib.sha256()
        left = size
        try:
            with open(part, "wb") as out:
                while left:
                    chunk = stream.read(min(CHUNK, left))
                    if not chunk:
                        raise ReceiveError(
                            "%s: stream ended after %d of %d bytes" % (name, size - left, size)
                        )
                    digest.update(chunk)
                    out.write(chunk)
                    left -= len(chunk)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:  # a full disk: say where (the part is removed with its directory)
            raise ReceiveError("%s: cannot write %s: %s" % (name, part, exc.strerror or exc)) from exc
        if digest.hexdigest() != sha:
            raise ReceiveError("%s: sha256 %s on arrival, expected %s" % (name, digest.hexdigest(), sha))
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(part, final)
        received.append({"sha256": sha, "name": name, "size": size})
    return received
