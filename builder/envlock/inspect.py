"""``envlock inspect``: will each compiled extension load and find a kernel image on a GPU?

From the files alone, with no GPU and no NVIDIA tool: the input is one
shared library (or loose ``.cubin``/``.ptx``/``.fatbin``), a wheel (members
read from the zip in memory, nothing unpacked to disk) or a venv directory.
Each file is read once: its ELF link facts and fatbin headers, and its image
verdict while the file is open (a container without an image may need a
look at its smallest image). Loading is decided afterwards, when every file
is known, by ``envlock.binary.loader.Loader``.

Result objects only; printing and exit codes belong to ``cli/inspect_cmd``.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Mapping
from typing import IO, NamedTuple

from envlock.binary import cuda
from envlock.binary.cuda import (
    JIT,
    NATIVE,
    NO_IMAGE,
    UNKNOWN,
    VERDICTS,
    WONT_LOAD,
    ContainerVerdict,
    DriverVersion,
    Gpu,
    ImageReport,
)
from envlock.binary.elf import ElfError, LinkFacts, is_elf, read_link_facts
from envlock.binary.fatbin import (
    FatbinContainer,
    container_has_kernels,
    is_cubin,
    read_cubin,
    read_fatbin_file,
    read_fatbin_sections,
    read_ptx,
)
from envlock.binary.loader import Loader, LoadReport, demangle, system_library_dirs
from envlock.errors import EnvlockError
from envlock.fatbin_codecs import decompress_image
from envlock.linkcache import cached_link_facts

DEVICE_SUFFIXES = (".cubin", ".ptx", ".fatbin")
_PTX_HEAD = 1 << 16
# Packages that compile kernels at run time: their kernels cannot be checked here.
RUNTIME_COMPILERS = {
    "triton": "triton compiles its kernels at run time",
    "flashinfer": "flashinfer compiles kernels at run time (JIT) beside its shipped cubins",
    "xgrammar": "xgrammar builds its token-bitmask kernel at run time",
    "torch/_inductor": "torch.compile (inductor) generates kernels at run time",
}


# A DT_NEEDED that pip wheels ship (CUDA, torch): never an optional host library.
_WHEEL_LIBRARY = re.compile(r"^lib(cu|nv|nccl|c10|torch|caffe2)")
_EXTENSION_MODULE = re.compile(r"(\.(cpython-[^.]+|abi3|pypy[^.]*)\.so$)|(^(?!lib)[^.]+\.so$)")


class InspectError(EnvlockError):
    """The path to inspect is missing or is not a library, wheel or venv."""


class LibraryResult(NamedTuple):
    """One shared library, or one directory of loose device code files."""

    path: str
    kind: str  # "library" or "device-code"
    containers: tuple[FatbinContainer, ...]
    images: ImageReport
    load: LoadReport | None
    verdict: str
    reason: str
    optional: bool = False
    glibc: str | None = None  # the newest GLIBC_x.y symbol version it needs, e.g. "2.34"

    @property
    def device_code(self) -> bool:
        """Does it carry GPU code at all? A CPU-only library's verdict is ``native`` (it runs)."""
        return bool(self.containers)

    @property
    def arches(self) -> tuple[str, ...]:
        found = {e.arch for c in self.containers for e in c.entries if e.kind in ("elf", "ptx")}
        return tuple(sorted(found, key=_arch_key))

    @property
    def executable_containers(self) -> int:
        return sum(1 for c in self.containers if not c.relocatable)


