"""Write a lock's new store objects to the shared store (``envlock.toml`` ``[store] push``).

Capture and lock put what they make (repacked wheels, bin/ scripts, source
archives, predicted entry points) into the local store first; this then
copies every object the lock names that the shared store lacks, so a
colleague's clone or a host can read it from ``[store] url``. Objects are
content addressed: one already there is never sent again, and a partial
copy never takes a final name (it is written under ``.incoming/`` and
renamed).

Two kinds of target: a directory (local disk, NFS mount) and
``ssh://[user@]host/path`` through the system ssh client (keys, agents and
``~/.ssh/config`` as for hosts); the remote side needs only ``sh``, ``tar``
and ``mkdir``/``mv``, and checks each file's sha256 with ``sha256sum`` when
the host has it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envlock.agent.pathguard import PathError, check_relative, safe_join
from envlock.config import SshTarget
from envlock.errors import EnvlockError
from envlock.lock.model import Lock
from envlock.store import Store, blob_key, wheel_key
from envlock.tmpname import create_exclusive, private_sibling
from envlock.workspace import Workspace

CHUNK = 1 << 20
_HEX64 = re.compile("[0-9a-f]{64}")


class StorePushError(EnvlockError):
    """The shared store could not be written."""


@dataclass(frozen=True, slots=True)
class Pushed:
    target: str  # where, as envlock.toml names it
    objects: int  # sent
    bytes: int
    present: int  # already there


def lock_objects(store: Store, lock: Lock) -> list[tuple[str, Path]]:
    """(key, local path) of every store object the lock names that this store holds."""
    keys: list[str] = []
    for pkg in lock.packages:
        if pkg.wheel.path is not None:
            keys.append(wheel_key(pkg.wheel.sha256, pkg.wheel.filename))
        keys.extend(blob_key(sha) for sha in pkg.scripts.values())
        if pkg.source_tree is not None:
            keys.append(blob_key(pkg.source_tree.sha256))
    found = {key: store.root / key for key in keys}
    return sorted((key, path) for key, path in found.items() if path.is_file())


def push_lock_objects(workspace: Workspace, store: Store, lock: Lock) -> Pushed | None:
    """Make the shared store hold every object of ``lock``; None when no ``push`` is configured."""
    target = workspace.config().store.push
    if target is None:
        return None
    return push_objects(target, lock_objects(store, lock))


def push_objects(target: Path | SshTarget, objects: Iterable[tuple[str, Path]]) -> Pushed:
    unique = dict(objects)
    if isinstance(target, SshTarget):
        return _push_ssh(target, unique)
    return _push_dir(target, unique)


def _push_dir(root: Path, objects: dict[str, Path]) -> Pushed:
    sent = size = present = 0
    for key, source in objects.items():
        final = _inside(root, key)
        if final.is_file() and not final.is_symlink():
            present += 1
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(final, ".part")
        digest = hashlib.sha256()
        try:
            with open(source, "rb") as src, create_exclusive(tmp) as out:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != _sha_of(key):
                raise StorePushError(f"{source}: bytes do not hash to its name; not pushed to {root}")
            os.replace(tmp, final)
        except OSError as exc:
            raise StorePushError(f"store.push {root}: cannot write {key}: {exc.strerror or exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        sent += 1
        size += source.stat().st_size
    return Pushed(str(root), sent, size, present)


def _inside(root: Path, key: str) -> Path:
    """``root/key``, refused when ``key`` is not a store key or a directory on the way is a symlink.

    The shared store is written by everyone on the team: ``wheels/<sha>`` made
    a symlink to ``~victim/.config`` would carry this push's file out of it.
    """
    _check_key(key, str(root))
    try:
        return Path(safe_join(str(root), key, "store.push"))
    except PathError as exc:
        raise StorePushError(f"store.push {root}: {exc}; nothing written there") from exc


def _check_key(key: str, shown: str) -> None:
    """``wheels/<sha256>/<name>`` or ``blobs/<xx>/<sha256>``, each part one plain path component."""
    parts = key.split("/")
    shaped = (len(parts) == 3 and parts[0] == "wheels" and _HEX64.fullmatch(parts[1])) or (
        len(parts) == 3 and parts[0] == "blobs" and _HEX64.fullmatch(parts[2]) and parts[1] == parts[2][:2]
    )
    try:
        check_relative(key, "store.push")
    except PathError:
        shaped = False
    if not shaped:
        raise StorePushError(
            f"store.push {shown}: {key!r}: not a store key (wheels/<sha256>/<name> or blobs/<xx>/<sha256>); "
            "nothing written there"
        )


def _sha_of(key: str) -> str:
    """The sha256 an object's key names: ``wheels/<sha>/<name>`` or ``blobs/<xx>/<sha>``."""
    parts = key.split("/")
    return parts[1] if parts[0] == "wheels" else parts[2]


