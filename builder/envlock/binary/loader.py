"""Would ld.so load a library? A model of the dynamic loader over ELF facts read elsewhere.

DT_NEEDED search as ld.so does it (RPATH and its inheritance, RUNPATH,
``$ORIGIN``, the directories torch preloads, /etc/ld.so.conf and the
defaults), symbol versions, and strong undefined symbols against the load
scope (``Loader``); plus ``demangle`` for showing C++ names. The CUDA
runtime a library loads is reported, and checked against the driver by
``envlock.binary.cuda``'s table. Like all of binary/, Python 3.8 and stdlib
only, so the agent can run it.
"""

from __future__ import annotations

import glob
import os
import re
from typing import (
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from envlock.binary.cuda import LOAD_OK, WONT_LOAD, DriverVersion, runtime_driver_problem
from envlock.binary.driver import driver_library
from envlock.binary.elf import LinkFacts, binds

# torch's C++ ABI: a symbol of these missing means "built against another torch".
TORCH_ABI_PREFIXES = ("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10", "_ZNK2at", "_ZNK5torch")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)$")
DRIVER = "driver"  # where a driver library resolves when this host has no driver


class LoadReport(NamedTuple):
    """What ld.so would say, plus the driver the CUDA runtime it loads needs."""

    verdict: str
    reason: str
    resolved: Dict[str, str] = {}  # noqa: RUF012 (never mutated: a NamedTuple's default)
    missing_symbols: Tuple[str, ...] = ()
    cuda_runtime: Optional[int] = None
    missing_library: Optional[str] = None


class _Closure(NamedTuple):
    order: Tuple[str, ...]
    resolved: Dict[str, Dict[str, str]]
    missing: Tuple[Tuple[str, str], ...]


