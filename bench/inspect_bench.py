"""Issue 3 benchmark: envlock inspect against NVIDIA's cuobjdump and against raw reading.

In one run, page cache warm for everyone (one unmeasured pass first):
- libtorch_cuda.so of torch 2.14.1+cu130 (~500 MB, hundreds of containers):
  envlock's header-only listing (in process, and the whole ``envlock
  inspect`` command) against ``cuobjdump --list-elf --list-ptx`` on the same
  file. The two listings must agree arch by arch (asserted here).
- the whole ~5.6 GB GPU venv: ``envlock inspect VENV`` (in process and
  through the CLI) against reading every one of its shared libraries once
  (Python 1 MiB reads in one thread, and ``cat`` through ``xargs -P``; the
  faster one is the anchor).
Targets: listing >= 50x faster than cuobjdump; venv inspect <= 2x the read.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from common import BIN, gpu_venv, run, save_result, timed
from envlock.binary.elf import read_link_facts
from envlock.binary.fatbin import FatbinContainer, read_fatbin_sections
from envlock.inspect import inspect_path

_LISTED = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(cubin|ptx)$")


def cuobjdump() -> str:
    found = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/*/bin/cuobjdump"))
    if not found:
        raise SystemExit("cuobjdump missing: pip install nvidia-cuda-cuobjdump (dev extra)")
    return str(found[-1])


def cuobjdump_counts(path: Path) -> collections.Counter[tuple[str, str]]:
    done = subprocess.run(
        [cuobjdump(), "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True
    )
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in done.stdout.splitlines():
        match = _LISTED.match(line.strip())
        if match:
            counts[("elf" if match.group(1) == "ELF" else "ptx", match.group(2))] += 1
    return counts


def listing(path: Path) -> list[FatbinContainer]:
    """What ``cuobjdump --list-elf --list-ptx`` answers: every image of the file, from headers."""
    with open(path, "rb") as stream:
        facts = read_link_facts(stream)
        sections = [(s.name, s.offset, s.size) for s in facts.sections]
        return read_fatbin_sections(stream, sections, facts.file_size)


def envlock_counts(containers: list[FatbinContainer]) -> collections.Counter[tuple[str, str]]:
    """In cuobjdump's spelling: executable containers only, PTX as sm_XX, no ``f`` on cubins."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for container in containers:
        if container.relocatable:
            continue
        for entry in container.entries:
            suffix = "" if entry.kind == "elf" and entry.suffix == "f" else entry.suffix
            counts[(entry.kind, f"sm_{entry.sm}{suffix}")] += 1
    return counts


def shared_libraries(venv: Path) -> list[Path]:
    found = []
    for base, dirs, names in os.walk(venv):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
        for name in names:
            path = os.path.join(base, name)
            if (name.endswith(".so") or ".so." in name) and not os.path.islink(path):
                found.append(Path(path))
    return found


