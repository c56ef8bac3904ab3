"""Assemble the Lock and its manifest from a snapshot and the traced origins."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from dataclasses import replace
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from envlock.abi import with_abi_facts
from envlock.agent.protocol import DistFacts, Inventory, VenvDescription
from envlock.capture.agentcall import Snapshot
from envlock.capture.files import (
    DistFiles,
    collect_files,
    lock_path_of,
    scaffold_rows,
    top_level_names,
    unowned_paths,
)
from envlock.capture.origins import Origin, index_config
from envlock.capture.repack import repack_dists
from envlock.capture.result import CaptureOptions, CaptureResult
from envlock.errors import EnvlockError
from envlock.hosts import HostProfile
from envlock.loadable import provided_names
from envlock.lock.digest import lock_digest, tree_digest
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import (
    FileEntry,
    GpuDevice,
    HostGpu,
    HostLibraries,
    Interpreter,
    Lock,
    Package,
    Platform,
    SourceTree,
)
from envlock.lock.published import keep_published
from envlock.store import Store, open_store
from envlock.storepush import describe, push_lock_objects
from envlock.tags import abi_tag, platform_tags
from envlock.transport import Transport, run_agent
from envlock.workspace import Workspace


def _previous_lock(workspace: Workspace, host: str) -> Lock | None:
    """The host's lock as it is now, for what ``envlock publish`` did to it; None if unreadable."""
    try:
        return workspace.read_lock(host)
    except EnvlockError:
        return None  # capture writes a good lock over a missing or broken one


def build_lock(
    workspace: Workspace,
    profile: HostProfile,
    snapshot: Snapshot,
    traced: dict[str, Origin],
    step: Callable[[str], None],
    transport: Transport,
    stats: dict[str, int],
    options: CaptureOptions,
) -> CaptureResult:
    host = profile.name
    warnings: list[str] = []
    described, inventory = snapshot.description, snapshot.inventory
    indexes, find_links = index_config(profile, described)
    store = open_store(workspace)

    owners: dict[str, str] = {}
    per_dist: list[tuple[DistFacts, DistFiles, Origin]] = []
    for dist in described["dists"]:
        files = collect_files(snapshot.files, dist, owners, warnings)
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
            origin = Origin("repacked", reason="hand-patched: " + ", ".join(changes), origin=origin.artifact)
        per_dist.append((dist, files, origin))

    wanted = [(d, f) for d, f, o in per_dist if o.source == "repacked"]
    repacked = repack_dists(workspace, transport, profile.venv, wanted, store, step, options.use_cache)

    packages: list[Package] = []
    manifest_rows: list[FileEntry] = []
    for dist, files, origin in per_dist:
        name = canonicalize_name(dist["name"])
        artifact = repacked[dist["dist_info"]] if origin.source == "repacked" else origin.artifact
        assert artifact is not None
        scripts = {}
        for rel, encoded in inventory["bin_files"].items():
            if owners.get(rel) == name:
                scripts[rel] = store.put_blob(base64.b64decode(encoded))
        manifest_rows.extend(files.entries)
        source_tree = _pack_editable_source(transport, profile.venv, dist, store, step)
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
                top_level=top_level_names(dist["top_level"], files.entries),
                wheel_tags=tuple(dist["wheel"]["tags"]),
                tree_digest=tree_digest(files.entries),
                file_count=len(files.entries),
                size=sum(e.size for e in files.entries),
                editable=source_tree is not None,
                source_tree=source_tree,
                modified=tuple(sorted(files.modified)),
                missing=tuple(sorted(files.missing)),
                reason=origin.reason,
                origin=origin.origin,
                direct_url=dist["direct_url"],
                scripts=scripts,
                native=tuple(files.native),
            )
        )

    packages = with_abi_facts(packages, _abi_takes(inventory, described["site"]))
    packages = keep_published(_previous_lock(workspace, host), packages)
    unowned = unowned_paths(snapshot.files, owners, manifest_rows)
    for egg in described["egg_infos"]:
        warnings.append(f"{egg}: legacy egg-info distribution is not captured; reinstall it as a wheel")
    if unowned:
        warnings.append(f"{len(unowned)} file(s) belong to no distribution and will not be rebuilt")
    interpreter = described["interpreter"]
    plat = described["platform"]
    lock = Lock(
        host=host,
        role="reference",
        venv=described["venv"],
        site=described["site"],
        digest="",  # lock_digest below, once every field is set
        interpreter=Interpreter(
            implementation=interpreter["implementation"],
            version=interpreter["version"],
            abi=abi_tag(interpreter),
            soabi=interpreter["soabi"] or "",
            ext_suffix=interpreter["ext_suffix"] or "",
            gil_disabled=bool(interpreter["py_gil_disabled"]),
        ),
        platform=Platform(
            system=plat["system"],
            machine=plat["machine"],
            libc=plat["libc"] or "",
            libc_version=plat["libc_version"] or "",
            platform_tags=tuple(platform_tags(plat["machine"], plat["libc"], plat["libc_version"])),
        ),
        # Every key, in file order: apply writes pyvenv.cfg back from these.
        pyvenv=dict(described["pyvenv_cfg"]),
        indexes=indexes,
        find_links=find_links,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        manifest_sha256="",
        manifest_files=len(manifest_rows),
        gpu=gpu_facts(described, profile),
        unowned=tuple(unowned),
        host_libraries=host_library_facts(inventory, packages),
    )
    extra_rows = scaffold_rows(snapshot.files, owners)
    manifest = render_manifest(manifest_rows + extra_rows)
    lock = replace(
        lock,
        digest=lock_digest(lock),
        manifest_sha256=manifest_sha256(manifest),
        manifest_files=manifest.count(b"\n") - 1,
    )
    if options.write:
        changed = workspace.write_lock_if_changed(host, lock, manifest)
        # The shared store gets what this lock names and it lacks (envlock.toml [store] push).
        pushed = push_lock_objects(workspace, store, lock)
        if pushed is not None and pushed.objects:
            step(f"pushed {describe(pushed)}")
    else:
        changed = not workspace.lock_is_current(host, lock, manifest)
    # After the write: a lock under an old name (pylock.gpu01.lab.toml) has just been renamed.
    lock_path = workspace.lock_path(host)
    manifest_path = workspace.manifest_path(host)
    rows = tuple(manifest_rows) + tuple(extra_rows)
    return CaptureResult(
        lock=lock,
        lock_path=lock_path,
        manifest_path=manifest_path,
        changed=changed,
        stats=stats,
        warnings=tuple(warnings),
        manifest_rows=rows,
    )


