"""Read and write ``pylock.<host>.toml`` canonically.

Writing: a fixed key order, packages sorted by name, lists sorted where order
carries no meaning, no timestamps; so the same venv gives a byte-identical
file. The document is validated with ``packaging.pylock`` before it is
written, and written atomically (temp file, fsync, rename) together with its
manifest, manifest first, so a reader never sees a lock whose manifest is
missing. Reading validates with ``packaging.pylock`` and then envlock's own
``[tool.envlock]`` tables; errors name the file and the field path.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.pylock import Pylock, PylockValidationError

from envlock.agent.pathguard import PathError, check_absolute_dir, check_relative, check_script_key
from envlock.errors import LockError
from envlock.lock.model import (
    FORMAT_VERSION,
    PUBLISHABLE,
    SOURCES,
    Artifact,
    CudaImages,
    GpuDevice,
    HostGpu,
    HostLibraries,
    Interpreter,
    Lock,
    NativeLib,
    Package,
    Platform,
    PublishedFrom,
    SourceTree,
)
from envlock.tmpname import private_sibling

CREATED_BY = "envlock"
# A 1,000-package lock is ~1.5 MB; anything near this is not a lock envlock
# wrote, and reading it whole would cost several times its size in memory.
LOCK_LIMIT = 64 << 20
_HEX = frozenset("0123456789abcdef")


# ---------------------------------------------------------------- writing


def _artifact_table(art: Artifact) -> dict[str, Any]:
    table: dict[str, Any] = {"name": art.filename}
    if art.url is not None:
        table["url"] = art.url
    if art.path is not None:
        table["path"] = art.path
    if art.size is not None:
        table["size"] = art.size
    table["hashes"] = {"sha256": art.sha256}
    return table


def _native_table(lib: NativeLib) -> dict[str, Any]:
    table: dict[str, Any] = {"path": lib.path, "sha256": lib.sha256}
    if lib.soname:
        table["soname"] = lib.soname
    for key, values in (("needed", lib.needed), ("rpath", lib.rpath), ("runpath", lib.runpath)):
        if values:
            table[key] = list(values)
    if lib.version_needs:
        table["version-needs"] = dict(sorted(lib.version_needs.items()))
    if lib.cuda_sections:
        table["cuda-sections"] = dict(sorted(lib.cuda_sections.items()))
    if lib.cuda_images is not None:
        images = lib.cuda_images
        table["cuda-images"] = {
            "containers": images.containers,
            "images": dict(sorted(images.images.items())),
            "relocatable": images.relocatable,
            "unreadable": images.unreadable,
        }
    if lib.error:
        table["error"] = lib.error
    if lib.provides:
        table["provides"] = sorted(lib.provides)
    if lib.takes:
        table["takes"] = {pkg: sorted(symbols) for pkg, symbols in sorted(lib.takes.items())}
    return table


def _package_tool(pkg: Package) -> dict[str, Any]:
    tool: dict[str, Any] = {"source": pkg.source}
    if pkg.reason:
        tool["reason"] = pkg.reason
    if pkg.installer:
        tool["installer"] = pkg.installer
    tool["requested"] = pkg.requested
    if pkg.editable:
        tool["editable"] = True
    tool["tree-digest"] = pkg.tree_digest
    tool["files"] = pkg.file_count
    tool["size"] = pkg.size
    tool["wheel-tags"] = list(pkg.wheel_tags)
    tool["top-level"] = list(pkg.top_level)
    tool["requires-dist"] = list(pkg.requires_dist)
    if pkg.modified:
        tool["modified"] = list(pkg.modified)
    if pkg.missing:
        tool["missing"] = list(pkg.missing)
    if pkg.origin is not None:
        tool["origin"] = _artifact_table(pkg.origin)
    if pkg.published_from is not None:
        was = pkg.published_from
        tool["published-from"] = {
            "source": was.source,
            **({"path": was.path} if was.path is not None else {}),
            **({"url": was.url} if was.url is not None else {}),
        }
    if pkg.direct_url is not None:
        tool["direct-url"] = _sorted_mapping(pkg.direct_url)
    if pkg.scripts:
        tool["scripts"] = dict(sorted(pkg.scripts.items()))
    if pkg.source_tree is not None:
        tree = pkg.source_tree
        tool["source-tree"] = {
            "path": tree.path,
            "sha256": tree.sha256,
            **({"size": tree.size} if tree.size is not None else {}),
        }
    if pkg.native:
        tool["native"] = [_native_table(lib) for lib in sorted(pkg.native, key=lambda n: n.path)]
    return tool


def _sorted_mapping(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_mapping(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_mapping(v) for v in value]
    return value


def _interpreter_table(interp: Interpreter) -> dict[str, Any]:
    table: dict[str, Any] = {"abi": interp.abi}
    if interp.ext_suffix is not None:
        table["ext-suffix"] = interp.ext_suffix
    table["gil-disabled"] = interp.gil_disabled
    table["implementation"] = interp.implementation
    if interp.soabi is not None:
        table["soabi"] = interp.soabi
    table["version"] = interp.version
    return table


def _platform_table(plat: Platform) -> dict[str, Any]:
    return {
        "libc": plat.libc,
        "libc-version": plat.libc_version,
        "machine": plat.machine,
        "platform-tags": list(plat.platform_tags),
        "system": plat.system,
    }


def _gpu_table(gpu: HostGpu) -> dict[str, Any]:
    if gpu.source == "nvidia-smi":
        devices = [{"cc": d.cc, "driver": d.driver, "name": d.name} for d in gpu.devices]
        return {"devices": devices, "source": gpu.source}
    table: dict[str, Any] = {"cc": list(gpu.cc)}
    if gpu.driver:
        table["driver"] = gpu.driver
    table["source"] = gpu.source
    return table


def lock_to_dict(lock: Lock) -> dict[str, Any]:
    """The TOML document as a dict, in canonical order."""
    packages = []
    for pkg in sorted(lock.packages, key=lambda p: p.name):
        table: dict[str, Any] = {"name": pkg.name, "version": pkg.version}
        if pkg.requires_python:
            table["requires-python"] = pkg.requires_python
        if pkg.index:
            table["index"] = pkg.index
        table["wheels"] = [_artifact_table(pkg.wheel)]
        table["tool"] = {"envlock": _package_tool(pkg)}
        packages.append(table)
    major_minor = lock.interpreter.major_minor
    tool: dict[str, Any] = {
        "format": lock.format_version,
        "host": lock.host,
        "role": lock.role,
        **({"reference": lock.reference} if lock.reference else {}),
        "venv": lock.venv,
        "site": lock.site,
        "digest": lock.digest,
        "digest-rules": lock.digest_rules,
        "manifest": {"sha256": lock.manifest_sha256, "files": lock.manifest_files},
        "indexes": list(lock.indexes),
        "find-links": list(lock.find_links),
        "interpreter": _interpreter_table(lock.interpreter),
        "platform": _platform_table(lock.platform),
        # File order, not sorted: apply writes pyvenv.cfg back in this order.
        "pyvenv": dict(lock.pyvenv),
    }
    if lock.gpu is not None:
        tool["gpu"] = _gpu_table(lock.gpu)
    if lock.unowned:
        tool["unowned"] = list(lock.unowned)
    if lock.host_libraries is not None:
        libs = lock.host_libraries
        # "missing" is always written: the table's presence says "these facts are known".
        found = {"found": dict(sorted(libs.found.items()))} if libs.found else {}
        tool["host-libraries"] = {**found, "missing": sorted(libs.missing)}
    machine = lock.platform.machine
    return {
        "lock-version": "1.0",
        "environments": [f"sys_platform == 'linux' and platform_machine == '{machine}'"],
        "requires-python": f"=={major_minor}.*",
        "created-by": CREATED_BY,
        "packages": packages,
        "tool": {"envlock": tool},
    }


def render_lock(lock: Lock) -> bytes:
    document = lock_to_dict(lock)
    try:
        Pylock.from_dict(document)
    except PylockValidationError as exc:  # a bug in envlock, never the user's input
        raise LockError(f"lock for {lock.host} fails PEP 751 validation: {exc}") from exc
    header = (
        "# Written by envlock; edit the host profile, not this file.\n"
        "# Review with `envlock review`, rebuild with `envlock apply`.\n"
    )
    import tomli_w  # writing only: reading a lock is most commands' work, writing one is not

    return (header + _literal_symbols(tomli_w.dumps(document))).encode("utf-8")


_TAKES_TABLE = "[packages.tool.envlock.native.takes]"


def _literal_symbols(text: str) -> str:
    """ABI symbol lists (``provides``, ``takes``) as TOML literal strings (``'...'``).

    tomllib reads a literal string with one ``find`` and a basic string
    (``"..."``, all tomli_w writes) character by character: on the GPU venv's
    lock, 2,000 symbols in basic strings cost 0.35 s to read, in literal
    strings 0.03 s. A symbol holds no quote, backslash or control character
    (checked here; any other string is left as it was), so the value is the same.
    """
    if "provides = [" not in text and _TAKES_TABLE not in text:
        return text
    lines = text.split("\n")
    in_takes = in_list = False
    for i, line in enumerate(lines):
        if line.startswith("["):
            in_takes, in_list = line == _TAKES_TABLE, False
        elif line == "provides = [" or (in_takes and line.endswith(" = [")):
            in_list = True
        elif line == "]":
            in_list = False
        elif in_list and line.startswith('    "') and line.endswith('",'):
            symbol = line[5:-2]
            if symbol.isprintable() and not any(c in symbol for c in "'\\\""):
                lines[i] = f"    '{symbol}',"
    return "\n".join(lines)


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same directory, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_sibling(path)
    try:
        with open(tmp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_lock(lock: Lock, lock_path: Path, manifest_path: Path, manifest: bytes) -> None:
    data = render_lock(lock)
    atomic_write(manifest_path, manifest)
    atomic_write(lock_path, data)


# ---------------------------------------------------------------- reading


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> LockError:
        return LockError(f"{self.source}: {where}: {message}")

    def get(self, table: Mapping[str, Any], key: str, kind: type, where: str, required: bool = True) -> Any:
        if key not in table:
            if required:
                raise self.fail(f"{where}{key}", "missing")
            return None
        value = table[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{where}{key}", f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    def strings(self, table: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = self.get(table, key, list, where, required=False) or []
        if not all(isinstance(v, str) for v in value):
            raise self.fail(f"{where}{key}", "expected a list of strings")
        return tuple(value)

    def sha256(self, value: object, where: str) -> str:
        """A sha256 hex digest: it names files and directories in stores, so nothing else passes."""
        if not isinstance(value, str) or len(value) != 64 or not _HEX.issuperset(value):
            raise self.fail(where, "missing or not a sha256 hex digest")
        return value

    def strmap(self, table: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
        value = self.get(table, key, dict, where)
        for k, v in value.items():
            if not isinstance(v, str):
                raise self.fail(f"{where}{key}.{k}", f"expected str, got {type(v).__name__}")
        return dict(value)

    def checked(self, check: Any, value: object, where: str) -> str:
        """A path through the path guard (``envlock.agent.pathguard``); its refusal names the field."""
        try:
            return str(check(value, where))
        except PathError as exc:
            raise LockError(f"{self.source}: {exc}") from exc


def _artifact(r: _Reader, table: Mapping[str, Any], where: str) -> Artifact:
    hashes = r.get(table, "hashes", dict, where)
    sha = r.sha256(hashes.get("sha256"), f"{where}hashes.sha256")
    filename = r.get(table, "name", str, where)
    if "/" in filename:  # it names a file in the store and on the host: one component only
        raise r.fail(f"{where}name", f"{filename!r}: a file name, not a path")
    r.checked(check_relative, filename, f"{where}name")
    return Artifact(
        filename=filename,
        sha256=sha,
        size=r.get(table, "size", int, where, required=False),
        url=r.get(table, "url", str, where, required=False),
        path=r.get(table, "path", str, where, required=False),
    )


def _loose(rel: object, what: str) -> str:
    """A path envlock reads or reports but never writes from the lock (``check_relative`` non-strict)."""
    return check_relative(rel, what, strict=False)


def _native(r: _Reader, table: Mapping[str, Any], where: str) -> NativeLib:
    return NativeLib(
        path=r.checked(_loose, r.get(table, "path", str, where), f"{where}path"),
        sha256=r.sha256(r.get(table, "sha256", str, where), f"{where}sha256"),
        soname=r.get(table, "soname", str, where, required=False),
        needed=r.strings(table, "needed", where),
        rpath=r.strings(table, "rpath", where),
        runpath=r.strings(table, "runpath", where),
        version_needs=r.get(table, "version-needs", dict, where, required=False) or {},
        cuda_sections=r.get(table, "cuda-sections", dict, where, required=False) or {},
        cuda_images=_cuda_images(r, table, where),
        error=r.get(table, "error", str, where, required=False),
        takes=_takes(r, table, where),
        provides=r.strings(table, "provides", where),
    )


def _takes(r: _Reader, table: Mapping[str, Any], where: str) -> dict[str, tuple[str, ...]]:
    """ABI facts: providing package -> the symbols this library binds from it."""
    takes = r.get(table, "takes", dict, where, required=False) or {}
    return {pkg: r.strings(takes, pkg, f"{where}takes.") for pkg in takes}


def _cuda_images(r: _Reader, table: Mapping[str, Any], where: str) -> CudaImages | None:
    facts = r.get(table, "cuda-images", dict, where, required=False)
    if facts is None:
        return None
    w = f"{where}cuda-images."
    images = r.get(facts, "images", dict, w, required=False) or {}
    for arch, count in images.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise r.fail(f"{w}images.{arch}", f"expected int, got {type(count).__name__}")
    return CudaImages(
        containers=r.get(facts, "containers", int, w, required=False) or 0,
        relocatable=r.get(facts, "relocatable", int, w, required=False) or 0,
        unreadable=r.get(facts, "unreadable", int, w, required=False) or 0,
        images=dict(images),
    )


def _scripts(r: _Reader, tool: Mapping[str, Any], tw: str) -> dict[str, str]:
    """bin/ files apply writes byte for byte: keys are ``bin/<name>``, values blob sha256s."""
    scripts = r.get(tool, "scripts", dict, tw, required=False) or {}
    for rel, sha in scripts.items():
        where = f"{tw}scripts.{rel!r}"
        r.checked(check_script_key, rel, where)
        r.sha256(sha, where)
    return dict(scripts)


def _source_tree(
    r: _Reader, tool: Mapping[str, Any], direct_url: Mapping[str, Any] | None, tw: str
) -> SourceTree | None:
    """An editable install's source tree: where apply unpacks it, and the archive's sha256.

    The path must be the one the install's direct_url.json (and so its .pth)
    points at: a tree anywhere else is never imported, so a lock that names
    another path is not one envlock wrote. It must also be an absolute,
    normalized path that is not a system directory or a home itself.
    """
    tree = r.get(tool, "source-tree", dict, tw, required=False)
    if tree is None:
        return None
    where = f"{tw}source-tree."
    path = r.checked(check_absolute_dir, r.get(tree, "path", str, where), f"{where}path")
    sha = r.sha256(r.get(tree, "sha256", str, where), f"{where}sha256")
    size = r.get(tree, "size", int, where, required=False)
    url = (direct_url or {}).get("url")
    if not isinstance(url, str) or not url.startswith("file://") or unquote(urlparse(url).path) != path:
        raise r.fail(f"{where}path", f"{path!r} is not the editable install's {tw}direct-url.url")
    return SourceTree(path=path, sha256=sha, size=size)


def _published_from(
    r: _Reader, tool: Mapping[str, Any], source: str, wheel: Artifact, where: str
) -> PublishedFrom | None:
    """A published package's provenance: it must have one, and its wheel must come from the index."""
    tw = f"{where}tool.envlock."
    table = r.get(tool, "published-from", dict, tw, required=False)
    if source != "published":
        if table is not None:
            raise r.fail(f"{tw}published-from", f"only a published package has one (source is {source!r})")
        return None
    if table is None:
        raise r.fail(f"{tw}published-from", "missing: a published package says where its wheel came from")
    if wheel.path is not None or not (wheel.url or "").startswith(("http://", "https://")):
        raise r.fail(f"{where}wheels[0].url", "a published wheel is fetched from its index by an http(s) URL")
    w = f"{tw}published-from."
    was = r.get(table, "source", str, w)
    if was not in PUBLISHABLE:
        raise r.fail(f"{w}source", f"expected one of {', '.join(PUBLISHABLE)}, got {was!r}")
    return PublishedFrom(
        source=was,
        path=r.get(table, "path", str, w, required=False),
        url=r.get(table, "url", str, w, required=False),
    )


