"""Issue 17, apply side: whole-process figures against anchors measured in the same run.

Every envlock figure is the real ``envlock`` command run as a user runs it
(interpreter start included). Rows:

- warm capture of the GPU venv over SSH (the loopback rig of
  tests/sshrig.py) minus the same capture run locally, with the master
  connection kept between runs (the default) and without it
  (``ENVLOCK_SSH_PERSIST=0``, as before); goal <= +0.15 s;
- no-op apply of the applied GPU venv (22,000 files; this interpreter's
  bytecode written, as after real use), locally (goal <= 0.3 s) and over SSH
  (goal <= 0.5 s); anchor: ``python -c pass`` and ``envlock --version``;
- apply of the GPU lock into a fresh path against ``uv pip install
  --link-mode copy`` of the same wheels plus a raw parallel sha256 of the
  installed tree (goal <= 1.2x), and ``pip install --require-hashes``
  against apply (goal >= 3x);
- on a loop-mounted XFS image (reflinks): apply, which clones there, against
  uv's default install (hard links from its warm cache) and uv's clone mode,
  each plus the raw hash (goal: as fast as uv's default, read as <= 1.2x).

Rows that compare two commands alternate them run by run, so load on a
shared machine falls on both alike; medians are reported.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import BIN, ROOT, fresh_venv, gpu_venv, payload_files, raw_hash_python, run, save_result

sys.path.insert(0, str(ROOT / "tests"))

from sshrig import SshRig

ENVLOCK = str(BIN / "envlock")
UV = str(BIN / "uv")


def alternate(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, dict[str, float]]:
    """Run each function ``repeat`` times, in turns; median and best of each."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {n: {"median": statistics.median(t), "best": min(t), "runs": len(t)} for n, t in times.items()}


def _workspace(root: Path, profiles: dict[str, str]) -> None:
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    for host, text in profiles.items():
        (root / "hosts" / f"{host}.toml").write_text(text)


def _copy_lock(root: Path, source: str, target: str) -> None:
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(root / "locks" / f"pylock.{source}{suffix}", root / "locks" / f"pylock.{target}{suffix}")


def main(work: Path, repeat: int) -> dict[str, object]:
    venv, index_url = gpu_venv(work)
    base = work / "apply-whole"
    base.mkdir(exist_ok=True)
    rig_dir = base / "rig"
    if rig_dir.exists():
        shutil.rmtree(rig_dir)
    rig = SshRig.start(rig_dir, ("bench-host",))
    try:
        results: dict[str, object] = {"machine": _machine()}
        # Disk: one 5.6 GB venv of envlock's and one anchor's at a time, the XFS image after them.
        _workspace(base / "ws", _profiles(base, venv, index_url, rig))
        _fresh_apply(base, repeat, results)  # leaves the last applied venv for the no-op rows
        _ssh_and_noop(base, repeat, results)
        fresh_venv(base / "fresh")
        _reflink(base, repeat, results)
    finally:
        rig.stop()
    save_result("apply_whole", results)
    return results


