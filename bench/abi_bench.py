"""Issue 16 benchmark: `envlock lock` with ABI checks against `envlock lock` without them.

On the ~5.6 GB torch GPU venv. The target pins a rebuilt CUDA runtime
(`nvidia-cuda-runtime 13.0.96+abibench`: the index wheel's files under
another local version, served from a second PEP 503 tree), so the target
lock changes a package that torch's libraries take ~230 symbols from and
the ABI check has real work: read the new wheel's exports, record what it
provides, check every kept library against it.

- measured: a workspace whose reference lock carries ABI facts (captured as
  envlock now captures), `envlock lock` as is;
- anchor: a workspace whose reference lock was captured with
  `ENVLOCK_NO_ABI_FACTS=1` (no facts, as before issue 16), `envlock lock`
  with `ENVLOCK_NO_ABI_CHECK=1`: what `lock` cost before the checks.

Both resolve the same target against the same index, alternating, as whole
processes. Also reported: the lock's size with and without the facts, the
number of symbol bindings recorded, the agent's ABI pass on a cold cache
(in process), and a warm capture with and without the facts (the ABI pass
is cached by the libraries' sha256). Target: at most 1.3x.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from common import BIN, build_index, gpu_venv, run, save_result

RUNTIME = "nvidia_cuda_runtime-13.0.96"
VARIANT = "13.0.96+abibench"


def _variant(wheelhouse: Path, links: Path) -> Path:
    """The CUDA runtime wheel's files under another local version (same libraries)."""
    source = next(wheelhouse.glob(f"{RUNTIME}-*.whl"))
    target = links / source.name.replace("13.0.96", VARIANT)
    if target.exists():
        return target
    links.mkdir(parents=True, exist_ok=True)
    old_info, new_info = f"{RUNTIME}.dist-info", f"nvidia_cuda_runtime-{VARIANT}.dist-info"
    members: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            if info.is_dir() or info.filename == f"{old_info}/RECORD":
                continue
            data = archive.read(info)
            name = info.filename.replace(old_info, new_info, 1)
            if name == f"{new_info}/METADATA":
                data = data.replace(b"Version: 13.0.96\n", f"Version: {VARIANT}\n".encode(), 1)
            members[name] = data
    import base64
    import hashlib

    rows = [
        [
            name,
            "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(),
            len(data),
        ]
        for name, data in members.items()
    ]
    rows.append([f"{new_info}/RECORD", "", ""])
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    members[f"{new_info}/RECORD"] = text.getvalue().encode()
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    os.replace(tmp, target)
    return target