def _package(r: _Reader, table: Mapping[str, Any], i: int) -> Package:
    where = f"packages[{i}]."
    wheels = r.get(table, "wheels", list, where)
    if len(wheels) != 1:
        raise r.fail(f"{where}wheels", f"expected exactly one wheel, got {len(wheels)}")
    tool = r.get(r.get(table, "tool", dict, where), "envlock", dict, f"{where}tool.")
    tw = f"{where}tool.envlock."
    source = r.get(tool, "source", str, tw)
    if source not in SOURCES:
        raise r.fail(f"{tw}source", f"expected one of {', '.join(SOURCES)}, got {source!r}")
    origin = tool.get("origin")
    direct_url = r.get(tool, "direct-url", dict, tw, required=False)
    wheel = _artifact(r, wheels[0], f"{where}wheels[0].")
    return Package(
        name=r.get(table, "name", str, where),
        version=r.get(table, "version", str, where),
        wheel=wheel,
        source=source,
        published_from=_published_from(r, tool, source, wheel, where),
        index=r.get(table, "index", str, where, required=False),
        requires_python=r.get(table, "requires-python", str, where, required=False),
        installer=r.get(tool, "installer", str, tw, required=False),
        requested=bool(r.get(tool, "requested", bool, tw, required=False)),
        requires_dist=r.strings(tool, "requires-dist", tw),
        top_level=r.strings(tool, "top-level", tw),
        wheel_tags=r.strings(tool, "wheel-tags", tw),
        tree_digest=r.get(tool, "tree-digest", str, tw),
        file_count=r.get(tool, "files", int, tw),
        size=r.get(tool, "size", int, tw),
        editable=bool(r.get(tool, "editable", bool, tw, required=False)),
        modified=r.strings(tool, "modified", tw),
        missing=r.strings(tool, "missing", tw),
        reason=r.get(tool, "reason", str, tw, required=False),
        origin=_artifact(r, origin, f"{tw}origin.") if isinstance(origin, dict) else None,
        direct_url=direct_url,
        scripts=_scripts(r, tool, tw),
        source_tree=_source_tree(r, tool, direct_url, tw),
        native=tuple(
            _native(r, lib, f"{tw}native[{j}].")
            for j, lib in enumerate(r.get(tool, "native", list, tw, required=False) or [])
        ),
    )


