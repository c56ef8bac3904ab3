"""Import smoke in the target venv: every module, in parallel worker interpreters.

Why workers that import many modules each, rather than one interpreter per
module: a venv's modules share their heavy dependencies (transformers,
functorch and torchgen all import torch); a worker pays for torch once and
then imports its dependents almost for free, while a fresh interpreter per
module would pay for torch again and again. Why several: a module can crash
the interpreter (a segfault in an extension) or hang, and then only its own
worker is lost; the agent kills it, reports the module it was on and starts a
replacement, and the other workers keep going on every core.

Sharing an interpreter has one cost: a module can fail only because of what
another imported before it (``import pip`` then ``import setuptools``
trips setuptools' distutils check). So a failure that could depend on order
is tried once more in a fresh worker before it is reported; if it imports
there, it is reported as ok with an order-dependence note. Missing modules
and libraries, driver libraries and timeouts are not retried: order cannot
explain them, or a retry would cost another timeout.

Classification here is lexical (the exception type and message); the
controller adds what only the lock knows (which package would provide a
missing module, the locked version of a package).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
import tempfile
import time
from email.message import Message
from email.parser import HeaderParser
from importlib.machinery import EXTENSION_SUFFIXES, PathFinder
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from envlock.agent.dists import DistError, find_dist_infos, parse_record
from envlock.agent.layout import import_names
from envlock.agent.protocol import ProgressEvent, SmokeReport
from envlock.agent.smoke_worker import Pool, SmokeError

__all__ = ["SmokeError", "run_smoke"]

# Failures that another module imported earlier in the same worker can cause.
# A missing name too: besides a circular import ("partially initialized"), an
# import hook another module installed can hand out another module of the same
# name (setuptools' _distutils_hack: "setuptools._distutils.command has no
# sdist" after some imports, never alone), which would make --deep flaky.
RETRY_KINDS = {"error", "undefined-symbol", "symbol-version", "crash", "missing-name"}
MAX_RETRIES = 32  # fresh interpreters spent on confirming failures, per run

_PATTERNS = (
    (
        "missing-name",
        re.compile(r"cannot import name '([^']+)' from (?:partially initialized module )?'([^']+)'"),
    ),
    ("undefined-symbol", re.compile(r"(\S+?): undefined symbol: (\S+)")),
    ("symbol-version", re.compile(r"version `([^']+)' not found \(required by ([^)]+)\)")),
    ("missing-library", re.compile(r"(\S+?): cannot open shared object file")),
    ("missing-module", re.compile(r"No module named '([^']+)'")),
)

# ---------------------------------------------------------------- what to import


def dotted(name: str) -> Optional[str]:
    """``nvidia/cusparselt`` (old top_level.txt spelling) -> ``nvidia.cusparselt``; None if not a name."""
    name = name.strip().replace("/", ".")
    return name if name and all(part.isidentifier() for part in name.split(".")) else None


def top_level_from_record(record: Iterable[List[Any]]) -> List[str]:
    """Import names from RECORD paths, for dists without top_level.txt (as capture derives them)."""
    return import_names(row[0] for row in record)


class LiveDists:
    """The venv's installed distributions, read from their dist-infos (nothing imported).

    Only what the smoke needs, read cheaply: METADATA's headers (not the long
    description after them) and, for a dist without top_level.txt, the first
    path component of each RECORD row; full RECORDs are parsed only to name
    the owner of a file in a failure.
    """

    def __init__(self, site: str) -> None:
        self.site = site
        self.dists: List[Dict[str, Any]] = []
        self.warnings: List[str] = []
        for dist_info in find_dist_infos(site):
            base = os.path.join(site, dist_info)
            try:
                meta = _metadata_headers(os.path.join(base, "METADATA"))
                top = self._top_level(base)
            except (DistError, OSError) as exc:
                self.warnings.append(str(exc))
                continue
            self.dists.append(
                {
                    "name": meta.get("Name", dist_info.split("-")[0]).strip(),
                    "version": meta.get("Version", "").strip(),
                    "requires_dist": [r.strip() for r in meta.get_all("Requires-Dist") or []],
                    "top_level": top,
                    "dist_info": dist_info,
                }
            )
        self._records: Dict[str, Set[str]] = {}  # parsed on demand

    @staticmethod
    def _top_level(base: str) -> List[str]:
        path = os.path.join(base, "top_level.txt")
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as stream:
                found = [dotted(line) for line in stream]
            return sorted({n for n in found if n})
        record = os.path.join(base, "RECORD")
        if not os.path.isfile(record):
            return []
        with open(record, encoding="utf-8", errors="replace") as stream:
            rows = [[_first_field(line)] for line in stream if line.strip()]
        return top_level_from_record(rows)

    def modules(self) -> List[str]:
        return sorted({name for dist in self.dists for name in dist["top_level"]})

    def owner(self, site_rel: str) -> Optional[str]:
        """The distribution whose RECORD lists ``site_rel`` (a path relative to site-packages)."""
        wanted = os.path.normpath(site_rel)
        head = wanted.split("/", 1)[0].split(".", 1)[0]
        likely = [d for d in self.dists if head in d["top_level"]]
        for dist in likely + [d for d in self.dists if d not in likely]:
            if wanted in self._files(dist["dist_info"]):
                return str(dist["name"])
        return None

    def _files(self, dist_info: str) -> Set[str]:
        if dist_info not in self._records:
            try:
                rows = parse_record(os.path.join(self.site, dist_info, "RECORD"))
            except (DistError, OSError):
                rows = []
            self._records[dist_info] = {os.path.normpath(row[0]) for row in rows}
        return self._records[dist_info]

    def report(self) -> List[Dict[str, Any]]:
        return [{k: v for k, v in d.items() if k != "dist_info"} for d in self.dists]


def _metadata_headers(path: str) -> Message:
    """METADATA's header block; the body (a long description, often most of the file) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as stream:
        lines = []
        for line in stream:
            if not line.strip():
                break
            lines.append(line)
    return HeaderParser().parsestr("".join(lines))


