"""The resolvelib provider: envlock's policy as candidate order.

resolvelib keeps the whole set consistent (every Requires-Dist, evaluated
under the *target's* markers); the policy lives in ``find_matches``'s order:

1. the reference's own artifact, when it runs on the target (same bytes);
2. another artifact of the same version (``1.0+cu128`` for ``1.0+cu126``,
   a cp312 wheel for a cp311 one);
3. the smallest version change: the nearest newer release first, then the
   nearest older one.

Candidates that do not run on the target (tags, Requires-Python, GPU images,
driver) are never offered; the Finder remembers why, for the error message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from resolvelib import AbstractProvider

from envlock.resolve.candidates import Candidate, Finder


def _release_key(candidate: Version, reference: Version | None) -> tuple[int, ...]:
    """Sort key: same public version, then nearest newer, then nearest older."""
    if reference is None:
        return (0, *(-p for p in candidate.release))  # no reference: newest first
    if candidate.public == reference.public:
        return (0,)
    cand, ref = candidate.release, reference.release
    width = max(len(cand), len(ref))
    cand += (0,) * (width - len(cand))
    ref += (0,) * (width - len(ref))
    distance = tuple(abs(a - b) for a, b in zip(cand, ref, strict=True))
    return (1 if candidate > reference else 2, *distance)


class LockProvider(AbstractProvider[Requirement, Candidate, str]):
    def __init__(
        self, finder: Finder, overrides: Mapping[str, SpecifierSet], markers: Mapping[str, str]
    ) -> None:
        self.finder = finder
        self.overrides = overrides
        self.markers = dict(markers)
        self.in_reference = {p.name for p in finder.reference.packages}
        self._satisfied: dict[tuple[int, str], bool] = {}

    def identify(self, requirement_or_candidate: Requirement | Candidate) -> str:
        return canonicalize_name(requirement_or_candidate.name)

    def get_preference(
        self,
        identifier: str,
        resolutions: Mapping[str, Candidate],
        candidates: Mapping[str, Iterator[Candidate]],
        information: Mapping[str, Iterator[Any]],
        backtrack_causes: Sequence[Any],
    ) -> Any:
        # Decide packages that have a reference first (most constrained by
        # policy), then by name, so the order of work is deterministic.
        return (identifier not in self.in_reference, identifier)

    def narrow_requirement_selection(
        self,
        identifiers: Iterable[str],
        resolutions: Mapping[str, Candidate],
        candidates: Mapping[str, Iterator[Candidate]],
        information: Mapping[str, Iterator[Any]],
        backtrack_causes: Sequence[Any],
    ) -> Iterable[str]:
        # Without a conflict to work on, the next identifier is simply the
        # preferred one: saves resolvelib ranking every open identifier each
        # round (quadratic for a 300-package reference).
        names = list(identifiers)
        if backtrack_causes or not names:
            return names
        return [min(names, key=lambda name: (name not in self.in_reference, name))]

    def _specifier(self, identifier: str, requirements: Iterable[Requirement]) -> SpecifierSet:
        if identifier in self.overrides:
            return self.overrides[identifier]
        spec = SpecifierSet()
        for req in requirements:
            spec &= req.specifier
        return spec

    def find_matches(
        self,
        identifier: str,
        requirements: Mapping[str, Iterator[Requirement]],
        incompatibilities: Mapping[str, Iterator[Candidate]],
    ) -> Callable[[], Iterator[Candidate]]:
        spec = self._specifier(identifier, requirements[identifier])
        bad = {c.key for c in incompatibilities[identifier]}
        # A factory, not a generator: resolvelib turns any other iterable into
        # a list at once, which would ask the indexes for every package.
        return lambda: self._matches(identifier, spec, bad)

    def _matches(self, identifier: str, spec: SpecifierSet, bad: set[str]) -> Iterator[Candidate]:
        """Lazily: resolvelib stops pulling once a candidate sticks, so the
        indexes are asked only when the reference's artifact does not do."""
        ref = self.finder.reference_candidate(identifier)
        if ref is not None and self._usable(ref, spec, bad):
            yield ref
        ref_version = ref.version if ref is not None else None
        others = [c for c in self.finder.candidates(identifier) if c.reference is None]
        others.sort(key=lambda c: (_release_key(c.version, ref_version), c.filename))
        for cand in others:
            if self._usable(cand, spec, bad):
                yield cand

    def _usable(self, cand: Candidate, spec: SpecifierSet, bad: set[str]) -> bool:
        if cand.key in bad or not spec.contains(cand.version, prereleases=True):
            return False
        return self.finder.problem(cand) is None

    def is_satisfied_by(self, requirement: Requirement, candidate: Candidate) -> bool:
        # resolvelib re-checks every pin against every requirement each round;
        # most roots carry no specifier, and the rest repeat: answer from a memo.
        spec = self.overrides.get(candidate.name, requirement.specifier)
        if not spec:
            return True
        key = (id(spec), candidate.key)
        hit = self._satisfied.get(key)
        if hit is None:
            hit = self._satisfied[key] = spec.contains(candidate.version, prereleases=True)
        return hit

    def get_dependencies(self, candidate: Candidate) -> list[Requirement]:
        requires, _python = self.finder.metadata(candidate)
        deps = []
        for text in requires:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(self.markers):
                continue
            if canonicalize_name(req.name) == candidate.name:
                continue
            deps.append(req)
        return deps
