"""``envlock publish HOST``: upload a lock's local wheels to a private index and point the lock there.

The wheels a lock can only take from this workspace (repacked, store, and
direct wheels at a ``file://`` URL) are uploaded, byte for byte, with the
upload API twine and ``uv publish`` speak, after the index's simple page
says it lacks them; a file the index already holds is checked by sha256 and
never uploaded twice. Then those lock entries name the index's URL for the
file, ``source = "published"`` and ``published-from`` (the source and path
they had), so the lock is plain PEP 751 that ``uv pip sync`` installs
wherever the index is reachable, and ``apply`` fetches them like any index
wheel. The bytes, and so the lock's digest and manifest, do not change.
Editable installs are left in the store unless asked for: their wheel is a
``.pth`` pointing at a source tree on the reference (docs/publish.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from envlock.errors import EnvlockError, PublishError
from envlock.fetch import fetch_one
from envlock.lock.digest import lock_digest
from envlock.lock.model import PUBLISHABLE, Artifact, Package, PublishedFrom
from envlock.publish.config import read_publish_config
from envlock.publish.credentials import find_credentials, redact
from envlock.publish.upload import PrivateIndex, digests
from envlock.reporter import Reporter
from envlock.store import Store
from envlock.workspace import Workspace

# upload: would upload (--dry-run); uploaded; present: the index has these bytes already;
# published: published before, left as it is; kept: not published (an editable install)
Action = Literal["upload", "uploaded", "present", "published", "kept"]


@dataclass(frozen=True, slots=True)
class PublishOptions:
    index: str | None = None
    check_url: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    dry_run: bool = False
    include_editable: bool = False


@dataclass(frozen=True, slots=True)
class PublishedWheel:
    """What publish did about one package's wheel."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int | None
    source: str  # before publishing
    action: Action
    url: str | None = None  # on the index
    reason: str | None = None  # kept: why


@dataclass(frozen=True, slots=True)
class PublishResult:
    host: str
    lock_path: Path
    index: str  # the upload URL, without credentials
    simple: str | None  # the simple index the lock now names (None: not contacted)
    credentials: str  # who, never the password
    dry_run: bool
    wheels: tuple[PublishedWheel, ...]
    written: bool

    def count(self, action: Action) -> int:
        return sum(1 for w in self.wheels if w.action == action)


def _publishable(pkg: Package) -> bool:
    if pkg.source not in PUBLISHABLE:
        return False
    # a direct wheel at an http(s) URL is reachable as it is; one at file:// is on this machine only
    return pkg.source != "direct" or (pkg.wheel.url or "").startswith("file://")


def _index_url(workspace: Workspace, options: PublishOptions) -> tuple[str, str | None]:
    config = read_publish_config(workspace)
    index = options.index or config.index
    if index is None:
        raise EnvlockError("no index to publish to: give --index URL, or set [publish] index in envlock.toml")
    try:
        parts = urlsplit(index)
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise EnvlockError(f"--index {redact(index)}: expected an http(s) upload URL with a host and port")
    for name, url in (("--check-url", options.check_url or config.check_url),):
        if url is not None and redact(url) != url:
            raise EnvlockError(f"{name} {redact(url)}: no user or password in it (they go to the upload URL)")
    return index, options.check_url or config.check_url


def publish(
    workspace: Workspace, host: str, options: PublishOptions, reporter: Reporter | None = None
) -> PublishResult:
    reporter = reporter or Reporter()
    index_url, check_url = _index_url(workspace, options)
    locked = workspace.read_locked(host)
    lock, lock_path = locked.lock, workspace.lock_path(host)
    credentials = find_credentials(index_url, options.username, options.password, options.token)
    todo = [p for p in lock.packages if _publishable(p) and (options.include_editable or not p.editable)]
    wheels: dict[str, PublishedWheel] = {}
    for pkg in lock.packages:
        if pkg.source == "published":
            wheels[pkg.name] = _outcome(pkg, "published", url=pkg.wheel.url)
        elif _publishable(pkg) and pkg.editable and not options.include_editable:
            why = "editable install: its wheel is a .pth to a source tree (--include-editable publishes it)"
            wheels[pkg.name] = _outcome(pkg, "kept", reason=why)
    index: PrivateIndex | None = None
    rewritten: dict[str, Package] = {}
    if todo:
        index = PrivateIndex(index_url, check_url, credentials)
        store = Store(workspace.store_dir)
        total = sum(p.wheel.size or 0 for p in todo)
        reporter.step(f"publish {len(todo)} wheel(s) of {host} to {index.shown}")
        sent, current = 0, ""

        def on_read(n: int) -> None:
            nonlocal sent
            sent += n
            reporter.progress("upload", sent, max(total, sent), current)

        for pkg in todo:
            current = pkg.wheel.filename
            outcome, url = _publish_one(index, store, lock_path.parent, pkg, options.dry_run, on_read)
            wheels[pkg.name] = _outcome(pkg, outcome, url=url)
            if url is not None:
                rewritten[pkg.name] = _published(pkg, url, index.check_url)
    written = False
    if rewritten and not options.dry_run:
        packages = tuple(rewritten.get(p.name, p) for p in lock.packages)
        new = replace(lock, packages=packages)
        new = replace(new, digest=lock_digest(new))
        if new.digest != lock.digest:  # only url, path and source moved; the bytes are the same
            raise PublishError(f"{locked.shown}: publishing would change the lock's digest (a bug)")
        written = workspace.write_lock_if_changed(host, new, locked.manifest)
    return PublishResult(
        host=host,
        lock_path=lock_path,
        index=redact(index_url),
        simple=redact(index.check_url) if index is not None else None,
        credentials=credentials.who,
        dry_run=options.dry_run,
        wheels=tuple(wheels[name] for name in sorted(wheels)),
        written=written,
    )