class InspectResult(NamedTuple):
    path: str  # as given, cleaned as pathlib would print it
    source: str  # "library", "wheel", "venv" or "directory" (of libraries, not a venv)
    gpu: Gpu
    driver: str | None
    libraries: tuple[LibraryResult, ...]
    verdict: str
    counts: dict[str, int]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every library runs, natively or by JIT."""
        return self.verdict in (NATIVE, JIT)


def inspect_path(path: str | os.PathLike[str], gpu: str = "12.0", driver: str | None = None) -> InspectResult:
    """Inspect a library, wheel or venv for GPU ``gpu`` (``"12.0"``) and ``driver``.

    Raises InspectError for input that is not one of those (missing path,
    not an ELF, a truncated ELF, a wheel that is not a zip).
    """
    try:
        target = Gpu.parse(gpu)
        driver_version = cuda.parse_driver(driver) if driver else None
    except ValueError as exc:
        raise InspectError(str(exc)) from exc
    # os.path, not pathlib: importing pathlib (and urllib.parse with it) was ~7 ms of every inspect
    path = _clean(os.fspath(path))
    if os.path.isdir(path):
        scan = _scan_venv(path, target, driver_version)
    elif os.path.isfile(path) and _suffix(path) in (".whl", ".zip"):
        scan = _scan_wheel(path, target, driver_version)
    elif os.path.isfile(path):
        scan = _scan_single(path, target, driver_version)
    else:
        raise InspectError(f"{path}: no such file or directory")
    return _judge(scan, target, driver)


def _clean(path: str) -> str:
    """``path`` as ``str(Path(path))`` spells it: no empty or ``.`` parts (``./a//b/`` is ``a/b``)."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return ("/" if path.startswith("/") else "") + "/".join(parts) or "."


def _suffix(path: str) -> str:
    """``Path(path).suffix``: the last ``.ext`` of the file name, none for ``.hidden`` names."""
    name = os.path.basename(path)
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


# --- reading ---------------------------------------------------------------------


class _File(NamedTuple):
    """One file as read: its link facts (None for loose device code) and images."""

    key: str
    display: str
    facts: LinkFacts | None
    containers: list[FatbinContainer]
    images: ImageReport
    error: str | None = None


class _Scan(NamedTuple):
    path: str
    source: str
    files: list[_File]
    loader: Loader
    unresolved: str
    notes: list[str]


def _read_file(
    stream: IO[bytes], key: str, display: str, gpu: Gpu, driver: DriverVersion | None
) -> _File | None:
    """Facts and images of one file; None when it is not device code or ELF at all."""
    head = stream.read(64)
    facts: LinkFacts | None = None
    error: str | None = None
    if key.endswith(".ptx"):
        stream.seek(0)
        containers = [read_ptx(stream.read(_PTX_HEAD))]
    elif is_cubin(head):
        containers = [read_cubin(stream)]
    elif is_elf(head):
        try:
            facts = cached_link_facts(stream, read_link_facts)
        except ElfError as exc:
            error = f"not a readable ELF file: {exc}"
            containers = []
        else:
            sections = [(s.name, s.offset, s.size) for s in facts.sections]
            containers = read_fatbin_sections(stream, sections, facts.file_size)
    elif key.endswith(".fatbin"):
        containers = read_fatbin_file(stream)
    else:
        return None

    def has_kernels(container: FatbinContainer) -> bool | None:
        return container_has_kernels(stream, container, decompress_image)

    images = cuda.judge_images(containers, gpu, driver, has_kernels)
    return _File(key, display, facts, containers, images, error)


def _is_candidate(name: str) -> bool:
    return name.endswith(".so") or ".so." in name or name.endswith(DEVICE_SUFFIXES)


def _site_packages(venv: str) -> str | None:
    found = sorted(p for p in glob.glob(os.path.join(glob.escape(venv), "lib/python*/site-packages")))
    return _clean(found[0]) if found else None


def _scan_venv(venv: str, gpu: Gpu, driver: DriverVersion | None) -> _Scan:
    site = _site_packages(venv)
    files: list[_File] = []
    for base, dirs, names in os.walk(venv):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(base, d)))
        for name in sorted(names):
            full = os.path.join(base, name)
            if not _is_candidate(name) or os.path.islink(full):
                continue
            display = _display(full, venv, site)
            with open(full, "rb") as stream:
                read = _read_file(stream, os.path.realpath(full), display, gpu, driver)
            if read is not None:
                files.append(read)
            elif name.endswith(".so") or ".so." in name:
                files.append(_unreadable(os.path.realpath(full), display, "not an ELF file", gpu))
    interpreter = os.path.join(venv, "bin", "python")
    loader = _loader(
        files,
        preload=_preload_dirs(site),
        checked=[os.path.realpath(venv)],
        interpreter=os.path.realpath(interpreter) if os.path.exists(interpreter) else None,
    )
    notes = _runtime_compiler_notes(lambda rel: site is not None and os.path.isdir(os.path.join(site, rel)))
    source = "venv" if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else "directory"
    return _Scan(venv, source, files, loader, WONT_LOAD, notes)


def _scan_single(path: str, gpu: Gpu, driver: DriverVersion | None) -> _Scan:
    with open(path, "rb") as stream:
        head = stream.read(64)
        stream.seek(0)
        if not (is_elf(head) or _suffix(path) in DEVICE_SUFFIXES):
            raise InspectError(f"{path}: not an ELF file, wheel or venv")
        read = _read_file(stream, os.path.realpath(path), path, gpu, driver)
    if read is None:
        raise InspectError(f"{path}: not an ELF file, wheel or venv")
    if read.error:
        raise InspectError(f"{path}: {read.error}")
    venv = _enclosing_venv(read.key)
    site = _site_packages(venv) if venv else None
    interpreter = os.path.join(venv, "bin", "python") if venv else None
    loader = _loader(
        [read],
        preload=_preload_dirs(site),
        checked=[venv if venv else os.path.dirname(read.key)],
        interpreter=os.path.realpath(interpreter) if interpreter and os.path.exists(interpreter) else None,
    )
    return _Scan(path, "library", [read], loader, WONT_LOAD, [])


