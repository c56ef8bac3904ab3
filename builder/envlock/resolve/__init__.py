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

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from resolvelib import BaseReporter, ResolutionImpossible, ResolutionTooDeep, Resolver

from envlock.errors import EnvlockError, ProfileError
from envlock.hosts import HostProfile, load_profile
from envlock.index import IndexClient
from envlock.lock.io import read_lock, render_lock, write_lock
from envlock.lock.manifest import read_manifest
from envlock.lock.model import Lock
from envlock.resolve.assemble import build_target_lock
from envlock.resolve.candidates import Candidate, Finder
from envlock.resolve.provider import LockProvider
from envlock.resolve.target import TargetEnv, target_env
from envlock.store import Store
from envlock.workspace import Workspace


class ResolveError(EnvlockError):
    """No set of artifacts runs on the target; the message says which and what would fix it."""


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
    probe: Callable[[HostProfile], dict[str, object]] | None = None,
) -> LockResult:
    profile = load_profile(workspace, host)
    if profile.reference is None:
        raise ProfileError(f"{profile.path}: reference: missing (the host whose lock {host} derives from)")
    ref_path = workspace.lock_path(profile.reference)
    reference = read_lock(ref_path, shown=str(ref_path.relative_to(workspace.root)))
    ref_rows = read_manifest(workspace.manifest_path(profile.reference), reference.manifest_sha256)
    env = target_env(profile, reference, (lambda: probe(profile)) if probe else None)
    _check_driver(profile, env)
    urls = profile.index.urls if profile.index else reference.indexes
    links = profile.index.find_links if profile.index else reference.find_links
    store = Store(workspace.store_dir)
    finder = Finder(env, reference, workspace.locks_dir, IndexClient(tuple(urls), tuple(links)), store)
    chosen, needed_by = _resolve(finder, env, reference, profile)
    lock, manifest, deviations = build_target_lock(
        host, profile.venv, env, reference, ref_rows, finder, chosen, needed_by, store, profile.python
    )
    path, manifest_path = workspace.lock_path(host), workspace.manifest_path(host)
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
    return LockResult(lock, env, deviations, changed=not same, stale=False, written=not same)


def _check_driver(profile: HostProfile, env: TargetEnv) -> None:
    """A GPU needs at least the driver of the first CUDA release that knows it."""
    from envlock.binary.compat import Gpu, gpu_driver, parse_driver

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


def _resolve(
    finder: Finder, env: TargetEnv, reference: Lock, profile: HostProfile
) -> tuple[dict[str, Candidate], dict[str, str]]:
    overrides: dict[str, SpecifierSet] = {}
    for text in profile.policy.overrides:
        override = Requirement(text)
        overrides[canonicalize_name(override.name)] = override.specifier
    roots = [Requirement(p.name) for p in reference.packages]
    roots += [Requirement(pin) for pin in profile.policy.pins]
    provider = LockProvider(finder, overrides, env.markers())
    try:
        result = Resolver(provider, BaseReporter()).resolve(roots, max_rounds=2000)
    except ResolutionImpossible as exc:
        raise ResolveError(_explain(finder, env, exc)) from exc
    except ResolutionTooDeep as exc:
        raise ResolveError(
            f"resolution for {profile.name} did not settle after {exc.round_count} rounds"
        ) from exc
    needed_by: dict[str, str] = {}
    for key in result.mapping:
        for parent in result.graph.iter_parents(key):
            if parent is not None:
                needed_by.setdefault(key, parent)
    return dict(result.mapping), needed_by


def _explain(finder: Finder, env: TargetEnv, exc: ResolutionImpossible) -> str:  # type: ignore[type-arg]
    names = []
    for cause in exc.causes:
        name = canonicalize_name(cause.requirement.name)
        if name not in names:
            names.append(name)
    parts = []
    for name in names:
        ref = finder.reference.package(name)
        rejected = finder.rejected.get(name, [])
        label = f"{name} {ref.version}" if ref else name
        if not finder.candidates(name):
            parts.append(f"{label}: no artifact on {', '.join(finder.client.urls) or 'any index'}")
            continue
        if not rejected:
            wanted = sorted(
                {
                    str(c.requirement.specifier) or "any"
                    for c in exc.causes
                    if canonicalize_name(c.requirement.name) == name
                }
            )
            parts.append(
                f"{label}: no artifact satisfies {' and '.join(wanted)} together with the other packages"
            )
            continue
        reasons = [why for _cand, why in rejected]
        first = next((why for cand, why in rejected if cand.reference is not None), reasons[0])
        parts.append(f"{label}: {_short(first)}{_fix(first, env)}")
    return "; ".join(parts) or "no consistent set of artifacts"


def _short(reason: str) -> str:
    return reason if len(reason) < 300 else reason[:297] + "..."


def _fix(reason: str, env: TargetEnv) -> str:
    if "no image for sm_" in reason:
        arch = ";".join(env.gpu_cc)
        return f"; rebuild with TORCH_CUDA_ARCH_LIST={arch} or add an index that has one"
    if "driver" in reason:
        return "; upgrade the host's driver, or pin a build for an older CUDA"
    if "do not fit" in reason:
        return f"; add an index with a wheel for Python {env.major_minor} on {env.machine}"
    if "requires Python" in reason:
        return "; pin a release that supports the target's Python"
    return ""
