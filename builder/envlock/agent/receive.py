"""Content-addressed artifact drop on the host: ``have`` and ``receive``.

Final names are ``DIR/<sha256>/<file name>`` and are created only by a
rename after the bytes hashed right, so a final name always holds good bytes
and ``have`` can trust existence. A transfer cut off midway leaves at most a
``DIR/.incoming/*.part`` file, removed by the next ``receive``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import IO, Dict, List

CHUNK = 1 << 20


class ReceiveError(Exception):
    pass


def _final(directory: str, sha: str, name: str) -> str:
    if "/" in name or name in ("", ".", "..") or len(sha) != 64:
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


def receive(directory: str, stream: IO[bytes]) -> List[Dict[str, object]]:
    """Read ``{"sha256","name","size"}\\n`` + bytes frames until EOF."""
    directory = os.path.expanduser(directory)
    incoming = os.path.join(directory, ".incoming")
    os.makedirs(incoming, exist_ok=True)
    for stale in glob.glob(os.path.join(incoming, "*.part")):
        os.unlink(stale)  # left by a transfer that was cut off
    received = []
    while True:
        line = stream.readline()
        if not line:
            break
        header = json.loads(line)
        sha, name, size = header["sha256"], header["name"], int(header["size"])
        final = _final(directory, sha, name)
        part = os.path.join(incoming, "%s.%d.part" % (sha, os.getpid()))
        digest = hashlib.sha256()
        left = size
        with open(part, "wb") as out:
            while left:
                chunk = stream.read(min(CHUNK, left))
                if not chunk:
                    os.unlink(part)
                    raise ReceiveError("%s: stream ended after %d of %d bytes" % (name, size - left, size))
                digest.update(chunk)
                out.write(chunk)
                left -= len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha:
            os.unlink(part)
            raise ReceiveError("%s: sha256 %s on arrival, expected %s" % (name, digest.hexdigest(), sha))
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(part, final)
        received.append({"sha256": sha, "name": name, "size": size})
    return received
