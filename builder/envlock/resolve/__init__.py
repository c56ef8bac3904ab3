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
from dataclasses import dataclass
from typing import Any

from envlock.errors import ProfileError, ResolveError
from envlock.hosts import HostProfile, load_profile
from envlock.lock.digest import check_lock_digest
from envlock.lock.io import read_lock, render_lock, write_lock
from envlock.lock.model import Lock
from envlock.resolve.memo import LockMemo
from envlock.resolve.target import TargetEnv, target_env
from envlock.workspace import Workspace


@dataclass(frozen=True, slots=True)
class LockResult:
    lock: Lock
    env: TargetEnv
    deviations: dict[str, str]  # package -> why its artifact differs from the reference's
    changed: bool
    stale: bool  # for --check: the lock on disk differs from a fresh resolution
    written: bool


def lock_host(
    workspace: Workspace,
    host: str,
    check: bool = False,
    probe: Callable[[HostProfile, Lock], dict[str, Any]] | None = None,
) -> LockResult:
    profile = load_profile(workspace, host)
    if profile.reference is None:
        raise ProfileError(f"{profile.path}: reference: missing (the host whose lock {host} derives from)")
    ref_path = workspace.lock_path(profile.reference)
    loaded: list[Lock] = []

    def reference_lock() -> Lock:
        if not loaded:
            loaded.append(read_lock(ref_path, shown=str(ref_path.relative_to(workspace.root))))
        return loaded[0]

    env = target_env(profile, reference_lock, (lambda: probe(profile, reference_lock())) if probe else None)
    _check_driver(profile, env)
    memo = LockMemo(workspace, profile, env)
    path, manifest_path = workspace.lock_path(host), workspace.manifest_path(host)
    known = memo.lookup()
    if known is not None:
        lock = read_lock(path, shown=str(path.relative_to(workspace.root)))
        return LockResult(lock, env, known, changed=False, stale=False, written=False)
    # The slow path: imported here so the unchanged case stays near start-up cost.
    from envlock.index import IndexClient
    from envlock.lock.manifest import read_manifest
    from envlock.resolve.assemble import build_target_lock
    from envlock.resolve.candidates import Finder
    from envlock.resolve.solve import resolve
    from envlock.store import Store

    reference = reference_lock()
    check_lock_digest(reference, str(ref_path.relative_to(workspace.root)))  # no laundering a hand edit
    ref_rows = read_manifest(workspace.manifest_path(profile.reference), reference.manifest_sha256)
    urls = profile.index.urls if profile.index else reference.indexes
    links = profile.index.find_links if profile.index else reference.find_links
    store = Store(workspace.store_dir)
    finder = Finder(env, reference, workspace.locks_dir, IndexClient(tuple(urls), tuple(links)), store)
    chosen, needed_by = resolve(finder, env, reference, profile)
    lock, manifest, deviations = build_target_lock(
        host,
        profile.venv,
        env,
        reference,
        ref_rows,
        finder,
        chosen,
        needed_by,
        store,
        workspace.locks_dir,
    )
    data = render_lock(lock)
    same = (
        path.is_file()
        and path.read_bytes() == data
        and manifest_path.is_file()
        and (manifest_path.read_bytes() == manifest)
    )
    if check:
        return LockResult(lock, env, deviations, changed=not same, stale=not same, written=False)
    if not same:
        write_lock(lock, path, manifest_path, manifest)
    memo.remember(deviations, asked_an_index=finder.asked_an_index)
    return LockResult(lock, env, deviations, changed=not same, stale=False, written=not same)


def _check_driver(profile: HostProfile, env: TargetEnv) -> None:
    """A GPU needs at least the driver of the first CUDA release that knows it."""
    from envlock.binary.cuda import Gpu, gpu_driver, parse_driver

    if env.driver is None:
        return
    for cc in env.gpu_cc:
        gpu = Gpu.parse(cc)
        needed = gpu_driver(gpu)
        if needed is not None and parse_driver(env.driver) < parse_driver(needed):
            raise ResolveError(
                f"{profile.path}: gpu.driver {env.driver} is too old for {gpu.sm} (compute capability {cc}): "
                f"it needs driver >= {needed}; upgrade the host's driver"
            )