def _pyvenv(r: _Reader, tool: Mapping[str, Any], w: str) -> dict[str, str]:
    """pyvenv.cfg facts; ``home`` names the directory whose python apply runs on the host."""
    pyvenv = r.strmap(tool, "pyvenv", w)
    home = pyvenv.get("home")
    if home is not None and (not home.startswith("/") or not home.isprintable()):
        raise r.fail(f"{w}pyvenv.home", f"{home!r}: expected an absolute directory path")
    return pyvenv


def _interpreter(r: _Reader, tool: Mapping[str, Any], w: str) -> Interpreter:
    table = r.get(tool, "interpreter", dict, w)
    wi = f"{w}interpreter."
    return Interpreter(
        implementation=r.get(table, "implementation", str, wi),
        version=r.get(table, "version", str, wi),
        abi=r.get(table, "abi", str, wi, required=False) or "",
        soabi=r.get(table, "soabi", str, wi, required=False),
        ext_suffix=r.get(table, "ext-suffix", str, wi, required=False),
        gil_disabled=bool(r.get(table, "gil-disabled", bool, wi, required=False)),
    )


def _platform(r: _Reader, tool: Mapping[str, Any], w: str) -> Platform:
    table = r.get(tool, "platform", dict, w)
    wp = f"{w}platform."
    return Platform(
        system=r.get(table, "system", str, wp, required=False) or "linux",
        machine=r.get(table, "machine", str, wp),
        libc=r.get(table, "libc", str, wp, required=False) or "",
        libc_version=r.get(table, "libc-version", str, wp, required=False) or "",
        platform_tags=r.strings(table, "platform-tags", wp),
    )


