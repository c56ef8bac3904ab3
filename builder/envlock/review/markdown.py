"""The review as a pull-request comment (GitHub-flavoured Markdown).

Layout: a hidden marker line (a CI job finds and updates its earlier
comment by it), one summary line, the blocking findings, the warnings, the
version table, then per-lock detail folded in ``<details>``. GitHub refuses
comments over 65,536 characters, so sections are added most serious first
while they fit, and a closing note says what was cut. Every cell is
escaped: ``|`` cannot break a table, ``<``/``>`` cannot open HTML, and an
``@`` is followed by a zero-width space so no text can @mention anyone.
"""

from __future__ import annotations

from collections.abc import Sequence

from envlock.review.model import RANK, Change, Finding, LockReview, Review

MARKER = "<!-- envlock-review -->"
LIMIT = 65_536
_RESERVE = 400  # room for the note that says what was cut
_KIND_ORDER = {"downgrade": 0, "upgrade": 1, "artifact": 2, "added": 3, "removed": 4}


def escape(text: str) -> str:
    """Make ``text`` safe inside a table cell or a line of prose."""
    return (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("`", "\\`")
        .replace("<", "&lt;")
        .replace("\r", " ")
        .replace("\n", " ")
        .replace("@", "@\u200b")
    )


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(escape(c) if c else " " for c in cells) + " |\n"


class _Budget:
    """Appends pieces while they fit; counts what did not."""

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit
        self.cut: dict[str, int] = {}

    def add(self, text: str, what: str | None = None) -> bool:
        if len(text) > self.left:
            if what:
                self.cut[what] = self.cut.get(what, 0) + 1
            return False
        self.parts.append(text)
        self.left -= len(text)
        return True


def summary_line(review: Review, fail_on: str) -> str:
    counts = [
        f"{review.count('block')} blocking",
        f"{review.count('warn')} warning{'s' if review.count('warn') != 1 else ''}",
        f"{review.count('info')} info",
    ]
    before = sum(lock.packages_before for lock in review.locks)
    after = sum(lock.packages_after for lock in review.locks)
    hosts = "; ".join(
        f"{lock.host.host}: Python {lock.host.python}, {lock.host.platform}"
        + (f", GPU {lock.host.gpu}" if lock.host.gpu else ", no GPU facts")
        for lock in review.locks
    )
    verdict = "fails" if review.fails(fail_on) else "passes"
    locks = len(review.locks)
    text = (
        f"**envlock review: {' · '.join(counts)}** ({verdict} --fail-on {fail_on}) — "
        f"{locks} lock{'s' if locks != 1 else ''} changed, {before} → {after} packages"
    )
    return escape_prose(text + (f" — {hosts}" if hosts else ""))


def escape_prose(text: str) -> str:
    """Prose keeps its own Markdown; only @mentions and raw HTML are defused."""
    return text.replace("@", "@\u200b").replace("<", "&lt;")


def _findings(review: Review, severity: str) -> list[tuple[LockReview, str, Finding]]:
    rows = []
    for lock in review.locks:
        for package, finding in lock.all_findings():
            if finding.severity == severity:
                rows.append((lock, package or "(lock)", finding))
    return rows


def _finding_table(
    budget: _Budget, title: str, rows: list[tuple[LockReview, str, Finding]], what: str
) -> None:
    if not rows:
        return
    head = (
        f"\n### {title} ({len(rows)})\n\n"
        + _row(["lock", "package", "finding", "detail"])
        + "|---|---|---|---|\n"
    )
    if not budget.add(head):
        budget.cut[what] = budget.cut.get(what, 0) + len(rows)
        return
    for i, (lock, package, finding) in enumerate(rows):
        if not budget.add(_row([lock.host.host, package, finding.code, finding.detail]), what):
            budget.cut[what] = budget.cut.get(what, 0) + len(rows) - i - 1
            return