def _enclosing_venv(path: str) -> str | None:
    """The nearest directory above ``path`` (absolute) holding a pyvenv.cfg."""
    directory = os.path.dirname(path)
    while True:
        if os.path.isfile(os.path.join(directory, "pyvenv.cfg")):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _scan_wheel(path: str, gpu: Gpu, driver: DriverVersion | None) -> _Scan:
    import io  # here, not at the top: zipfile costs every other inspect ~10 ms of start-up
    import zipfile

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InspectError(f"{path}: not a wheel: {exc}") from exc
    # Members live under a virtual root, so $ORIGIN and RUNPATH resolve inside the wheel.
    root = "/" + os.path.basename(path)
    files: list[_File] = []
    members: list[str] = []
    with archive:
        for info in archive.infolist():
            members.append(info.filename)
            name = info.filename.rsplit("/", 1)[-1]
            if info.is_dir() or not _is_candidate(name):
                continue
            try:
                data = archive.read(info)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise InspectError(f"{path}: cannot read {info.filename}: {exc}") from exc
            key = f"{root}/{info.filename}"
            read = _read_file(io.BytesIO(data), key, info.filename, gpu, driver)
            if read is not None:
                files.append(read)
            elif name.endswith(".so") or ".so." in name:
                files.append(_unreadable(key, info.filename, "not an ELF file", gpu))
    nvidia = {
        f"{root}/{m.rsplit('/', 1)[0]}" for m in members if m.startswith("nvidia/") and m.count("/") == 3
    }
    preload = [f"{root}/torch/lib", *sorted(nvidia)]
    loader = _loader(files, preload=preload, checked=[root], interpreter=None)
    notes = _runtime_compiler_notes(lambda rel: any(m.startswith(rel + "/") for m in members))
    notes.append("libraries other wheels provide are not checked: a DT_NEEDED outside the wheel is 'unknown'")
    return _Scan(path, "wheel", files, loader, UNKNOWN, notes)


def _unreadable(key: str, display: str, error: str, gpu: Gpu) -> _File:
    return _File(key, display, None, [], cuda.judge_images([], gpu, None), error)


def _display(path: str, venv: str, site: str | None) -> str:
    """``path`` (found walking ``venv``) relative to site-packages when inside it, else to the venv."""
    path = _clean(path)
    if site is not None and path.startswith(site.rstrip("/") + "/"):
        return path[len(site.rstrip("/")) + 1 :]
    return path[len(_clean(venv).rstrip("/")) + 1 :] if _clean(venv) != "." else path


def _preload_dirs(site: str | None) -> list[str]:
    """Directories whose libraries torch (and the nvidia wheels' loaders) map before extensions."""
    if site is None:
        return []
    dirs = [
        os.path.join(site, "torch", "lib"),
        *sorted(glob.glob(os.path.join(glob.escape(site), "nvidia/*/lib"))),
    ]
    return [os.path.realpath(d) for d in dirs if os.path.isdir(d)]


def _read_host(path: str) -> LinkFacts | None:
    try:
        with open(path, "rb") as stream:
            if not is_elf(stream.read(4)):
                return None
            stream.seek(0)
            return cached_link_facts(stream, read_link_facts)
    except (OSError, ElfError):
        return None


def _loader(files: list[_File], preload: list[str], checked: list[str], interpreter: str | None) -> Loader:
    known = {f.key: f.facts for f in files if f.facts is not None}
    return Loader(
        known,
        _read_host,
        preload_dirs=preload,
        system_dirs=system_library_dirs(),
        interpreter=interpreter,
        checked_roots=checked,
    )


def _runtime_compiler_notes(present: Callable[[str], bool]) -> list[str]:
    return [f"{note}: not checked here" for rel, note in RUNTIME_COMPILERS.items() if present(rel)]


# --- judging ---------------------------------------------------------------------


def _judge(scan: _Scan, gpu: Gpu, driver: str | None) -> InspectResult:
    driver_version = cuda.parse_driver(driver) if driver else None
    libraries: list[tuple[_File, LoadReport | None]] = []
    loose: dict[str, list[_File]] = {}
    for item in scan.files:
        if item.facts is None and item.error is None:
            loose.setdefault(os.path.dirname(item.display), []).append(item)
            continue
        load = None
        if item.facts is not None:
            load = scan.loader.check(item.key, driver_version, unresolved=scan.unresolved)
        libraries.append((item, load))
    names = demangle([load.missing_symbols[0] for _item, load in libraries if load and load.missing_symbols])
    results = [
        _library_result(item, load, gpu, driver_version, names, _optional(scan, item, load))
        for item, load in libraries
    ]
    results += [
        _bundle_result(directory, items, gpu, scan.source) for directory, items in sorted(loose.items())
    ]
    results.sort(key=lambda r: r.path)
    counts = {verdict: sum(1 for r in results if r.verdict == verdict) for verdict in VERDICTS}
    notes = list(scan.notes)
    if driver is None:
        notes.append("no --driver given: driver minimums (runtime, GPU, PTX JIT) not checked")
    return InspectResult(
        path=scan.path,
        source=scan.source,
        gpu=gpu,
        driver=driver,
        libraries=tuple(results),
        verdict=cuda.worst(r.verdict for r in results if not r.optional),
        counts=counts,
        notes=tuple(notes),
    )


