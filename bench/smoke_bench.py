"""Issue 7 benchmark: envlock smoke of the ~5.6 GB GPU venv against its anchors.

In one run, page cache and bytecode warm for everyone (one unmeasured pass
of each first), the same modules (every top-level module that the smoke
imports: the lock's and the live venv's):
- one interpreter importing all of them, one after another (the practical
  floor: every shared dependency is paid for once, nothing is isolated),
- a sequential ``python -c "import X"`` loop (isolated, pays for torch again
  for every module that imports it),
- ``envlock smoke gpu`` through the real CLI (lock read, agent start, workers).
Targets: smoke <= 2x the single interpreter, and faster than the loop.
Then ``--deep`` once, for scale (no anchor: nobody imports 10,000 modules by hand).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import BIN, gpu_venv, run, save_result

SINGLE = """
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
"""


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, index_url = gpu_venv(work)
    root = work / "smoke-ws"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "gpu.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    envlock = str(BIN / "envlock")
    run([envlock, "capture", "gpu", "--root", str(root)])  # the lock the smoke reads
    smoke = [envlock, "smoke", "gpu", "--root", str(root)]
    python = str(venv / "bin" / "python")

    first = _smoke_json(smoke)  # also warms bytecode and the page cache for the anchors
    modules = [r["target"] for r in first["results"] if not r["check"]]

    def single() -> None:
        subprocess.run([python, "-I", "-c", SINGLE, *modules], check=True, capture_output=True)

    def loop() -> None:
        for name in modules:
            subprocess.run([python, "-I", "-c", f"import {name}"], capture_output=True)

    results: dict[str, object] = {
        "modules": len(modules),
        "cores": os.cpu_count() or 1,
        "jobs": first["jobs"],
        "failed": [r["target"] for r in first["results"] if r["status"] == "failed"],
        "order_dependent": [r["target"] for r in first["results"] if r.get("order_dependent")],
    }
    agent: list[float] = []

    def smoke_run() -> None:
        agent.append(_smoke_json(smoke)["agent_seconds"])

    single()  # unmeasured: the anchors' bytecode and pages warm too
    # Interleaved rounds: on a shared machine, load changes over minutes, and
    # each round exposes all three to the same load.
    results.update(
        interleaved({"single_interpreter": single, "import_loop": loop, "envlock_smoke": smoke_run}, repeat)
    )
    results["agent_only_median"] = statistics.median(agent)

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    # --deep once, for scale: every submodule of every package (~10,000 here).
    start = time.perf_counter()
    deep = _smoke_json([*smoke, "--deep"])
    failed = [r for r in deep["results"] if r["status"] == "failed"]
    results["deep"] = {
        "seconds": time.perf_counter() - start,
        "modules": len(deep["results"]) - sum(r["check"] for r in deep["results"]),
        "failed": len(failed),
        "causes": sum(1 for r in failed if r["same_as"] is None),
    }
    results["ratio_smoke_vs_single"] = med("envlock_smoke") / med("single_interpreter")
    results["ratio_smoke_vs_loop"] = med("envlock_smoke") / med("import_loop")
    save_result("smoke", results)
    return results


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, dict[str, float]]:
    """Median and best wall time of ``repeat`` rounds, each running every function once in turn,
    and the median CPU time (user + system, all child processes): the part that load on a
    shared machine does not inflate."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        name: {
            "median": statistics.median(wall[name]),
            "best": min(wall[name]),
            "cpu_median": statistics.median(cpu[name]),
            "runs": repeat,
        }
        for name in fns
    }


def _smoke_json(smoke: list[str]) -> dict[str, Any]:
    proc = subprocess.run([*smoke, "--format", "json"], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"envlock smoke failed: {proc.stderr}")
    return json.loads(proc.stdout)["result"]  # type: ignore[no-any-return]


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s | {r['cpu_median']:.2f} s |"  # type: ignore[index]

    return "\n".join(
        [
            f"GPU venv: {results['modules']} top-level modules, {results['cores']} cores, "
            f"{results['jobs']} smoke workers",
            "",
            "| measurement | median | best | CPU (median) |",
            "|---|---|---|---|",
            row("single_interpreter", "one interpreter imports them all (floor)"),
            row("import_loop", 'sequential `python -c "import X"` loop'),
            row("envlock_smoke", "`envlock smoke gpu` (CLI, lock, agent, workers)"),
            "",
            f"agent alone (median of the smoke's own timer): {results['agent_only_median']:.2f} s",
            f"smoke / single interpreter: {results['ratio_smoke_vs_single']:.2f}x (target <= 2x)",
            f"smoke / import loop: {results['ratio_smoke_vs_loop']:.2f}x (target < 1x)",
            f"failed: {results['failed'] or 'none'}; order-dependent: {results['order_dependent'] or 'none'}",
            "--deep, once: {modules} modules in {seconds:.1f} s, {failed} failed ({causes} causes)".format(
                **results["deep"]  # type: ignore[arg-type]
            ),
        ]
    )
