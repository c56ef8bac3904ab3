"""``envlock lock HOST``: resolve a per-host lock from the reference's.

Inputs: the reference lock (``reference = "ct129"`` in the target's
profile), the target's environment (``target.py``), the indexes (the
profile's ``[index]``, else the reference's), the store. Policy and its
order live in ``provider.py``; which artifacts run on the target in
``candidates.py``; the resulting Lock, with a reason on every package that
differs from the reference, in ``assemble.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from envlock.errors import EnvlockError, ProfileError, ResolveError
from envlock.hosts import HostProfile, load_profile
from envlock.resolve.memo import LockMemo, LockSummary
from envlock.resolve.target import TargetEnv, target_env
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.changes import LockDiff
    from envlock.lock.model import Lock


@dataclass(frozen=True, slots=True, kw_only=True)
class LockResult:
    lock: LockSummary  # what the command reports of the lock (a warm run does not read it)
    env: TargetEnv
    deviations: dict[str, str]  # package -> why its artifact differs from the reference's
    changed: bool
    stale: bool  # for --check: the lock on disk differs from a fresh resolution
    written: bool
    # For a stale --check: the lock on disk against the fresh resolution
    # (``a`` is the disk's), or why the disk's lock could not be compared.
    staleness: LockDiff | None = None
    unreadable: str | None = None


def lock_host(
    workspace: Workspace,
    host: str,
    check: bool = False,
    probe: Callable[[HostProfile, Lock], dict[str, Any]] | None = None,
) -> LockResult:
    profile = load_profile(workspace, host)
    if profile.reference is None:
        raise ProfileError(f"{profile.path}: reference: missing (the host whose lock {host} derives from)")
    ref_host = profile.reference
    loaded: list[Lock] = []

    def reference_lock() -> Lock:
        # Digest checked: a hand edit to the reference must not be laundered into a valid target lock.
        if not loaded:
            loaded.append(workspace.read_lock(ref_host))
        return loaded[0]

    memo = LockMemo(workspace, profile)

    def reference_libc() -> str:
        known = memo.reference_libc()
        return known if known is not None else reference_lock().platform.libc_version

    env = target_env(profile, reference_libc, (lambda: probe(profile, reference_lock())) if probe else None)
    _check_driver(profile, env)
    known = memo.lookup(env)
    if known is not None:
        deviations, summary = known
        return LockResult(
            lock=summary, env=env, deviations=deviations, changed=False, stale=False, written=False
        )
    # The slow path: imported here so the unchanged case stays near start-up cost.
    from envlock.index import IndexClient
    from envlock.resolve.assemble import build_target_lock
    from envlock.resolve.candidates import Finder
    from envlock.resolve.solve import resolve
    from envlock.store import open_store

    reference = reference_lock()
    ref_rows = workspace.read_locked(ref_host, reference).rows()
    urls = profile.index.urls if profile.index else reference.indexes
    links = profile.index.find_links if profile.index else reference.find_links
    store = open_store(workspace)
    finder = Finder(env, reference, workspace.locks_dir, IndexClient(tuple(urls), tuple(links)), store)
    chosen, needed_by = resolve(finder, env, reference, profile)
    lock, manifest, deviations = build_target_lock(
        host=host,
        venv=profile.venv,
        env=env,
        reference=reference,
        reference_rows=ref_rows,
        finder=finder,
        chosen=chosen,
        needed_by=needed_by,
        store=store,
        lock_dir=workspace.locks_dir,
    )
    _check_abi(profile, reference, lock)
    from envlock.lock.published import keep_published

    lock = replace(lock, packages=tuple(keep_published(_on_disk(workspace, host), lock.packages)))
    if check:
        same = workspace.lock_is_current(host, lock, manifest)
        staleness, unreadable = (None, None) if same else _against_disk(workspace, host, lock)
        return LockResult(
            lock=LockSummary.of(lock),
            env=env,
            deviations=deviations,
            changed=not same,
            stale=not same,
            written=False,
            staleness=staleness,
            unreadable=unreadable,
        )
    written = workspace.write_lock_if_changed(host, lock, manifest)
    # New objects (store wheels, predicted entry points) go to the shared store (envlock.toml).
    from envlock.storepush import push_lock_objects

    push_lock_objects(workspace, store, lock)
    memo.remember(env, reference, lock, deviations, asked_an_index=finder.asked_an_index)
    return LockResult(
        lock=LockSummary.of(lock),
        env=env,
        deviations=deviations,
        changed=written,
        stale=False,
        written=written,
    )


def _on_disk(workspace: Workspace, host: str) -> Lock | None:
    """The host's lock as it is now (for what ``envlock publish`` did to it); None if unreadable."""
    try:
        return workspace.read_lock(host)
    except EnvlockError:
        return None


def _against_disk(workspace: Workspace, host: str, fresh: Lock) -> tuple[LockDiff | None, str | None]:
    """What a rewrite would change: the lock on disk diffed against the fresh one."""
    from envlock.changes import diff_locks  # --check of a stale lock only
    from envlock.lock.io import read_lock

    path = workspace.lock_path(host)
    shown = workspace.shown(path)
    if not path.is_file():
        return None, f"{shown}: no lock on disk yet"
    try:
        on_disk = read_lock(path, shown=shown)
    except EnvlockError as exc:
        return None, str(exc)
    return diff_locks(on_disk, fresh, "on disk", "fresh"), None


def _check_abi(profile: HostProfile, reference: Lock, lock: Lock) -> None:
    """Refuse a target lock in which a library kept from the reference loses a symbol it
    takes from a package that changed (ABI facts, ``envlock.abi``)."""
    import os

    from envlock.abi import abi_breaks, summarize
    from envlock.resolve.assemble import NO_ABI_CHECK

    if os.environ.get(NO_ABI_CHECK):
        return
    breaks = abi_breaks(reference, lock)
    if not breaks:
        return
    lines = summarize(breaks)
    first = breaks[0]
    pins = sorted({f'"{b.provider}=={b.provider_before}"' for b in breaks})
    consumers = sorted({b.consumer for b in breaks})
    fix = (
        f"keep what they were built against ({profile.path}: [lock] pins = [{', '.join(pins)}]) "
        f"or rebuild {', '.join(consumers)} against {first.provider} {first.provider_after or '(removed)'}"
    )
    count = f"{len(breaks)} symbol(s) lost" if len(breaks) > 1 else "a symbol lost"
    raise ResolveError(
        f"ABI break for {profile.name} ({count}): "
        + "; ".join(lines[:4])
        + (f"; and {len(lines) - 4} more" if len(lines) > 4 else "")
        + f"; {fix}"
    )


def _check_driver(profile: HostProfile, env: TargetEnv) -> None:
    """A GPU needs at least the driver of the first CUDA release that knows it."""
    if env.driver is None:
        return
    from envlock.binary.cuda import Gpu, gpu_driver, parse_driver

    for cc in env.gpu_cc:
        gpu = Gpu.parse(cc)
        needed = gpu_driver(gpu)
        if needed is not None and parse_driver(env.driver) < parse_driver(needed):
            raise ResolveError(
                f"{profile.path}: gpu.driver {env.driver} is too old for {gpu.sm} (compute capability {cc}): "
                f"it needs driver >= {needed}; upgrade the host's driver"
            )
