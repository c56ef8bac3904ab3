"""The review for a terminal: one table per lock, most serious first."""

from __future__ import annotations

from envlock.render import table
from envlock.review.model import RANK, Review

_LABEL = {"block": "BLOCK", "warn": "warn", "info": "info"}


def render_text(review: Review, fail_on: str = "block") -> str:
    lines = [f"envlock review: {review.base} -> {review.head}"]
    if not review.locks:
        lines.append("no lock files changed")
    for lock in review.locks:
        lines.append("")
        lines.append(
            f"{lock.path} ({lock.host.host}, {lock.status}): "
            f"{lock.packages_before} -> {lock.packages_after} packages"
        )
        rows = []
        for package, finding in lock.all_findings():
            rows.append([_LABEL[finding.severity], package or "(lock)", finding.code, finding.detail])
        rows.sort(key=lambda r: -RANK[r[0].lower()])
        if rows:
            lines.append(table(["", "package", "finding", "detail"], rows))
    lines.append("")
    verdict = "fails" if review.fails(fail_on) else "passes"
    warnings = review.count("warn")
    lines.append(
        f"{review.count('block')} blocking, {warnings} warning{'s' if warnings != 1 else ''}, "
        f"{review.count('info')} info ({verdict} --fail-on {fail_on})"
    )
    lines += [f"note: {note}" for note in review.notes]
    return "\n".join(lines)