def _machine() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, load average at start {load[0]:.1f} (shared with other engineers' work)"


def _profiles(base: Path, venv: Path, index_url: str, rig: SshRig) -> dict[str, str]:
    """The GPU venv, locally and over SSH; ``fresh``, the applied venv, reached both ways at one path
    (the rig's sshd sees this machine's files outside its own host directory)."""
    index = f'[index]\nurls = ["{index_url}"]\n'
    fresh = base / "fresh"
    return {
        "gpu": f'venv = "{venv}"\n{index}',
        "gpu-ssh": rig.profile("bench-host", str(venv), index),
        "fresh": f'venv = "{fresh}"\n',
        "fresh-ssh": rig.profile("bench-host", str(fresh)),
    }


def _ssh_and_noop(base: Path, repeat: int, results: dict[str, object]) -> None:
    root = base / "ws"
    target = base / "fresh"
    capture = [ENVLOCK, "capture", "gpu", "--root", str(root)]
    capture_ssh = [ENVLOCK, "capture", "gpu-ssh", "--root", str(root)]
    run(capture_ssh)  # ships the agent to the host's own cache, fills its stat cache
    once = dict(os.environ, ENVLOCK_SSH_PERSIST="0")
    results["capture_warm"] = alternate(
        {
            "local": lambda: run(capture),
            "ssh_persist": lambda: run(capture_ssh),
            "ssh_no_persist": lambda: run(capture_ssh, env=once),
        },
        repeat + 2,
    )
    _copy_lock(root, "gpu", "fresh-ssh")
    # Real use writes this interpreter's bytecode (the staged smoke writes none).
    subprocess.run(
        [str(target / "bin/python"), "-m", "compileall", "-q", "-j", "2", str(target / "lib")],
        stdout=subprocess.DEVNULL,
        check=False,
    )
    noop = [ENVLOCK, "apply", "fresh", "--root", str(root)]
    noop_ssh = [ENVLOCK, "apply", "fresh-ssh", "--root", str(root)]
    run(noop)
    run(noop_ssh)
    results["noop"] = alternate(
        {
            "python_pass": lambda: run([sys.executable, "-c", "pass"]),
            "envlock_version": lambda: run([ENVLOCK, "--version"]),
            "local": lambda: run(noop),
            "ssh": lambda: run(noop_ssh),
            "ssh_no_persist": lambda: run(noop_ssh, env=once),
        },
        repeat + 4,
    )
    results["pyc_files"] = sum(1 for _ in target.rglob("*.pyc"))
    results["files"] = len(payload_files(target))


def _requirements(root: Path, host: str, out: Path, artifacts: Path) -> Path:
    lock_text = (root / "locks" / f"pylock.{host}.toml").read_text()
    # By name and sha256: a shared drop may hold another build under the same file name.
    wheels = [
        w
        for w in sorted(artifacts.glob("*/*.whl"))
        if f'"{w.name}"' in lock_text and w.parent.name in lock_text
    ]
    out.write_text(
        "".join(f"{w.name.split('-')[0]} @ file://{w} --hash=sha256:{w.parent.name}\n" for w in wheels)
    )
    return out


def _uv_install(target: Path, requirements: Path, cache: Path | None, *flags: str) -> None:
    shutil.rmtree(target, ignore_errors=True)
    python = Path(sys.executable).resolve()
    run([UV, "venv", "-q", "--python", str(python), str(target)])
    cache_flags = ["--cache-dir", str(cache)] if cache else []
    argv = [UV, "pip", "install", "--python", str(target / "bin/python"), "--offline", "--no-index"]
    run([*argv, "--no-deps", "--require-hashes", "-q", *cache_flags, *flags, "-r", str(requirements)])


def _fresh_apply(base: Path, repeat: int, results: dict[str, object]) -> None:
    root = base / "ws"
    run([ENVLOCK, "capture", "gpu", "--root", str(root)])
    _copy_lock(root, "gpu", "fresh")
    fresh = base / "fresh"

    def apply_fresh() -> None:
        fresh_venv(fresh)
        run([ENVLOCK, "apply", "fresh", "--root", str(root)])

    apply_fresh()  # store, artifact drop and uv's cache warm; unmeasured
    requirements = _requirements(
        root, "fresh", base / "requirements.txt", Path.home() / ".cache/envlock/artifacts"
    )
    uv_target = base / "uv-copy"
    _uv_install(uv_target, requirements, None, "--link-mode", "copy")  # uv's cache warm
    files = payload_files(uv_target)
    results["fresh"] = alternate(
        {
            "apply": apply_fresh,
            "uv_copy": lambda: _uv_install(uv_target, requirements, None, "--link-mode", "copy"),
            "raw_hash": lambda: raw_hash_python(files, 4),
        },
        repeat,
    )
    pip_target = base / "pip"

    def pip_install() -> None:
        shutil.rmtree(pip_target, ignore_errors=True)
        run([sys.executable, "-m", "venv", "--without-pip", str(pip_target)])
        pip = [sys.executable, "-m", "pip", "--python", str(pip_target / "bin/python"), "install", "-q"]
        run([*pip, "--no-deps", "--require-hashes", "--no-cache-dir", "-r", str(requirements)])

    shutil.rmtree(uv_target, ignore_errors=True)
    results["pip"] = alternate({"pip": pip_install, "apply": apply_fresh}, 1)
    shutil.rmtree(pip_target, ignore_errors=True)


def _reflink(base: Path, repeat: int, results: dict[str, object]) -> None:
    """The same lock applied on XFS with reflinks, HOME (so uv's cache and the artifact drop)
    and the workspace on that filesystem too, as on a host whose disk is XFS."""
    image, mount = base / "xfs.img", base / "xfs"
    mount.mkdir(exist_ok=True)
    with open(image, "wb") as out:
        out.truncate(20 << 30)
    run(["/usr/sbin/mkfs.xfs", "-q", "-f", "-m", "reflink=1", str(image)])
    run(["mount", "-o", "loop", str(image), str(mount)])
    try:
        _reflink_measure(base, mount, repeat, results)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        image.unlink()


def _reflink_measure(base: Path, mount: Path, repeat: int, results: dict[str, object]) -> None:
    home = mount / "home"
    root = mount / "ws"
    target = mount / "venv"
    # The store stays on ext4 (its wheels are checked again on use); the push copies them over.
    env = dict(
        os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), ENVLOCK_STORE=str(base / "ws/store")
    )
    shutil.copytree(base / "ws" / "locks", root / "locks")
    _workspace(root, {"xfs": f'venv = "{target}"\n'})
    _copy_lock(root, "gpu", "xfs")
    apply = [ENVLOCK, "apply", "xfs", "--root", str(root), "--format", "json"]

    modes: list[str] = []

    def apply_fresh() -> None:
        fresh_venv(target)
        out = subprocess.run(apply, check=True, capture_output=True, text=True, env=env).stdout
        modes.append(('"link_mode": "clone"' in out and "clone") or "copy")

    apply_fresh()  # unpacks the wheels into uv's cache on XFS; unmeasured
    requirements = _requirements(root, "xfs", mount / "requirements.txt", home / ".cache/envlock/artifacts")
    cache = home / ".cache" / "envlock" / "uv"  # the cache apply filled (same unpacked wheels)
    uv_target = mount / "uv"
    _uv_install(uv_target, requirements, cache)  # warm
    files = payload_files(uv_target)
    results["xfs"] = alternate(
        {
            "apply": apply_fresh,
            "uv_default": lambda: _uv_install(uv_target, requirements, cache),
            "uv_clone": lambda: _uv_install(uv_target, requirements, cache, "--link-mode", "clone"),
            "raw_hash": lambda: raw_hash_python(files, 4),
        },
        repeat,
    )
    results["xfs_link_modes"] = sorted(set(modes))