def system_library_dirs(root: str = "/") -> List[str]:
    """The host's ld.so search directories: /etc/ld.so.conf (with includes), then the defaults.

    LD_LIBRARY_PATH is ignored: it belongs to a shell, not to the host.
    """
    dirs: List[str] = []

    def read_conf(path: str, depth: int) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as stream:
                lines = stream.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include") and depth < 8:
                pattern = line.split(None, 1)[1] if " " in line else ""
                if not pattern.startswith("/"):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for included in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
                    read_conf(included, depth + 1)
            elif line.startswith("/"):
                dirs.append(line)

    read_conf(os.path.join(root, "etc/ld.so.conf"), 0)
    defaults = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu"]
    defaults += ["/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    seen: List[str] = []
    for directory in dirs + defaults:
        if directory not in seen:
            seen.append(directory)
    return seen


class Loader:
    """ld.so's search and symbol binding, over files already read and the host's libraries.

    ``files`` maps a path (a real path, or a virtual one for wheel members) to
    its facts; host libraries are read on demand with ``read_host`` and
    cached. Search order per DT_NEEDED, as ld.so: the requester's DT_RPATH
    (when it has no DT_RUNPATH) and the RPATHs of the objects that loaded
    it, its DT_RUNPATH, then the venv directories torch preloads
    (``preload_dirs``: torch/lib, nvidia/*/lib) and the host's system
    directories. Objects under ``checked_roots`` (the venv, the wheel) have
    their symbol versions and undefined symbols checked; host libraries are
    trusted to match their own dependencies.
    """

    def __init__(
        self,
        files: Mapping[str, LinkFacts],
        read_host: Callable[[str], Optional[LinkFacts]],
        preload_dirs: Sequence[str] = (),
        system_dirs: Sequence[str] = (),
        interpreter: Optional[str] = None,
        checked_roots: Sequence[str] = (),
    ) -> None:
        self.files = dict(files)
        self.read_host = read_host
        self.preload_dirs = list(preload_dirs)
        self.system_dirs = list(system_dirs)
        self.interpreter = interpreter
        self.checked_roots = [os.path.join(os.path.normpath(r), "") for r in checked_roots]
        self._host: Dict[str, Optional[LinkFacts]] = {}
        self._listing: Dict[str, FrozenSet[str]] = {}
        self._virtual_dirs: Dict[str, Set[str]] = {}
        self._sonames: Dict[str, str] = {}
        for path, facts in sorted(self.files.items()):
            self._virtual_dirs.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
            self._sonames.setdefault(facts.soname or os.path.basename(path), path)
        self._closures: Dict[str, _Closure] = {}
        self._resolved: Dict[Tuple[str, Tuple[str, ...], str, int], Optional[str]] = {}
        self._residue: Dict[str, Tuple[str, ...]] = {}
        self._interpreter_scope: Optional[List[FrozenSet[str]]] = None
        self._dependents: Optional[Dict[str, List[str]]] = None

    # -- files ----------------------------------------------------------------

    def facts(self, path: str) -> Optional[LinkFacts]:
        if path in self.files:
            return self.files[path]
        if path not in self._host:
            self._host[path] = self.read_host(path)
        return self._host[path]

    def is_system(self, path: str) -> bool:
        """A host library: trusted to be consistent with its own dependencies, so not checked."""
        return path not in self.files and not any(path.startswith(root) for root in self.checked_roots)

    def _exists(self, directory: str, name: str) -> Optional[str]:
        """The path ``directory/name`` resolves to, if it is a file."""
        directory = os.path.normpath(directory)
        if name in self._virtual_dirs.get(directory, ()):
            return os.path.join(directory, name)
        if directory not in self._listing:
            try:
                self._listing[directory] = frozenset(os.listdir(directory))
            except OSError:
                self._listing[directory] = frozenset()
        if name not in self._listing[directory]:
            return None
        real = os.path.realpath(os.path.join(directory, name))
        return real if os.path.isfile(real) else None

    # -- search ---------------------------------------------------------------

    def search_dirs(self, path: str, facts: LinkFacts, inherited: Sequence[str]) -> List[str]:
        origin = os.path.dirname(path)
        dirs: List[str] = []
        if not facts.runpath:
            dirs += [_expand(p, origin) for p in facts.rpath] + list(inherited)
        dirs += [_expand(p, origin) for p in facts.runpath]
        return dirs + self.preload_dirs + self.system_dirs

    def resolve(self, name: str, path: str, facts: LinkFacts, inherited: Sequence[str] = ()) -> Optional[str]:
        """Where ld.so finds DT_NEEDED ``name`` of the object at ``path``; None if nowhere.

        Last resort, a library of the venv whose SONAME is ``name``: ld.so
        reuses an object already loaded under that SONAME, and packages load
        their own libraries before their plugins (triton's libtriton.so).
        """
        dirs = tuple(self.search_dirs(path, facts, inherited)) if "/" not in name else ()
        key = (name, dirs, facts.machine, facts.elf_class)
        if key not in self._resolved:
            self._resolved[key] = self._search(name, dirs, facts)
        return self._resolved[key]

    def _search(self, name: str, dirs: Sequence[str], facts: LinkFacts) -> Optional[str]:
        candidates = [os.path.join(d, name) for d in dirs] if dirs else [name]
        for candidate in candidates:
            found = self._exists(os.path.dirname(candidate), os.path.basename(candidate))
            if found is None:
                continue
            other = self.facts(found)
            # ld.so skips a library of another class or machine and keeps looking.
            if other is not None and other.machine == facts.machine and other.elf_class == facts.elf_class:
                return found
        return self._sonames.get(name)

    def closure(self, path: str) -> _Closure:
        """Breadth-first load order from ``path``, each object's resolved DT_NEEDED, what is missing."""
        if path in self._closures:
            return self._closures[path]
        order = [path]
        resolved: Dict[str, Dict[str, str]] = {}
        missing: List[Tuple[str, str]] = []
        inherited: Dict[str, List[str]] = {path: []}
        by_name: Dict[str, str] = {}
        queue = [path]
        while queue:
            current = queue.pop(0)
            facts = self.facts(current)
            if facts is None:
                continue
            resolved[current] = {}
            rpaths = [] if facts.runpath else [_expand(p, os.path.dirname(current)) for p in facts.rpath]
            for name in facts.needed:
                # ld.so maps a SONAME once; later requests reuse the loaded object.
                found = by_name.get(name) or self.resolve(name, current, facts, inherited[current])
                if found is None and driver_library(name) is not None:
                    found = DRIVER
                if found is None:
                    missing.append((name, current))
                    continue
                resolved[current][name] = found
                by_name[name] = found
                if found != DRIVER and found not in inherited:
                    inherited[found] = inherited[current] + rpaths
                    order.append(found)
                    queue.append(found)
        result = _Closure(tuple(order), resolved, tuple(missing))
        self._closures[path] = result
        return result

    def dependents(self, path: str) -> List[str]:
        """Files (of ``files``) that load ``path`` through their DT_NEEDED closure."""
        if self._dependents is None:
            self._dependents = {}
            for root in sorted(self.files):
                for obj in self.closure(root).order[1:]:
                    self._dependents.setdefault(obj, []).append(root)
        return self._dependents.get(path, [])

    # -- symbols --------------------------------------------------------------

    def interpreter_scope(self) -> List[FrozenSet[str]]:
        """Symbols of the Python executable and what it loads: extensions bind to them."""
        if self._interpreter_scope is None:
            self._interpreter_scope = []
            if self.interpreter and self.facts(self.interpreter) is not None:
                order = self.closure(self.interpreter).order
                self._interpreter_scope = [
                    f.exported for f in (self.facts(p) for p in order) if f is not None
                ]
        return self._interpreter_scope

    def _scope(self, root: str) -> List[FrozenSet[str]]:
        closure = self.closure(root)
        scope = [f.exported for f in (self.facts(p) for p in closure.order) if f is not None]
        return scope + self.interpreter_scope()

    def _unbound(self, symbols: Sequence[str], root: str) -> Tuple[str, ...]:
        """Of ``symbols``, those nothing in ``root``'s load scope (and the interpreter) exports."""
        closure = self.closure(root)
        scope = self._scope(root)
        prefixes: Tuple[str, ...] = ()
        for names in closure.resolved.values():
            for name, where in names.items():
                library = driver_library(name) if where == DRIVER else None
                if library is not None:
                    prefixes += library.symbols
        if not self.interpreter_scope():
            prefixes += ("Py", "_Py")  # no interpreter file: assume it provides the C API
        # Set differences in C, one per library in scope, then ``symbols``' own order.
        unbound = set(symbols)
        for exported in scope:
            if not unbound:
                break
            unbound = unbound.difference(exported)
        return tuple(s for s in symbols if s in unbound and not (prefixes and s.startswith(prefixes)))

    def missing_symbols(self, obj: str, root: str) -> Tuple[str, ...]:
        """Strong undefined symbols of ``obj`` unbound when ``root`` is loaded (ld.so's global scope).

        Anything ``obj``'s own load scope binds, any larger scope binds too, so
        only the residue of the first check is looked up again per root.
        """
        if obj not in self._residue:
            facts = self.facts(obj)
            self._residue[obj] = self._unbound(facts.undefined if facts else (), obj)
        residue = self._residue[obj]
        return residue if not residue or root == obj else self._unbound(residue, root)

    def bindings(self, path: str) -> Dict[str, str]:
        """Where each strong undefined symbol of ``path`` binds (ABI facts, docs/lock-format.md).

        The first object that exports it, in ``path``'s load scope: its
        DT_NEEDED closure in load order, then the libraries of
        ``preload_dirs`` (torch maps torch/lib and the nvidia wheels' libraries
        before any extension is imported, so an extension binds to them
        without naming them). Symbols are ``name@VERSION`` when versioned,
        matched as ld.so matches them (``binary.elf.binds``); facts must be
        read with ``symbol_versions=True``. Symbols nothing here exports (the
        host's libc, the interpreter's C API) are left out.
        """
        facts = self.facts(path)
        if facts is None or not facts.undefined_versioned:
            return {}
        scope = [p for p in self.closure(path).order[1:]]
        preload = {os.path.normpath(d) for d in self.preload_dirs}
        scope += [p for p in sorted(self.files) if os.path.dirname(p) in preload and p not in scope]
        providers = []
        for where in scope:
            other = self.facts(where) if where != path else None
            if other is not None and other.exported:
                providers.append((where, other))
        bound: Dict[str, str] = {}
        for symbol in facts.undefined_versioned:
            # A versioned reference names the library it was linked against
            # (``GLIBCXX_3.4.21`` from libstdc++.so.6): a venv library that
            # bundles a copy of those symbols (libcufile) is not where it binds.
            files = facts.version_files.get(symbol.partition("@")[2], ())
            for where, other in providers:
                if files and (other.soname or os.path.basename(where)) not in files:
                    continue
                if binds(symbol, other.exported, other.exported_versioned, bool(other.exported_versioned)):
                    bound[symbol] = where
                    break
        return bound

    # -- the verdict ------------------------------------------------------------

    def check(
        self, path: str, driver: Optional[DriverVersion] = None, unresolved: str = WONT_LOAD
    ) -> LoadReport:
        """Would ``path`` load? ``unresolved`` is the verdict for a DT_NEEDED found nowhere
        (``unknown`` for a wheel, whose dependencies come from other wheels)."""
        closure = self.closure(path)
        flat = {name: where for names in closure.resolved.values() for name, where in names.items()}
        runtime = _cuda_runtime(flat, closure.missing)
        if closure.missing:
            name, needed_by = closure.missing[0]
            reason = self._missing_reason(name, needed_by, path)
            return LoadReport(unresolved, reason, flat, (), runtime, missing_library=name)
        checked = [obj for obj in closure.order if obj == path or not self.is_system(obj)]
        for obj in checked:
            problem = self._version_problem(obj, closure.resolved.get(obj, {}), path)
            if problem:
                return LoadReport(WONT_LOAD, problem, flat, (), runtime)
        for obj in checked:
            symbols = self.missing_symbols(obj, path)
            if symbols and obj == path:
                symbols = self._bound_by_dependents(path, symbols)
            if symbols:
                via = "" if obj == path else f" (in {os.path.basename(obj)}, which it loads)"
                ranked = sorted(symbols, key=lambda s: (not s.startswith(TORCH_ABI_PREFIXES), s))
                more = f" and {len(symbols) - 1} more" if len(symbols) > 1 else ""
                reason = f"undefined symbol {ranked[0]}{more}{via}: no library it loads exports it"
                return LoadReport(WONT_LOAD, reason, flat, tuple(ranked), runtime)
        problem = runtime_driver_problem(runtime, driver)
        if problem:
            return LoadReport(WONT_LOAD, problem, flat, (), runtime)
        return LoadReport(LOAD_OK, "loads", flat, (), runtime)

    def _bound_by_dependents(self, path: str, symbols: Tuple[str, ...]) -> Tuple[str, ...]:
        """A library that others load (libtorch_nvshmem.so by libtorch_cuda.so) binds
        in their scope: it is fine when one of them loads cleanly binds it all."""
        for dependent in self.dependents(path):
            if not self._unbound(symbols, dependent):
                return ()
        return symbols

    def _missing_reason(self, name: str, needed_by: str, root: str) -> str:
        via = "" if needed_by == root else f" (needed by {os.path.basename(needed_by)})"
        match = _CUDART.match(name)
        if match:
            have = sorted({os.path.basename(p) for p in self.files if _CUDART.match(os.path.basename(p))})
            also = "; the venv has {}".format(", ".join(have)) if have else ""
            nowhere = "which nothing in the venv or on the host provides"
            return f"needs the CUDA {match.group(1)} runtime ({name}){via}, {nowhere}{also}"
        return f"needs {name}{via}: not found in its RPATH/RUNPATH, the venv or the host's library paths"

    def _version_problem(self, path: str, resolved: Mapping[str, str], root: str) -> Optional[str]:
        facts = self.facts(path)
        if facts is None:
            return None
        for library, versions in sorted(facts.version_needs.items()):
            where = resolved.get(library)
            provider = self.facts(where) if where and where != "driver" else None
            if provider is None or not provider.version_defs:
                continue  # ld.so only warns about a library without version definitions
            defined = set(provider.version_defs)
            for version in versions:
                if version not in defined:
                    family = version.rsplit("_", 1)[0]
                    offered = _highest(v for v in defined if v.rsplit("_", 1)[0] == family)
                    has = (f"; {where} provides up to {offered}") if offered else ""
                    via = "" if path == root else f" (in {os.path.basename(path)}, which it loads)"
                    return f"needs {version} from {library}{via}{has}"
        return None


def _expand(entry: str, origin: str) -> str:
    return os.path.normpath(entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))


def _cuda_runtime(resolved: Mapping[str, str], missing: Sequence[Tuple[str, str]]) -> Optional[int]:
    for name in list(resolved) + [m[0] for m in missing]:
        match = _CUDART.match(name)
        if match:
            return int(match.group(1))
    return None


def _highest(versions: Iterable[str]) -> Optional[str]:
    def key(name: str) -> Tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", name))

    found = sorted(versions, key=key)
    return found[-1] if found else None


def demangle(symbols: Sequence[str]) -> Dict[str, str]:
    """C++ names for mangled symbols through ``c++filt`` when it is on PATH; else as given."""
    names = {s: s for s in symbols}
    mangled = [s for s in symbols if s.startswith("_Z")]
    if not mangled:
        return names
    import shutil  # only now: subprocess is not every inspect's start-up to pay
    import subprocess

    tool = shutil.which("c++filt")
    if not tool:
        return names
    try:
        done = subprocess.run(
            [tool], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return names
    lines = done.stdout.splitlines()
    if len(lines) == len(mangled):
        names.update(zip(mangled, lines))  # noqa: B905 (lengths checked; 3.8 has no strict=)
    return names