# Run by the remote login shell with the store root as $1. Reads keys on stdin; prints those present.
_PRESENT = 'root=$1; while IFS= read -r k; do [ -f "$root/$k" ] && printf "%s\\n" "$k"; done; exit 0'
# Unpacks a tar of keys from stdin into a private directory, checks each file's sha256
# (when sha256sum exists) against its key, and renames it into place. The store is written
# by the whole team: a directory on the way, or the final name, that is a symlink (or a
# directory at the final name, which mv would move the file into) is refused, not followed.
_RECEIVE = r"""
set -e
root=$1
mkdir -p "$root/.incoming"
d=$(mktemp -d "$root/.incoming/push.XXXXXXXX")
trap 'rm -rf "$d"' EXIT
tar -x -f - -C "$d"
cd "$d"
find . -type f | while IFS= read -r f; do
  k=${f#./}
  case "$k" in
    wheels/*) want=$(printf "%s" "$k" | cut -d/ -f2) ;;
    blobs/*) want=$(printf "%s" "$k" | cut -d/ -f3) ;;
    *) echo "unexpected member $k" >&2; exit 3 ;;
  esac
  if command -v sha256sum >/dev/null 2>&1; then
    got=$(sha256sum < "$k" | cut -c1-64)
    [ "$got" = "$want" ] || { echo "$k: sha256 $got on arrival" >&2; exit 4; }
  fi
  top=${k%%/*}
  mid=$(dirname "$k")
  for p in "$root/$top" "$root/$mid" "$root/$k"; do
    if [ -L "$p" ]; then echo "$p is a symlink; refusing to write through it" >&2; exit 5; fi
  done
  if [ -d "$root/$k" ]; then echo "$root/$k is a directory; refusing to write into it" >&2; exit 5; fi
  mkdir -p "$root/$mid"
  mv -f "$k" "$root/$k"
done
"""


def _ssh(target: SshTarget, script: str, stdin: bytes | IO[bytes]) -> bytes:
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"]
    if target.port:
        argv += ["-p", str(target.port)]
    remote = " ".join(["sh", "-c", shlex.quote(script), "sh", shlex.quote(target.path)])
    argv += ["--", target.host, remote]
    try:
        if isinstance(stdin, bytes):
            proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=3600)
        else:
            proc = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StorePushError(f"store.push {target}: {exc}") from exc
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        raise StorePushError(f"store.push {target}: {why[-1] if why else f'ssh exited {proc.returncode}'}")
    return proc.stdout


def _push_ssh(target: SshTarget, objects: dict[str, Path]) -> Pushed:
    keys = sorted(objects)
    for key in keys:
        _check_key(key, str(target))
    answer = _ssh(target, _PRESENT, stdin="".join(k + "\n" for k in keys).encode())
    there = set(answer.decode(errors="replace").splitlines())
    missing = [k for k in keys if k not in there]
    if not missing:
        return Pushed(str(target), 0, 0, len(keys))
    with tempfile.TemporaryFile() as tar_file:
        with tarfile.open(fileobj=tar_file, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for key in missing:
                info = tar.gettarinfo(str(objects[key]), arcname=key)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                with open(objects[key], "rb") as src:
                    tar.addfile(info, src)
        tar_file.flush()
        tar_file.seek(0)
        _ssh(target, _RECEIVE, tar_file)
    size = sum(objects[k].stat().st_size for k in missing)
    return Pushed(str(target), len(missing), size, len(keys) - len(missing))


def describe(pushed: Pushed) -> str:
    return f"{pushed.objects} new object(s), {pushed.bytes} bytes, to {pushed.target}"
