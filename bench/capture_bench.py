"""Issue 2 benchmark: envlock capture of the ~5.6 GB GPU venv against its anchors.

In one run, page cache warm for everyone (one unmeasured pass first):
- raw parallel sha256 of the same files (Python threads with hashlib, and
  coreutils sha256sum through xargs -P; the faster one is the anchor),
- envlock capture cold (--no-cache: rehash everything, re-trace every wheel),
- envlock capture warm (stat cache and provenance cache hit),
- pip inspect (records no hashes at all).
Targets: cold <= 1.3x raw hash; warm <= pip inspect.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from common import (
    BIN,
    gpu_venv,
    payload_files,
    raw_hash_python,
    raw_hash_sha256sum,
    run,
    save_result,
    timed,
)


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, index_url = gpu_venv(work)
    root = work / "capture-ws"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "gpu.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    jobs = os.cpu_count() or 1
    files = payload_files(venv)
    size = sum(f.stat().st_size for f in files)
    envlock = [str(BIN / "envlock"), "capture", "gpu", "--root", str(root)]

    raw_hash_python(files, jobs * 2)  # warm the page cache, unmeasured
    results: dict[str, object] = {"files": len(files), "bytes": size, "cores": jobs}
    results["raw_hash_python"] = timed(lambda: raw_hash_python(files, jobs * 2), repeat)
    results["raw_hash_sha256sum"] = timed(lambda: raw_hash_sha256sum(venv, jobs), repeat)
    results["capture_cold"] = timed(lambda: run([*envlock, "--no-cache"]), repeat)
    results["capture_warm"] = timed(lambda: run(envlock), repeat, warmup=1)
    results["pip_inspect"] = timed(lambda: run([str(venv / "bin/pip"), "inspect"]), repeat, warmup=1)

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    anchor = min(med("raw_hash_python"), med("raw_hash_sha256sum"))
    results["ratio_cold_vs_raw_hash"] = med("capture_cold") / anchor
    results["ratio_warm_vs_pip_inspect"] = med("capture_warm") / med("pip_inspect")
    packages = subprocess.run(
        [*envlock, "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    results["capture_json_bytes"] = len(packages)
    save_result("capture", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s |"  # type: ignore[index]

    return "\n".join(
        [
            f"GPU venv: {results['files']} files, {results['bytes'] / 1e9:.2f} GB, {results['cores']} cores",
            "",
            "| measurement | median | best |",
            "|---|---|---|",
            row("raw_hash_python", "raw parallel sha256 (hashlib threads)"),
            row("raw_hash_sha256sum", "raw parallel sha256 (sha256sum, xargs -P)"),
            row("capture_cold", "envlock capture --no-cache"),
            row("capture_warm", "envlock capture (warm)"),
            row("pip_inspect", "pip inspect"),
            "",
            f"cold capture / fastest raw hash: {results['ratio_cold_vs_raw_hash']:.2f}x (target <= 1.3x)",
            f"warm capture / pip inspect: {results['ratio_warm_vs_pip_inspect']:.2f}x (target <= 1.0x)",
        ]
    )