def _optional(scan: _Scan, item: _File, load: LoadReport | None) -> bool:
    """A plugin that only lacks a host library (nvshmem's MPI and InfiniBand transports,
    cuFile's RDMA): nothing in the venv links to it and Python does not import it,
    so its package loads it only when that feature is used."""
    if scan.source not in ("venv", "directory") or load is None or load.verdict != WONT_LOAD:
        return False
    if not load.missing_library:
        return False
    if _WHEEL_LIBRARY.match(load.missing_library):
        return False
    name = os.path.basename(item.key)
    return not _EXTENSION_MODULE.search(name) and not scan.loader.dependents(item.key)


def _library_result(
    item: _File,
    load: LoadReport | None,
    gpu: Gpu,
    driver: DriverVersion | None,
    names: dict[str, str],
    optional: bool = False,
) -> LibraryResult:
    images = item.images
    if item.error is not None:
        return LibraryResult(item.display, "library", (), images, None, UNKNOWN, item.error)
    verdict, reason = images.verdict, _image_reason(images)
    if load is not None and load.verdict != cuda.LOAD_OK:
        reason = load.reason
        if load.missing_symbols:
            first = load.missing_symbols[0]
            reason = reason.replace(first, names.get(first, first), 1)
        verdict = load.verdict
    elif driver is not None and (item.containers or (load and load.cuda_runtime)):
        needed = cuda.gpu_driver(gpu)
        if needed and driver < cuda.parse_driver(needed):
            verdict, reason = WONT_LOAD, f"{gpu.sm} GPUs need driver >= {needed}"
    if optional:
        reason += " (optional plugin: nothing in the venv links to it; not counted)"
    return LibraryResult(
        item.display,
        "library",
        tuple(item.containers),
        images,
        load,
        verdict,
        reason,
        optional,
        _newest_glibc(item.facts.version_needs if item.facts else {}),
    )


def _newest_glibc(version_needs: Mapping[str, tuple[str, ...]]) -> str | None:
    """``{"libc.so.6": ("GLIBC_2.2.5", "GLIBC_2.34")}`` -> ``"2.34"``."""
    found = [
        tuple(int(part) for part in v.removeprefix("GLIBC_").split("."))
        for versions in version_needs.values()
        for v in versions
        if re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)
    ]
    return ".".join(map(str, max(found))) if found else None


def _image_reason(images: ImageReport) -> str:
    """The summary, plus why the first bad container is bad."""
    bad = next((v for v in images.containers if v.verdict in (UNKNOWN, NO_IMAGE)), None)
    if bad is None:
        return images.summary
    return f"{images.summary}; container {bad.container.index}: {bad.reason}"


def _bundle_result(directory: str, items: list[_File], gpu: Gpu, source: str) -> LibraryResult:
    """Loose device code files of one directory: the package loads the file for the GPU
    at run time, so the directory runs when its best file does."""
    containers: list[FatbinContainer] = []
    verdicts: list[ContainerVerdict] = []
    for item in items:
        for container, judged in zip(item.containers, item.images.containers, strict=True):
            containers.append(container)
            verdicts.append(judged)
    verdict = cuda.best(v.verdict for v in verdicts if v.verdict in VERDICTS)
    counts = {
        name: sum(1 for v in verdicts if v.verdict == name) for name in (NATIVE, JIT, NO_IMAGE, UNKNOWN)
    }
    if len(items) == 1 and source == "library":
        path, summary = items[0].display, items[0].images.summary
        reason = _image_reason(items[0].images)
    else:
        path = f"{directory or '.'}/ ({len(items)} device code files)"
        summary = f"{gpu.sm}: {counts[NATIVE]}/{len(items)} files native, {counts[JIT]} JIT"
        reason = summary + "; loaded by the package at run time, which picks the file for the GPU"
    images = ImageReport(verdict, tuple(verdicts), counts, summary)
    return LibraryResult(path, "device-code", tuple(containers), images, None, verdict, reason)


def _arch_key(arch: str) -> tuple[int, int, str]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return (int(arch.startswith("compute_")), int(digits or 0), arch)
