"""``make demo``: the main job on a small real venv, end to end.

1. download a few real wheels (one with a compiled extension, for Python
   3.11 and 3.12) and serve them as a local PEP 503 index;
2. build the reference venv of host ``ct129`` (Python 3.11) and hand-patch
   one file, as people do on real hosts;
3. ``envlock capture ct129`` -> demo/work/fleet/locks/pylock.ct129.toml;
4. ``envlock lock ct200``: host ct200 runs Python 3.12 (probed on the host),
   so the compiled wheel changes and the lock says why;
5. ``envlock apply ct200``: build, verify, smoke, swap in;
6. ``envlock verify ct200``, ``envlock smoke ct200``, ``envlock diff ct129 ct200``;
7. the same lock also installs with plain ``uv pip sync`` (PEP 751), and
   ``envlock export`` writes it for pip-tools.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
BIN = Path(sys.executable).parent
PINS = ["six==1.17.0", "idna==3.20", "attrs==26.1.0", "packaging==26.3", "markupsafe==3.0.3"]
PYENV = Path.home() / ".pyenv" / "versions"


def say(text: str) -> None:
    # bold only on a terminal, and never with NO_COLOR (https://no-color.org): `make demo | cat` stays plain
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(f"\n\033[1m==> {text}\033[0m" if bold else f"\n==> {text}", flush=True)


def sh(*cmd: str, ok: tuple[int, ...] = (0,)) -> None:
    print("$ " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd).returncode
    if code not in ok:
        raise SystemExit(f"demo: {cmd[0]} exited {code}")


def build_index(wheels: Path, root: Path) -> str:
    pages: dict[str, list[str]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        link = f'<a href="{wheel.resolve().as_uri()}#sha256={digest}">{wheel.name}</a>'
        pages.setdefault(project, []).append(link)
    for project, links in pages.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        body = "\n".join(links)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{body}\n</body></html>\n")
    return (root / "simple").as_uri()


def payload(venv: Path) -> dict[str, str]:
    site = next((venv / "lib").glob("python*/site-packages"))
    skip = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
    return {
        p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.name not in skip
    }


def _python312() -> str | None:
    """A CPython 3.12 for host ct200 (pyenv provides one on these machines)."""
    found = sorted(PYENV.glob("3.12.*/bin/python3.12"))
    return str(found[-1]) if found else shutil.which("python3.12")


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    wheels, fleet = WORK / "wheels", WORK / "fleet"
    say("download a few real wheels and serve them as a local index")
    sh(sys.executable, "-m", "pip", "download", "-qq", "--no-deps", "-d", str(wheels), *PINS)
    target_python = _python312()
    if target_python:
        cp312 = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"]
        platform = ["--platform", "manylinux_2_17_x86_64", "--only-binary=:all:"]
        pip = [sys.executable, "-m", "pip", "download", "-qq", "--no-deps", *cp312, *platform]
        sh(*pip, "-d", str(wheels), "markupsafe==3.0.3")
    index = build_index(wheels, WORK / "index")

    say("build the reference venv for host ct129")
    ref = WORK / "venv-ct129"
    sh(str(BIN / "uv"), "venv", "-q", "--python", sys.executable, str(ref))
    sh(
        str(BIN / "uv"),
        "pip",
        "install",
        "-q",
        "--link-mode",
        "copy",
        "--python",
        str(ref / "bin/python"),
        "--index-url",
        index,
        *PINS,
    )
    six = next(ref.glob("lib/python*/site-packages/six.py"))
    six.write_text(six.read_text() + "\n# hot fix applied by hand on ct129\n")
    (fleet / "hosts").mkdir(parents=True)
    (fleet / "hosts" / "ct129.toml").write_text(f'venv = "{ref}"\n\n[index]\nurls = ["{index}"]\n')

    envlock = str(BIN / "envlock")
    say("envlock capture ct129")
    sh(envlock, "capture", "ct129", "--root", str(fleet))
    say("the same capture again: served from the stat cache, lock unchanged")
    sh(envlock, "capture", "ct129", "--root", str(fleet))

    target = WORK / "venv-ct200"
    profile = f'venv = "{target}"\nreference = "ct129"\n'
    profile += f'python = "{target_python or Path(sys.executable).resolve()}"\n'
    profile += f'\n[index]\nurls = ["{index}"]\n\n[smoke]\nchecks = ["from markupsafe import escape"]\n'
    (fleet / "hosts" / "ct200.toml").write_text(profile)
    say("envlock lock ct200 (Python probed on the host)")
    sh(envlock, "lock", "ct200", "--root", str(fleet))
    say("envlock apply ct200 --dry-run, then for real")
    sh(envlock, "apply", "ct200", "--root", str(fleet), "--dry-run")
    sh(envlock, "apply", "ct200", "--root", str(fleet))
    say("envlock apply ct200 again: nothing to do")
    sh(envlock, "apply", "ct200", "--root", str(fleet))
    say("envlock verify ct200")
    sh(envlock, "verify", "ct200", "--root", str(fleet))
    say("envlock smoke ct200")
    sh(envlock, "smoke", "ct200", "--root", str(fleet))
    say("envlock diff ct129 ct200")
    # Exit 1: the two locks differ, as they should (Python 3.12 wheel, other venv path).
    sh(envlock, "diff", "ct129", "ct200", "--root", str(fleet), ok=(0, 1))

    say("rebuild a second venv from the lock with plain uv (PEP 751)")
    rebuilt = WORK / "venv-rebuilt"
    sh(str(BIN / "uv"), "venv", "-q", "--python", sys.executable, str(rebuilt))
    sh(
        str(BIN / "uv"),
        "pip",
        "sync",
        "-q",
        "--python",
        str(rebuilt / "bin/python"),
        str(fleet / "locks/pylock.ct129.toml"),
    )
    expected, got = payload(ref), payload(rebuilt)
    differ = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    if differ:
        print(f"payload differs in {len(differ)} file(s): {differ[:5]}")
        return 1
    print(f"payload identical: {len(expected)} files, hand patch included")

    say("envlock export ct129 (for pip-sync / pip --require-hashes)")
    sh(envlock, "export", "ct129", "--root", str(fleet), "-o", str(WORK / "requirements.txt"))
    print((WORK / "requirements.txt").read_text())
    say("done: lock in demo/work/fleet/locks/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
