"""Turn a resolution into the target's Lock and manifest, explaining every deviation."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from envlock.abi import provides_from_exports, still_taken, taken_from
from envlock.agent.layout import relocate
from envlock.fetch import blob
from envlock.lock.compare import version_kind
from envlock.lock.digest import lock_digest, tree_digest
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import Artifact, FileEntry, HostGpu, Interpreter, Lock, Package, Platform
from envlock.pyvenv import derive_target_pyvenv
from envlock.resolve.candidates import Candidate, Finder
from envlock.resolve.target import TargetEnv
from envlock.resolve.wheelrows import wheel_layout
from envlock.store import Store
from envlock.tags import abi_tag

# Set (to anything) to lock without ABI facts or checks: the benchmark's anchor.
NO_ABI_CHECK = "ENVLOCK_NO_ABI_CHECK"
_PATH_FREE_SCAFFOLD = (".lock", ".gitignore", "CACHEDIR.TAG")


def deviation_reason(
    finder: Finder, cand: Candidate, ref: Package | None, needed_by: str | None
) -> str | None:
    """Why ``cand`` differs from the reference's choice (None when it does not)."""
    if cand.reference is not None:
        return None
    if cand.source == "built":
        return built_reason(finder, cand)
    if ref is None:
        return f"added: required by {needed_by} on the target" if needed_by else "added by a profile pin"
    ref_cand = next((c for c in finder.candidates(ref.name) if c.reference is not None), None)
    why = finder.problem(ref_cand) if ref_cand is not None else None
    if why is None:
        why = "the reference's wheel conflicts with the other packages' requirements on the target"
    if cand.version.public == ref_cand.version.public if ref_cand else False:
        change = f"the same version, another artifact: {cand.filename}"
    else:
        direction = "upgrade" if ref_cand is None else version_kind(str(ref_cand.version), str(cand.version))
        change = f"{direction} {ref.version} -> {cand.version}: {cand.filename}"
    source = f" from {cand.index}" if cand.index else ""
    return f"the reference's wheel does not fit: {why}; chose {change}{source}"


def built_reason(finder: Finder, cand: Candidate) -> str:
    """Why a wheel ``envlock build`` made is locked: what the index wheels lack on this GPU."""
    sms = "/".join("sm_" + cc.replace(".", "") for cc in finder.env.gpu_cc) or "the target"
    listed = [c for c in finder.candidates(cand.name) if not c.in_store]
    problems = [finder.problem(c) for c in listed]
    if not listed:
        why = "no index lists a wheel of it"
    elif all(p is not None and "no image for sm_" in p for p in problems):
        why = f"no index wheel has {sms} SASS or PTX"
    elif all(p is not None for p in problems):
        first = next(p for p in problems if p is not None)
        why = f"no index wheel runs on the target ({first})"
    else:
        why = "preferred over the index wheels of other versions"
    record = f"store/builds/{cand.sha256}.json"
    return f"built for {sms}: {why}; chose {cand.version}: {cand.filename} (envlock build; {record})"


def _versioned_name(rel: str, old_minor: str, new_minor: str) -> str:
    """``bin/pip3.11`` -> ``bin/pip3.12``: installers name these scripts after the running Python."""
    if old_minor == new_minor or not rel.startswith("bin/") or not rel.endswith(old_minor):
        return rel
    stem = rel[: -len(old_minor)]
    if stem.endswith(("bin/", ".")) or stem[-1].isdigit():
        return rel  # "bin/3.11" or "bin/x13.11": not a name followed by a version
    return stem + new_minor


def _repointed(
    pkg: Package, rows: list[FileEntry], old_venv: str, new_venv: str, minors: tuple[str, str], store: Store
) -> tuple[Package, list[FileEntry]]:
    """The reference's package for the target venv: bin/ scripts' interpreter lines
    pointed at it, and scripts named after the Python minor version renamed.

    Only the shebang changes, which the digest rules normalise; a rename
    changes the tree digest, recomputed here. Apply writes these exact bytes.
    """
    old_minor, new_minor = minors
    moved = [replace(r, path=_versioned_name(r.path, old_minor, new_minor)) for r in rows]
    if old_venv == new_venv and moved == rows:
        return pkg, rows
    scripts = {}
    for rel, sha in pkg.scripts.items():
        data = blob(store, sha, f"{pkg.name} {rel}").read_bytes()
        new_rel = _versioned_name(rel, old_minor, new_minor)
        scripts[new_rel] = store.put_blob(relocate(data, old_venv, new_venv))
    if moved != rows:
        pkg = replace(pkg, tree_digest=tree_digest(moved))
    return replace(pkg, scripts=scripts), moved


