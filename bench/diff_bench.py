"""Issue 8 benchmark: envlock diff of two 1,000-package locks; envlock verify of the GPU venv.

In one run (commands that are compared run in turns, see ``interleaved``):
- ``envlock diff A B`` of two synthetic 1,000-package locks (~2.7 KB of TOML
  per package, like the GPU lock: requires-dist, native tables with NEEDED
  lists, CUDA sections) that differ in 40 packages, as a whole CLI process;
  anchors: ``envlock --version`` (the CLI's start-up floor) and the same
  diff with both locks parsed whole in-process (what lockpair avoids).
  Target: under 0.3 s.
- ``envlock verify gpu`` of the unchanged ~5.6 GB GPU venv, against
  ``pip inspect`` of the same venv (which checks nothing), both warm; plus
  verify's first run after a capture (the manifest rows rebuilt, stat cache
  warm). Target: verify <= pip inspect.
"""

from __future__ import annotations

import hashlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import BIN, ROOT, gpu_venv, run, save_result, timed

sys.path.insert(0, str(ROOT / "builder"))

from envlock.lock.io import render_lock
from envlock.lock.model import Artifact, HostGpu, Interpreter, Lock, NativeLib, Package, Platform
from envlock.workspace import cache_dir

PACKAGES = 1000


def _sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def _package(i: int, version: str = "1.0.0", label: str = "") -> Package:
    name = f"pkg-{i:04d}"
    dist = name.replace("-", "_")
    filename = f"{dist}-{version}-cp311-cp311-manylinux_2_17_x86_64.whl"
    native: list[NativeLib] = []
    if i % 7 == 0:  # about one package in seven ships native code, as in the GPU venv
        for j in range(1 + i % 9):
            native.append(
                NativeLib(
                    path=f"site-packages/{dist}/lib/lib{dist}_{j}.so",
                    sha256=_sha(f"{name}{version}{label}{j}"),
                    soname=f"lib{dist}_{j}.so",
                    needed=("libc.so.6", "libstdc++.so.6", f"libpkg_{(i + 7) % PACKAGES:04d}_0.so"),
                    runpath=("$ORIGIN",),
                    version_needs={"GLIBC": "2.17", "GLIBCXX": "3.4.21"},
                    cuda_sections={".nv_fatbin": 1 << 20} if j % 3 == 0 else {},
                )
            )
    return Package(
        name=name,
        version=version,
        wheel=Artifact(
            filename=filename,
            sha256=_sha(filename + label),
            size=100_000 + i,
            url=f"https://files.example/packages/{filename}",
        ),
        source="index",
        index="https://pypi.example/simple",
        requires_python=">=3.9",
        installer="pip",
        requires_dist=tuple(
            f"pkg-{(i + k) % PACKAGES:04d}>=1.0; python_version >= '3.9' and extra == 'x{k}'"
            for k in range(1, 9)
        ),
        top_level=(dist,),
        wheel_tags=("cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64"),
        tree_digest="sha256:" + _sha(f"tree {filename}{label}"),
        file_count=40 + i % 50,
        size=400_000 + i,
        native=tuple(native),
    )


def _lock(host: str, packages: list[Package]) -> Lock:
    return Lock(
        host=host,
        role="reference",
        venv="/opt/venv",
        site="lib/python3.11/site-packages",
        digest="sha256:" + _sha(host),
        interpreter=Interpreter(
            implementation="cpython",
            version="3.11.9",
            abi="cp311",
            soabi="cpython-311-x86_64-linux-gnu",
            ext_suffix=".cpython-311-x86_64-linux-gnu.so",
        ),
        platform=Platform(
            system="Linux",
            machine="x86_64",
            libc="glibc",
            libc_version="2.35",
            platform_tags=("manylinux_2_35_x86_64", "manylinux_2_17_x86_64"),
        ),
        pyvenv={"home": "/usr/bin", "include-system-site-packages": "false", "version": "3.11.9"},
        indexes=("https://pypi.example/simple",),
        find_links=(),
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        manifest_sha256=_sha("manifest " + host),
        manifest_files=60_000,
        gpu=HostGpu(source="profile", cc=("12.0",), driver="575.57.08"),
    )


def synthetic_locks(out: Path) -> tuple[Path, Path]:
    """Two locks of 1,000 packages: 30 upgrades, 5 added, 5 removed, 2 rebuilt at the same version."""
    base = [_package(i) for i in range(PACKAGES)]
    head = list(base)
    for i in range(0, 300, 10):
        head[i] = _package(i, "1.1.0")
    head[301] = _package(301, label="rebuilt")
    head[302] = _package(302, label="rebuilt")
    head = [p for p in head if p.name not in {f"pkg-{i:04d}" for i in range(990, 995)}]
    head += [_package(PACKAGES + k) for k in range(5)]
    out.mkdir(parents=True, exist_ok=True)
    a, b = out / "pylock.a.toml", out / "pylock.b.toml"
    a.write_bytes(render_lock(_lock("a", base)))
    b.write_bytes(render_lock(_lock("b", head)))
    return a, b


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, dict[str, float]]:
    """Like ``common.timed`` for several commands, run in turns (one warm-up turn first).

    These machines are shared: load comes and goes over tens of seconds, and
    timing one command's runs, then the other's, would compare different
    loads. In turns, each ratio compares runs seconds apart.
    """
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {
        name: {"median": statistics.median(ts), "best": min(ts), "runs": repeat} for name, ts in times.items()
    }


