"""Issue 5 benchmark: envlock lock for a 300-package reference against a loopback index.

A synthetic index of 300 small wheels (a dependency chain every 10
packages) served by http.server on 127.0.0.1; a reference venv with all of
them, captured; then, warm caches, in one run: `envlock lock` of a target
with the same Python (every reference wheel kept) against
`uv pip compile --generate-hashes` of the same 300 pins from the same index.
Target: envlock at most 3x uv.
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

from common import BIN, ROOT, run, save_result, timed

sys.path.insert(0, str(ROOT / "tests"))

from helpers import build_simple_index, make_wheel

COUNT = 300


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


def _serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/simple"


def index_tree(work: Path) -> Path:
    """The 300-wheel PEP 503 tree under ``work/lock-bench/index`` (made once)."""
    base = work / "lock-bench"
    wheels_dir, index_dir = base / "wheels", base / "index"
    if not (index_dir / "simple").is_dir():
        wheels = []
        for i in range(COUNT):
            requires = (f"pkg{i + 1:03d}>=1.0",) if i % 10 != 9 and i + 1 < COUNT else ()
            files = {f"pkg{i:03d}/__init__.py": f"N = {i}\n".encode()}
            wheels.append(make_wheel(wheels_dir, f"pkg{i:03d}", "1.0", files, requires=requires))
        build_simple_index(index_dir, wheels)
    return index_dir


def main(work: Path, repeat: int) -> dict[str, object]:
    server, url = _serve(index_tree(work))
    try:
        return _measure(work / "lock-bench", url, repeat)
    finally:
        server.shutdown()


def prepare(base: Path, url: str) -> tuple[Path, list[str]]:
    """A captured 300-package reference and a target host under ``base``: (workspace root, uv's argv)."""
    venv = base / "venv"
    uv = str(BIN / "uv")
    pins = [f"pkg{i:03d}==1.0" for i in range(COUNT)]
    if not venv.exists():
        run([uv, "venv", "-q", "--python", sys.executable, str(venv)])
        run([uv, "pip", "install", "-q", "--python", str(venv / "bin/python"), "--index-url", url, *pins])
    root = base / "ws"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    index = f'[index]\nurls = ["{url}"]\n'
    (root / "hosts" / "ref.toml").write_text(f'venv = "{venv}"\n{index}')
    python = Path(sys.executable).resolve()
    version = ".".join(str(v) for v in sys.version_info[:3])
    target = (
        f'venv = "{base}/target"\nreference = "ref"\npython = "{python}"\n[target]\npython = "{version}"\n'
    )
    (root / "hosts" / "target.toml").write_text(target + index)
    envlock = str(BIN / "envlock")
    run([envlock, "capture", "ref", "--root", str(root), "--no-cache"])
    requirements = base / "requirements.in"
    requirements.write_text("\n".join(pins) + "\n")
    out = base / "requirements.txt"
    compile_cmd = [
        uv,
        "pip",
        "compile",
        "-q",
        "--generate-hashes",
        "--index-url",
        url,
        "--python-version",
        f"{sys.version_info[0]}.{sys.version_info[1]}",
        str(requirements),
        "-o",
        str(out),
    ]
    return root, compile_cmd


def _measure(base: Path, url: str, repeat: int) -> dict[str, object]:
    root, compile_cmd = prepare(base, url)
    envlock = str(BIN / "envlock")
    results: dict[str, object] = {"packages": COUNT}
    results["envlock_lock"] = timed(
        lambda: run([envlock, "lock", "target", "--root", str(root)]), repeat, warmup=1
    )
    results["uv_pip_compile"] = timed(lambda: run(compile_cmd), repeat, warmup=1)
    locked = subprocess.run([envlock, "lock", "target", "--root", str(root), "--check"], capture_output=True)
    results["check_exit"] = locked.returncode
    results["ratio"] = results["envlock_lock"]["median"] / results["uv_pip_compile"]["median"]  # type: ignore[index]
    save_result("lock", results)
    return results


def report(results: dict[str, object]) -> str:
    def row(key: str, label: str) -> str:
        r = results[key]
        return f"| {label} | {r['median']:.2f} s | {r['best']:.2f} s |"  # type: ignore[index]

    return "\n".join(
        [
            f"{results['packages']} packages, loopback index, warm caches",
            "",
            "| measurement | median | best |",
            "|---|---|---|",
            row("envlock_lock", "envlock lock (target keeps every reference wheel)"),
            row("uv_pip_compile", "uv pip compile --generate-hashes, same pins"),
            "",
            f"envlock lock / uv pip compile: {results['ratio']:.2f}x (target <= 3x)",
        ]
    )