def _publish_one(
    index: PrivateIndex,
    store: Store,
    lock_dir: Path,
    pkg: Package,
    dry_run: bool,
    on_read: Callable[[int], None],
) -> tuple[Action, str | None]:
    """Upload one wheel unless the index has it; its action and its URL there (None: not yet)."""
    art = pkg.wheel
    listed = index.listed(pkg.name).get(art.filename)
    if listed is not None:
        _check_listed_url(index, listed.url, art.filename)
        _same_bytes(index, art, listed.sha256 or index.sha256_of(listed, art.size))
        return "present", listed.url
    if dry_run:
        return "upload", None
    path = fetch_one(store, lock_dir, pkg).path  # the store copy, its sha256 checked against the lock
    sums = digests(path)
    if sums.sha256 != art.sha256:  # changed on disk since fetch_one read it
        raise PublishError(f"{art.filename}: {path} no longer has the lock's sha256; not uploading it")
    answer = index.upload(path, art.filename, sums, on_read)
    listed = index.listed(pkg.name).get(art.filename)
    if listed is None:
        raise PublishError(
            f"index {index.shown}: {'accepted' if answer == 'uploaded' else 'refused'} {art.filename} "
            f"but does not list it at {redact(index.check_url)}"
        )
    _check_listed_url(index, listed.url, art.filename)
    _same_bytes(index, art, listed.sha256 or index.sha256_of(listed, art.size))
    return ("uploaded" if answer == "uploaded" else "present"), listed.url


def _check_listed_url(index: PrivateIndex, url: str, filename: str) -> None:
    """The URL an index lists for a file goes into the lock, and every host fetches from it:
    an http(s) URL with a host, nothing else (a ``file://`` URL would make the lock
    unreadable, another scheme unfetchable, and a control character could forge lines)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not url.isprintable():
        raise PublishError(
            f"{filename}: index {index.shown} lists {redact(url)!r} for it: "
            "not an http(s) URL a host can fetch; the lock is left as it was"
        )


def _same_bytes(index: PrivateIndex, art: Artifact, listed_sha256: str) -> None:
    if listed_sha256 != art.sha256:
        raise PublishError(
            f"{art.filename}: index {index.shown} already holds other bytes under this name "
            f"(sha256 {listed_sha256[:16]}…, the lock's wheel is {art.sha256[:16]}…); an index never "
            "replaces a file: give the build another version (a local label such as +team.2) "
            "or remove that file from the index"
        )


def _published(pkg: Package, url: str, simple: str) -> Package:
    was = PublishedFrom(source=pkg.source, path=pkg.wheel.path, url=pkg.wheel.url)
    wheel = Artifact(filename=pkg.wheel.filename, sha256=pkg.wheel.sha256, size=pkg.wheel.size, url=url)
    return replace(pkg, source="published", wheel=wheel, index=redact(simple), published_from=was)


def _outcome(
    pkg: Package, action: Action, url: str | None = None, reason: str | None = None
) -> PublishedWheel:
    source = pkg.published_from.source if pkg.published_from is not None else pkg.source
    return PublishedWheel(
        name=pkg.name,
        version=pkg.version,
        filename=pkg.wheel.filename,
        sha256=pkg.wheel.sha256,
        size=pkg.wheel.size,
        source=source,
        action=action,
        url=url,
        reason=reason,
    )


__all__ = ["PublishOptions", "PublishResult", "PublishedWheel", "publish"]
