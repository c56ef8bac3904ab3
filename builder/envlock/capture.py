"""``envlock capture HOST``: freeze a live venv into ``locks/pylock.<host>.toml``.

Flow: the agent snapshots the venv on the host (every file hashed, every
dist-info read, every ELF library inspected); each distribution is traced to
the exact wheel on an index when its bytes allow it, and repacked into the
store otherwise; the lock and its file manifest are written atomically, and
only when their bytes change.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envlock.errors import CaptureError, IndexError_
from envlock.hosts import HostProfile, load_profile
from envlock.index import IndexClient, IndexFile
from envlock.lock.digest import tree_digest, venv_digest
from envlock.lock.io import render_lock, write_lock
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import Artifact, FileEntry, Lock, NativeLib, Package, Source
from envlock.provenance import Found, ProvenanceCache, find_on_index, record_matches
from envlock.store import Store
from envlock.tags import abi_tag, platform_tags
from envlock.transport import ProgressCallback, Transport, open_transport, run_agent
from envlock.workspace import Workspace, cache_dir

_BOOKKEEPING = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
# Written by venv creators (python -m venv, uv venv, virtualenv), not by any wheel.
_SCAFFOLD = (
    "pyvenv.cfg",
    "lib64",
    ".lock",
    ".gitignore",
    "CACHEDIR.TAG",
    "bin/python",
    "bin/activate",
    "bin/Activate.ps1",
    "bin/deactivate",
    "bin/pydoc",
)


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    use_cache: bool = True
    allow_unreachable_index: bool = False
    jobs: int = 0


@dataclass(frozen=True, slots=True)
class CaptureResult:
    lock: Lock
    lock_path: Path
    manifest_path: Path
    changed: bool
    stats: dict[str, int]
    warnings: tuple[str, ...] = field(default=())


@dataclass
class _DistFiles:
    entries: list[FileEntry] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    native: list[NativeLib] = field(default_factory=list)


@dataclass
class _Origin:
    source: Source
    artifact: Artifact | None = None
    index: str | None = None
    reason: str | None = None
    origin: Artifact | None = None
    warnings: list[str] = field(default_factory=list)


def capture(
    workspace: Workspace,
    host: str,
    options: CaptureOptions = CaptureOptions(),
    on_progress: ProgressCallback | None = None,
    on_step: Callable[[str], None] | None = None,
) -> CaptureResult:
    profile = load_profile(workspace, host)
    with open_transport(profile) as transport:
        return _capture(workspace, profile, transport, options, on_progress, on_step or (lambda _msg: None))


def _capture(
    workspace: Workspace,
    profile: HostProfile,
    transport: Transport,
    options: CaptureOptions,
    on_progress: ProgressCallback | None,
    step: Callable[[str], None],
) -> CaptureResult:
    host = profile.name

    step(f"snapshot {profile.venv} on {host}")
    args = ["snapshot", "--venv", profile.venv]
    if options.jobs:
        args += ["--jobs", str(options.jobs)]
    if not options.use_cache:
        args.append("--no-cache")
    stats: dict[str, int] = {}

    def relay(event: dict[str, Any]) -> None:
        if event.get("phase") == "stats":
            stats.update({k: v for k, v in event.items() if k != "phase"})
        elif on_progress is not None:
            on_progress(event)

    # The agent sends the venv's description first and hashes afterwards:
    # tracing every dist to its wheel runs here meanwhile, on the spare core
    # time that hashing (bound by reads as much as by SHA) leaves.
    pool = ThreadPoolExecutor(max_workers=1)
    tracing: list[Future[dict[str, _Origin]]] = []
    stop = threading.Event()

    def on_description(line: bytes) -> None:
        described = json.loads(line)
        tracing.append(pool.submit(trace_origins, profile, described, options, stop))

    try:
        raw = run_agent(transport, profile.venv, args, on_progress=relay, on_first_line=on_description)
        memo = _UnchangedMemo(workspace, profile, raw)
        if options.use_cache:
            unchanged = memo.lookup()
            if unchanged is not None:
                stop.set()
                return CaptureResult(
                    unchanged, workspace.lock_path(host), workspace.manifest_path(host), False, stats
                )
        described, inventory = raw.split(b"\n", 1)
        snapshot = {**json.loads(described), **json.loads(inventory)}
        step(f"trace {len(snapshot['dists'])} distributions to their wheels")
        traced = tracing[0].result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    result = build_lock(workspace, profile, snapshot, traced, step, transport, stats, options)
    memo.remember()
    return result


def _index_config(profile: HostProfile, described: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # A profile's [index] replaces the host's pip configuration as a whole.
    if profile.index is not None:
        return profile.index.urls, profile.index.find_links
    pip = described["pip_config"]
    return tuple(pip["urls"]), tuple(pip["find_links"])


def trace_origins(
    profile: HostProfile,
    described: dict[str, Any],
    options: CaptureOptions,
    stop: threading.Event | None = None,
) -> dict[str, _Origin]:
    """Where each distribution's bytes come from, keyed by dist-info name.

    Needs only the dist-info data, not the file hashes; hand patches found
    later by comparing hashes with RECORD override the answer.
    """
    indexes, find_links = _index_config(profile, described)
    client = IndexClient(indexes, find_links)
    cache = ProvenanceCache(cache_dir() / "provenance.json" if options.use_cache else None)
    origins: dict[str, _Origin] = {}
    warnings: list[str] = []
    for dist in described["dists"]:
        if stop is not None and stop.is_set():
            break  # the answer is no longer wanted (unchanged venv, or a failure)
        if dist["direct_url"] is not None:
            origin = _direct_origin(client, dist)
        else:
            origin = _index_origin(client, cache, indexes + find_links, dist, options, warnings)
        origin.warnings = warnings
        origins[dist["dist_info"]] = origin
        warnings = []
    cache.save()
    return origins


class _UnchangedMemo:
    """Recognises a venv that has not changed since the last capture wrote the lock.

    The agent's stdout depends on the venv's content alone (statistics go to
    stderr), so the same stdout, profile, store and envlock version with the
    lock and manifest still as written means the lock would come out the same.
    """

    def __init__(self, workspace: Workspace, profile: HostProfile, raw: bytes) -> None:
        from envlock import __version__

        self.workspace, self.profile = workspace, profile
        parts = [__version__, str(workspace.root), str(workspace.store_dir), profile.name]
        key = hashlib.sha256("|".join(parts).encode())
        key.update(profile.path.as_posix().encode())
        key.update(_read_or_empty(workspace.root / profile.path))
        key.update(raw)
        self.key = key.hexdigest()
        self.path = (
            cache_dir()
            / "captures"
            / f"{hashlib.sha256(str(workspace.root).encode()).hexdigest()[:16]}-{profile.name}.json"
        )

    def _files_digest(self) -> str:
        digest = hashlib.sha256()
        for path in (
            self.workspace.lock_path(self.profile.name),
            self.workspace.manifest_path(self.profile.name),
        ):
            digest.update(_read_or_empty(path))
        return digest.hexdigest()

    def lookup(self) -> Lock | None:
        try:
            memo = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if memo.get("key") != self.key or memo.get("files") != self._files_digest():
            return None
        from envlock.lock.io import read_lock

        lock = read_lock(self.workspace.lock_path(self.profile.name))
        locks_dir = self.workspace.locks_dir
        if any(p.wheel.path and not (locks_dir / p.wheel.path).is_file() for p in lock.packages):
            return None  # a store wheel went missing: rebuild (and repack) properly
        return lock

    def remember(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": self.key, "files": self._files_digest()}), encoding="utf-8")
        os.replace(tmp, self.path)


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _lock_path_of(site: str, venv_rel: str) -> str:
    """``lib/python3.11/site-packages/x`` -> ``site-packages/x``: stable across Pythons."""
    if venv_rel.startswith(site + "/"):
        return "site-packages/" + venv_rel[len(site) + 1 :]
    return venv_rel


def _b64_sha256(hex_digest: str) -> str:
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(hex_digest)).rstrip(b"=").decode()


def _collect_files(
    snapshot: dict[str, Any], dist: dict[str, Any], owners: dict[str, str], warnings: list[str]
) -> _DistFiles:
    site = snapshot["site"]
    files = snapshot["_files"]
    links = snapshot["_links"]
    normalized = snapshot["bin_normalized"]
    name = canonicalize_name(dist["name"])
    out = _DistFiles()
    for path, digest, _size in dist["record"]:
        if "/." in path or path.startswith((".", "/")):
            rel = posixpath.normpath(posixpath.join(site, path))
        else:
            rel = f"{site}/{path}"  # already normal: skip the costly normpath
        if rel.startswith("../"):
            warnings.append(f"{name}: RECORD row {path!r} points outside the venv; not captured")
            continue
        parts = rel.split("/")
        if "__pycache__" in parts or rel.endswith(".pyc"):
            continue
        if len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] in _BOOKKEEPING:
            continue
        owners[rel] = name
        shown = _lock_path_of(site, rel)
        if rel in files:
            sha, size, executable = files[rel]
            if digest.startswith("sha256=") and _b64_sha256(sha) != digest:
                out.modified.append(shown)
            if rel in normalized:
                sha, size = normalized[rel]
            out.entries.append(
                FileEntry(owner=name, path=shown, sha256=sha, size=size, kind="x" if executable else "f")
            )
            facts = snapshot["native"].get(rel)
            if facts is not None:
                out.native.append(_native(shown, files[rel][0], facts))
        elif rel in links:
            out.entries.append(FileEntry(owner=name, path=shown, sha256=links[rel], size=0, kind="l"))
        else:
            out.missing.append(shown)
    return out


def _native(path: str, sha: str, facts: dict[str, Any]) -> NativeLib:
    if "error" in facts:
        return NativeLib(path=path, sha256=sha, error=facts["error"])
    return NativeLib(
        path=path,
        sha256=sha,
        soname=facts.get("soname"),
        needed=tuple(facts.get("needed", [])),
        rpath=tuple(facts.get("rpath", [])),
        runpath=tuple(facts.get("runpath", [])),
        version_needs=facts.get("version_needs", {}),
        cuda_sections=facts.get("cuda_sections", {}),
    )


def _top_level(dist: dict[str, Any], entries: list[FileEntry]) -> tuple[str, ...]:
    if dist.get("top_level"):
        return tuple(dist["top_level"])
    names: set[str] = set()
    for entry in entries:
        if not entry.path.startswith("site-packages/"):
            continue
        parts = entry.path[len("site-packages/") :].split("/")
        head = parts[0]
        if head.endswith((".dist-info", ".pth", ".data")) or head.startswith("."):
            continue
        if len(parts) == 1:
            if head.endswith(".py"):
                names.add(head[:-3])
            elif head.endswith(".so"):
                names.add(head.split(".", 1)[0])
        elif head.isidentifier():
            names.add(head)
    return tuple(sorted(names))


def _direct_origin(client: IndexClient, dist: dict[str, Any]) -> _Origin:
    direct = dist["direct_url"]
    url = direct.get("url", "")
    if direct.get("dir_info", {}).get("editable"):
        return _Origin("repacked", reason=f"editable install of {url}")
    if "vcs_info" in direct:
        vcs = direct["vcs_info"]
        return _Origin(
            "repacked",
            reason=f"built from {vcs.get('vcs', 'vcs')} {url}@{vcs.get('commit_id', '?')}",
        )
    if "dir_info" in direct:
        return _Origin("repacked", reason=f"built locally from {url}")
    archive = direct.get("archive_info", {})
    if url.endswith(".whl"):
        hashes = archive.get("hashes") or {}
        sha = hashes.get("sha256")
        if sha is None and str(archive.get("hash", "")).startswith("sha256="):
            sha = archive["hash"].split("=", 1)[1]
        file = IndexFile(url.rsplit("/", 1)[-1], url, sha, url)
        try:
            if record_matches(client.read_record(file), dist["record"], set(dist["console_scripts"])):
                found = Artifact(filename=file.filename, sha256=client.wheel_sha256(file), url=url)
                return _Origin("direct", artifact=found)
        except IndexError_ as exc:
            return _Origin("repacked", reason=f"direct wheel {url} unreadable ({exc})")
        return _Origin("repacked", reason=f"direct wheel {url} does not match the installed RECORD")
    return _Origin("repacked", reason=f"built from {url}")


def _index_origin(
    client: IndexClient,
    cache: ProvenanceCache,
    sources: tuple[str, ...],
    dist: dict[str, Any],
    options: CaptureOptions,
    warnings: list[str],
) -> _Origin:
    key = ProvenanceCache.key(dist, sources)
    found: Found | None = cache.get(key)
    if found is None:
        try:
            found = find_on_index(client, dist)
        except IndexError_ as exc:
            if not options.allow_unreachable_index:
                raise CaptureError(
                    f"{exc} (while tracing {dist['name']} {dist['version']}; "
                    "--allow-unreachable-index repacks instead)"
                ) from exc
            warnings.append(f"{dist['name']}: {exc}; repacked, index hash unknown")
            return _Origin("repacked", reason=f"index unreachable ({exc}); index hash unknown")
        if found is not None:
            cache.put(key, found)
    if found is None:
        return _Origin(
            "repacked",
            reason=f"no wheel on {', '.join(sources) or 'any index'} matches the installed RECORD",
        )
    return _Origin("index", artifact=found.artifact, index=found.index)


def build_lock(
    workspace: Workspace,
    profile: HostProfile,
    snapshot: dict[str, Any],
    traced: dict[str, _Origin],
    step: Callable[[str], None],
    transport: Transport,
    stats: dict[str, int],
    options: CaptureOptions,
) -> CaptureResult:
    host = profile.name
    warnings: list[str] = []
    snapshot["_files"] = {row[0]: (row[1], row[2], row[3]) for row in snapshot["files"]}
    snapshot["_links"] = dict(snapshot["links"])
    indexes, find_links = _index_config(profile, snapshot)
    store = Store(workspace.store_dir)

    owners: dict[str, str] = {}
    per_dist: list[tuple[dict[str, Any], _DistFiles, _Origin]] = []
    for dist in snapshot["dists"]:
        files = _collect_files(snapshot, dist, owners, warnings)
        origin = traced[dist["dist_info"]]
        warnings.extend(origin.warnings)
        if files.modified or files.missing:
            # The live venv is what works: freeze it as it is, patches and
            # deletions included, and keep the wheel it came from as origin.
            changes = []
            if files.modified:
                changes.append(f"{len(files.modified)} file(s) differ from RECORD")
            if files.missing:
                changes.append(f"{len(files.missing)} file(s) missing")
            origin = _Origin("repacked", reason="hand-patched: " + ", ".join(changes), origin=origin.artifact)
        per_dist.append((dist, files, origin))

    wanted = [(d, f) for d, f, o in per_dist if o.source == "repacked"]
    repacked = _repack(workspace, transport, profile.venv, wanted, store, step, options.use_cache)

    packages: list[Package] = []
    manifest_rows: list[FileEntry] = []
    for dist, files, origin in per_dist:
        name = canonicalize_name(dist["name"])
        artifact = repacked[dist["dist_info"]] if origin.source == "repacked" else origin.artifact
        assert artifact is not None
        scripts = {}
        for rel, encoded in snapshot["entry_point_scripts"].items():
            if owners.get(rel) == name:
                scripts[rel] = store.put_blob(base64.b64decode(encoded))
        manifest_rows.extend(files.entries)
        packages.append(
            Package(
                name=name,
                version=dist["version"],
                wheel=artifact,
                source=origin.source,
                index=origin.index,
                requires_python=dist["requires_python"],
                installer=dist["installer"],
                requested=dist["requested"],
                requires_dist=tuple(dist["requires_dist"]),
                top_level=_top_level(dist, files.entries),
                wheel_tags=tuple(dist["wheel"]["tags"]),
                tree_digest=tree_digest(files.entries),
                file_count=len(files.entries),
                size=sum(e.size for e in files.entries),
                editable=bool((dist["direct_url"] or {}).get("dir_info", {}).get("editable")),
                modified=tuple(sorted(files.modified)),
                missing=tuple(sorted(files.missing)),
                reason=origin.reason,
                origin=origin.origin,
                direct_url=dist["direct_url"],
                scripts=scripts,
                native=tuple(files.native),
            )
        )

    unowned = _unowned(snapshot, owners, manifest_rows)
    for egg in snapshot["egg_infos"]:
        warnings.append(f"{egg}: legacy egg-info distribution is not captured; reinstall it as a wheel")
    if unowned:
        warnings.append(f"{len(unowned)} file(s) belong to no distribution and will not be rebuilt")
    interpreter = snapshot["interpreter"]
    plat = snapshot["platform"]
    lock = Lock(
        host=host,
        role="reference",
        venv=snapshot["venv"],
        site=snapshot["site"],
        digest=venv_digest(interpreter["version"], [(p.name, p.version, p.tree_digest) for p in packages]),
        interpreter={
            "implementation": interpreter["implementation"],
            "version": interpreter["version"],
            "abi": abi_tag(interpreter),
            "soabi": interpreter["soabi"] or "",
            "ext-suffix": interpreter["ext_suffix"] or "",
            "gil-disabled": interpreter["py_gil_disabled"],
        },
        platform={
            "system": plat["system"],
            "machine": plat["machine"],
            "libc": plat["libc"] or "",
            "libc-version": plat["libc_version"] or "",
            "platform-tags": platform_tags(plat["machine"], plat["libc"], plat["libc_version"]),
        },
        pyvenv={
            k: v
            for k, v in snapshot["pyvenv_cfg"].items()
            if k in ("home", "include-system-site-packages", "version", "version_info")
        },
        indexes=indexes,
        find_links=find_links,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        manifest_sha256="",
        manifest_files=len(manifest_rows),
        gpu=_gpu(snapshot, profile),
        unowned=tuple(unowned),
    )
    manifest = render_manifest(manifest_rows + [r for r in _scaffold_rows(snapshot, owners)])
    lock = replace(lock, manifest_sha256=manifest_sha256(manifest), manifest_files=manifest.count(b"\n") - 1)
    lock_path = workspace.lock_path(host)
    manifest_path = workspace.manifest_path(host)
    changed = not (
        lock_path.is_file()
        and manifest_path.is_file()
        and lock_path.read_bytes() == render_lock(lock)
        and manifest_path.read_bytes() == manifest
    )
    if changed:
        write_lock(lock, lock_path, manifest_path, manifest)
    return CaptureResult(lock, lock_path, manifest_path, changed, stats, tuple(warnings))


def _is_scaffold(rel: str) -> bool:
    return rel in _SCAFFOLD or rel.startswith(_SCAFFOLD[5:])


def _unowned(snapshot: dict[str, Any], owners: dict[str, str], rows: list[FileEntry]) -> list[str]:
    site = snapshot["site"]
    result = []
    for rel in list(snapshot["_files"]) + list(snapshot["_links"]):
        if rel in owners or _is_scaffold(rel):
            continue
        parts = rel.split("/")
        if len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] in _BOOKKEEPING:
            continue
        result.append(_lock_path_of(site, rel))
    return sorted(result)


def _scaffold_rows(snapshot: dict[str, Any], owners: dict[str, str]) -> list[FileEntry]:
    """Manifest rows for files no distribution owns: ``:venv`` scaffold or ``:unowned``."""
    site = snapshot["site"]
    rows = []
    for rel, (sha, size, executable) in snapshot["_files"].items():
        if rel in owners:
            continue
        parts = rel.split("/")
        if len(parts) >= 2 and parts[-2].endswith(".dist-info") and parts[-1] in _BOOKKEEPING:
            continue
        owner = ":venv" if _is_scaffold(rel) else ":unowned"
        rows.append(
            FileEntry(
                owner=owner,
                path=_lock_path_of(site, rel),
                sha256=sha,
                size=size,
                kind="x" if executable else "f",
            )
        )
    for rel, target in snapshot["_links"].items():
        if rel not in owners:
            owner = ":venv" if _is_scaffold(rel) else ":unowned"
            rows.append(
                FileEntry(owner=owner, path=_lock_path_of(site, rel), sha256=target, size=0, kind="l")
            )
    return rows


def _gpu(snapshot: dict[str, Any], profile: HostProfile) -> dict[str, Any] | None:
    if snapshot.get("gpu"):
        return {"source": "nvidia-smi", "devices": snapshot["gpu"]}
    if profile.gpu is not None:
        gpu: dict[str, Any] = {"source": "profile", "cc": list(profile.gpu.cc)}
        if profile.gpu.driver:
            gpu["driver"] = profile.gpu.driver
        return gpu
    return None


def _repack_key(dist: dict[str, Any], files: _DistFiles) -> str:
    """Same dist-info, same RECORD, same live bytes: the same repacked wheel."""
    text = "|".join([dist["dist_info"], dist["record_sha256"], tree_digest(files.entries)])
    return hashlib.sha256(text.encode()).hexdigest()


def _repack(
    workspace: Workspace,
    transport: Transport,
    venv: str,
    wanted: list[tuple[dict[str, Any], _DistFiles]],
    store: Store,
    step: Callable[[str], None],
    use_cache: bool,
) -> dict[str, Artifact]:
    """Repacked wheels by dist-info name; reuses store wheels whose content key matches."""
    cache_path = cache_dir() / "repack.json"
    known: dict[str, Any] = {}
    if use_cache and cache_path.is_file():
        try:
            known = json.loads(cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
    result: dict[str, Artifact] = {}
    todo: list[str] = []
    keys: dict[str, str] = {}
    for dist, files in wanted:
        key = keys[dist["dist_info"]] = _repack_key(dist, files)
        hit = known.get(key)
        if hit and store.has_wheel(hit["sha256"], hit["filename"]):
            result[dist["dist_info"]] = _store_artifact(
                workspace, store, hit["filename"], hit["sha256"], hit["size"]
            )
        else:
            todo.append(dist["dist_info"])
    if todo:
        step(f"repack {len(todo)} distribution(s) into the store")
        raw = run_agent(transport, venv, ["repack", "--venv", venv, *todo])
        pos = 0
        while pos < len(raw):
            end = raw.index(b"\n", pos)
            header = json.loads(raw[pos:end])
            data = raw[end + 1 : end + 1 + header["size"]]
            pos = end + 1 + header["size"]
            _path, sha = store.put_wheel(data, header["filename"], expected_sha256=header["sha256"])
            result[header["dist_info"]] = _store_artifact(
                workspace, store, header["filename"], sha, len(data)
            )
            known[keys[header["dist_info"]]] = {
                "filename": header["filename"],
                "sha256": sha,
                "size": len(data),
            }
        missing = set(todo) - set(result)
        if missing:
            raise CaptureError(f"host {transport.host}: agent did not repack {', '.join(sorted(missing))}")
        if use_cache:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            os.replace(tmp, cache_path)
    return result


def _store_artifact(workspace: Workspace, store: Store, filename: str, sha: str, size: int) -> Artifact:
    relative = os.path.relpath(store.wheel_path(sha, filename), workspace.locks_dir)
    return Artifact(filename=filename, sha256=sha, size=size, path=Path(relative).as_posix())