def _med(results: dict[str, object], row: str, name: str) -> float:
    return results[row][name]["median"]  # type: ignore[index, no-any-return]


def table(results: dict[str, object]) -> list[list[str]]:
    """(row, envlock, anchor, ratio, goal, met?) from one run."""
    m = lambda row, name: _med(results, row, name)  # noqa: E731
    met = lambda ok: "yes" if ok else "no"  # noqa: E731
    ssh_extra = m("capture_warm", "ssh_persist") - m("capture_warm", "local")
    before = m("capture_warm", "ssh_no_persist") - m("capture_warm", "local")
    fresh = m("fresh", "uv_copy") + m("fresh", "raw_hash")
    xfs_default = m("xfs", "uv_default") + m("xfs", "raw_hash")
    xfs_clone = m("xfs", "uv_clone") + m("xfs", "raw_hash")
    return [
        ["warm capture over SSH, master kept (before: a new connection each run)",
         f"{m('capture_warm', 'ssh_persist'):.2f} s (before {m('capture_warm', 'ssh_no_persist'):.2f} s)",
         f"local {m('capture_warm', 'local'):.2f} s", f"+{ssh_extra:.2f} s (before +{before:.2f} s)",
         "<= +0.15 s", "yes" if ssh_extra <= 0.15 else "no"],
        [f"no-op apply, {results['files']:,} files, {results['pyc_files']:,} .pyc, local",
         f"{m('noop', 'local'):.2f} s", f"`envlock --version` {m('noop', 'envlock_version'):.2f} s, "
         f"`python -c pass` {m('noop', 'python_pass'):.2f} s", "-", "<= 0.3 s",
         "yes" if m("noop", "local") <= 0.3 else "no"],
        ["no-op apply over SSH (before: a new connection)", f"{m('noop', 'ssh'):.2f} s "
         f"(before {m('noop', 'ssh_no_persist'):.2f} s)", f"local no-op {m('noop', 'local'):.2f} s",
         f"+{m('noop', 'ssh') - m('noop', 'local'):.2f} s", "<= 0.5 s", met(m("noop", "ssh") <= 0.5)],
        ["apply, fresh path (ext4: copies)", f"{m('fresh', 'apply'):.1f} s",
         f"uv copy mode {m('fresh', 'uv_copy'):.1f} s + raw hash {m('fresh', 'raw_hash'):.1f} s",
         f"{m('fresh', 'apply') / fresh:.2f}x", "<= 1.2x", met(m("fresh", "apply") / fresh <= 1.2)],
        ["pip --require-hashes vs apply", f"{m('pip', 'apply'):.1f} s", f"pip {m('pip', 'pip'):.1f} s",
         f"{m('pip', 'pip') / m('pip', 'apply'):.1f}x faster", ">= 3x",
         "yes" if m("pip", "pip") / m("pip", "apply") >= 3 else "no"],
        [f"apply on XFS ({', '.join(results['xfs_link_modes'])})", f"{m('xfs', 'apply'):.1f} s",  # type: ignore[arg-type]
         f"uv default (hard links) {m('xfs', 'uv_default'):.1f} s + raw hash {m('xfs', 'raw_hash'):.1f} s",
         f"{m('xfs', 'apply') / xfs_default:.2f}x", "as fast as uv's default",
         "yes" if m("xfs", "apply") / xfs_default <= 1.2 else "no"],
        ["apply on XFS vs uv clone mode", f"{m('xfs', 'apply'):.1f} s",
         f"uv clone {m('xfs', 'uv_clone'):.1f} s + raw hash {m('xfs', 'raw_hash'):.1f} s",
         f"{m('xfs', 'apply') / xfs_clone:.2f}x", "<= 1.2x", met(m("xfs", "apply") / xfs_clone <= 1.2)],
    ]  # fmt: skip


def report(results: dict[str, object]) -> str:
    lines = ["| row | envlock | anchor | ratio | goal | met? |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in table(results)]
    lines.append(f"\nmachine: {results['machine']}")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--work", type=Path, default=Path(os.environ.get("ENVLOCK_BENCH_WORK", "/var/tmp/envlock-bench"))
    )
    args = parser.parse_args()
    print(report(main(args.work, args.repeat)))
