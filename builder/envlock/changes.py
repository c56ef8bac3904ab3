"""What differs between two locks: package by package, environment and load facts.

The engine of ``envlock diff`` (which also resolves host names, files and
``live:HOST`` into locks) and of ``envlock review`` (which classifies the
result into findings). The result names each package change the way a person
would say it (``xgrammar 0.1.10 -> 0.1.32 (upgrade)``, ``llguidance 1.3.0
only on ct129``), the environment changes (Python, glibc, GPU), and the
native libraries that will load on one side but not on the other
(``loadable``), since that is what the version list alone never shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from envlock.abi import AbiBreak, abi_breaks
from envlock.loadable import LoadProblem, load_problems
from envlock.lock.compare import ChangeKind, version_kind
from envlock.lock.foreign import foreign_note
from envlock.lock.model import Lock, Package
from envlock.lock.summary import gpu_summary, platform_summary
from envlock.lockpair import LockPair, pair_from_locks


@dataclass(frozen=True, slots=True)
class PackageChange:
    """One package that differs. ``artifact``: same version, other bytes or origin."""

    name: str
    kind: ChangeKind
    before: Package | None
    after: Package | None

    @property
    def from_version(self) -> str | None:
        return self.before.version if self.before else None

    @property
    def to_version(self) -> str | None:
        return self.after.version if self.after else None

    def describe(self, a_label: str, b_label: str) -> str:
        if self.kind == "added":
            assert self.after is not None
            return f"{self.name} {self.after.version} only on {b_label}"
        if self.kind == "removed":
            assert self.before is not None
            return f"{self.name} {self.before.version} only on {a_label}"
        assert self.before is not None and self.after is not None
        if self.kind == "artifact":
            return (
                f"{self.name} {self.after.version}: same version, {artifact_change(self.before, self.after)}"
            )
        return f"{self.name} {self.before.version} -> {self.after.version} ({self.kind})"


@dataclass(frozen=True, slots=True)
class EnvChange:
    """A host or venv fact that differs: Python, ABI, platform, glibc, GPU, indexes."""

    what: str
    before: str
    after: str

    def describe(self) -> str:
        return f"{self.what} {self.before or '-'} -> {self.after or '-'}"


@dataclass(frozen=True, slots=True)
class LockDiff:
    a_label: str
    b_label: str
    a: Lock  # the packages that differ (and those a load verdict depends on): see lockpair
    b: Lock
    changes: tuple[PackageChange, ...]
    environment: tuple[EnvChange, ...]
    load_only_a: tuple[LoadProblem, ...]  # will not load on a, loads on b
    load_only_b: tuple[LoadProblem, ...]
    packages_a: int
    packages_b: int
    unchanged: int
    # Symbols libraries kept from a to b take from a package that changed and lost them.
    abi_breaks: tuple[AbiBreak, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """Which envlock facts a side lacks (a plain PEP 751 lock another tool wrote)."""
        found = (foreign_note(self.a, self.a_label), foreign_note(self.b, self.b_label))
        return tuple(note for note in found if note is not None)

    @property
    def identical(self) -> bool:
        return not (
            self.changes or self.environment or self.load_only_a or self.load_only_b or self.abi_breaks
        )


def _origin_key(pkg: Package, repointed: bool = False) -> tuple[object, ...]:
    wheel = pkg.wheel
    # Locks for different venv paths: the bin/ scripts' interpreter lines differ by
    # design. The tree digest hashes scripts with that line normalised (and apply
    # verifies the bytes against it), so the script names are all left to compare.
    scripts = sorted(pkg.scripts) if repointed else sorted(pkg.scripts.items())
    return (
        pkg.version,
        wheel.filename,
        wheel.sha256,
        wheel.url,
        wheel.path,
        pkg.source,
        pkg.index,
        pkg.tree_digest,
        # ABI facts are relations between packages, not the package's bytes:
        # they are compared as breaks (``abi_breaks``), never as a package change.
        tuple(
            replace(lib, takes={}, provides=()) if lib.takes or lib.provides else lib for lib in pkg.native
        ),
        scripts,
        pkg.source_tree,
        pkg.artifacts,
        pkg.marker,
    )


def differs(before: Package, after: Package, repointed: bool = False) -> bool:
    """True when the bytes, version or origin differ (bookkeeping such as ``requested`` is ignored).

    With a foreign lock on either side only what it holds counts: the version,
    the artifacts and their hashes, the marker. Against an envlock lock, the
    envlock side's one wheel must be among the foreign side's artifacts, same hash.
    ``repointed``: the packages come from locks for different venv paths.
    """
    if "foreign" not in (before.source, after.source):
        return _origin_key(before, repointed) != _origin_key(after, repointed)
    if before.version != after.version:
        return True
    if before.source == after.source:
        return (all_artifacts(before), before.marker) != (all_artifacts(after), after.marker)
    mine, theirs = (before, after) if after.source == "foreign" else (after, before)
    return all_artifacts(theirs).get(mine.wheel.filename) != mine.wheel.sha256


def artifact_change(before: Package, after: Package) -> str:
    """What changed about a package whose version did not."""
    b, a = before.wheel, after.wheel
    if (before.source == "foreign") != (after.source == "foreign"):
        mine, theirs = (before, after) if after.source == "foreign" else (after, before)
        listed = all_artifacts(theirs).get(mine.wheel.filename)
        if listed is None:
            return f"{mine.wheel.filename} is not among the plain lock's artifacts"
        return (
            f"{mine.wheel.filename}: other hash in the plain lock ({listed[:12]} vs {mine.wheel.sha256[:12]})"
        )
    if b.filename != a.filename:
        return f"other wheel: {b.filename} -> {a.filename}"
    if b.sha256 != a.sha256:
        return f"other bytes: {a.filename} sha256 {b.sha256[:12]} -> {a.sha256[:12]}"
    if before.source != after.source:
        return f"source {before.source} -> {after.source}"
    if before.tree_digest != after.tree_digest:
        return "installed files differ"
    if (before.index, b.url) != (after.index, a.url):
        return f"fetched from elsewhere: {before.index or b.url} -> {after.index or a.url}"
    if before.scripts != after.scripts:
        return "bin/ files differ: " + _scripts_change(before.scripts, after.scripts)
    if before.source_tree != after.source_tree:
        b_tree, a_tree = before.source_tree, after.source_tree
        b_path, a_path = (t.path if t else None for t in (b_tree, a_tree))
        if b_path != a_path:
            return f"editable source tree moved: {b_path} -> {a_path}"
        b_sha, a_sha = ((t.sha256 if t else "")[:12] for t in (b_tree, a_tree))
        return f"editable source tree differs: archive sha256 {b_sha} -> {a_sha}"
    if before.artifacts != after.artifacts:
        return "other artifacts: " + _artifacts_change(before, after)
    if before.marker != after.marker:
        return f"marker {before.marker or '(none)'} -> {after.marker or '(none)'}"
    return "native facts differ"


def all_artifacts(pkg: Package) -> dict[str, str]:
    """File name -> hash of every artifact a package lists (one wheel for envlock's locks)."""
    return {art.filename: art.sha256 for art in (pkg.wheel, *pkg.artifacts)}


def _artifacts_change(before: Package, after: Package) -> str:
    old, new = all_artifacts(before), all_artifacts(after)
    parts = [f"+{name}" for name in sorted(new.keys() - old.keys())]
    parts += [f"-{name}" for name in sorted(old.keys() - new.keys())]
    parts += [f"~{name} (hash)" for name in sorted(old.keys() & new.keys()) if old[name] != new[name]]
    return ", ".join(parts) or "same files, other urls or sizes"


def _scripts_change(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    parts = [f"+{rel}" for rel in sorted(after.keys() - before.keys())]
    parts += [f"-{rel}" for rel in sorted(before.keys() - after.keys())]
    parts += [f"~{rel}" for rel in sorted(before.keys() & after.keys()) if before[rel] != after[rel]]
    return ", ".join(parts)


def _pyvenv_changes(a: Lock, b: Lock) -> list[tuple[str, str, str]]:
    """One row per pyvenv.cfg key that differs; the version is the python row's."""
    keys = [k for k in dict.fromkeys([*a.pyvenv, *b.pyvenv]) if k not in ("version", "version_info")]
    return [(f"pyvenv {k}", a.pyvenv.get(k, ""), b.pyvenv.get(k, "")) for k in keys]


def environment_changes(a: Lock, b: Lock) -> tuple[EnvChange, ...]:
    facts = (
        ("python", a.interpreter.version, b.interpreter.version),
        ("abi", a.interpreter.abi, b.interpreter.abi),
        ("platform", platform_summary(a), platform_summary(b)),
        ("gpu", gpu_summary(a), gpu_summary(b)),
        ("indexes", " ".join(a.indexes), " ".join(b.indexes)),
        ("find-links", " ".join(a.find_links), " ".join(b.find_links)),
        *_pyvenv_changes(a, b),
    )
    return tuple(EnvChange(what, x, y) for what, x, y in facts if x != y)


def diff_pair(pair: LockPair, a_label: str, b_label: str) -> LockDiff:
    a, b = pair.a, pair.b
    before = {p.name: p for p in a.packages}
    after = {p.name: p for p in b.packages}
    changes: list[PackageChange] = []
    for name in sorted(pair.names_a | pair.names_b):
        old, new = before.get(name), after.get(name)
        if name not in pair.names_b:
            changes.append(PackageChange(name, "removed", old, None))
        elif name not in pair.names_a:
            changes.append(PackageChange(name, "added", None, new))
        elif old is not None and new is not None and differs(old, new, repointed=a.venv != b.venv):
            changes.append(PackageChange(name, version_kind(old.version, new.version), old, new))
    problems_a, problems_b = load_problems(a), load_problems(b)
    common = len(pair.names_a & pair.names_b)
    changed_common = sum(1 for c in changes if c.kind not in ("added", "removed"))
    return LockDiff(
        a_label=a_label,
        b_label=b_label,
        a=a,
        b=b,
        changes=tuple(changes),
        # A foreign lock has no environment facts: ``notes`` says so instead.
        environment=environment_changes(a, b) if a.foreign is None and b.foreign is None else (),
        load_only_a=tuple(sorted(problems_a - problems_b)),
        load_only_b=tuple(sorted(problems_b - problems_a)),
        packages_a=len(pair.names_a),
        packages_b=len(pair.names_b),
        unchanged=common - changed_common,
        abi_breaks=tuple(abi_breaks(a, b)),
    )


def diff_locks(a: Lock, b: Lock, a_label: str | None = None, b_label: str | None = None) -> LockDiff:
    """Compare two parsed locks."""
    return diff_pair(pair_from_locks(a, b), a_label or a.host, b_label or b.host)