def _first_field(line: str) -> str:
    """A RECORD row's path, without a CSV parser unless the path is quoted."""
    if line.startswith('"'):
        return next(csv.reader([line]))[0]
    return line.split(",", 1)[0]


def _extension_name(filename: str) -> Optional[str]:
    for suffix in sorted(EXTENSION_SUFFIXES, key=len, reverse=True):
        if filename.endswith(suffix):
            name = filename[: -len(suffix)]
            # A bare ``.so`` named lib* is a shared library shipped beside the
            # code (torch/lib/libtorch.so), not an extension module.
            if suffix == ".so" and name.startswith("lib"):
                return None
            return name
    return None


def submodules(name: str, search_path: List[str]) -> List[str]:
    """Every submodule of package ``name``, found from its files without importing it.

    Regular packages (a directory with ``__init__.py``) are walked; directories
    without one only inside a namespace package (``nvidia.cu13``), since inside
    a regular package they are mostly data (``torch/include``). ``__main__``
    is left out: importing it runs a program.
    """
    spec = PathFinder.find_spec(name, search_path)
    if spec is None or not spec.submodule_search_locations:
        return []
    found: Set[str] = set()
    stack: List[Tuple[str, List[str], bool]] = [
        (name, list(spec.submodule_search_locations), spec.origin is None)
    ]
    while stack:
        package, locations, namespace = stack.pop()
        for location in locations:
            try:
                entries = sorted(os.scandir(location), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.isidentifier() or entry.name == "__pycache__":
                        continue
                    child = package + "." + entry.name
                    if os.path.isfile(os.path.join(entry.path, "__init__.py")):
                        found.add(child)
                        stack.append((child, [entry.path], False))
                    elif namespace:
                        stack.append((child, [entry.path], True))
                    continue
                stem = entry.name[:-3] if entry.name.endswith(".py") else _extension_name(entry.name)
                if stem and stem.isidentifier() and stem not in ("__init__", "__main__"):
                    found.add(package + "." + stem)
    return sorted(found)


# ---------------------------------------------------------------- classification


def classify(chain: List[Dict[str, Any]], skip_missing: Tuple[str, ...]) -> Dict[str, Any]:
    """Kind, facts and status of a failed import, from the first link of the chain that says why.

    ``skip_missing``: name prefixes of libraries (the GPU driver's) whose
    absence skips the module rather than failing it.
    """
    for link in chain:
        if link["type"] == "ModuleNotFoundError" and link.get("name"):
            return _verdict("missing-module", link, {"module": link["name"]})
        for kind, pattern in _PATTERNS:
            match = pattern.search(link["message"])
            if match is None:
                continue
            if kind == "missing-name":
                facts = {"name": match.group(1), "module": match.group(2)}
            elif kind == "undefined-symbol":
                facts = {"library": match.group(1), "symbol": match.group(2)}
            elif kind == "symbol-version":
                facts = {"version": match.group(1), "library": match.group(2)}
            elif kind == "missing-library":
                facts = {"library": match.group(1)}
                if link.get("path"):
                    facts["needed_by"] = link["path"]  # the extension that failed to load
                if skip_missing and match.group(1).startswith(skip_missing):
                    return _verdict("needs-gpu-driver", link, facts, status="skipped")
            else:
                facts = {"module": match.group(1)}
            return _verdict(kind, link, facts)
    return _verdict("error", chain[0], {})


def _verdict(
    kind: str, link: Dict[str, Any], facts: Dict[str, Any], status: str = "failed"
) -> Dict[str, Any]:
    return {
        "status": status,
        "kind": kind,
        "type": link["type"],
        "message": link["message"],
        "frames": link["frames"],
        "facts": facts,
    }


# ---------------------------------------------------------------- the run


class _Run:
    """Collects results, sends failures that order could explain to a fresh worker, stops on fail-fast."""

    def __init__(
        self,
        venv: str,
        site: str,
        live: LiveDists,
        skip_missing: Tuple[str, ...],
        fail_fast: bool,
        total: int,
    ) -> None:
        self.venv, self.site, self.live = venv, site, live
        self.skip_missing, self.fail_fast, self.total = skip_missing, fail_fast, total
        self.results: Dict[int, Dict[str, Any]] = {}
        self.shared_failures: Dict[int, Dict[str, Any]] = {}
        self.retries = 0
        self.pool: Optional[Pool] = None
        self._last_progress = 0.0

    def on_answer(self, item: Dict[str, Any], message: Dict[str, Any]) -> None:
        assert self.pool is not None
        record = self._record(item, message)
        if record["status"] != "ok":
            # Imported first by its worker, or retried in a fresh one: nothing else was loaded.
            record["alone"] = bool(message.get("alone") or item.get("fresh"))
        if item.get("fresh"):
            shared = self.shared_failures.pop(item["id"])
            if record["status"] == "ok":
                record["order_dependent"] = {k: shared.get(k) for k in ("kind", "type", "message", "where")}
        elif self._order_could_explain(record):
            self.retries += 1
            self.shared_failures[item["id"]] = record
            self.pool.add_fresh(item)
            return
        self.results[item["id"]] = record
        self._progress(record["target"])
        if self.fail_fast and record["status"] == "failed":
            self.pool.stop()

    def _order_could_explain(self, record: Dict[str, Any]) -> bool:
        if record["status"] != "failed" or record["alone"] or self.retries >= MAX_RETRIES:
            return False
        return record["kind"] in RETRY_KINDS or "partially initialized" in (record["message"] or "")

    def _record(self, item: Dict[str, Any], message: Dict[str, Any]) -> Dict[str, Any]:
        record: Dict[str, Any] = {
            "target": item.get("check", item.get("module")),
            "check": "check" in item,
            "seconds": round(message.get("seconds", 0.0), 4),
        }
        if message.get("ok"):
            record["status"] = "ok"
            return record
        if "chain" in message:
            verdict = classify(message["chain"], self.skip_missing)
        elif "crashed" in message:
            verdict = {"status": "failed", "kind": "crash", "type": None, "facts": message["crashed"]}
        else:
            verdict = {
                "status": "failed",
                "kind": "timeout",
                "type": None,
                "facts": {"timeout": message["timeout"]},
            }
        frames = [self._frame(f) for f in verdict.get("frames", message.get("frames", []))]
        record.update(verdict)
        record["message"] = verdict.get("message", message.get("message"))
        record["frames"] = frames
        inside = [f for f in frames if f["in_venv"]]
        record["where"] = inside[-1] if inside else None
        for key in ("library", "needed_by"):
            value = record["facts"].get(key)
            if isinstance(value, str) and "/" in value:
                record["facts"][key] = shown = self.shown(value)
                record["facts"][key + "_owner"] = self.owner(shown)
        return record

    def shown(self, path: str) -> str:
        """``site-packages/x.py`` inside site-packages, venv-relative inside the venv, else as is."""
        for base in (self.venv, os.path.realpath(self.venv)):
            site = os.path.join(base, self.site) + "/"
            if path.startswith(site):
                return "site-packages/" + path[len(site) :]
            if path.startswith(base + "/"):
                return path[len(base) + 1 :]
        return path

    def owner(self, shown: str) -> Optional[str]:
        return self.live.owner(shown[len("site-packages/") :]) if shown.startswith("site-packages/") else None

    def _frame(self, frame: List[Any]) -> Dict[str, Any]:
        path, line, function, code = frame
        shown = self.shown(path)
        in_venv = shown != path
        return {
            "file": shown,
            "line": line,
            "function": function,
            "code": code,
            "in_venv": in_venv,
            "owner": self.owner(shown) if in_venv else None,
        }

    def _progress(self, target: str) -> None:
        now = time.monotonic()
        done = len(self.results)
        if now - self._last_progress >= 0.1 or done == self.total:
            self._last_progress = now
            event: ProgressEvent = {"phase": "smoke", "done": done, "total": self.total, "detail": target}
            sys.stderr.write("@progress " + json.dumps(event) + "\n")
            sys.stderr.flush()


def run_smoke(
    venv: str,
    modules: List[str],
    checks: List[str],
    jobs: int = 0,
    timeout: float = 60.0,
    deep: bool = False,
    fail_fast: bool = False,
    from_venv: bool = False,
    skip_missing: Iterable[str] = (),
    python: Optional[str] = None,
    write_bytecode: bool = True,
) -> SmokeReport:
    """Import ``modules`` (plus every dist's top-level with ``from_venv``) and run ``checks``.

    ``skip_missing``: name prefixes of libraries (the GPU driver's) whose
    absence skips a module instead of failing it, on a host that has no GPU.
    ``write_bytecode=False`` runs the workers with ``-B`` (apply's staged venv).
    """
    started = time.monotonic()
    venv = os.path.abspath(venv)
    site = _site_packages(venv)
    live = LiveDists(os.path.join(venv, site))
    names = {n for n in (dotted(m) for m in modules) if n}
    if from_venv:
        names.update(live.modules())
    if deep:
        path = _import_path()
        for name in sorted(n for n in names if "." not in n):
            names.update(submodules(name, path))
    # A check that is a bare module name is an import; anything else is a statement.
    items: List[Dict[str, Any]] = [
        dict({"check": c}, **({"module": c} if dotted(c) == c else {})) for c in checks
    ]
    items += [{"module": n} for n in sorted(names)]
    for number, item in enumerate(items):
        item["id"] = number
    jobs = max(1, jobs or _cpu_count())
    run = _Run(venv, site, live, tuple(skip_missing), fail_fast, len(items))
    workdir = tempfile.mkdtemp(prefix="envlock-smoke-")
    try:
        run.pool = Pool(jobs, timeout, workdir, run.on_answer, python, write_bytecode)
        run.pool.fresh_first = fail_fast
        run.pool.run(items)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = [run.results[i["id"]] for i in items if i["id"] in run.results]
    return {
        "venv": venv,
        "site": site,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "jobs": min(jobs, len(items)),
        "timeout": timeout,
        "seconds": round(time.monotonic() - started, 3),
        "retries": run.retries,
        "stopped": bool(run.pool.stopping),
        "dists": live.report(),
        "warnings": live.warnings,
        "checks": len(checks),
        "results": results,
        "not_run": [str(i.get("check", i.get("module"))) for i in items if i["id"] not in run.results],
    }


def _site_packages(venv: str) -> str:
    """site-packages relative to the venv, for this interpreter's version."""
    candidate = os.path.join("lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    if os.path.isdir(os.path.join(venv, candidate)):
        return candidate
    raise SmokeError("%s: no %s (not a venv of %s?)" % (venv, candidate, sys.executable))


def _import_path() -> List[str]:
    """``sys.path`` as the workers see it: without the agent's own bundle."""
    bundle = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [p for p in sys.path if p and os.path.abspath(p) != bundle]


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
