"""Locks built in code, for data-driven tests of diff and review.

Hashes are fake but well-formed (sha256 of a label), so every lock passes
``render_lock``/``read_lock`` validation; what differs between two locks is
exactly what a test says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from envlock.lock.digest import lock_digest
from envlock.lock.io import render_lock
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import (
    Artifact,
    CudaImages,
    FileEntry,
    HostGpu,
    HostLibraries,
    Interpreter,
    Lock,
    NativeLib,
    Package,
    Platform,
)

INDEX = "https://pypi.example/simple"


def sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def lib(
    path: str,
    *,
    soname: str | None = None,
    needed: Sequence[str] = ("libc.so.6",),
    glibc: str | None = "2.17",
    cuda: bool = False,
    label: str = "",
    images: Mapping[str, int] | None = None,
) -> NativeLib:
    """``images``: per-arch container counts, as the CUDA reader records them (``cuda-images``)."""
    extra: dict[str, object] = {}
    if images is not None:
        containers = max(images.values(), default=0)
        extra["cuda_images"] = CudaImages(containers=containers, images=dict(images))
    return NativeLib(
        path=path,
        sha256=sha(path + label),
        soname=soname,
        needed=tuple(needed),
        version_needs={"GLIBC": glibc} if glibc else {},
        cuda_sections={".nv_fatbin": 4096} if cuda or images else {},
        **extra,  # type: ignore[arg-type]
    )


# Per-arch facts in locks arrived with the CUDA reader; older models lack the field.
HAS_CUDA_IMAGES = "cuda_images" in NativeLib.__dataclass_fields__


def pkg(
    name: str,
    version: str,
    *,
    source: str = "index",
    native: Iterable[NativeLib] = (),
    index: str | None = INDEX,
    filename: str | None = None,
    label: str = "",
    reason: str | None = None,
    files: int = 3,
) -> Package:
    dist = name.replace("-", "_")
    filename = filename or f"{dist}-{version}-py3-none-any.whl"
    wheel = Artifact(
        filename=filename,
        sha256=sha(f"{filename}{label}"),
        size=1000,
        url=f"https://files.example/{filename}" if source == "index" else None,
        path=f"../store/wheels/{sha(filename + label)}/{filename}" if source == "repacked" else None,
    )
    if source == "repacked" and reason is None:
        reason = "built locally from a source tree"
    return Package(
        name=name,
        version=version,
        wheel=wheel,
        source=source,  # type: ignore[arg-type]
        index=index if source == "index" else None,
        requires_python=">=3.8",
        installer="uv",
        top_level=(dist,),
        wheel_tags=("py3-none-any",),
        tree_digest="sha256:" + sha(f"tree {filename}{label}"),
        file_count=files,
        size=1000 * files,
        reason=reason,
        native=tuple(native),
    )


def make_lock(
    host: str,
    packages: Iterable[Package],
    *,
    python: str = "3.11.9",
    glibc: str = "2.35",
    cc: Sequence[str] = (),
    indexes: Sequence[str] = (INDEX,),
    manifest: Sequence[FileEntry] = (),
    host_libraries: HostLibraries | None = None,
) -> Lock:
    gpu = HostGpu(source="profile", cc=tuple(cc), driver="575.57.08") if cc else None
    packages = tuple(sorted(packages, key=lambda p: p.name))
    lock = Lock(
        host=host,
        role="reference",
        venv="/opt/venv",
        site=f"lib/python{python.rsplit('.', 1)[0]}/site-packages",
        digest="",
        interpreter=Interpreter(
            implementation="cpython",
            version=python,
            abi="cp" + "".join(python.split(".")[:2]),
            soabi="",
            ext_suffix=".so",
        ),
        platform=Platform(
            system="Linux",
            machine="x86_64",
            libc="glibc",
            libc_version=glibc,
            platform_tags=(f"manylinux_{glibc.replace('.', '_')}_x86_64",),
        ),
        pyvenv={"home": "/usr/bin", "include-system-site-packages": "false", "version": python},
        indexes=tuple(indexes),
        find_links=(),
        packages=packages,
        manifest_sha256=manifest_sha256(render_manifest(manifest)),
        manifest_files=len(manifest),
        gpu=gpu,
        host_libraries=host_libraries,
    )
    return replace(lock, digest=lock_digest(lock))


def rows_for(packages: Iterable[Package], changed: Mapping[str, str] | None = None) -> list[FileEntry]:
    """Manifest rows: ``files`` rows per package; ``changed`` maps a path to another content label."""
    rows = []
    for p in packages:
        dist = p.name.replace("-", "_")
        for i in range(p.file_count):
            path = f"site-packages/{dist}/m{i}.py"
            content = (changed or {}).get(path, f"{p.name} {p.version} {i}")
            rows.append(FileEntry(owner=p.name, path=path, sha256=sha(content), size=100 + i, kind="f"))
    return rows


def with_manifest(lock: Lock, rows: Sequence[FileEntry]) -> tuple[Lock, bytes]:
    data = render_manifest(rows)
    return replace(lock, manifest_sha256=manifest_sha256(data), manifest_files=len(rows)), data


def write_lock_files(locks_dir: Path, lock: Lock, manifest: bytes | None = None) -> Path:
    locks_dir.mkdir(parents=True, exist_ok=True)
    path = locks_dir / f"pylock.{lock.host}.toml"
    path.write_bytes(render_lock(lock))
    if manifest is not None:
        (locks_dir / f"pylock.{lock.host}.files.tsv").write_bytes(manifest)
    return path


def seed_locks() -> tuple[Lock, Lock]:
    """The seed case: ct129 works; ct200 has an old xgrammar, no llguidance or soundfile,
    and a cu12 kernel in a cu13 venv."""
    cudart12 = lib(
        "site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", soname="libcudart.so.12", label="12"
    )
    cudart13 = lib("site-packages/nvidia/cu13/lib/libcudart.so.13", soname="libcudart.so.13", label="13")
    common_ops = lib(
        "site-packages/sgl_kernel/common_ops.abi3.so",
        needed=("libcudart.so.12", "libc10.so", "libc.so.6"),
        cuda=True,
    )
    libc10 = lib("site-packages/torch/lib/libc10.so", soname="libc10.so")
    shared = [
        pkg("sgl-kernel", "0.3.9", native=[common_ops]),
        pkg("torch", "2.8.0", native=[libc10]),
        pkg("numpy", "2.2.6"),
    ]
    ct129 = make_lock(
        "ct129",
        [
            *shared,
            pkg("xgrammar", "0.1.32"),
            pkg("llguidance", "1.3.0"),
            pkg("soundfile", "0.13.1"),
            pkg("nvidia-cuda-runtime-cu12", "12.8.90", native=[cudart12]),
        ],
        cc=["9.0"],
    )
    ct200 = make_lock(
        "ct200",
        [*shared, pkg("xgrammar", "0.1.10"), pkg("nvidia-cuda-runtime", "13.0.96", native=[cudart13])],
        cc=["12.0"],
        host_libraries=HostLibraries(missing=("libcudart.so.12",)),  # what ct200's capture found
    )
    return ct129, ct200
