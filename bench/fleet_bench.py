"""Issue 15 benchmark: apply one lock to 1, 2, 4 and 8 SSH hosts, pull against push.

Hosts are the test rig's sshd on loopback (tests/sshrig.py), each in its own
mount namespace with its own venv directory and artifact drop. A real nginx
(tests/storeserver.py, the block docs/store.md documents) serves the
registry mirror as the package index and the workspace's shared store.
The venv is a registry venv (numpy, scipy, pandas, pyarrow from the
mirror); with ENVLOCK_BENCH_FLEET_GPU=1 and the GPU venv's marker present
(bench/common.py), the ~5.6 GB GPU venv instead: eight hosts then hold
eight venvs and drops, ~70 GB, more than a shared bench machine has free.
The result says which.

For each fleet size N and mode, every host starts bare (no venv, empty
drop) and N `envlock apply hK --format json` processes run at once, each a
whole process; measured: the wall time of the slowest, and each apply's
`bytes_sent` (all the controller sent that host). Modes: `pull` (profile
`pull = true`: hosts fetch from the index and the shared store) and `push`
(`pull = false`: the controller sends every artifact, today's behaviour),
both from a warm controller store. Ratios are against one host in the same
mode and run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, ROOT, gpu_venv, run, save_result

sys.path.insert(0, str(ROOT / "tests"))

from sshrig import VENV_PATH, SshRig
from storeserver import StoreServer

FLEET = (1, 2, 4, 8)
MIRROR = Path("/opt/pypi")
REGISTRY_PINS = ["numpy==2.4.6", "scipy==1.17.1", "pandas==3.0.6", "pyarrow==25.0.1"]


def _registry_venv(work: Path, index_url: str) -> Path:
    venv = work / "fleet-venv"
    marker = venv / ".envlock-bench-complete"
    if not marker.exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([str(BIN / "uv"), "venv", "-q", "--python", sys.executable, str(venv)])
        run([str(BIN / "uv"), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
             "--index-url", index_url, "--link-mode", "copy", *REGISTRY_PINS])  # fmt: skip
        marker.touch()
    return venv


def main(work: Path, repeat: int) -> dict[str, object]:
    # A SIGTERM must still stop the rig and nginx (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = work / "fleet"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    served = base / "shared-store"
    server = StoreServer.start(served, base / "nginx", also={"pypi": MIRROR})
    rig = SshRig.start(base / "rig", tuple(f"h{i}" for i in range(1, max(FLEET) + 1)))
    try:
        gpu_marker = work / "gpu-venv" / ".envlock-bench-complete"
        if gpu_marker.exists() and os.environ.get("ENVLOCK_BENCH_FLEET_GPU") == "1":
            venv, index_url = gpu_venv(work)
            which = "gpu-venv (torch 2.14.1 CUDA, ~5.6 GB)"
        else:
            index_url = server.url.replace("/envlock/", "/pypi/simple/")
            venv = _registry_venv(work, index_url)
            which = "registry venv: " + ", ".join(REGISTRY_PINS)
        return _measure(base, venv, index_url, which, served, server, rig, repeat)
    finally:
        rig.stop()
        server.stop()


def _reset(rig: SshRig) -> None:
    """Every host bare: no venv, no state dir, an empty drop (the agent bundle stays)."""
    for host in rig.hosts.values():
        drop = host.root.parent / "cache" / "artifacts"
        for path in (host.root / "venv", host.root / "venv.envlock", drop):
            shutil.rmtree(path, ignore_errors=True)


def _fleet_apply(root: Path, hosts: list[str]) -> tuple[float, list[dict[str, object]]]:
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [str(BIN / "envlock"), "apply", h, "--format", "json", "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in hosts
    ]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    results = []
    for host, proc, (out, err) in zip(hosts, procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"apply {host} failed: {err.strip()}")
        results.append(json.loads(out)["result"])
    return wall, results


def _measure(
    base: Path,
    venv: Path,
    index_url: str,
    which: str,
    served: Path,
    server: StoreServer,
    rig: SshRig,
    repeat: int,
) -> dict[str, object]:
    root = base / "ws"
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "ref.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    (root / "envlock.toml").write_text(f'[store]\nurl = "{server.url}"\npush = "{served}"\n')
    run([str(BIN / "envlock"), "capture", "ref", "--root", str(root)])
    lock = root / "locks" / "pylock.ref.toml"
    manifest = root / "locks" / "pylock.ref.files.tsv"
    for alias in rig.hosts:
        shutil.copy(lock, root / "locks" / f"pylock.{alias}.toml")
        shutil.copy(manifest, root / "locks" / f"pylock.{alias}.files.tsv")
    results: dict[str, object] = {"venv": which, "hosts": "sshd on loopback (tests/sshrig.py)"}
    modes = {"push": "false", "pull": "true"}

    def use(mode: str) -> None:
        for alias in rig.hosts:
            profile = rig.profile(alias, VENV_PATH, f"pull = {modes[mode]}\n")
            (root / "hosts" / f"{alias}.toml").write_text(profile)

    for mode in modes:  # warm: controller store, shared store (uv), page cache, agent bundles
        use(mode)
        _reset(rig)
        _fleet_apply(root, list(rig.hosts))
    runs: dict[tuple[str, int], list[tuple[float, list[dict[str, object]]]]] = {}
    # Modes alternate within each fleet size and repeat, so both see the same load on a
    # shared machine.
    for n in FLEET:
        for _ in range(repeat):
            for mode in modes:
                use(mode)
                _reset(rig)
                runs.setdefault((mode, n), []).append(_fleet_apply(root, [f"h{i}" for i in range(1, n + 1)]))
    for mode in modes:
        per_n: dict[str, dict[str, object]] = {}
        for n in FLEET:
            walls = [wall for wall, _ in runs[(mode, n)]]
            answers = [a for _, batch in runs[(mode, n)] for a in batch]
            sent = [int(str(a["bytes_sent"])) for a in answers]
            artifacts = [int(str(a["pushed_bytes"])) + int(str(a["pulled_bytes"])) for a in answers]
            per_n[str(n)] = {
                "wall_median": statistics.median(walls),
                "wall_runs": walls,
                "bytes_sent_per_host_median": statistics.median(sent),
                "artifact_bytes_per_host_median": statistics.median(artifacts),
            }
        one = float(str(per_n["1"]["wall_median"]))
        for entry in per_n.values():
            entry["vs_one_host"] = float(str(entry["wall_median"])) / one
        results[mode] = per_n
    results["repeat"] = repeat
    save_result("fleet", results)
    return results


def report(results: dict[str, object]) -> str:
    lines = [f"venv: {results['venv']}; hosts: {results['hosts']}"]
    lines.append(f"{'mode':<5} {'N':>2} {'wall s':>8} {'x one':>6} {'sent/host':>12} {'artifacts/host':>15}")
    for mode in ("push", "pull"):
        for n, entry in results[mode].items():  # type: ignore[attr-defined]
            sent, artifacts = entry["bytes_sent_per_host_median"], entry["artifact_bytes_per_host_median"]
            lines.append(
                f"{mode:<5} {n:>2} {entry['wall_median']:8.1f} {entry['vs_one_host']:6.2f} "
                f"{sent:>12,.0f} {artifacts:>15,.0f}"
            )
    return "\n".join(lines)