def _sorted_changes(review: Review) -> list[tuple[LockReview, Change]]:
    items = [(lock, change) for lock in review.locks for change in lock.changes]
    return sorted(
        items, key=lambda lc: (-RANK[lc[1].severity], _KIND_ORDER[lc[1].kind], lc[1].package, lc[0].path)
    )


def _version_table(budget: _Budget, review: Review) -> None:
    items = _sorted_changes(review)
    if not items:
        return
    what = "version rows"
    head = (
        f"\n### Versions ({len(items)})\n\n"
        + _row(["change", "package", "from", "to", "lock"])
        + "|---|---|---|---|---|\n"
    )
    if not budget.add(head):
        budget.cut[what] = budget.cut.get(what, 0) + len(items)
        return
    for i, (lock, change) in enumerate(items):
        if not budget.add(
            _row([change.kind, change.package, change.before or "—", change.after or "—", lock.host.host]),
            what,
        ):
            budget.cut[what] = budget.cut.get(what, 0) + len(items) - i - 1
            return


def _change_detail(change: Change) -> str:
    arrow = f"{change.before or '—'} → {change.after or '—'}"
    lines = [f"**{escape(change.package)}** {escape(arrow)} ({change.kind})\n"]
    lines += [f"- {f.severity} `{f.code}`: {escape(f.detail)}\n" for f in change.findings]
    if change.files:
        body = "\n".join(line.replace("```", "'''") for line in change.files)
        lines.append(f"\n```\n{body}\n```\n")
    return "".join(lines) + "\n"


def _details(budget: _Budget, lock: LockReview) -> None:
    what = "per-package details"
    changed = len(lock.changes)
    plural = "s" if changed != 1 else ""
    summary = (
        f"{lock.path} ({lock.host.host}, {lock.status}): {changed} package{plural} changed, "
        f"{lock.packages_before} → {lock.packages_after} packages"
    )
    opening = f"\n<details><summary>{escape(summary)}</summary>\n\n"
    closing = "</details>\n"
    if not budget.add(opening, None):
        budget.cut[what] = budget.cut.get(what, 0) + changed
        return
    budget.left -= len(closing)
    if not lock.changes and not lock.findings:
        budget.add("No package changes.\n\n", None)
    for finding in lock.findings:
        about = f"{escape(finding.package)}: " if finding.package else ""
        budget.add(f"- {finding.severity} `{finding.code}`: {about}{escape(finding.detail)}\n", what)
    if lock.findings:
        budget.add("\n", None)
    ordered = sorted(lock.changes, key=lambda c: (-RANK[c.severity], _KIND_ORDER[c.kind], c.package))
    for i, change in enumerate(ordered):
        if not budget.add(_change_detail(change), what):
            budget.cut[what] = budget.cut.get(what, 0) + len(ordered) - i
            break
    budget.left += len(closing)
    budget.add(closing, None)


def render_markdown(review: Review, fail_on: str = "block", limit: int = LIMIT) -> str:
    budget = _Budget(limit - _RESERVE)
    budget.add(f"{MARKER}\n{summary_line(review, fail_on)}\n")
    budget.add(f"\n{escape(review.base)} → {escape(review.head)}\n")
    for note in review.notes:
        budget.add(f"\n_note: {escape(note)}_\n", "notes")
    if not review.locks:
        budget.add("\nNo lock files changed.\n")
    _finding_table(budget, "Blocking", _findings(review, "block"), "blocking rows")
    _finding_table(budget, "Warnings", _findings(review, "warn"), "warning rows")
    _version_table(budget, review)
    for lock in review.locks:
        _details(budget, lock)
    text = "".join(budget.parts)
    if budget.cut:
        what = ", ".join(f"{n} {kind}" for kind, n in budget.cut.items())
        text += (
            f"\n_Cut to stay under GitHub's {LIMIT:,}-character comment limit: {what}. "
            "Run `envlock review` locally, or `--format json`, for everything._\n"
        )
    return text
