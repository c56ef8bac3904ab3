"""``envlock inspect PATH``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from envlock.binary.cuda import JIT, NATIVE
from envlock.binary.fatbin import FatbinContainer, FatbinEntry
from envlock.cli.commands import summary
from envlock.errors import ExitCode
from envlock.inspect import InspectResult, LibraryResult, inspect_path
from envlock.render import envelope, plural, table

_ARCHES_SHOWN = 8


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help=summary("inspect"),
        description="Read the CUDA device code (fatbin containers, cubins, PTX) and the ELF link facts "
        "of a shared library, a wheel or a whole venv, and decide for each library whether it loads "
        "and has a kernel image for the GPU: native (SASS), jit (PTX), no-image, wont-load or unknown. "
        "Needs no GPU and no NVIDIA tool. Exit 0 when everything runs, 1 on findings.",
    )
    p.add_argument("path", help="a .so (or .cubin/.ptx/.fatbin), a wheel, or a venv directory")
    p.add_argument("--gpu", default="12.0", help="compute capability of the target GPU (default: 12.0)")
    p.add_argument("--driver", help="NVIDIA driver version of the target host, e.g. 580.65.06")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    result = inspect_path(args.path, gpu=args.gpu, driver=args.driver)
    elapsed = time.monotonic() - started
    code = ExitCode.OK if result.ok else ExitCode.FINDINGS
    if args.format == "json":
        print(envelope("inspect", result.ok, {"result": result_json(result, elapsed)}))
    else:
        print(render_text(result, elapsed, every=bool(args.verbose)))
    return int(code)


# --- JSON ------------------------------------------------------------------------


def result_json(result: InspectResult, elapsed: float) -> dict[str, Any]:
    return {
        "path": str(result.path),
        "source": result.source,
        "gpu": {"cc": str(result.gpu), "sm": result.gpu.sm},
        "driver": result.driver,
        "verdict": result.verdict,
        "device_code": any(library.device_code for library in result.libraries),
        "counts": result.counts,
        "notes": list(result.notes),
        "seconds": round(elapsed, 3),
        "libraries": [_library_json(library) for library in result.libraries],
    }


def _library_json(library: LibraryResult) -> dict[str, Any]:
    load = library.load
    verdicts = {v.container.index: v for v in library.images.containers}
    return {
        "path": library.path,
        "kind": library.kind,
        "verdict": library.verdict,
        "reason": library.reason,
        "optional": library.optional,
        "device_code": library.device_code,
        "glibc": library.glibc,
        "arches": list(library.arches),
        "images": {
            "verdict": library.images.verdict,
            "summary": library.images.summary,
            "counts": library.images.counts,
        },
        "load": None
        if load is None
        else {
            "verdict": load.verdict,
            "reason": load.reason,
            "needed": load.resolved,
            "missing_library": load.missing_library,
            "missing_symbols": list(load.missing_symbols),
            "cuda_runtime": load.cuda_runtime,
        },
        "containers": [_container_json(c, verdicts.get(c.index)) for c in library.containers],
    }


def _container_json(container: FatbinContainer, verdict: Any) -> dict[str, Any]:
    return {
        "index": container.index,
        "section": container.section,
        "offset": container.offset,
        "size": container.size,
        "error": container.error,
        "verdict": verdict.verdict if verdict else None,
        "reason": verdict.reason if verdict else None,
        "image": verdict.image.arch if verdict and verdict.image else None,
        "entries": [_entry_json(e) for e in container.entries],
    }


def _entry_json(entry: FatbinEntry) -> dict[str, Any]:
    return {
        "offset": entry.offset,
        "kind": entry.kind,
        "arch": entry.arch,
        "sm": entry.sm,
        "suffix": entry.suffix,
        "ptx_isa": entry.ptx_isa,
        "version": list(entry.version),
        "flags": entry.flags,
        "compression": entry.compression,
        "header_size": entry.header_size,
        "payload_size": entry.payload_size,
        "compressed_size": entry.compressed_size,
        "uncompressed_size": entry.uncompressed_size,
        "error": entry.error,
    }


# --- text ------------------------------------------------------------------------


# What the verdict column says for a library: "native" is for device code (SASS
# for the GPU); a CPU-only library that loads is not "native", it has none.
CPU_ONLY = "loads"


def _verdict_text(library: LibraryResult) -> str:
    shown = CPU_ONLY if not library.device_code and library.verdict == NATIVE else library.verdict
    return shown + (" (optional)" if library.optional else "")


def render_text(result: InspectResult, elapsed: float, every: bool = False) -> str:
    driver = f", driver {result.driver}" if result.driver else ""
    lines = [
        f"{result.path} ({result.source}) on {result.gpu.sm} (compute capability {result.gpu}){driver}",
        "",
    ]
    shown = list(result.libraries) if every else _shown(result)
    rows = [
        [
            library.path,
            str(library.executable_containers) if library.containers else "",
            _arches(library.arches),
            _verdict_text(library),
            library.reason,
        ]
        for library in shown
    ]
    if rows:
        lines.append(table(["library", "containers", "arches", "verdict", "reason"], rows, right=(1,)))
        lines += _link_facts(shown)
    elif not result.libraries:
        lines.append(f"no shared libraries in this {result.source}: nothing to load, no device code")
    else:
        lines.append(
            f"{plural(len(result.libraries), 'library', 'libraries')} without device code, all load "
            "(-v or --format json lists them)"
        )
    if result.source == "library" and result.libraries and result.libraries[0].containers:
        lines += ["", _container_table(result.libraries[0])]
    hidden = len(result.libraries) - len(rows)
    lines.append("")
    cpu_only = sum(1 for lib in result.libraries if not lib.device_code and lib.verdict == NATIVE)
    counts = {**result.counts, NATIVE: result.counts.get(NATIVE, 0) - cpu_only}
    words = [f"{n} {v}" for v, n in counts.items() if n]
    if cpu_only:
        words.append(f"{cpu_only} without device code")
    optional = sum(1 for library in result.libraries if library.optional)
    summary = f"{plural(len(result.libraries), 'library', 'libraries')}: {', '.join(words) or 'none'}"
    if optional:
        summary += f" ({plural(optional, 'optional plugin')} not counted)"
    if hidden and rows:
        summary += f"; {hidden} without device code that load are not listed (-v lists all)"
    if result.libraries:
        lines.append(summary)
    has_code = any(library.device_code for library in result.libraries)
    verdict = result.verdict if has_code or result.verdict != NATIVE else "runs (no device code)"
    lines.append(f"verdict: {verdict} ({elapsed:.1f} s)")
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def _link_facts(libraries: list[LibraryResult]) -> list[str]:
    """What ld.so needs for each listed library: DT_NEEDED (found or not), glibc, missing symbols."""
    lines = []
    for library in libraries:
        load = library.load
        if load is None:
            continue
        needed = [name if path else f"{name} (missing)" for name, path in load.resolved.items()]
        if load.missing_library and load.missing_library not in load.resolved:
            needed.append(f"{load.missing_library} (missing)")
        facts = [f"needs {' '.join(needed)}" if needed else "needs nothing"]
        if library.glibc:
            facts.append(f"glibc >= {library.glibc}")
        if load.missing_symbols:
            more = len(load.missing_symbols) - 3
            facts.append(
                "missing symbols " + " ".join(load.missing_symbols[:3]) + (f" +{more}" if more > 0 else "")
            )
        lines.append(f"  {library.path}: {'; '.join(facts)}")
    return ["", *lines] if lines else []


def _shown(result: InspectResult) -> list[LibraryResult]:
    """Libraries with device code or a finding; in a venv the rest is noise (a wheel shows all)."""
    if result.source in ("library", "wheel"):
        return list(result.libraries)
    return [lib for lib in result.libraries if lib.containers or lib.verdict not in (NATIVE, JIT)]


def _arches(arches: tuple[str, ...]) -> str:
    if len(arches) <= _ARCHES_SHOWN:
        return " ".join(arches)
    return " ".join(arches[:_ARCHES_SHOWN]) + f" +{len(arches) - _ARCHES_SHOWN}"


def _container_table(library: LibraryResult) -> str:
    rows = []
    for verdict in library.images.containers:
        container = verdict.container
        arches = " ".join(
            e.arch + ("*" if e.compression not in ("none", "unknown") else "") for e in container.entries
        )
        rows.append(
            [str(container.index), container.section, arches or "(empty)", verdict.verdict, verdict.reason]
        )
    legend = "containers (* compressed):"
    return legend + "\n" + table(["#", "section", "images", "verdict", "reason"], rows, right=(0,))
