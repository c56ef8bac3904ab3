"""Frozen data classes for a lock; plain data, no I/O.

A ``Lock`` is what ``locks/pylock.<host>.toml`` says: the interpreter and
platform it was captured on, one ``Package`` per distribution with the exact
wheel (``Artifact``) that reinstalls its bytes, and the venv's payload
digest. Per-file hashes live in a sidecar manifest (``FileEntry`` rows), so
the lock stays small enough to read and review.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

# PEP 610 direct_url.json is free-form JSON: kept as it was read.
Json: TypeAlias = str | int | float | bool | list["Json"] | dict[str, "Json"] | None

FORMAT_VERSION = 1
DIGEST_RULES = "envlock-payload-2"

# index: a wheel on an index; direct: a wheel URL from direct_url.json;
# repacked: built by envlock from a host's live files; store: a wheel someone
# put in the artifact store (a build for the target's GPU, say), found by the resolver.
# built: a wheel ``envlock build`` made from its sdist for the target's GPU (its build
# record is ``store/builds/<sha256>.json``), found in the store by the resolver.
# published: a repacked, store, built or local direct wheel that ``envlock publish`` uploaded
# to a private index; the wheel's url is the index's, ``published_from`` says where it was.
# foreign: a package of a PEP 751 lock another tool wrote (``lock/foreign.py``);
# never in a lock envlock writes or applies.
Source = Literal["index", "direct", "repacked", "store", "built", "published", "foreign"]
SOURCES: tuple[Source, ...] = ("index", "direct", "repacked", "store", "built", "published")
# The sources a wheel can have before it is published: bytes no public index serves.
PUBLISHABLE: tuple[Source, ...] = ("repacked", "store", "built", "direct")


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifact:
    """One wheel file: where to fetch it and the sha256 it must have."""

    filename: str
    sha256: str
    size: int | None = None
    url: str | None = None
    path: str | None = None  # relative to the lock's directory (store wheels)


@dataclass(frozen=True, slots=True, kw_only=True)
class CudaImages:
    """Headers-only facts of a library's device code (``cuda-images``, docs/cuda.md).

    ``images``: per arch (``sm_90``, ``sm_120a``, ``compute_120``), how many
    executable containers hold it; ``containers`` how many there are.
    """

    containers: int
    relocatable: int = 0
    unreadable: int = 0
    images: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeLib:
    """ELF facts of one shared library in a package."""

    path: str
    sha256: str
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    version_needs: Mapping[str, str] = field(default_factory=dict)
    cuda_sections: Mapping[str, int] = field(default_factory=dict)
    cuda_images: CudaImages | None = None
    error: str | None = None
    # ABI facts (docs/lock-format.md): the symbols this library binds from
    # libraries of other packages, per providing package, sorted, spelled
    # ``name@VERSION`` when versioned; and the symbols of this library that
    # other packages' libraries bind. Not covered by the lock digest.
    takes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    provides: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceTree:
    """An editable install's source directory, packed into the store (a tar.gz blob)."""

    path: str  # where the install's .pth points, on the reference
    sha256: str
    size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedFrom:
    """Where a published package's wheel was before ``envlock publish`` (the same bytes)."""

    source: Source  # repacked, store or direct
    path: str | None = None  # the store path the lock gave, relative to the lock's directory
    url: str | None = None  # a direct wheel's file:// URL


@dataclass(frozen=True, slots=True, kw_only=True)
class Package:
    name: str  # normalized
    version: str
    wheel: Artifact
    source: Source
    index: str | None = None
    requires_python: str | None = None
    installer: str | None = None
    requested: bool = False
    requires_dist: tuple[str, ...] = ()
    top_level: tuple[str, ...] = ()
    wheel_tags: tuple[str, ...] = ()
    tree_digest: str = ""
    file_count: int = 0
    size: int = 0
    editable: bool = False
    modified: tuple[str, ...] = ()  # files whose bytes differ from RECORD
    missing: tuple[str, ...] = ()  # RECORD rows with no file
    reason: str | None = None  # why the bytes come from where they do
    origin: Artifact | None = None  # the index wheel a repacked package was patched from
    published_from: PublishedFrom | None = None  # source "published" only
    direct_url: Mapping[str, Json] | None = None
    scripts: Mapping[str, str] = field(default_factory=dict)  # entry-point script -> sha256
    source_tree: SourceTree | None = None  # editable installs
    native: tuple[NativeLib, ...] = ()
    # Foreign locks only: every other artifact listed (more wheels, the sdist) and the marker.
    artifacts: tuple[Artifact, ...] = ()
    marker: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    """One manifest row. ``owner`` is a package name, ``:venv`` or ``:unowned``."""

    owner: str
    path: str
    sha256: str  # for a symlink: its target
    size: int
    kind: Literal["f", "x", "l"]  # file, executable file, symlink


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreter:
    implementation: str  # "cpython"
    version: str  # "3.11.7"
    abi: str = ""  # "cp311"
    soabi: str | None = None  # reference locks only: the captured interpreter's
    ext_suffix: str | None = None
    gil_disabled: bool = False

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    system: str = "linux"
    machine: str = ""
    libc: str = ""  # "glibc"
    libc_version: str = ""
    platform_tags: tuple[str, ...] = ()  # manylinux tags the host accepts, newest first


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDevice:
    """One GPU as nvidia-smi reported it."""

    name: str = ""
    cc: str = ""
    driver: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostGpu:
    """The GPUs of a lock's host: from nvidia-smi (``devices``) or the profile (``cc``, ``driver``)."""

    source: Literal["nvidia-smi", "profile"]
    devices: tuple[GpuDevice, ...] = ()
    cc: tuple[str, ...] = ()
    driver: str | None = None

    @property
    def ccs(self) -> tuple[str, ...]:
        """Compute capabilities, sorted, whichever source gave them."""
        if self.source == "nvidia-smi":
            return tuple(sorted({d.cc for d in self.devices if d.cc}))
        return tuple(sorted(self.cc))

    @property
    def drivers(self) -> tuple[str, ...]:
        found = {d.driver for d in self.devices if d.driver}
        if self.driver:
            found.add(self.driver)
        return tuple(sorted(found))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostLibraries:
    """Where the host's loader finds the ``DT_NEEDED`` names no locked package ships.

    Searched by the agent on the host at capture (the ld.so cache, then the
    system directories, as ld.so does): ``found`` maps a name to the path it
    resolved to, ``missing`` lists the names found nowhere. Review reads
    these; apply does not act on them (docs/lock-format.md).
    """

    found: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def state(self, name: str) -> Literal["present", "missing", "unknown"]:
        if name in self.found:
            return "present"
        return "missing" if name in self.missing else "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class Lock:
    host: str
    role: Literal["reference", "target"]
    venv: str
    site: str
    digest: str
    interpreter: Interpreter
    platform: Platform
    pyvenv: Mapping[str, str]  # pyvenv.cfg, every key in file order
    indexes: tuple[str, ...]
    find_links: tuple[str, ...]
    packages: tuple[Package, ...]
    manifest_sha256: str
    manifest_files: int
    gpu: HostGpu | None = None
    unowned: tuple[str, ...] = ()
    reference: str | None = None  # for a target lock: the host it was resolved from
    host_libraries: HostLibraries | None = None  # captured locks only: None means "not known"
    # A plain PEP 751 lock another tool wrote: its ``created-by``; None for envlock's own.
    foreign: str | None = None
    format_version: int = FORMAT_VERSION
    digest_rules: str = DIGEST_RULES

    def package(self, name: str) -> Package | None:
        for pkg in self.packages:
            if pkg.name == name:
                return pkg
        return None
