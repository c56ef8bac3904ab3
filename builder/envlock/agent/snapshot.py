"""Take a snapshot of a venv: interpreter, platform, distributions and every file.

Paths in the snapshot are relative to the venv root, POSIX style. Files in
``__pycache__`` directories are derived (compiled bytecode) and skipped.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

from envlock.agent.dists import DistError, find_dist_infos, find_egg_infos, read_dist
from envlock.agent.hashing import CacheEntry, StatCache, hash_files
from envlock.agent.hostfacts import (
    gpu_facts,
    host_libraries,
    interpreter_facts,
    pip_index_config,
    platform_facts,
    read_pyvenv_cfg,
)
from envlock.agent.layout import is_scaffold, unshebang
from envlock.agent.protocol import AGENT_PROTOCOL, DistFacts, FileRow, HashStats, Inventory, VenvDescription

SKIP_DIRS = {"__pycache__"}


class SnapshotError(Exception):
    """The venv cannot be captured; the message names the path."""


def find_site_packages(venv: str, version: Tuple[int, int]) -> str:
    """The venv's site-packages, relative to the venv root."""
    for lib in ("lib", "lib64"):
        candidate = os.path.join(lib, "python%d.%d" % version, "site-packages")
        if os.path.isdir(os.path.join(venv, candidate)) and not os.path.islink(os.path.join(venv, lib)):
            return candidate
    found = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
    if found:
        return os.path.relpath(found[0], venv)
    raise SnapshotError("%s: no lib/python%d.%d/site-packages (not a venv?)" % ((venv, *version)))


def _check_utf8(path: str, name: str) -> None:
    """Refuse a file name (or link target) that is not UTF-8.

    Python hands such names over with surrogate escapes. The lock, the
    manifest and every wheel's RECORD are UTF-8 text, so no wheel installs
    such a file and no lock can record it; capturing it would need a second
    encoding in every format for a file nobody can rebuild. So the capture
    stops and names the file (its bad bytes shown as ``\\xNN``).
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise SnapshotError(
            "%s: file name (or link target) is not UTF-8; a lock cannot record it: rename or remove it"
            % shown
        ) from None


def walk(venv: str) -> Tuple[List[Tuple[str, os.stat_result]], Dict[str, str]]:
    """Regular files (with their stat) and symlinks (with their target)."""
    files: List[Tuple[str, os.stat_result]] = []
    links: Dict[str, str] = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(venv, rel_dir)))
        except OSError as exc:
            raise SnapshotError(f"{os.path.join(venv, rel_dir)}: cannot list: {exc.strerror}") from exc
        for entry in entries:
            if not entry.name.isascii():
                _check_utf8(entry.path, entry.name)
            rel = rel_dir + "/" + entry.name if rel_dir else entry.name
            if entry.is_symlink():
                target = os.readlink(entry.path)
                if not target.isascii():
                    _check_utf8(entry.path, target)
                links[rel] = target
            elif entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIP_DIRS:
                    stack.append(rel)
            elif entry.is_file(follow_symlinks=False):
                files.append((rel, entry.stat(follow_symlinks=False)))
    return files, links


def default_cache_path(venv: str) -> Optional[str]:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(os.path.realpath(venv).encode()).hexdigest()[:24]
    return os.path.join(base, "envlock", "agent", f"stat-{key}.json")


def describe_venv(venv: str) -> VenvDescription:
    """Interpreter, platform and every dist-info: cheap, sent before the hashing."""
    venv = os.path.abspath(venv)
    if not os.path.isdir(venv):
        raise SnapshotError(f"{venv}: no such directory")
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        raise SnapshotError(f"{venv}: not a venv (no pyvenv.cfg)")
    interpreter = interpreter_facts()
    major, minor = interpreter["version_info"][:2]
    site = find_site_packages(venv, (major, minor))
    site_abs = os.path.join(venv, site)
    try:
        dists = [read_dist(site_abs, name) for name in find_dist_infos(site_abs)]
    except DistError as exc:
        raise SnapshotError(str(exc)) from exc
    return {
        "protocol": AGENT_PROTOCOL,
        "venv": venv,
        "site": site,
        "interpreter": interpreter,
        "platform": platform_facts(),
        "pyvenv_cfg": read_pyvenv_cfg(venv),
        "pip_config": pip_index_config(venv),
        "gpu": gpu_facts(),
        "dists": dists,
        "egg_infos": find_egg_infos(site_abs),
    }


def inventory(
    venv: str,
    dists: List[DistFacts],
    jobs: int,
    use_cache: bool = True,
    read_elf: bool = True,
) -> Tuple[Inventory, HashStats, Dict[str, CacheEntry]]:
    """Every file of the venv hashed (stat cache permitting) and every ELF library read.

    Also the run's statistics (for stderr: stdout depends on content alone)
    and the stat-cache entries (apply hands them to the swapped-in venv).
    """
    venv = os.path.abspath(venv)
    files, links = walk(venv)
    modes = {rel: st.st_mode for rel, st in files}
    cache = StatCache(default_cache_path(venv) if use_cache else None)
    hashed, stats = hash_files(venv, files, cache, jobs, read_elf=read_elf)
    if use_cache and (stats["hashed"] or len(cache.entries) != len(hashed)):
        cache.save(hashed)

    file_rows: List[FileRow] = []
    native: Dict[str, Dict[str, Any]] = {}
    for rel in sorted(hashed):
        size, _mtime, _ino, _ctime, sha, facts = hashed[rel]
        executable = bool(modes[rel] & stat.S_IXUSR)
        file_rows.append((rel, sha, size, executable))
        if facts is not None:
            native[rel] = facts
    normalized, scripts = _bin_scripts(venv, [r for r in file_rows if r[0].startswith("bin/")])
    found: Inventory = {
        "files": file_rows,
        "links": sorted((rel, target) for rel, target in links.items()),
        "native": native,
        "host_libraries": host_libraries(native) if read_elf else {},
        "bin_normalized": normalized,
        "bin_files": scripts,
    }
    return found, stats, hashed


def _bin_scripts(venv: str, rows: List[FileRow]) -> Tuple[Dict[str, Tuple[str, int]], Dict[str, str]]:
    """Venv-path-free hashes of bin/ scripts, and the exact bytes of bin/ files.

    A script's shebang names the venv path; hashing it as ``#!python`` lets a
    lock compare scripts across venv paths. Installers write bin/ files
    themselves (entry points from templates, shebangs rewritten), differently
    from one installer to the next, so their exact bytes travel here and
    apply puts them back.
    """
    normalized: Dict[str, Tuple[str, int]] = {}
    scripts: Dict[str, str] = {}
    for rel, _sha, size, _x in rows:
        if size > 1 << 20:
            continue
        with open(os.path.join(venv, rel), "rb") as stream:
            data = stream.read()
        if data.startswith(b"#!"):
            plain = unshebang(data)
            normalized[rel] = (hashlib.sha256(plain).hexdigest(), len(plain))
        if not is_scaffold(rel):
            scripts[rel] = base64.b64encode(data).decode("ascii")
    return normalized, scripts
