"""Classify what changed in one lock into findings, most serious first (REVIEW.md).

| finding | code | severity |
|---|---|---|
| the lock's digest does not cover what it says (edited by hand) | digest-mismatch | block |
| same version, same file name, other sha256 (index or direct wheel) | same-name-different-bytes | block |
| no image left for a host compute capability | gpu-arch-lost | block |
| a kept library takes a symbol its changed provider no longer exports | abi-break | block |
| won't load: a NEEDED no package ships that the host lacks; glibc too new | native-unloadable | block |
| a NEEDED no package ships, on a lock without host facts | host-library-unknown | warn |
| locally built or modified package added or changed | local-build | warn |
| local version label changed (+cu126 -> +cu128) | local-version-label | warn |
| downgrade | downgrade | warn |
| new native library, new DT_NEEDED | new-native-library, new-needed | warn |
| an arch dropped that the host does not use | arch-dropped | warn |
| yanked on its index | yanked | warn |
| index URL changed | index-changed | warn |
| the same wheel moved to a private index (``envlock publish``) | published | info |
| upgrade / added / removed / other same-version change | upgrade, added, removed, artifact | info |
| a NEEDED no package ships that the host has (an sdist build linking libyaml) | host-library | info |
| Python, ABI, platform or GPU of the lock changed | environment | info |

Two sources of the same file name are not suspicious when one is a
repacked wheel: envlock names repacked wheels like the index wheel they
came from, and going back to the index wheel (a patch removed) is how a
hand patch ends. Those are ``local-build`` warnings instead. A published
wheel (``envlock publish``) is one of those local builds, now fetched from a
private index: publishing it changes where it is fetched from, not its bytes,
so that change alone is a ``published`` note.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from packaging.version import InvalidVersion, Version

from envlock.abi import AbiBreak, summarize
from envlock.changes import LockDiff, PackageChange, all_artifacts, artifact_change
from envlock.loadable import LoadProblem, is_host_library, library_label
from envlock.lock.compare import compare_rows
from envlock.lock.model import FileEntry, Lock, NativeLib
from envlock.lock.summary import gpu_summary, platform_summary
from envlock.review.gpu import arches_dropped, coverage_lost, device_code
from envlock.review.model import RANK, Change, Finding, HostFacts, LockReview, LockStatus, Severity
from envlock.review.yanked import YankedCheck

FILE_LINES = 200  # per package, before the rest is counted


def _local(version: str | None) -> str | None:
    if version is None:
        return None
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def _list(items: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# Sources whose wheel envlock or the user built: its file name is not an index's own.
_LOCAL = ("repacked", "store", "built", "published")


def _just_published(change: PackageChange) -> bool:
    """The same bytes, now fetched from the private index they were published to."""
    before, after = change.before, change.after
    return (
        before is not None
        and after is not None
        and after.source == "published"
        and before.source != "published"
        and before.wheel.sha256 == after.wheel.sha256
        and before.tree_digest == after.tree_digest
        and before.scripts == after.scripts
    )


def package_findings(change: PackageChange, ccs: Sequence[str], yanked: YankedCheck | None) -> list[Finding]:
    before, after = change.before, change.after
    found: list[Finding] = []
    if before is not None and after is not None and change.kind == "artifact":
        pinned = before.source not in _LOCAL and after.source not in _LOCAL
        was, now = all_artifacts(before), all_artifacts(after)  # a foreign lock lists several
        for name in sorted(was.keys() & now.keys()):
            if pinned and was[name] and now[name] and was[name] != now[name]:
                found.append(
                    Finding(
                        "same-name-different-bytes",
                        "block",
                        f"{name}: sha256 {was[name][:16]}… at base, "
                        f"{now[name][:16]}… at head; an index never serves two files under one name "
                        "(rebuilt or tampered artifact)",
                    )
                )
    if before is not None and after is not None:
        found += _native_change_findings(before.native, after.native, ccs)
    if after is not None and after.native and before is None:
        paths = [library_label(lib.path) for lib in after.native]
        found.append(Finding("new-native-library", "warn", f"adds native code: {_list(paths)}"))
    if _just_published(change):
        assert before is not None and after is not None
        found.append(
            Finding(
                "published",
                "info",
                f"{after.wheel.filename} published to {after.index or after.wheel.url} "
                f"(was {before.source}; same sha256 {after.wheel.sha256[:16]}…)",
            )
        )
    elif after is not None and after.source in _LOCAL:
        what = "added" if before is None else "changed"
        reason = after.reason or "repacked from the live files"
        found.append(Finding("local-build", "warn", f"locally built or modified package {what}: {reason}"))
    if before is not None and after is not None:
        old, new = _local(before.version), _local(after.version)
        if old != new and (old or new):
            found.append(
                Finding(
                    "local-version-label",
                    "warn",
                    f"local version label +{old or '(none)'} -> +{new or '(none)'}: "
                    "the build variant changed",
                )
            )
        if before.index and after.index and before.index != after.index:
            found.append(Finding("index-changed", "warn", f"index {before.index} -> {after.index}"))
    if change.kind == "downgrade":
        found.append(Finding("downgrade", "warn", f"{change.from_version} -> {change.to_version}"))
    checkable = after is not None and after.source == "index" and change.kind != "removed"
    if yanked is not None and after is not None and checkable and yanked.is_yanked(after):
        found.append(Finding("yanked", "warn", f"{after.wheel.filename} is yanked on {after.index}"))
    if change.kind == "upgrade":
        found.append(Finding("upgrade", "info", f"{change.from_version} -> {change.to_version}"))
    elif change.kind == "added":
        found.append(Finding("added", "info", f"{change.to_version}"))
    elif change.kind == "removed":
        found.append(Finding("removed", "info", f"{change.from_version}"))
    elif change.kind == "artifact" and not found:
        assert before is not None and after is not None
        found.append(Finding("artifact", "info", artifact_change(before, after)))
    return found


def _native_change_findings(
    before: Iterable[NativeLib], after: Iterable[NativeLib], ccs: Sequence[str]
) -> list[Finding]:
    old = {lib.path: lib for lib in before}
    new = {lib.path: lib for lib in after}
    found: list[Finding] = []
    for path in sorted(old.keys() & new.keys()):
        was, now = device_code(old[path]), device_code(new[path])
        lost = coverage_lost(was, now, ccs)
        if lost:
            where = ", ".join(f"cc {cc}" if cc[0].isdigit() else cc for cc in lost)
            found.append(
                Finding(
                    "gpu-arch-lost", "block", f"{library_label(path)}: no GPU code left that runs on {where}"
                )
            )
        dropped = arches_dropped(was, now, ccs)
        if dropped:
            found.append(
                Finding(
                    "arch-dropped", "warn", f"{library_label(path)}: dropped {_list(dropped)} (not used here)"
                )
            )
    added = sorted(new.keys() - old.keys())
    if added:
        found.append(
            Finding(
                "new-native-library",
                "warn",
                f"new native library: {_list([library_label(p) for p in added])}",
            )
        )
    needed_before = {n for lib in old.values() for n in lib.needed}
    needed_after = {n for lib in new.values() for n in lib.needed}
    fresh = sorted(n for n in needed_after - needed_before if not is_host_library(n))
    if fresh:
        found.append(Finding("new-needed", "warn", f"now needs {_list(fresh)} (DT_NEEDED)"))
    return found


# A library no package ships is rated by what the lock's host facts say about it:
# only a library the host's loader does not find blocks (issue 14).
_HOST_LIBRARY_FINDING: dict[str, tuple[str, Severity]] = {
    "missing": ("native-unloadable", "block"),
    "unknown": ("host-library-unknown", "warn"),
    "present": ("host-library", "info"),
}


def load_finding(problem: LoadProblem, unchanged: bool) -> Finding:
    detail = problem.describe()
    code: str = "native-unloadable"
    severity: Severity = "block"
    if problem.kind == "needed":
        code, severity = _HOST_LIBRARY_FINDING[problem.host]
    if unchanged:
        return Finding(code, severity, detail + " (the package itself did not change)", problem.package)
    return Finding(code, severity, detail)


def abi_findings(diff: LockDiff) -> list[Finding]:
    """One blocking finding per library and provider whose symbols the head lost
    (``envlock.abi``), against the package that will fail to import."""
    groups: dict[tuple[str, str, str], list[AbiBreak]] = {}
    for item in diff.abi_breaks:
        groups.setdefault((item.consumer, item.library, item.provider), []).append(item)
    found = []
    for line, group in zip(summarize(diff.abi_breaks), groups.values(), strict=True):
        unchanged = " (the package itself did not change)" if group[0].kept else ""
        found.append(Finding("abi-break", "block", line + unchanged, group[0].consumer))
    return found


def file_lines(package: str, base: Sequence[FileEntry], head: Sequence[FileEntry]) -> tuple[str, ...]:
    drift = compare_rows([r for r in base if r.owner == package], [r for r in head if r.owner == package])
    lines = []
    for item in drift:
        if item.state == "changed":
            assert item.locked is not None and item.live is not None
            lines.append(f"{item.flags} {item.path} ({item.locked.sha256[:12]} -> {item.live.sha256[:12]})")
        else:
            lines.append(f"{'removed' if item.state == 'missing' else 'added'} {item.path}")
    if len(lines) > FILE_LINES:
        lines = [*lines[:FILE_LINES], f"… and {len(lines) - FILE_LINES} more file(s)"]
    return tuple(lines)


def host_facts(lock: Lock) -> HostFacts:
    return HostFacts(
        host=lock.host,
        python=lock.interpreter.version,
        platform=platform_summary(lock),
        gpu=gpu_summary(lock),
    )


def review_diff(
    path: str,
    status: LockStatus,
    diff: LockDiff,
    *,
    manifests: tuple[Sequence[FileEntry], Sequence[FileEntry]] | None = None,
    yanked: YankedCheck | None = None,
    tampered: str | None = None,
) -> LockReview:
    """Findings for one lock file: ``diff`` is base (a) -> head (b).

    ``tampered``: why the head's digest does not match its contents, if it does not.
    """
    head = diff.b if status != "removed" else diff.a
    ccs = _ccs(head) or _ccs(diff.a)
    by_package: dict[str, list[Finding]] = {}
    lock_findings: list[Finding] = []
    if tampered is not None:
        lock_findings.append(Finding("digest-mismatch", "block", tampered))
    changes = {c.name: c for c in diff.changes}
    for change in diff.changes:
        by_package[change.name] = package_findings(change, ccs, yanked)
    lock_findings += abi_findings(diff)
    for problem in diff.load_only_b:
        if problem.package in changes:
            by_package[problem.package].insert(0, load_finding(problem, unchanged=False))
        else:
            lock_findings.append(load_finding(problem, unchanged=True))
    if status == "changed":
        for env in diff.environment:
            if env.what in ("indexes", "find-links"):
                lock_findings.append(Finding("index-changed", "warn", env.describe()))
            else:
                lock_findings.append(Finding("environment", "info", env.describe()))
    reviewed = []
    for change in diff.changes:
        files: tuple[str, ...] = ()
        if manifests is not None and change.kind in ("upgrade", "downgrade", "artifact"):
            files = file_lines(change.name, manifests[0], manifests[1])
        findings = sorted(by_package[change.name], key=lambda f: -_rank(f.severity))
        reviewed.append(
            Change(
                package=change.name,
                kind=change.kind,
                before=change.from_version,
                after=change.to_version,
                findings=tuple(findings),
                files=files,
            )
        )
    return LockReview(
        path=path,
        status=status,
        host=host_facts(head),
        packages_before=diff.packages_a if status != "added" else 0,
        packages_after=diff.packages_b if status != "removed" else 0,
        changes=tuple(reviewed),
        findings=tuple(sorted(lock_findings, key=lambda f: -_rank(f.severity))),
    )


def _rank(severity: str) -> int:
    return RANK[severity]


def _ccs(lock: Lock) -> tuple[str, ...]:
    return lock.gpu.ccs if lock.gpu is not None else ()