def _workspace(root: Path, venv: Path, url: str, extra: str, target: Path) -> None:
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    index = f'[index]\nurls = ["{url}", "{extra}"]\n'
    (root / "hosts" / "ref.toml").write_text(f'venv = "{venv}"\n{index}')
    python = (venv / "bin" / "python").resolve()
    version = subprocess.run(
        [str(python), "-c", "import platform; print(platform.python_version())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (root / "hosts" / "target.toml").write_text(
        f'venv = "{target}"\nreference = "ref"\npython = "{python}"\n[target]\npython = "{version}"\n'
        f'[lock]\npins = ["nvidia-cuda-runtime=={VARIANT}"]\n{index}'
    )


def _agent_pass(venv: Path) -> dict[str, float]:
    """The agent's ABI pass alone, cold (in process, no cache)."""
    from envlock.agent.abi import abi_imports
    from envlock.agent.layout import is_library_name
    from envlock.agent.snapshot import describe_venv, walk

    described = describe_venv(str(venv))
    files, _links = walk(str(venv))
    native: dict[str, dict[str, object]] = {}
    for rel, _st in files:
        if is_library_name(rel):
            with open(venv / rel, "rb") as stream:
                if stream.read(4) == b"\x7fELF":
                    native[rel] = {}
    start = time.perf_counter()
    found = abi_imports(str(venv.resolve()), described["site"], described["dists"], native)
    seconds = time.perf_counter() - start
    bindings = sum(len(symbols) for sources in found.values() for symbols in sources.values())
    return {"seconds": seconds, "libraries": len(native), "consumers": len(found), "bindings": bindings}


def _in_process(roots: dict[str, Path], repeat: int) -> dict[str, float]:
    """The parts the facts add to `lock`, timed alone (the whole process is noisy on a shared machine):
    reading the larger reference lock, and the break check itself."""
    from envlock.abi import abi_breaks
    from envlock.lock.io import read_lock

    def best(fn: object) -> float:
        times = []
        for _ in range(max(3, repeat)):
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - start)
        return min(times)

    refs = {name: root / "locks" / "pylock.ref.toml" for name, root in roots.items()}
    reference = read_lock(refs["checks"])
    target = read_lock(roots["checks"] / "locks" / "pylock.target.toml")
    return {
        "read_reference_with_facts": best(lambda: read_lock(refs["checks"])),
        "read_reference_without": best(lambda: read_lock(refs["anchor"])),
        "abi_breaks": best(lambda: abi_breaks(reference, target)),
    }


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, url = gpu_venv(work)
    base = work / "abi-bench"
    links = base / "links"
    _variant(work / "wheelhouse", links)
    extra = build_index(links, base / "index")  # PEP 503 with sha256: lock refuses a wheel without
    envlock = str(BIN / "envlock")
    roots = {"checks": base / "ws-checks", "anchor": base / "ws-anchor"}
    for name, root in roots.items():
        _workspace(root, venv, url, extra, base / "target")
        env = dict(os.environ)
        if name == "anchor":
            env["ENVLOCK_NO_ABI_FACTS"] = "1"
        run([envlock, "capture", "ref", "--root", str(root)], env=env)
    anchor_env = dict(os.environ, ENVLOCK_NO_ABI_CHECK="1")

    def lock(name: str) -> float:
        start = time.perf_counter()
        env = anchor_env if name == "anchor" else None
        run([envlock, "lock", "target", "--root", str(roots[name])], env=env)
        return time.perf_counter() - start

    def capture(name: str) -> float:
        start = time.perf_counter()
        env = dict(os.environ, ENVLOCK_NO_ABI_FACTS="1") if name == "anchor" else None
        run([envlock, "capture", "ref", "--root", str(roots[name])], env=env)
        return time.perf_counter() - start

    for name in roots:  # warm-up: fills the store with the variant wheel, page cache
        lock(name)
    times: dict[str, list[float]] = {"checks": [], "anchor": []}
    captures: dict[str, list[float]] = {"checks": [], "anchor": []}
    for _ in range(repeat):
        for name in ("anchor", "checks"):
            times[name].append(lock(name))
            captures[name].append(capture(name))
    results: dict[str, object] = {
        name: {"median": statistics.median(t), "best": min(t), "runs": len(t)} for name, t in times.items()
    }
    results["ratio"] = statistics.median(times["checks"]) / statistics.median(times["anchor"])
    results["warm_capture"] = {
        name: {"median": statistics.median(t), "best": min(t), "runs": len(t)} for name, t in captures.items()
    }
    sizes = {name: (root / "locks" / "pylock.ref.toml").stat().st_size for name, root in roots.items()}
    results["reference_lock_bytes"] = sizes
    results["target_lock_bytes"] = {
        name: (root / "locks" / "pylock.target.toml").stat().st_size for name, root in roots.items()
    }
    results["agent_abi_pass"] = _agent_pass(venv)
    results["in_process"] = _in_process(roots, repeat)
    results["cores"] = os.cpu_count()
    save_result("abi", results)
    shutil.rmtree(base / "target", ignore_errors=True)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s |"  # type: ignore[index]

    sizes: dict[str, int] = results["reference_lock_bytes"]  # type: ignore[assignment]
    agent: dict[str, float] = results["agent_abi_pass"]  # type: ignore[assignment]
    return "\n".join(
        [
            "GPU venv (torch 2.14.1 cu130), target pins a rebuilt nvidia-cuda-runtime",
            "",
            "| measurement | median | best |",
            "|---|---|---|",
            row("checks", "envlock lock, reference with ABI facts, checks on"),
            row("anchor", "envlock lock, reference without facts, ENVLOCK_NO_ABI_CHECK=1"),
            "",
            f"with / without ABI checks: {results['ratio']:.2f}x (target <= 1.3x)",
            "warm capture, median: {checks:.2f} s with ABI facts, {anchor:.2f} s without".format(
                **{k: v["median"] for k, v in results["warm_capture"].items()}  # type: ignore[attr-defined]
            ),
            f"reference lock: {sizes['checks']} bytes with ABI facts, {sizes['anchor']} without",
            "in process (best): read reference {read_reference_with_facts:.3f} s with facts, "
            "{read_reference_without:.3f} s without; abi_breaks {abi_breaks:.4f} s".format(
                **results["in_process"]  # type: ignore[arg-type]
            ),
            f"agent ABI pass (cold, in process): {agent['seconds']:.2f} s over {agent['libraries']:.0f} "
            f"libraries, {agent['bindings']:.0f} bindings in {agent['consumers']:.0f} libraries",
        ]
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(report(main(Path(os.environ.get("ENVLOCK_BENCH_WORK", "/var/tmp/envlock-bench")), 3)))