def _pack_editable_source(
    transport: Transport, venv: str, dist: DistFacts, store: Store, step: Callable[[str], None]
) -> SourceTree | None:
    """The source tree an editable install points at, packed into the store."""
    direct = dist["direct_url"] or {}
    if not direct.get("dir_info", {}).get("editable"):
        return None
    path = unquote(urlparse(direct.get("url", "")).path)
    step(f"pack the source of editable {dist['name']} ({path})")
    data = run_agent(transport, venv, ["pack-source", "--dir", path])
    return SourceTree(path=path, sha256=store.put_blob(data), size=len(data))


def _abi_takes(inventory: Inventory, site: str) -> dict[str, dict[str, list[str]]]:
    """The agent's ABI facts (venv-relative paths) in the lock's terms (``site-packages/...``)."""
    return {
        lock_path_of(site, library): {
            lock_path_of(site, source): symbols for source, symbols in sources.items()
        }
        for library, sources in inventory.get("abi", {}).items()
    }


def host_library_facts(inventory: Inventory, packages: Iterable[Package]) -> HostLibraries | None:
    """The agent's search on the host for the DT_NEEDED names no locked package ships
    (None when there is none: a lock of pure-Python or self-contained wheels says nothing)."""
    shipped = provided_names(packages)
    searched = {k: v for k, v in inventory.get("host_libraries", {}).items() if k not in shipped}
    if not searched:
        return None
    return HostLibraries(
        found={name: path for name, path in searched.items() if path},
        missing=tuple(sorted(name for name, path in searched.items() if not path)),
    )


def gpu_facts(described: VenvDescription, profile: HostProfile) -> HostGpu | None:
    if described["gpu"]:
        devices = tuple(GpuDevice(name=d["name"], cc=d["cc"], driver=d["driver"]) for d in described["gpu"])
        return HostGpu(source="nvidia-smi", devices=devices)
    if profile.gpu is not None:
        return HostGpu(source="profile", cc=profile.gpu.cc, driver=profile.gpu.driver)
    return None
