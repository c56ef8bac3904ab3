"""Run resolvelib with envlock's provider; explain when nothing fits."""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from resolvelib import BaseReporter, ResolutionImpossible, ResolutionTooDeep, Resolver

from envlock.errors import ResolveError
from envlock.hosts import HostProfile
from envlock.lock.model import Lock
from envlock.resolve.candidates import Candidate, Finder
from envlock.resolve.provider import LockProvider
from envlock.resolve.target import TargetEnv


def resolve(
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
        raise ResolveError(_explain(finder, env, exc, profile.name)) from exc
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


def _explain(finder: Finder, env: TargetEnv, exc: ResolutionImpossible, host: str) -> str:  # type: ignore[type-arg]
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
        parts.append(f"{label}: {_short(first)}{_fix(first, env)}{_build_hint(first, name, host)}")
    return "; ".join(parts) or "no consistent set of artifacts"


def _short(reason: str) -> str:
    return reason if len(reason) < 300 else reason[:297] + "..."


def _build_hint(reason: str, name: str, host: str) -> str:
    """Where no wheel has the GPU's arch: the command that builds one from the sdist."""
    if "no image for sm_" not in reason:
        return ""
    return f" (`envlock build {name} --host {host}` builds one from its sdist)"


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
