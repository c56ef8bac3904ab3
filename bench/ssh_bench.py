"""Issue 4 benchmark: capture over SSH to loopback against local capture.

A real sshd on 127.0.0.1 (the test rig, tests/sshrig.py) reaches the same
~5.6 GB GPU venv; the host side keeps its own agent cache. In one run:
local capture cold and warm, SSH capture cold and warm (target: overhead
<= 15%), and re-pushing 100 artifacts that are already on the host, the
connection set-up included (target: under 1 s).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from common import BIN, ROOT, gpu_venv, run, save_result, timed

sys.path.insert(0, str(ROOT / "tests"))

from envlock.hosts import parse_profile
from envlock.transfer import Item, push
from envlock.transport import open_transport
from sshrig import SshRig


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, index_url = gpu_venv(work)
    rig_dir = work / "ssh-rig"
    if rig_dir.exists():
        import shutil

        shutil.rmtree(rig_dir)
    rig = SshRig.start(rig_dir, ("bench-host",))
    try:
        return _measure(work, venv, index_url, rig, repeat)
    finally:
        rig.stop()


def _measure(work: Path, venv: Path, index_url: str, rig: SshRig, repeat: int) -> dict[str, object]:
    index = f'[index]\nurls = ["{index_url}"]\n'
    local_ws = work / "ssh-bench-local"
    remote_ws = work / "ssh-bench-remote"
    for root, text in (
        (local_ws, f'venv = "{venv}"\n{index}'),
        (remote_ws, rig.profile("bench-host", str(venv), index)),
    ):
        (root / "hosts").mkdir(parents=True, exist_ok=True)
        (root / "hosts" / "gpu.toml").write_text(text)
    local = [str(BIN / "envlock"), "capture", "gpu", "--root", str(local_ws)]
    remote = [str(BIN / "envlock"), "capture", "gpu", "--root", str(remote_ws)]
    run(local)  # page cache and agent bytecode warm for both sides
    run(remote)
    results: dict[str, object] = {}
    results["local_cold"] = timed(lambda: run([*local, "--no-cache"]), repeat)
    results["ssh_cold"] = timed(lambda: run([*remote, "--no-cache"]), repeat)
    results["local_warm"] = timed(lambda: run(local), repeat, warmup=1)
    results["ssh_warm"] = timed(lambda: run(remote), repeat, warmup=1)

    artifacts = work / "ssh-bench-artifacts"
    artifacts.mkdir(exist_ok=True)
    items = []
    for i in range(100):
        path = artifacts / f"pkg{i}-1.0-py3-none-any.whl"
        if not path.exists():
            path.write_bytes(os.urandom(64 * 1024))
        items.append(Item(hashlib.sha256(path.read_bytes()).hexdigest(), path.name, path))
    profile = parse_profile(
        "bench-host",
        {"venv": str(venv), "ssh": "bench-host", "ssh_args": ["-F", str(rig.config)]},
        Path("bench"),
    )

    def push_all() -> int:
        with open_transport(profile) as transport:
            return len(push(transport, str(venv), items, remote_dir="~/.cache/envlock/bench-artifacts").sent)

    push_all()  # the first push sends them
    sent_again: list[int] = []
    results["repush_100_present"] = timed(lambda: sent_again.append(push_all()), repeat)
    results["repush_sent"] = max(sent_again)

    def med(key: str) -> float:
        return results[key]["median"]  # type: ignore[index, no-any-return]

    results["overhead_cold"] = med("ssh_cold") / med("local_cold") - 1
    results["overhead_warm"] = med("ssh_warm") / med("local_warm") - 1
    save_result("ssh", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s |"  # type: ignore[index]

    return "\n".join(
        [
            "| measurement | median | best |",
            "|---|---|---|",
            row("local_cold", "capture, local, --no-cache"),
            row("ssh_cold", "capture over SSH (loopback), --no-cache"),
            row("local_warm", "capture, local, warm"),
            row("ssh_warm", "capture over SSH, warm"),
            row("repush_100_present", "push 100 artifacts already on the host (connection included)"),
            "",
            f"SSH overhead, cold: {results['overhead_cold']:+.1%}; "
            f"warm: {results['overhead_warm']:+.1%} (target <= 15%)",
            f"re-push sent {results['repush_sent']} of 100 (target: 0, under 1 s)",
        ]
    )


if __name__ == "__main__":
    print(report(main(Path(os.environ.get("ENVLOCK_BENCH_WORK", "/var/tmp/envlock-bench")), 3)))
