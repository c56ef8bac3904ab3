"""Where each distribution's bytes come from: index wheel, direct wheel, or repack."""

from __future__ import annotations

import csv
import io
import os
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envlock.agent.protocol import DistFacts, VenvDescription
from envlock.capture.result import CaptureOptions
from envlock.errors import CaptureError, IndexError_
from envlock.hosts import HostProfile
from envlock.index import IndexClient, IndexFile
from envlock.lock.model import Artifact, Source
from envlock.provenance import Found, ProvenanceCache, find_on_index, record_matches, tags_match
from envlock.store import Store
from envlock.workspace import cache_dir


@dataclass
class Origin:
    source: Source
    artifact: Artifact | None = None
    index: str | None = None
    reason: str | None = None
    origin: Artifact | None = None
    warnings: list[str] = field(default_factory=list)


def index_config(profile: HostProfile, described: VenvDescription) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # A profile's [index] replaces the host's pip configuration as a whole.
    if profile.index is not None:
        return profile.index.urls, profile.index.find_links
    pip = described["pip_config"]
    return tuple(pip["urls"]), tuple(pip["find_links"])


@dataclass(frozen=True)
class StoreBuilds:
    """Wheels ``envlock build`` put in the store: an installed distribution whose RECORD
    is one of theirs came from it (``source = "built"``), as a target lock said."""

    store: Store
    lock_dir: Path

    def origin(self, dist: DistFacts) -> Origin | None:
        from envlock.buildrecord import read_record

        name = canonicalize_name(dist["name"])
        prefix = name.replace("-", "_")
        for path in sorted((self.store.root / "wheels").glob(f"*/{prefix}-*.whl")):
            try:
                if parse_wheel_filename(path.name)[:2] != (name, Version(dist["version"])):
                    continue
            except InvalidWheelFilename:
                continue
            record = read_record(self.store, path.parent.name)
            if record is None or not tags_match(path.name, dist["wheel"]["tags"]):
                continue
            if record_matches(_wheel_record(path), dist["record"], set(dist["console_scripts"])):
                relative = Path(os.path.relpath(path, self.lock_dir)).as_posix()
                art = Artifact(
                    filename=path.name, sha256=record.sha256, size=path.stat().st_size, path=relative
                )
                sms = "/".join("sm_" + cc.replace(".", "") for cc in record.gpu)
                why = f"built for {sms} by envlock build (store/builds/{record.sha256}.json)"
                return Origin("built", artifact=art, reason=why)
        return None


def _wheel_record(path: Path) -> list[list[str]]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
            text = archive.read(names[0]).decode("utf-8") if len(names) == 1 else ""
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError):
        return []
    return [row for row in csv.reader(io.StringIO(text)) if row]


def trace_origins(
    profile: HostProfile,
    described: VenvDescription,
    options: CaptureOptions,
    stop: threading.Event | None = None,
    builds: StoreBuilds | None = None,
) -> dict[str, Origin]:
    """Where each distribution's bytes come from, keyed by dist-info name.

    Needs only the dist-info data, not the file hashes; hand patches found
    later by comparing hashes with RECORD override the answer.
    """
    indexes, find_links = index_config(profile, described)
    client = IndexClient(indexes, find_links)
    cache = ProvenanceCache(cache_dir() / "provenance.json" if options.use_cache else None)
    origins: dict[str, Origin] = {}
    warnings: list[str] = []
    for dist in described["dists"]:
        if stop is not None and stop.is_set():
            break  # the answer is no longer wanted (unchanged venv, or a failure)
        direct = dist["direct_url"]
        if direct is not None:
            origin = direct_origin(client, dist, direct)
        else:
            origin = index_origin(client, cache, indexes + find_links, dist, options, warnings)
            if origin.source == "repacked" and builds is not None:
                origin = builds.origin(dist) or origin
        origin.warnings = warnings
        origins[dist["dist_info"]] = origin
        warnings = []
    cache.save()
    return origins


def direct_origin(client: IndexClient, dist: DistFacts, direct: dict[str, Any]) -> Origin:
    """The origin of a distribution installed from a URL (``direct``: its direct_url.json)."""
    url = direct.get("url", "")
    if direct.get("dir_info", {}).get("editable"):
        return Origin("repacked", reason=f"editable install of {url}")
    if "vcs_info" in direct:
        vcs = direct["vcs_info"]
        return Origin(
            "repacked",
            reason=f"built from {vcs.get('vcs', 'vcs')} {url}@{vcs.get('commit_id', '?')}",
        )
    if "dir_info" in direct:
        return Origin("repacked", reason=f"built locally from {url}")
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
                return Origin("direct", artifact=found)
        except IndexError_ as exc:
            return Origin("repacked", reason=f"direct wheel {url} unreadable ({exc})")
        return Origin("repacked", reason=f"direct wheel {url} does not match the installed RECORD")
    return Origin("repacked", reason=f"built from {url}")


def index_origin(
    client: IndexClient,
    cache: ProvenanceCache,
    sources: tuple[str, ...],
    dist: DistFacts,
    options: CaptureOptions,
    warnings: list[str],
) -> Origin:
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
            return Origin("repacked", reason=f"index unreachable ({exc}); index hash unknown")
        if found is not None:
            cache.put(key, found)
    if found is None:
        return Origin(
            "repacked",
            reason=f"no wheel on {', '.join(sources) or 'any index'} matches the installed RECORD",
        )
    return Origin("index", artifact=found.artifact, index=found.index)
