"""``envlock review``: what a pull request does to its locks, as findings by severity.

``review_git`` compares every changed ``locks/*.toml`` between a base
revision and a head revision (or the working tree); ``review_texts``
compares one lock's two versions and is what the golden tests drive. Each
pair goes through ``envlock diff``'s comparison (only differing packages
are parsed, see ``lockpair``) and ``findings`` classifies the result;
renderers in ``text``, ``markdown`` and ``jsonout`` print it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from envlock.changes import diff_pair
from envlock.errors import LockError
from envlock.lock.digest import digest_problem
from envlock.lock.foreign import foreign_note
from envlock.lock.io import LOCK_LIMIT
from envlock.lock.manifest import MANIFEST_LIMIT, manifest_sha256, parse_manifest
from envlock.lock.model import FileEntry, Lock
from envlock.lockpair import LockPair, LockText, pair_from_locks, pair_from_texts, parse_whole
from envlock.review.findings import review_diff
from envlock.review.git import changed_locks, read_at, resolve
from envlock.review.model import LockReview, LockStatus, Review
from envlock.review.yanked import YankedCheck

__all__ = ["Review", "ReviewOptions", "review_git", "review_texts"]


@dataclass(frozen=True, slots=True)
class ReviewOptions:
    check_yanked: bool = True  # ask the indexes (file://, http(s)://) whether wheels are yanked


@dataclass(frozen=True, slots=True)
class LockVersions:
    """One lock file's bytes at base and at head (None: absent there), manifests alongside."""

    path: str
    base: bytes | None
    head: bytes | None
    base_manifest: bytes | None = None
    head_manifest: bytes | None = None
    base_label: str = "base"
    head_label: str = "head"


def manifest_path_of(lock_path: str) -> str:
    """``locks/pylock.ct129.toml`` -> ``locks/pylock.ct129.files.tsv``."""
    return lock_path.removesuffix(".toml") + ".files.tsv"


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockError(f"{source}: not UTF-8 text") from exc


def _rows(data: bytes | None, lock: Lock, source: str, notes: list[str]) -> list[FileEntry] | None:
    if data is None:
        return None
    if manifest_sha256(data) != lock.manifest_sha256:
        notes.append(f"{source}: does not match its lock's manifest sha256; per-file detail left out")
        return None
    return parse_manifest(data, source)


def _empty_like(lock: Lock) -> Lock:
    return replace(lock, packages=())


def review_texts(versions: LockVersions, yanked: YankedCheck | None, notes: list[str]) -> LockReview:
    """Review one lock file's change; ``notes`` collects what could not be checked."""
    path = versions.path
    base_src, head_src = f"{versions.base_label}:{path}", f"{versions.head_label}:{path}"
    status: LockStatus
    if versions.base is not None and versions.head is not None:
        status = "changed"
        pair = pair_from_texts(
            _decode(versions.base, base_src), base_src, _decode(versions.head, head_src), head_src
        )
    elif versions.head is not None:
        status = "added"
        head = parse_whole(LockText(head_src, _decode(versions.head, head_src)))
        pair = pair_from_locks(_empty_like(head), head)
    elif versions.base is not None:
        status = "removed"
        base = parse_whole(LockText(base_src, _decode(versions.base, base_src)))
        pair = pair_from_locks(base, _empty_like(base))
    else:
        raise LockError(f"{path}: absent at both revisions")
    for lock, shown in ((pair.a, base_src), (pair.b, head_src)):
        note = foreign_note(lock, shown)
        if note is not None and (status == "changed" or lock.packages):
            notes.append(note)
    manifests = _manifests(versions, pair, notes) if status == "changed" else None
    diff = diff_pair(pair, versions.base_label, versions.head_label)
    # A foreign lock has no digest to check: foreign_note says so.
    checked = versions.head is not None and pair.b.foreign is None
    tampered = _head_digest_problem(versions, head_src, pair) if checked else None
    return review_diff(path, status, diff, manifests=manifests, yanked=yanked, tampered=tampered)


def _head_digest_problem(versions: LockVersions, source: str, pair: LockPair) -> str | None:
    """Whether the head lock's digest covers what it says.

    The pair holds only the packages that differ, so the head is parsed
    whole here: a digest is over every package, and every block then goes
    through the same validation (path guard included) as ``read_lock``.
    """
    assert versions.head is not None
    head = pair.b if len(pair.b.packages) == len(pair.names_b) else None
    if head is None:
        head = parse_whole(LockText(source, _decode(versions.head, source)))
    return digest_problem(head)


def _manifests(
    versions: LockVersions, pair: LockPair, notes: list[str]
) -> tuple[list[FileEntry], list[FileEntry]] | None:
    manifest = manifest_path_of(versions.path)
    base = _rows(versions.base_manifest, pair.a, f"{versions.base_label}:{manifest}", notes)
    head = _rows(versions.head_manifest, pair.b, f"{versions.head_label}:{manifest}", notes)
    return (base, head) if base is not None and head is not None else None


def review_versions(
    versions: list[LockVersions], base: str, head: str, options: ReviewOptions | None = None
) -> Review:
    options = options or ReviewOptions()
    yanked = YankedCheck() if options.check_yanked else None
    notes: list[str] = []
    locks = tuple(review_texts(v, yanked, notes) for v in versions)
    if yanked is not None:
        notes += yanked.notes()
    return Review(base=base, head=head, locks=locks, notes=tuple(notes))


def review_git(
    root: Path, base: str, head: str | None = None, options: ReviewOptions | None = None
) -> Review:
    """Every changed ``locks/*.toml`` between ``base`` and ``head`` (None: the working tree)."""
    base_commit = resolve(root, base)
    head_commit = resolve(root, head) if head is not None else None
    versions = []
    for path in changed_locks(root, base_commit, head_commit):
        manifest = manifest_path_of(path)
        versions.append(
            LockVersions(
                path=path,
                base=read_at(root, base_commit, path, LOCK_LIMIT),
                head=read_at(root, head_commit, path, LOCK_LIMIT),
                base_manifest=read_at(root, base_commit, manifest, MANIFEST_LIMIT),
                head_manifest=read_at(root, head_commit, manifest, MANIFEST_LIMIT),
                base_label=base,
                head_label=head or "working tree",
            )
        )
    versions = [v for v in versions if v.base is not None or v.head is not None]
    return review_versions(versions, f"{base} ({base_commit[:12]})", _head_label(head, head_commit), options)


def _head_label(head: str | None, commit: str | None) -> str:
    return "working tree" if head is None or commit is None else f"{head} ({commit[:12]})"
