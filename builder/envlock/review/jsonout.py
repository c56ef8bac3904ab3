"""The review as JSON: a versioned envelope that CI and bots can rely on.

``schema_version`` changes only when a field changes meaning or goes away;
new fields may appear. Shape (see REVIEW.md): ``command``, ``base``,
``head``, ``summary`` (counts by severity, packages before/after, the
``--fail-on`` verdict), ``changes[]`` (one per package that changed in one
lock: ``package``, ``kind``, ``from``, ``to``, ``findings[]`` of ``code``,
``severity``, ``detail``), ``locks[]`` (per lock file, with findings about
the lock as a whole), and ``notes[]`` (what was not checked).
"""

from __future__ import annotations

from typing import Any

from envlock.render import envelope
from envlock.review.model import Finding, Review


def _finding(finding: Finding) -> dict[str, str]:
    out = {"code": finding.code, "severity": finding.severity, "detail": finding.detail}
    if finding.package is not None:
        out["package"] = finding.package
    return out


def review_json(review: Review, fail_on: str = "block") -> dict[str, Any]:
    return {
        "base": review.base,
        "head": review.head,
        "summary": {
            "block": review.count("block"),
            "warn": review.count("warn"),
            "info": review.count("info"),
            "locks": len(review.locks),
            "packages_before": sum(lock.packages_before for lock in review.locks),
            "packages_after": sum(lock.packages_after for lock in review.locks),
            "fail_on": fail_on,
            "failed": review.fails(fail_on),
        },
        "changes": [
            {
                "lock": lock.path,
                "host": lock.host.host,
                "package": change.package,
                "kind": change.kind,
                "from": change.before,
                "to": change.after,
                "findings": [_finding(f) for f in change.findings],
                "files": list(change.files),
            }
            for lock in review.locks
            for change in lock.changes
        ],
        "locks": [
            {
                "path": lock.path,
                "host": lock.host.host,
                "status": lock.status,
                "python": lock.host.python,
                "platform": lock.host.platform,
                "gpu": lock.host.gpu,
                "packages_before": lock.packages_before,
                "packages_after": lock.packages_after,
                "findings": [_finding(f) for f in lock.findings],
            }
            for lock in review.locks
        ],
        "notes": list(review.notes),
    }


def render_json(review: Review, fail_on: str = "block") -> str:
    return envelope("review", True, review_json(review, fail_on))
