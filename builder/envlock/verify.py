"""``envlock verify HOST``: the live venv against its lock, file by file, like ``rpm -V``.

The locked side is ``locks/pylock.<host>.toml`` and its manifest, whose
sha256 must be the one the lock records (a manifest edited by hand is an
error, not drift). The live side is the agent's snapshot turned into
manifest rows by capture's own functions (``capture.live``), so an
untouched file gives the identical row (``envlock.drift``). When the live manifest's sha256 is
the recorded one, every file matches and no row is compared; otherwise rows
are compared by path and each difference is reported with rpm-style flags:

    S  size differs        5  sha256 differs
    M  kind differs (f regular, x executable, l symlink)
    L  symlink target differs
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from envlock.capture.live import snapshot_live
from envlock.drift import VerifyResult, compare
from envlock.lock.io import read_lock
from envlock.reporter import Reporter
from envlock.workspace import Workspace


def verify(
    workspace: Workspace,
    host: str,
    *,
    use_cache: bool = True,
    jobs: int = 0,
    reporter: Reporter | None = None,
) -> VerifyResult:
    """Compare ``host``'s live venv with its lock."""
    lock_path = workspace.lock_path(host)
    if not lock_path.is_file():
        read_lock(lock_path, shown=workspace.shown(lock_path))  # raises the usual message
    # The agent is another process: read and check the lock while it walks the venv.
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(
            snapshot_live, workspace, host, use_cache=use_cache, jobs=jobs, reporter=reporter
        )
        locked = workspace.read_locked(host)
        live = running.result()
    return compare(locked.lock, locked.manifest, live, lock_path)