def _gpu(r: _Reader, tool: Mapping[str, Any], w: str) -> HostGpu | None:
    table = r.get(tool, "gpu", dict, w, required=False)
    if table is None:
        return None
    wg = f"{w}gpu."
    source = r.get(table, "source", str, wg)
    if source == "nvidia-smi":
        devices = []
        for i, device in enumerate(r.get(table, "devices", list, wg, required=False) or []):
            wd = f"{wg}devices[{i}]."
            if not isinstance(device, dict):
                raise r.fail(f"{wg}devices[{i}]", "expected a table")
            devices.append(
                GpuDevice(
                    name=r.get(device, "name", str, wd, required=False) or "",
                    cc=r.get(device, "cc", str, wd, required=False) or "",
                    driver=r.get(device, "driver", str, wd, required=False) or "",
                )
            )
        return HostGpu(source="nvidia-smi", devices=tuple(devices))
    if source == "profile":
        return HostGpu(
            source="profile",
            cc=r.strings(table, "cc", wg),
            driver=r.get(table, "driver", str, wg, required=False),
        )
    raise r.fail(f"{wg}source", f"expected nvidia-smi or profile, got {source!r}")


def _host_libraries(r: _Reader, tool: Mapping[str, Any], w: str) -> HostLibraries | None:
    table = r.get(tool, "host-libraries", dict, w, required=False)
    if table is None:
        return None
    wh = f"{w}host-libraries."
    found = r.get(table, "found", dict, wh, required=False) or {}
    for name, path in found.items():
        if not isinstance(path, str) or not path.startswith("/"):
            raise r.fail(f"{wh}found.{name}", f"expected an absolute path, got {path!r}")
    return HostLibraries(found=dict(found), missing=r.strings(table, "missing", wh))