def read_all_python(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb", buffering=0) as stream:
            while stream.read(1 << 20):
                pass


def read_all_cat(files: list[Path], jobs: int) -> None:
    args = "\0".join(str(p) for p in files).encode()
    subprocess.run(
        ["xargs", "-0", f"-P{jobs}", "-n", "16", "cat"], input=args, stdout=subprocess.DEVNULL, check=True
    )


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, _index_url = gpu_venv(work)
    library = next(venv.glob("lib/python*/site-packages/torch/lib/libtorch_cuda.so"))
    files = shared_libraries(venv)
    jobs = os.cpu_count() or 1
    envlock = str(BIN / "envlock")
    read_all_python(files)  # warm the page cache, unmeasured

    containers = listing(library)
    ours, theirs = envlock_counts(containers), cuobjdump_counts(library)
    assert ours == theirs, (
        f"listings differ: envlock {sorted(ours.items())} cuobjdump {sorted(theirs.items())}"
    )
    results: dict[str, object] = {
        "library": str(library.relative_to(venv)),
        "library_bytes": library.stat().st_size,
        "containers": len(containers),
        "images": sum(ours.values()),
        "per_arch": {f"{kind} {arch}": n for (kind, arch), n in sorted(ours.items())},
        "venv_libraries": len(files),
        "venv_library_bytes": sum(p.stat().st_size for p in files),
        "cores": jobs,
    }
    results["cuobjdump"] = timed(
        lambda: run([cuobjdump(), "--list-elf", "--list-ptx", str(library)], stderr=subprocess.DEVNULL),
        repeat,
    )
    results["listing"] = timed(lambda: listing(library), repeat, warmup=1)
    results["inspect_library_cli"] = timed(
        lambda: subprocess.run(
            [envlock, "inspect", str(library), "--format", "json"], stdout=subprocess.DEVNULL
        ),
        repeat,
        warmup=1,
    )
    results["read_all_python"] = timed(lambda: read_all_python(files), repeat)
    results["read_all_cat_1"] = timed(lambda: read_all_cat(files, 1), repeat)
    results["read_all_cat"] = timed(lambda: read_all_cat(files, jobs), repeat)
    verdicts: dict[str, object] = {}

    def inspect_venv() -> None:
        result = inspect_path(venv, "12.0", "580.65.06")
        verdicts.update(verdict=result.verdict, counts=result.counts)

    results["inspect_venv"] = timed(inspect_venv, repeat, warmup=1)
    results["inspect_venv_cli"] = timed(
        lambda: subprocess.run(
            [envlock, "inspect", str(venv), "--gpu", "12.0", "--driver", "580.65.06"],
            stdout=subprocess.DEVNULL,
        ),
        repeat,
        warmup=1,
    )
    results["venv_verdict"] = verdicts

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    read_anchor = min(med("read_all_python"), med("read_all_cat_1"), med("read_all_cat"))
    results["speedup_listing_vs_cuobjdump"] = med("cuobjdump") / med("listing")
    results["speedup_cli_vs_cuobjdump"] = med("cuobjdump") / med("inspect_library_cli")
    results["ratio_inspect_venv_vs_read"] = med("inspect_venv") / read_anchor
    results["ratio_inspect_venv_cli_vs_read"] = med("inspect_venv_cli") / read_anchor
    save_result("inspect", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.3f} s | {r['best']:.3f} s |"  # type: ignore[index]

    return "\n".join(
        [
            f"{results['library']}: {results['library_bytes'] / 1e6:.0f} MB, "
            f"{results['containers']} containers, {results['images']} images; "
            f"venv: {results['venv_libraries']} shared libraries, "
            f"{results['venv_library_bytes'] / 1e9:.2f} GB; {results['cores']} cores",
            "",
            "| measurement | median | best |",
            "|---|---|---|",
            row("cuobjdump", "cuobjdump --list-elf --list-ptx libtorch_cuda.so"),
            row("listing", "envlock listing of libtorch_cuda.so (in process)"),
            row("inspect_library_cli", "envlock inspect libtorch_cuda.so --format json (whole command)"),
            row("read_all_python", "read every .so of the venv once (Python, 1 thread)"),
            row("read_all_cat_1", "read every .so of the venv once (cat, one process at a time)"),
            row("read_all_cat", f"read every .so of the venv once (cat, xargs -P{results['cores']})"),
            row("inspect_venv", "envlock inspect VENV (in process)"),
            row("inspect_venv_cli", "envlock inspect VENV (whole command)"),
            "",
            f"listings agree per arch: {results['per_arch']}",
            f"listing vs cuobjdump: {results['speedup_listing_vs_cuobjdump']:.0f}x faster (target >= 50x); "
            f"whole command: {results['speedup_cli_vs_cuobjdump']:.0f}x",
            f"venv inspect / fastest read of its libraries: {results['ratio_inspect_venv_vs_read']:.2f}x "
            f"in process, {results['ratio_inspect_venv_cli_vs_read']:.2f}x whole command (target <= 2x)",
            f"venv verdict for sm_120, driver 580.65.06: {results['venv_verdict']}",
        ]
    )


if __name__ == "__main__":
    from common import DEFAULT_WORK

    print(report(main(DEFAULT_WORK, int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
