"""Real parts for tests: wheels written by hand, a PEP 503 tree, venvs, a build backend."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
UV = str(BIN / "uv")
ENVLOCK = str(BIN / "envlock")

# git in tests: a fixed identity, and no user or system config (hooks, signing) of the machine
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    out_dir: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    *,
    requires: tuple[str, ...] = (),
    console_scripts: Mapping[str, str] | None = None,
    tag: str = "py3-none-any",
) -> Path:
    """Write a valid wheel; ``files`` maps archive paths (``.data/...`` allowed) to bytes."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members = dict(files)
    members[f"{info}/METADATA"] = metadata.encode()
    members[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: envlock-tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    )
    if console_scripts:
        body = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in console_scripts.items())
        members[f"{info}/entry_points.txt"] = body.encode()
    rows = [[path, record_hash(data), str(len(data))] for path, data in members.items()]
    rows.append([f"{info}/RECORD", "", ""])
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    members[f"{info}/RECORD"] = text.getvalue().encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return path


def build_simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 tree under ``root`` (simple/ + files/); returns its file:// URL."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        target = files / wheel.name
        if not target.exists():
            shutil.copy2(wheel, target)
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        projects.setdefault(project, []).append(target)
    for project, paths in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = ""
        for p in sorted(paths):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            links += f'<a href="../../files/{p.name}#sha256={digest}">{p.name}</a>\n'
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return (root / "simple").as_uri()


def make_venv(path: Path, python: str | None = None) -> Path:
    cmd = [UV, "venv", "-q", "--python", python or sys.executable, str(path)]
    subprocess.run(cmd, check=True)
    return path


def uv_install(venv: Path, *args: str) -> None:
    subprocess.run([UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *args], check=True)


def run_envlock(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True)


BACKEND = '''
"""A tiny PEP 517/660 backend: no dependencies, so builds need no network."""
import base64, csv, hashlib, io, os, zipfile

NAME, VERSION = "@NAME@", "0.1.0"
INFO = NAME + "-" + VERSION + ".dist-info"


def _h(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(directory, members):
    meta = "Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n" % (NAME, VERSION)
    members[INFO + "/METADATA"] = meta.encode()
    wheel = "Wheel-Version: 1.0\\nGenerator: tinybackend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    members[INFO + "/WHEEL"] = wheel.encode()
    rows = [[p, _h(d), str(len(d))] for p, d in members.items()] + [[INFO + "/RECORD", "", ""]]
    out = io.StringIO()
    csv.writer(out, lineterminator="\\n").writerows(rows)
    members[INFO + "/RECORD"] = out.getvalue().encode()
    name = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, data in members.items():
            archive.writestr(path, data)
    return name


def _sources():
    members = {}
    for base, _dirs, files in os.walk("src"):
        for f in files:
            if f.endswith(".py"):
                full = os.path.join(base, f)
                with open(full, "rb") as s:
                    members[os.path.relpath(full, "src").replace(os.sep, "/")] = s.read()
    return members


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (os.path.abspath("src") + "\\n").encode()
    return _wheel(wheel_directory, {"_" + NAME + ".pth": pth})
'''


def make_local_project(path: Path, name: str, body: str = "VALUE = 1\n") -> Path:
    """A source tree built by the in-tree backend above."""
    (path / "src" / name).mkdir(parents=True, exist_ok=True)
    (path / "src" / name / "__init__.py").write_text(body)
    (path / "backend.py").write_text(BACKEND.replace("@NAME@", name))
    (path / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
    )
    return path


def compile_shared_library(out: Path) -> Path:
    """A real ELF .so that needs libm (for ELF facts)."""
    src = out.with_suffix(".c")
    src.write_text("#include <math.h>\ndouble envlock_test(double x) { return cos(x); }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(out), str(src), "-lm", "-Wl,-soname,libenvtest.so.1"],
        check=True,
    )
    src.unlink()
    return out


def walk_payload(venv: Path) -> dict[str, str]:
    """Independent of envlock: sha256 of every file a distribution installed.

    Skips bytecode, installer bookkeeping and the venv creator's own files;
    normalises the venv path in script shebangs, so two venvs at different
    paths compare equal when their payload is the same.
    """
    site = next((venv / "lib").glob("python*/site-packages"))
    bookkeeping = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
    result: dict[str, str] = {}
    for path in sorted(site.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.parent.name.endswith(".dist-info") and path.name in bookkeeping:
            continue
        result["site/" + path.relative_to(site).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted((venv / "bin").iterdir()):
        if path.is_symlink() or path.name.startswith(
            ("activate", "python", "Activate", "deactivate", "pydoc")
        ):
            continue
        data = path.read_bytes().replace(str(venv).encode(), b"{venv}")
        result["bin/" + path.name] = hashlib.sha256(data).hexdigest()
    return result


def content_listing(path: Path, skip_bytecode: bool = False) -> dict[str, str]:
    """Every entry under ``path`` with its content: a file's sha256, a link's target, "dir".

    Independent of envlock: what fault tests compare before and after.
    """

    found: dict[str, str] = {}
    for entry in sorted(path.rglob("*")):
        if skip_bytecode and "__pycache__" in entry.parts:
            continue
        rel = str(entry.relative_to(path))
        if entry.is_symlink():
            found[rel] = "-> " + os.readlink(entry)
        elif entry.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = hashlib.sha256(entry.read_bytes()).hexdigest()
    return found


def descendants(parent: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below ``parent``, from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 1 :].split()[1])
        children.setdefault(ppid, []).append((int(stat.parent.name), comm))
    found, todo = [], [parent]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            found.append((pid, comm))
            todo.append(pid)
    return found


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` (T: stopped), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 1 :].split()[0]


def wait_stopped(under: int, proc: subprocess.Popen[str]) -> int:
    """A process below ``under`` stopped by SIGSTOP (an agent at its ENVLOCK_FAULT point).

    Bounded: 60 s; fails at once if ``proc`` (what started it) ends first.
    """
    for _ in range(600):
        stopped = [pid for pid, _ in descendants(under) if process_state(pid) == "T"]
        if stopped:
            return stopped[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("no process reached its fault point")


def copy_lock(root: Path, source: str, target: str) -> None:
    """Give host ``target`` the lock (and manifest) of host ``source``, as written."""
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(root / "locks" / f"pylock.{source}{suffix}", root / "locks" / f"pylock.{target}{suffix}")