def _whole_diff(a: Path, b: Path) -> None:
    from envlock.changes import diff_locks
    from envlock.lock.io import read_lock

    diff_locks(read_lock(a), read_lock(b))


def _in_process_diff(work: Path, a: Path, b: Path) -> None:
    from envlock.cli.diff_cmd import render_text
    from envlock.diff import diff
    from envlock.workspace import open_workspace

    render_text(diff(open_workspace(work), str(a), str(b)))


# A process that imports only what diff needs: what `envlock diff` would cost
# if the CLI imported each command's implementation when it runs.
_LEAN = (
    "import sys; from envlock.diff import diff; from envlock.workspace import open_workspace; "
    "r = diff(open_workspace(sys.argv[1]), sys.argv[2], sys.argv[3]); "
    "print(len(r.changes))"
)


def main(work: Path, repeat: int) -> dict[str, object]:
    envlock = str(BIN / "envlock")
    results: dict[str, object] = {}

    a, b = synthetic_locks(work / "diff-locks")
    results["lock_bytes"] = a.stat().st_size
    results["packages"] = PACKAGES
    diff_cmd = [envlock, "diff", str(a), str(b), "--root", str(work)]
    out = subprocess.run(diff_cmd, capture_output=True, text=True)
    assert out.returncode == 1, out.stderr  # they differ
    results["diff_output_lines"] = len(out.stdout.splitlines())
    lean = [sys.executable, "-c", _LEAN, str(work), str(a), str(b)]
    results.update(
        interleaved(
            {
                "cli_startup": lambda: run([envlock, "--version"]),
                "diff_cli": lambda: subprocess.run(diff_cmd, stdout=subprocess.DEVNULL, check=False),
                "diff_lean_process": lambda: run(lean),
            },
            repeat,
        )
    )
    results["diff_in_process"] = timed(lambda: _in_process_diff(work, a, b), repeat, warmup=1)
    results["diff_whole_parse_in_process"] = timed(lambda: _whole_diff(a, b), repeat, warmup=1)

    venv, index_url = gpu_venv(work)
    root = work / "diff-ws"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "gpu.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    started = time.perf_counter()
    run([envlock, "capture", "gpu", "--root", str(root)])
    results["capture_once_seconds"] = time.perf_counter() - started
    verify_cmd = [envlock, "verify", "gpu", "--root", str(root)]

    def verify_without_memo() -> None:
        for memo in (cache_dir() / "verify").glob("*-gpu.json"):
            memo.unlink()
        run(verify_cmd)

    results.update(
        interleaved(
            {
                "verify_first": verify_without_memo,
                "verify_warm": lambda: run(verify_cmd),
                "pip_inspect": lambda: run([str(venv / "bin/pip"), "inspect"]),
            },
            repeat,
        )
    )

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    results["ratio_verify_vs_pip_inspect"] = med("verify_warm") / med("pip_inspect")
    results["ratio_verify_first_vs_pip_inspect"] = med("verify_first") / med("pip_inspect")
    save_result("diff", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.3f} s | {r['best']:.3f} s |"  # type: ignore[index]

    diff = results["diff_cli"]["median"]  # type: ignore[index]
    return "\n".join(
        [
            f"synthetic locks: {results['packages']} packages, {results['lock_bytes'] / 1e6:.2f} MB each; "
            f"diff prints {results['diff_output_lines']} lines",
            "",
            "| measurement | median | best |",
            "|---|---|---|",
            row("cli_startup", "`envlock --version` (start-up floor)"),
            row("diff_cli", "`envlock diff A B`, whole process"),
            row("diff_in_process", "same diff in-process (read, compare, render)"),
            row("diff_whole_parse_in_process", "same diff, both locks parsed whole, in-process"),
            row("diff_lean_process", "same diff, a process importing only `envlock.diff`"),
            row("verify_first", "`envlock verify gpu`, first run after capture (rows rebuilt)"),
            row("verify_warm", "`envlock verify gpu`, unchanged venv"),
            row("pip_inspect", "`pip inspect`"),
            "",
            f"diff, whole process: {diff:.3f} s (target < 0.3 s)",
            f"verify / pip inspect: {results['ratio_verify_vs_pip_inspect']:.2f}x (target <= 1.0x); "
            f"first verify / pip inspect: {results['ratio_verify_first_vs_pip_inspect']:.2f}x",
        ]
    )


if __name__ == "__main__":
    from common import DEFAULT_WORK

    print(report(main(DEFAULT_WORK, 3)))
