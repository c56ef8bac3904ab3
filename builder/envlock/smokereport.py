"""The agent's smoke report, explained: one result per module with its cause.

Shared by ``envlock smoke`` and by apply's staged smoke, so a failure reads
the same in both. Each failure gets a kind (see SEVERITY), the line that
matters, and one sentence with what the lock knows (which package ships the
missing library, which provides the undefined symbol); failures caused by
another one are marked as cascades. A failure expected on any healthy venv
(platform-only, test package, optional extra, vendored, ``[smoke] exclude``:
``envlock.smokeexpected``) carries its reason in ``expected`` and does not
gate.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envlock.agent.protocol import SmokeReport
from envlock.binary.driver import driver_library
from envlock.hosts import HostProfile
from envlock.lock.model import Lock
from envlock.smokeexpected import expected_reason

# Most serious first: a crash takes the whole process down with no exception
# to catch; a hang blocks it; an ABI mismatch needs a rebuild; then what a
# reinstall fixes; a generic error last (it may be a module's own check).
SEVERITY = {
    "crash": 0,
    "timeout": 1,
    "undefined-symbol": 2,
    "symbol-version": 2,
    "missing-library": 3,
    "needs-gpu-driver": 3,
    "missing-name": 4,
    "missing-module": 5,
    "error": 6,
}

Status = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """A traceback frame; ``path`` in the lock's terms (``site-packages/...``) inside the venv."""

    path: str
    line: int
    function: str = ""
    code: str = ""
    owner: str | None = None  # the distribution whose RECORD lists the file

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleResult:
    target: str  # a module name, or a check statement
    check: bool
    status: Status
    seconds: float
    kind: str | None = None  # see SEVERITY
    error_type: str | None = None
    message: str | None = None
    why: str | None = None  # one sentence, with what the lock knows
    where: Where | None = None  # the line that matters
    frames: tuple[Where, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    alone: bool = False  # the failure happened with nothing else imported before
    order_dependent: str | None = None  # failed after other imports, imports alone: how
    same_as: str | None = None  # the target this failure's cause is reported under
    expected: str | None = None  # why this failure is expected on a healthy venv (it does not gate)

    @property
    def severity(self) -> int:
        return SEVERITY.get(self.kind or "error", len(SEVERITY))


@dataclass(frozen=True, slots=True, kw_only=True)
class SmokeResult:
    host: str
    venv: str
    python: str
    lock: str | None  # the lock whose modules were imported too, if any
    has_gpu: bool
    jobs: int
    seconds: float
    results: tuple[ModuleResult, ...]
    checks: int = 0  # how many of the targets are profile checks (run or not)
    not_run: tuple[str, ...] = ()  # left when --fail-fast stopped
    stopped: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[ModuleResult, ...]:
        """Real failures (the gate), most serious first, checks before modules."""
        failed = [r for r in self.results if r.status == "failed" and r.expected is None]
        return tuple(sorted(failed, key=lambda r: (r.severity, not r.check, r.target)))

    @property
    def expected_failures(self) -> tuple[ModuleResult, ...]:
        """Failures expected on a healthy venv, by reason then name."""
        failed = [r for r in self.results if r.status == "failed" and r.expected is not None]
        return tuple(sorted(failed, key=lambda r: (r.expected or "", r.target)))

    @property
    def skipped(self) -> tuple[ModuleResult, ...]:
        return tuple(r for r in self.results if r.status == "skipped")

    def by_cause(self) -> tuple[tuple[ModuleResult, ...], ...]:
        """Failures, then skips, one group per cause: the reported one first, then the rest."""
        groups: dict[tuple[Any, ...], list[ModuleResult]] = {}
        for r in (*self.failures, *self.skipped):
            groups.setdefault(cause(r), []).append(r)
        ordered = [sorted(g, key=lambda r: r.same_as is not None) for g in groups.values()]
        return tuple(
            tuple(g) for g in sorted(ordered, key=lambda g: (g[0].status != "failed", g[0].severity))
        )

    @property
    def passed(self) -> bool:
        return not self.failures


def lock_modules(lock: Lock) -> list[str]:
    """Every top-level import name the lock records, dotted (``nvidia/cusparselt`` is old spelling)."""
    return sorted({name.replace("/", ".") for pkg in lock.packages for name in pkg.top_level})


def host_has_gpu(profile: HostProfile, lock: Lock | None) -> bool:
    """What the profile says, else what the lock recorded (nvidia-smi at capture, or the profile then)."""
    if profile.gpu is not None:
        return bool(profile.gpu.cc)
    if lock is not None and lock.gpu:
        return bool(lock.gpu.ccs)
    return False


def build_result(
    profile: HostProfile, lock: Lock | None, lock_shown: str | None, has_gpu: bool, report: SmokeReport
) -> SmokeResult:
    """Turn the agent's report into results with explanations and cascades marked."""
    known = _Knowledge(lock, report.get("dists", []))
    results = [_expected(_result(raw, known, has_gpu), known, profile) for raw in report["results"]]
    return SmokeResult(
        host=profile.name,
        venv=report["venv"],
        python=report["python"],
        lock=lock_shown,
        has_gpu=has_gpu,
        jobs=report["jobs"],
        seconds=report["seconds"],
        results=_mark_cascades(results),
        checks=int(report.get("checks", 0)),
        not_run=tuple(report.get("not_run", [])),
        stopped=bool(report.get("stopped")),
        warnings=tuple(report.get("warnings", [])),
    )


def _where(frame: Mapping[str, Any] | None) -> Where | None:
    if not frame:
        return None
    return Where(
        path=frame["file"],
        line=int(frame["line"]),
        function=frame.get("function", ""),
        code=frame.get("code", ""),
        owner=frame.get("owner"),
    )


def _result(raw: Mapping[str, Any], known: _Knowledge, has_gpu: bool) -> ModuleResult:
    status: Status = raw["status"]
    kind = raw.get("kind")
    facts = dict(raw.get("facts") or {})
    where = _where(raw.get("where"))
    if kind == "missing-library" and driver_library(str(facts.get("library", ""))) is not None:
        kind = "needs-gpu-driver"  # on a host with a GPU: the driver is broken, a failure
    order = raw.get("order_dependent")
    return ModuleResult(
        target=raw["target"],
        check=bool(raw.get("check")),
        status=status,
        seconds=float(raw.get("seconds", 0.0)),
        kind=kind,
        error_type=raw.get("type"),
        message=raw.get("message"),
        why=known.explain(kind, facts, raw, where, has_gpu) if status != "ok" else None,
        where=where,
        frames=tuple(w for w in (_where(f) for f in raw.get("frames", [])) if w is not None),
        facts=facts,
        alone=bool(raw.get("alone")),
        order_dependent=_order_note(order) if order else None,
    )


def _expected(result: ModuleResult, known: _Knowledge, profile: HostProfile) -> ModuleResult:
    if result.status != "failed":
        return result
    importer = result.where.owner if result.where and result.where.owner else known.provider(result.target)
    reason = expected_reason(
        target=result.target,
        check=result.check,
        kind=result.kind,
        facts=result.facts,
        message=result.message,
        importer=importer,
        requires_dist=known.requires_dist,
        exclude=profile.smoke_exclude,
        profile_source=str(profile.path),
    )
    return replace(result, expected=reason) if reason else result


def _order_note(order: Mapping[str, Any]) -> str:
    what = f"{order.get('type') or order.get('kind')}: {_first_line(order.get('message'))}"
    at = f" at {order['where']['file']}:{order['where']['line']}" if order.get("where") else ""
    return f"failed after other imports in the same interpreter ({what}{at}); imports alone"


def _first_line(text: str | None, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cause(result: ModuleResult) -> tuple[Any, ...]:
    """What a failure comes down to: modules with the same cause fail for one reason.

    A missing module, name, library or symbol is its own cause wherever it
    is imported from (``--deep`` on torch: hundreds of test modules need
    pytest); any other failure is the same error raised at the same line
    (when torch cannot load, transformers and functorch fail at torch's line).
    """
    facts = result.facts
    keys = {
        "missing-module": ("module",),
        "missing-name": ("module", "name"),
        "missing-library": ("library",),
        "needs-gpu-driver": ("library",),
        "undefined-symbol": ("library", "symbol"),
        "symbol-version": ("library", "version"),
    }.get(result.kind or "")
    if keys is not None:
        return (result.status, result.kind, *(facts.get(k) for k in keys))
    if result.where is None:
        return (result.status, result.kind, result.target)
    where = (result.where.path, result.where.line)
    return (result.status, result.kind, result.error_type, result.message, *where)


def _mark_cascades(results: list[ModuleResult]) -> tuple[ModuleResult, ...]:
    """Point every failure at the one its cause is reported under (``same_as``).

    That one is the missing module itself, else the module whose own file
    raised it, else the shortest name: the failure a reader should look at first.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(results):
        if r.status != "ok":  # expected and real failures are reported apart
            groups.setdefault((r.expected is None, *cause(r)), []).append(i)
    marked = list(results)
    for members in groups.values():
        first = results[members[0]]
        own = [i for i in members if _raised_in_own_file(results[i])]
        if first.kind == "missing-module":
            own = [i for i in members if results[i].target == first.facts.get("module")] or own
        root = min(own or members, key=lambda i: (results[i].check, len(results[i].target)))
        for i in members:
            if i != root:
                marked[i] = replace(results[i], same_as=results[root].target)
    return tuple(marked)


def _raised_in_own_file(result: ModuleResult) -> bool:
    own = "site-packages/" + result.target.replace(".", "/")
    return result.where is not None and result.where.path.startswith((own + "/", own + "."))


class _Knowledge:
    """What the lock and the live venv say about packages, modules and libraries."""

    def __init__(self, lock: Lock | None, live: list[dict[str, Any]]) -> None:
        self.lock = lock
        self.installed = {canonicalize_name(d["name"]): d for d in live}
        self.locked = {canonicalize_name(p.name): p for p in lock.packages} if lock else {}
        self.live_modules: dict[str, list[str]] = {}
        for d in live:
            for name in d.get("top_level", []):
                self.live_modules.setdefault(name, []).append(canonicalize_name(d["name"]))
        self.lock_modules: dict[str, list[str]] = {}
        for p in lock.packages if lock else ():
            for name in p.top_level:
                self.lock_modules.setdefault(name.replace("/", "."), []).append(canonicalize_name(p.name))

    @staticmethod
    def _provider(module: str, table: dict[str, list[str]]) -> str | None:
        parts = module.split(".")
        for n in range(len(parts), 0, -1):
            owners = table.get(".".join(parts[:n]), [])
            if len(owners) == 1:
                return owners[0]
        return None

    def provider(self, module: str) -> str | None:
        return self._provider(module, self.live_modules) or self._provider(module, self.lock_modules)

    def versions(self, package: str) -> tuple[str | None, str | None]:
        """(installed, locked) versions of a package."""
        live = self.installed.get(canonicalize_name(package))
        locked = self.locked.get(canonicalize_name(package))
        return (live["version"] if live else None, locked.version if locked else None)

    def requires_dist(self, dist: str | None) -> list[str]:
        """A distribution's Requires-Dist lines (live metadata, else the lock's)."""
        if dist is None:
            return []
        key = canonicalize_name(dist)
        live, locked = self.installed.get(key), self.locked.get(key)
        return list(live["requires_dist"]) if live else (list(locked.requires_dist) if locked else [])

    def requirement(self, importer: str | None, package: str) -> str | None:
        """The importer's Requires-Dist on ``package`` (live metadata, else the lock's)."""
        if importer is None:
            return None
        key = canonicalize_name(importer)
        live, locked = self.installed.get(key), self.locked.get(key)
        specs = live["requires_dist"] if live else (list(locked.requires_dist) if locked else [])
        for spec in specs:
            try:
                req = Requirement(spec)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) == canonicalize_name(package):
                return f"{req.name}{req.specifier}" if req.specifier else req.name
        return None

    def library_providers(self, library: str) -> list[tuple[str, str]]:
        """(package, path) of every locked library with that SONAME or file name."""
        found = []
        for pkg in self.lock.packages if self.lock else ():
            for lib in pkg.native:
                if library in (lib.soname, posixpath.basename(lib.path)):
                    found.append((pkg.name, lib.path))
        return found

    def needed(self, path: str) -> tuple[str, ...]:
        for pkg in self.lock.packages if self.lock else ():
            for lib in pkg.native:
                if lib.path == path:
                    return lib.needed
        return ()

    def label(self, package: str | None) -> str:
        """``xgrammar 0.1.10`` (installed version, else locked)."""
        if package is None:
            return "?"
        installed, locked = self.versions(package)
        version = installed or locked
        return f"{package} {version}" if version else package

    def explain(
        self, kind: str | None, facts: dict[str, Any], raw: Mapping[str, Any], where: Where | None, gpu: bool
    ) -> str:
        importer = where.owner if where else None
        if kind == "missing-module":
            return self._missing_module(facts["module"], raw["target"], importer)
        if kind == "missing-name":
            return self._missing_name(facts["name"], facts["module"], importer)
        if kind in ("undefined-symbol", "symbol-version"):
            return self._abi(kind, facts)
        if kind == "missing-library":
            return self._missing_library(facts)
        if kind == "needs-gpu-driver":
            library = facts.get("library", "libcuda.so.1")
            if not gpu:
                return f"needs the GPU driver ({library}); this host has no GPU, so it is skipped"
            return f"the GPU driver's {library} is missing on a host with a GPU: install or repair the driver"
        if kind == "crash":
            signal = facts.get("signal_name")
            if signal:
                return f"crashed the interpreter ({signal}: {_first_line(raw.get('message'))})"
            return f"the interpreter exited with status {facts.get('exit_status')} during the import"
        if kind == "timeout":
            return f"still importing after {facts.get('timeout', 0):g} s; killed"
        return f"{raw.get('type')}: {_first_line(raw.get('message'))}"

    def _missing_module(self, module: str, target: str, importer: str | None) -> str:
        lock_pkg = self._provider(module, self.lock_modules)
        live_pkg = self._provider(module, self.live_modules)
        if lock_pkg and canonicalize_name(lock_pkg) not in self.installed:
            _, locked = self.versions(lock_pkg)
            return f"{module} comes from {lock_pkg} {locked} in the lock, which is not installed"
        if live_pkg:
            installed, locked = self.versions(live_pkg)
            drift = f" (the lock has {locked})" if locked and locked != installed else ""
            return f"{live_pkg} {installed} is installed but has no module {module}{drift}"
        scope = "locked" if self.lock is not None else "installed"
        who = f"; {importer} imports it" if importer and module != target else ""
        return f"no {scope} distribution provides {module}{who}"

    def _missing_name(self, name: str, module: str, importer: str | None) -> str:
        package = self.provider(module)
        text = f"{module} has no {name}"
        if package:
            installed, locked = self.versions(package)
            if installed and locked and installed != locked:
                text += f": {package} {installed} is installed, the lock has {locked}"
            elif installed:
                text += f" ({package} {installed}" + (", as locked)" if locked == installed else ")")
        requirement = self.requirement(importer, package or module)
        if requirement and importer:
            text += f"; {self.label(importer)} requires {requirement}"
        return text

    def _abi(self, kind: str, facts: dict[str, Any]) -> str:
        library = str(facts.get("library", "?"))
        owner = facts.get("library_owner")
        shown = posixpath.basename(library) + (f" ({self.label(owner)})" if owner else "")
        if kind == "symbol-version":
            version = str(facts.get("version", ""))
            family = "glibc" if version.startswith("GLIBC_") else "libstdc++"
            family = "libgcc_s" if version.startswith("GCC_") else family
            return f"{shown} needs {version}, newer than this host's {family}"
        needed = self.needed(library)
        against = f" ({', '.join(needed)})" if needed else ""
        return (
            f"ABI mismatch: {shown} needs {facts.get('symbol')}, which none of the libraries it loads"
            f"{against} exports: built against another version of one of them"
        )

    def _missing_library(self, facts: dict[str, Any]) -> str:
        library = str(facts.get("library"))
        needed_by = facts.get("needed_by")
        owner = facts.get("needed_by_owner")
        providers = self.library_providers(library)
        if providers and canonicalize_name(providers[0][0]) not in self.installed:
            _, locked = self.versions(providers[0][0])
            clause = f"comes from {providers[0][0]} {locked} in the lock, not installed here"
        elif providers:
            package, path = providers[0]
            clause = f"is in {package} ({path}), but the loader's search path does not reach it"
        elif self.lock is not None:
            clause = "no locked package ships: a system library missing on this host"
        else:
            clause = "is not found: a system library missing here, or a package not installed"
        if needed_by:
            subject = posixpath.basename(needed_by) + (f" ({self.label(owner)})" if owner else "")
            return f"{subject} needs {library}, which {clause}"
        if clause.startswith("no locked package ships"):
            return f"no locked package ships {library}: a system library missing on this host"
        return f"{library} {clause}"
