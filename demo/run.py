"""``make demo``: the main job on a small real venv, end to end.

1. download a few real wheels and serve them as a local PEP 503 index;
2. build the reference venv (host ``ct129`` in demo/work/fleet/hosts);
3. hand-patch one file, as people do on real hosts;
4. ``envlock capture ct129`` -> demo/work/fleet/locks/pylock.ct129.toml;
5. rebuild a second venv from the lock with ``uv pip sync`` and check that
   every payload byte matches (patch included);
6. ``envlock export ct129`` for pip-tools users.

Steps that later issues add (lock for a second host profile, apply, verify,
smoke) join this script as they land.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
BIN = Path(sys.executable).parent
PINS = ["six==1.17.0", "idna==3.20", "attrs==26.1.0", "packaging==26.3"]


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def sh(*cmd: str) -> None:
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def build_index(wheels: Path, root: Path) -> str:
    for wheel in sorted(wheels.glob("*.whl")):
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        link = f'<a href="{wheel.resolve().as_uri()}#sha256={digest}">{wheel.name}</a>'
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{link}\n</body></html>\n")
    return (root / "simple").as_uri()


def payload(venv: Path) -> dict[str, str]:
    site = next((venv / "lib").glob("python*/site-packages"))
    skip = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
    return {
        p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.name not in skip
    }


def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    wheels, fleet = WORK / "wheels", WORK / "fleet"
    say("download a few real wheels and serve them as a local index")
    sh(sys.executable, "-m", "pip", "download", "-qq", "--no-deps", "-d", str(wheels), *PINS)
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
