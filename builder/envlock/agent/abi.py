"""ABI facts at capture: which symbols each library takes from another distribution's libraries.

An extension built against one torch binds ``_ZN3c10...`` symbols that
another torch may not export; package metadata cannot say so. Here every
ELF library of the venv is read once more for its dynamic symbols with
their versions, and each strong undefined symbol is bound the way ld.so
binds it (``envlock.binary.loader.Loader.bindings``, the engine ``envlock
inspect`` uses): its DT_NEEDED closure, the host's system libraries
included, then the libraries torch preloads. Only bindings from one
distribution to another are recorded, and not a symbol the host's own
libraries in the closure export as well (it binds whatever the venv
holds). The controller turns the answer into the lock's ``takes`` and
``provides`` (docs/lock-format.md, "ABI facts").
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import posixpath
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from envlock.agent.protocol import DistFacts
from envlock.binary.elf import ElfError, LinkFacts, binds, read_link_facts
from envlock.binary.loader import Loader, system_library_dirs


def _owners(site: str, dists: List[DistFacts], wanted: Dict[str, Any]) -> Dict[str, str]:
    """Venv-relative library path -> the distribution whose RECORD lists it."""
    owners: Dict[str, str] = {}
    for dist in dists:
        for path, _digest, _size in dist["record"]:
            rel = posixpath.normpath(posixpath.join(site, path))
            if rel in wanted:
                owners[rel] = dist["name"]
    return owners


def _read(path: str) -> Optional[LinkFacts]:
    try:
        with open(path, "rb") as stream:
            return read_link_facts(stream, symbol_versions=True)
    except (OSError, ElfError):
        return None


def _host_exports(loader: Loader, path: str) -> List[Tuple[FrozenSet[str], FrozenSet[str], bool]]:
    """Exports of the host libraries ``path`` loads (libstdc++, libc, ...)."""
    found = []
    for obj in loader.closure(path).order[1:]:
        facts = loader.facts(obj)
        if facts is not None and loader.is_system(obj):
            found.append((facts.exported, facts.exported_versioned, bool(facts.exported_versioned)))
    return found


def abi_imports(
    venv: str, site: str, dists: List[DistFacts], native: Dict[str, Dict[str, Any]]
) -> Dict[str, Dict[str, List[str]]]:
    """``{library: {providing library: [symbol, ...]}}`` for bindings across distributions.

    Paths are venv-relative; symbols sorted, ``name@VERSION`` when versioned.
    Libraries no distribution owns, and unreadable ones, take no part.
    """
    readable = {rel: facts for rel, facts in native.items() if "error" not in facts}
    owners = _owners(site, dists, readable)
    if len(set(owners.values())) < 2:
        return {}  # one distribution with native code: nothing crosses a package boundary
    files: Dict[str, LinkFacts] = {}
    for rel in sorted(owners):
        facts = _read(os.path.join(venv, rel))
        if facts is not None:
            files[os.path.join(venv, rel)] = facts
    site_abs = os.path.join(venv, site)
    preload = [
        os.path.join(site_abs, "torch", "lib"),
        *sorted(glob.glob(os.path.join(site_abs, "nvidia", "*", "lib"))),
    ]
    # The host's libraries are read too (its libstdc++ comes before any venv
    # library in the load order), so a venv library that bundles a copy of
    # them (libcufile exports std:: symbols) is not mistaken for a provider.
    loader = Loader(
        files, _read, preload_dirs=preload, system_dirs=system_library_dirs(), checked_roots=[venv]
    )
    prefix = os.path.join(venv, "")
    found: Dict[str, Dict[str, List[str]]] = {}
    for path in sorted(files):
        rel = path[len(prefix) :]
        takes: Dict[str, List[str]] = {}
        host = _host_exports(loader, path)
        for symbol, where in loader.bindings(path).items():
            other = where[len(prefix) :] if where.startswith(prefix) else None
            if other is None or owners.get(other) in (None, owners[rel]):
                continue
            if any(binds(symbol, *exports) for exports in host):
                continue  # the host's libstdc++ has it too: whatever the venv holds, it binds
            takes.setdefault(other, []).append(symbol)
        if takes:
            found[rel] = {other: sorted(symbols) for other, symbols in sorted(takes.items())}
    return found


def cached_abi_imports(
    venv: str,
    site: str,
    dists: List[DistFacts],
    native: Dict[str, Dict[str, Any]],
    digests: Dict[str, str],
    cache_path: Optional[str],
) -> Dict[str, Dict[str, List[str]]]:
    """``abi_imports``, remembered beside the stat cache under a key of every library's
    sha256 and every RECORD's: a warm capture of an unchanged venv reads no symbol table."""
    key = hashlib.sha256()
    for rel in sorted(native):
        key.update(("%s\0%s\n" % (rel, digests.get(rel, ""))).encode("utf-8", "surrogateescape"))
    for dist in dists:
        key.update(("%s\0%s\n" % (dist["name"], dist["record_sha256"])).encode("utf-8", "surrogateescape"))
    wanted = key.hexdigest()
    if cache_path:
        try:
            with open(cache_path, encoding="utf-8") as stream:
                cached = json.load(stream)
            if cached.get("key") == wanted:
                found: Dict[str, Dict[str, List[str]]] = cached["abi"]
                return found
        except (OSError, ValueError, KeyError, AttributeError):
            pass  # a damaged cache only costs a cold run
    found = abi_imports(venv, site, dists, native)
    if cache_path:
        try:
            os.makedirs(os.path.dirname(cache_path), exist_ok=True)
            tmp = "%s.%d.tmp" % (cache_path, os.getpid())
            with open(tmp, "w", encoding="utf-8") as stream:
                stream.write(json.dumps({"key": wanted, "abi": found}))
            os.replace(tmp, cache_path)
        except OSError:
            pass
    return found
