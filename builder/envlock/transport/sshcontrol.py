"""Where SSH master connections wait between envlock runs (``ssh_persist``).

A warm command over SSH paid a handshake (key exchange and public-key
authentication, ~0.16 s even on loopback) on every run. The master
connection now outlives the run that opened it for ``ssh_persist`` seconds
(the ``ENVLOCK_SSH_PERSIST`` environment variable, else the profile's
``ssh_persist``, else 60; 0: one connection per run, closed at its end, as
before), and a run within that time reuses it.

A master's socket is a key to the host: whoever connects to it runs commands
there as the user, and whoever can put a socket where envlock looks receives
envlock's commands (and the agent bundle) and answers them. So:

- the sockets live in ``$XDG_RUNTIME_DIR/envlock-ssh`` when that variable
  names a directory of the user's, else in ``/tmp/envlock-ssh-<uid>``; envlock
  creates the directory 0700 and, before every use, refuses it (an error
  naming it, exit 2) unless it is a real directory (no symlink), owned by the
  user, writable by nobody else, in a parent that nobody else can rename it
  out of (owned by the user or root, and sticky when others may write there);
- a socket's name is keyed by everything that decides where and as whom ssh
  connects: a hash of the profile's target and ssh options (so two profiles
  never share a master opened with other options, keys or ``-F`` files) and
  ssh's own ``%C`` (a hash of the local host, remote host, port, user and
  jump host, as resolved from the ssh configuration at each run, so an edited
  ``Host`` entry does not reach the old host's master);
- a run checks the master with ``ssh -O check`` under an ``flock`` per key
  (two runs never start two masters on one socket); when it is gone, a new
  master starts with ``ControlMaster=auto``, which removes a stale socket
  (``ECONNREFUSED``) before binding its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import EnvlockError, ProfileError
from envlock.hosts import HostProfile, parse_duration

DEFAULT_PERSIST = 60
PERSIST_ENV = "ENVLOCK_SSH_PERSIST"
# sun_path holds 108 bytes; ssh binds "<ControlPath>.<16 random chars>" first, and %C is 40 hex.
_SOCKET_NAME = 16 + 1 + 40
_MAX_DIR = 107 - _SOCKET_NAME - 17


@dataclass(frozen=True, slots=True)
class ControlPlan:
    """How this run reaches the host: the socket path, its lock file, and how long it persists."""

    persist: int  # seconds; 0: a private master for this run only
    path: str  # ControlPath (with ssh's %C when shared)
    lock: Path | None  # flock taken while checking or starting a shared master


def persist_seconds(profile: HostProfile) -> int:
    """``ENVLOCK_SSH_PERSIST``, else the profile's ``ssh_persist``, else the default."""
    raw = os.environ.get(PERSIST_ENV)
    if raw is not None and raw.strip():
        seconds = parse_duration(raw)
        if seconds is None:
            raise EnvlockError(
                f'{PERSIST_ENV}={raw!r}: expected seconds like 60 or "60s", "5m", "1h" (at most 24h; '
                "0: one connection per run)"
            )
        return seconds
    return DEFAULT_PERSIST if profile.ssh_persist is None else profile.ssh_persist


def shared_dir() -> Path:
    """Where persistent masters' sockets live for this user (see the module docstring).

    ``$XDG_RUNTIME_DIR`` only when it is a directory of this user's: after
    ``su`` or ``sudo -E`` it often names another user's, or one that is gone.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        try:
            st = os.stat(runtime)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            return Path(runtime) / "envlock-ssh"
    return Path("/tmp") / f"envlock-ssh-{os.getuid()}"


def private_dir(path: Path) -> Path:
    """``path``, created 0700 when missing, after checking nobody else can use or swap it."""
    uid = os.getuid()
    parent = path.parent
    try:
        up = os.lstat(parent)
    except OSError as exc:
        raise _refused(path, f"its parent {parent} cannot be read ({exc.strerror})") from exc
    if stat.S_ISLNK(up.st_mode) or not stat.S_ISDIR(up.st_mode):
        raise _refused(path, f"its parent {parent} is not a directory")
    if up.st_uid not in (uid, 0):
        raise _refused(path, f"its parent {parent} is owned by uid {up.st_uid}")
    if up.st_mode & 0o022 and not up.st_mode & stat.S_ISVTX:
        raise _refused(path, f"its parent {parent} is writable by others and not sticky")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _refused(path, f"cannot create it ({exc.strerror})") from exc
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refused(path, "it is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise _refused(path, "it is not a directory")
    if st.st_uid != uid:
        raise _refused(path, f"it is owned by uid {st.st_uid}, not by you (uid {uid})")
    if st.st_mode & 0o022:
        raise _refused(path, f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")
    if len(str(path)) > _MAX_DIR:
        raise _refused(path, f"its path is longer than {_MAX_DIR} characters (a socket path holds 108)")
    return path


def _refused(path: Path, why: str) -> EnvlockError:
    return ProfileError(
        f"ssh control directory {path}: {why}; envlock will not keep SSH connections there "
        f"(fix or remove it, or set {PERSIST_ENV}=0 for one connection per run)"
    )


def profile_key(profile: HostProfile, fixed: list[str]) -> str:
    """A hash of what this profile asks ssh for: target, envlock's options and the profile's."""
    assert profile.ssh is not None
    words = json.dumps([profile.ssh, fixed, list(profile.ssh_args)])
    return hashlib.sha256(words.encode()).hexdigest()[:16]


def control_plan(profile: HostProfile, fixed: list[str]) -> ControlPlan:
    """Where this run's master lives: shared and keyed, or private to the run (persist 0)."""
    persist = persist_seconds(profile)
    if persist == 0:
        # mkdtemp: 0700, a fresh name nobody could have prepared.
        return ControlPlan(0, f"{tempfile.mkdtemp(prefix='envlock-ssh-')}/cm", None)
    directory = private_dir(shared_dir())
    key = profile_key(profile, fixed)
    return ControlPlan(persist, f"{directory}/{key}-%C", directory / f"{key}.lock")
