"""Turn a resolution into the target's Lock and manifest, explaining every deviation."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from envlock.agent.apply import relocate
from envlock.lock.digest import lock_digest, tree_digest
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import Artifact, FileEntry, Lock, Package
from envlock.resolve.candidates import Candidate, Finder
from envlock.resolve.target import TargetEnv
from envlock.resolve.wheelrows import wheel_layout
from envlock.store import Store
from envlock.tags import abi_tag


def deviation_reason(
    finder: Finder, cand: Candidate, ref: Package | None, needed_by: str | None
) -> str | None:
    """Why ``cand`` differs from the reference's choice (None when it does not)."""
    if cand.reference is not None:
        return None
    if ref is None:
        return f"added: required by {needed_by} on the target" if needed_by else "added by a profile pin"
    ref_cand = next((c for c in finder.candidates(ref.name) if c.reference is not None), None)
    why = finder.problem(ref_cand) if ref_cand is not None else None
    if why is None:
        why = "the reference's wheel conflicts with the other packages' requirements on the target"
    if cand.version.public == ref_cand.version.public if ref_cand else False:
        change = f"the same version, another artifact: {cand.filename}"
    else:
        direction = "upgrade" if ref_cand is None or cand.version > ref_cand.version else "downgrade"
        change = f"{direction} {ref.version} -> {cand.version}: {cand.filename}"
    source = f" from {cand.index}" if cand.index else ""
    return f"the reference's wheel does not fit: {why}; chose {change}{source}"


def _repointed(pkg: Package, old_venv: str, new_venv: str, store: Store) -> Package:
    """The reference's package, its bin/ scripts' interpreter lines pointed at the target venv.

    Only the shebang changes, which the digest rules normalise: the package
    keeps its tree digest, and apply writes these exact bytes.
    """
    if old_venv == new_venv or not pkg.scripts:
        return pkg
    scripts = {}
    for rel, sha in pkg.scripts.items():
        data = store.blob_path(sha).read_bytes()
        scripts[rel] = store.put_blob(relocate(data, old_venv, new_venv))
    return replace(pkg, scripts=scripts)


def _artifact(cand: Candidate, path: Path, lock_dir: Path) -> Artifact:
    if cand.in_store:
        relative = Path(os.path.relpath(path, lock_dir)).as_posix()
        assert cand.sha256 is not None
        return Artifact(filename=cand.filename, sha256=cand.sha256, size=path.stat().st_size, path=relative)
    return cand.artifact(size=path.stat().st_size)


def build_target_lock(
    host: str,
    venv: str,
    env: TargetEnv,
    reference: Lock,
    reference_rows: list[FileEntry],
    finder: Finder,
    chosen: dict[str, Candidate],
    needed_by: dict[str, str],
    store: Store,
    base_python: str | None,
    lock_dir: Path,
) -> tuple[Lock, bytes, dict[str, str]]:
    """The target's Lock, its manifest, and the reason for every package that deviates."""
    packages: list[Package] = []
    deviations: dict[str, str] = {}
    rows: list[FileEntry] = []
    by_owner: dict[str, list[FileEntry]] = {}
    for row in reference_rows:
        by_owner.setdefault(row.owner, []).append(row)
    for name in sorted(chosen):
        cand = chosen[name]
        ref = reference.package(name)
        if cand.reference is not None:
            packages.append(_repointed(cand.reference, reference.venv, venv, store))
            rows.extend(by_owner.get(name, []))
            continue
        path = finder.local_path(cand)
        layout = wheel_layout(path, name, venv, env.major_minor)
        scripts = {rel: store.put_blob(data) for rel, data in layout.scripts.items()}
        requires, requires_python = finder.metadata(cand)
        rows.extend(layout.rows)
        reason = deviation_reason(finder, cand, ref, needed_by.get(name))
        deviations[name] = reason or ""
        packages.append(
            Package(
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
        )
    manifest = render_manifest(rows)
    pyvenv = {"include-system-site-packages": "false"}
    version_key = "version_info" if "version_info" in reference.pyvenv else "version"
    pyvenv[version_key] = env.python
    if base_python:
        pyvenv["home"] = str(Path(base_python).parent)
    gpu = {"source": "profile", "cc": list(env.gpu_cc)}
    if env.driver:
        gpu["driver"] = env.driver
    lock = Lock(
        host=host,
        role="target",
        reference=reference.host,
        venv=venv,
        site=f"lib/python{env.major_minor}/site-packages",
        digest="",  # lock_digest below, once every field is set
        interpreter={
            "implementation": env.implementation,
            "version": env.python,
            "abi": abi_tag({"version": env.python}),
            "gil-disabled": False,
        },
        platform={
            "system": "linux",
            "machine": env.machine,
            "libc": env.libc,
            "libc-version": env.libc_version,
            "platform-tags": env.platform_tags(),
        },
        pyvenv=pyvenv,
        indexes=finder.client.urls,
        find_links=finder.client.find_links,
        packages=tuple(packages),
        manifest_sha256=manifest_sha256(manifest),
        manifest_files=len(rows),
        gpu=gpu if env.gpu_cc else None,
    )
    return replace(lock, digest=lock_digest(lock)), manifest, deviations
