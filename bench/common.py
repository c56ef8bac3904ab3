"""Shared bench helpers: timing, the GPU venv, raw hashing anchors, result files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DEFAULT_WORK = Path(os.environ.get("ENVLOCK_BENCH_WORK", "/var/tmp/envlock-bench"))
GPU_PINS = ["torch==2.14.1", "transformers", "numpy"]


def timed(fn: Callable[[], object], repeat: int = 3, warmup: int = 0) -> dict[str, float]:
    """Median and best wall time of ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "best": min(times), "runs": repeat}


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload, no-any-return]


def build_index(wheelhouse: Path, index_root: Path) -> str:
    """A PEP 503 tree (with sha256 fragments) over a wheelhouse; returns its URL."""
    pages: dict[str, list[str]] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        digest = hashlib.sha256()
        with open(wheel, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        project = wheel.name.split("-")[0].replace("_", "-").replace(".", "-").lower()
        href = f"{wheel.resolve().as_uri()}#sha256={digest.hexdigest()}"
        pages.setdefault(project, []).append(f'<a href="{href}">{wheel.name}</a>')
    for project, links in pages.items():
        page = index_root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        )
    return (index_root / "simple").as_uri()


def gpu_venv(work: Path) -> tuple[Path, str]:
    """The ~5.6 GB torch venv, installed only from a local index envlock can trace.

    Wheels are downloaded once (pip, with this machine's configured indexes)
    into a wheelhouse, served as a PEP 503 tree, and the venv is installed
    from that tree alone, so every distribution has an index wheel.
    """
    venv = work / "gpu-venv"
    wheelhouse = work / "wheelhouse"
    index_root = work / "index"
    marker = venv / ".envlock-bench-complete"
    if not (wheelhouse / ".complete").exists():
        wheelhouse.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "-q", "-d", str(wheelhouse), *GPU_PINS])
        (wheelhouse / ".complete").touch()
    url = (index_root / "simple").as_uri()
    if not (index_root / "simple").is_dir():
        url = build_index(wheelhouse, index_root)
    if not marker.exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(venv)])
        env = dict(os.environ, PIP_FIND_LINKS="", PIP_CONFIG_FILE=os.devnull)
        run([str(venv / "bin/pip"), "install", "-q", "--index-url", url, *GPU_PINS], env=env)
        marker.touch()
    return venv, url


def fresh_venv(path: Path) -> None:
    """Remove a venv and its ``.envlock`` state, so the next apply starts from nothing."""
    for suffix in ("", ".envlock"):
        target = Path(f"{path}{suffix}")
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def payload_files(venv: Path) -> list[Path]:
    """The files capture hashes: every regular file outside __pycache__."""
    files = []
    for base, dirs, names in os.walk(venv):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(base, d))]
        for name in names:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                files.append(Path(path))
    return files


def raw_hash_python(files: list[Path], jobs: int) -> None:
    def one(path: Path) -> str:
        digest = hashlib.sha256()
        with open(path, "rb", buffering=0) as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    with ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(one, files, chunksize=64):
            pass


def raw_hash_sha256sum(venv: Path, jobs: int) -> None:
    find = subprocess.Popen(
        ["find", str(venv), "-type", "f", "-not", "-path", "*/__pycache__/*", "-print0"],
        stdout=subprocess.PIPE,
    )
    subprocess.run(
        ["xargs", "-0", f"-P{jobs}", "-n", "256", "sha256sum"],
        stdin=find.stdout,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    find.wait()


def save_result(name: str, data: dict[str, object]) -> Path:
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
