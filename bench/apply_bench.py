"""Issue 6 benchmark: envlock apply of the ~5.6 GB GPU venv into a fresh path.

In one run, from a warm store (one unmeasured apply first):
- envlock apply into a fresh path (fetch check, push, staged uv install,
  bin/ bytes, verify every file, smoke, swap),
- the anchor: plain `uv pip install` of the same wheels with the same flags,
  plus a parallel raw sha256 of the installed tree,
- `pip install --require-hashes` of the same wheels (envlock's export),
- a no-op apply on the applied venv.
Targets: apply <= 1.2x (uv install + raw hash); >= 3x faster than pip;
no-op under 0.3 s.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from common import BIN, fresh_venv, gpu_venv, payload_files, raw_hash_python, run, save_result, timed


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, index_url = gpu_venv(work)
    root = work / "apply-ws"
    target = work / "apply-target"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "gpu.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    (root / "hosts" / "target.toml").write_text(f'venv = "{target}"\n')
    envlock = str(BIN / "envlock")
    run([envlock, "capture", "gpu", "--root", str(root)])
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(root / "locks" / f"pylock.gpu{suffix}", root / "locks" / f"pylock.target{suffix}")
    apply = [envlock, "apply", "target", "--root", str(root)]
    fresh_venv(target)
    run(apply)  # warm store and host drop, unmeasured

    def fresh_apply() -> None:
        fresh_venv(target)
        run(apply)

    results: dict[str, object] = {}
    results["apply_fresh"] = timed(fresh_apply, repeat)
    results["apply_noop"] = timed(lambda: run(apply), repeat, warmup=1)

    requirements = work / "apply-requirements.txt"
    wheels = sorted((Path.home() / ".cache/envlock/artifacts").glob("*/*.whl"))
    lock_text = (root / "locks" / "pylock.target.toml").read_text()
    chosen = [w for w in wheels if f'"{w.name}"' in lock_text]
    requirements.write_text(
        "".join(f"{w.name.split('-')[0]} @ file://{w} --hash=sha256:{w.parent.name}\n" for w in chosen)
    )
    uv_target = work / "apply-uv-target"
    python = Path(sys.executable).resolve()

    def uv_install(*flags: str) -> None:
        shutil.rmtree(uv_target, ignore_errors=True)
        run([str(BIN / "uv"), "venv", "-q", "--python", str(python), str(uv_target)])
        uv = str(BIN / "uv")
        target_python = str(uv_target / "bin/python")
        flags_all = ["--offline", "--no-index", "--no-deps", "--require-hashes", "-q", *flags]
        run([uv, "pip", "install", "--python", target_python, *flags_all, "-r", str(requirements)])

    uv_install()  # warm uv's own cache, unmeasured
    # Plain uv: its cache, hard links into it (fast; the venv shares inodes with the cache).
    results["uv_install"] = timed(uv_install, repeat)
    # Like for like with envlock apply, which copies (see docs/design.md, Apply).
    results["uv_install_copy"] = timed(lambda: uv_install("--link-mode", "copy"), repeat)
    files = payload_files(uv_target)
    results["raw_hash_installed"] = timed(lambda: raw_hash_python(files, 4), repeat)

    pip_target = work / "apply-pip-target"

    def pip_install() -> None:
        shutil.rmtree(pip_target, ignore_errors=True)
        run([sys.executable, "-m", "venv", "--without-pip", str(pip_target)])
        pip = [sys.executable, "-m", "pip", "--python", str(pip_target / "bin/python"), "install", "-q"]
        flags = ["--no-deps", "--require-hashes", "--no-cache-dir", "-r", str(requirements)]
        subprocess.run([*pip, *flags], check=True, stdout=subprocess.DEVNULL)

    results["pip_install"] = timed(pip_install, 1)
    shutil.rmtree(pip_target, ignore_errors=True)
    shutil.rmtree(uv_target, ignore_errors=True)

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    anchor = med("uv_install") + med("raw_hash_installed")
    results["ratio_apply_vs_uv_plus_hash"] = med("apply_fresh") / anchor
    results["ratio_apply_vs_uv_copy_plus_hash"] = med("apply_fresh") / (
        med("uv_install_copy") + med("raw_hash_installed")
    )
    results["speedup_vs_pip"] = med("pip_install") / med("apply_fresh")
    save_result("apply", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s | {r['runs']} |"  # type: ignore[index]

    return "\n".join(
        [
            "| measurement | median | best | runs |",
            "|---|---|---|---|",
            row("apply_fresh", "envlock apply, fresh path, warm store"),
            row("uv_install", "uv pip install, warm cache, default hard links"),
            row("uv_install_copy", "uv pip install, warm cache, --link-mode copy"),
            row("raw_hash_installed", "raw parallel sha256 of the installed tree"),
            row("pip_install", "pip install --require-hashes"),
            row("apply_noop", "envlock apply, no-op"),
            "",
            f"apply / (uv install + raw hash): {results['ratio_apply_vs_uv_plus_hash']:.2f}x "
            "(target <= 1.2x); "
            f"against uv in copy mode: {results['ratio_apply_vs_uv_copy_plus_hash']:.2f}x",
            f"pip / apply: {results['speedup_vs_pip']:.1f}x (target >= 3x)",
            f"no-op apply: {results['apply_noop']['median']:.2f} s (target < 0.3 s)",  # type: ignore[index]
        ]
    )
