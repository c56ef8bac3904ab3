"""Plain data of a review: findings, changes, one result per lock file.

Severities are ordered (block > warn > info) so ``--fail-on`` and the
"most serious first" rule of the renderers are one comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from envlock.lock.compare import ChangeKind

Severity = Literal["block", "warn", "info"]
SEVERITIES: tuple[Severity, ...] = ("block", "warn", "info")
RANK: dict[str, int] = {"block": 3, "warn": 2, "info": 1, "never": 99}
LockStatus = Literal["changed", "added", "removed"]


@dataclass(frozen=True, slots=True)
class Finding:
    code: str  # stable identifier, e.g. "same-name-different-bytes"
    severity: Severity
    detail: str  # one line a reviewer reads
    # For a lock-level finding about a package that did not change itself
    # (its library no longer loads because another package went away).
    package: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One package that differs between base and head, with what the review found about it."""

    package: str
    kind: ChangeKind
    before: str | None  # version at base
    after: str | None  # version at head
    findings: tuple[Finding, ...] = ()
    files: tuple[str, ...] = ()  # per-file detail lines from the manifests, when both are at hand

    @property
    def severity(self) -> Severity:
        return max((f.severity for f in self.findings), key=RANK.__getitem__, default="info")


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the summary line says about a lock's host."""

    host: str
    python: str
    platform: str
    gpu: str


@dataclass(frozen=True, slots=True)
class LockReview:
    """The review of one ``locks/*.toml`` file."""

    path: str
    status: LockStatus
    host: HostFacts
    packages_before: int
    packages_after: int
    changes: tuple[Change, ...]
    findings: tuple[Finding, ...] = ()  # about the lock as a whole (index URLs, Python, platform)

    def all_findings(self) -> list[tuple[str | None, Finding]]:
        """(package or None, finding), every finding of this lock."""
        out: list[tuple[str | None, Finding]] = [(f.package, f) for f in self.findings]
        out += [(c.package, f) for c in self.changes for f in c.findings]
        return out


@dataclass(frozen=True, slots=True)
class Review:
    base: str  # as the user named it ("origin/main", a file)
    head: str  # "working tree" when not a revision
    locks: tuple[LockReview, ...]
    notes: tuple[str, ...] = field(default=())  # what was not checked, and why

    def count(self, severity: Severity) -> int:
        return sum(1 for lock in self.locks for _, f in lock.all_findings() if f.severity == severity)

    def worst(self) -> int:
        """RANK of the most serious finding, 0 when there is none."""
        return max((RANK[f.severity] for lock in self.locks for _, f in lock.all_findings()), default=0)

    def fails(self, fail_on: str) -> bool:
        return self.worst() >= RANK[fail_on]