def _artifact(cand: Candidate, path: Path, lock_dir: Path) -> Artifact:
    if cand.in_store:
        relative = Path(os.path.relpath(path, lock_dir)).as_posix()
        assert cand.sha256 is not None
        return Artifact(filename=cand.filename, sha256=cand.sha256, size=path.stat().st_size, path=relative)
    return cand.artifact(size=path.stat().st_size)


def build_target_lock(
    *,
    host: str,
    venv: str,
    env: TargetEnv,
    reference: Lock,
    reference_rows: list[FileEntry],
    finder: Finder,
    chosen: dict[str, Candidate],
    needed_by: dict[str, str],
    store: Store,
    lock_dir: Path,
) -> tuple[Lock, bytes, dict[str, str]]:
    """The target's Lock, its manifest, and the reason for every package that deviates."""
    packages: list[Package] = []
    deviations: dict[str, str] = {}
    rows: list[FileEntry] = []
    # ABI facts: what the reference's libraries take from each package; a new
    # wheel of such a package records which of those symbols it still exports.
    wanted = {} if os.environ.get(NO_ABI_CHECK) else taken_from(reference)
    by_owner: dict[str, list[FileEntry]] = {}
    for row in reference_rows:
        by_owner.setdefault(row.owner, []).append(row)
    for name in sorted(chosen):
        cand = chosen[name]
        ref = reference.package(name)
        if cand.reference is not None:
            minors = (reference.interpreter.major_minor, env.major_minor)
            pkg, pkg_rows = _repointed(
                cand.reference, by_owner.get(name, []), reference.venv, venv, minors, store
            )
            packages.append(pkg)
            rows.extend(pkg_rows)
            continue
        path = finder.local_path(cand)
        takes = ref is not None and any(lib.takes for lib in ref.native)
        layout = wheel_layout(
            path, name, venv, env.major_minor, exports=bool(wanted) and (name in wanted or takes)
        )
        scripts = {rel: store.put_blob(data) for rel, data in layout.scripts.items()}
        requires, requires_python = finder.metadata(cand)
        rows.extend(layout.rows)
        reason = deviation_reason(finder, cand, ref, needed_by.get(name))
        deviations[name] = reason or ""
        package = Package(
            name=name,
            version=str(cand.version),
            wheel=_artifact(cand, path, lock_dir),
            source=cand.source,
            index=cand.index,
            requires_python=requires_python,
            requires_dist=requires,
            top_level=layout.top_level,
            wheel_tags=layout.wheel_tags,
            tree_digest=tree_digest(layout.rows),
            file_count=len(layout.rows),
            size=sum(r.size for r in layout.rows),
            reason=reason,
            scripts=scripts,
            native=layout.native,
        )
        if name in wanted:
            package = provides_from_exports(package, layout.exports, wanted[name])
        if takes and wanted:
            package = still_taken(package, ref, layout.exports)
        packages.append(package)
    # Creator files whose bytes do not depend on the path or the Python (uv's
    # `.lock`, `.gitignore`, `CACHEDIR.TAG`): apply keeps exactly these.
    rows.extend(r for r in by_owner.get(":venv", []) if r.path in _PATH_FREE_SCAFFOLD)
    manifest = render_manifest(rows)
    pyvenv = derive_target_pyvenv(
        reference.pyvenv,
        reference_venv=reference.venv,
        venv=venv,
        python=env.python_path,
        python_realpath=env.python_realpath,
        version=env.python,
    )
    lock = Lock(
        host=host,
        role="target",
        reference=reference.host,
        venv=venv,
        site=f"lib/python{env.major_minor}/site-packages",
        digest="",  # lock_digest below, once every field is set
        interpreter=Interpreter(
            implementation=env.implementation, version=env.python, abi=abi_tag({"version": env.python})
        ),
        platform=Platform(
            machine=env.machine,
            libc=env.libc,
            libc_version=env.libc_version,
            platform_tags=tuple(env.platform_tags()),
        ),
        pyvenv=pyvenv,
        indexes=finder.client.urls,
        find_links=finder.client.find_links,
        packages=tuple(packages),
        manifest_sha256=manifest_sha256(manifest),
        manifest_files=len(rows),
        gpu=HostGpu(source="profile", cc=env.gpu_cc, driver=env.driver) if env.gpu_cc else None,
    )
    return replace(lock, digest=lock_digest(lock)), manifest, deviations