def parse_lock(document: Mapping[str, Any], source: str) -> Lock:
    """Validate a parsed TOML document as PEP 751 and as an envlock lock."""
    r = _Reader(source)
    try:
        Pylock.from_dict(document)
    except PylockValidationError as exc:
        raise LockError(f"{source}: not a valid PEP 751 lock: {exc}") from exc
    tool = r.get(r.get(document, "tool", dict, ""), "envlock", dict, "tool.")
    w = "tool.envlock."
    fmt = r.get(tool, "format", int, w)
    if fmt != FORMAT_VERSION:
        raise r.fail(
            f"{w}format",
            f"lock format {fmt} is not supported (this envlock reads {FORMAT_VERSION})",
        )
    role = r.get(tool, "role", str, w)
    if role not in ("reference", "target"):
        raise r.fail(f"{w}role", f"expected reference or target, got {role!r}")
    manifest = r.get(tool, "manifest", dict, w)
    return Lock(
        host=r.get(tool, "host", str, w),
        role=role,
        venv=r.get(tool, "venv", str, w),
        site=r.get(tool, "site", str, w),
        digest=r.get(tool, "digest", str, w),
        digest_rules=r.get(tool, "digest-rules", str, w),
        interpreter=_interpreter(r, tool, w),
        platform=_platform(r, tool, w),
        pyvenv=_pyvenv(r, tool, w),
        indexes=r.strings(tool, "indexes", w),
        find_links=r.strings(tool, "find-links", w),
        manifest_sha256=r.sha256(r.get(manifest, "sha256", str, f"{w}manifest."), f"{w}manifest.sha256"),
        manifest_files=r.get(manifest, "files", int, f"{w}manifest."),
        gpu=_gpu(r, tool, w),
        unowned=r.strings(tool, "unowned", w),
        reference=r.get(tool, "reference", str, w, required=False),
        host_libraries=_host_libraries(r, tool, w),
        packages=tuple(_package(r, pkg, i) for i, pkg in enumerate(document["packages"])),
        format_version=fmt,
    )


def read_lock_text(path: Path, shown: str | None = None) -> str:
    """A lock file's text; a missing, unreadable or non-UTF-8 file is a LockError naming it."""
    source = shown or str(path)
    try:
        with open(path, "rb") as stream:
            data = stream.read(LOCK_LIMIT + 1)
        if len(data) > LOCK_LIMIT:
            raise LockError(
                f"{source}: over {LOCK_LIMIT >> 20} MiB; not a lock envlock wrote (refusing to read it)"
            )
        return data.decode("utf-8")
    except FileNotFoundError as exc:
        raise LockError(f"{source}: no such lock (run `envlock capture` or `envlock lock` first)") from exc
    except OSError as exc:
        raise LockError(f"{source}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise LockError(f"{source}: not UTF-8 text") from exc


def read_lock(path: Path, shown: str | None = None) -> Lock:
    source = shown or str(path)
    return lock_from_text(read_lock_text(path, source), source)


def lock_from_text(text: str, source: str) -> Lock:
    """A lock's text parsed and validated (``source`` names it in errors)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{source}: not valid TOML: {exc}") from exc
    return parse_lock(document, source)
