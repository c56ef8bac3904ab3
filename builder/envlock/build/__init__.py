"""``envlock build PKG --host HOST``: a wheel of PKG for the host's GPU, from its sdist.

For when no index has a build with the host's arch (``envlock lock`` says
so). Order of work, cheapest refusal first:

1. the host's facts: the lock whose wheels pin the build (the host's own
   lock, else its reference's: the one ``envlock lock`` derives from), the
   GPU (``--gpu``, else the profile's ``[gpu] cc``, else the lock's), the
   indexes (the profile's ``[index]``, else the lock's);
2. the toolchain (``toolchain.py``): nvcc for that arch and the lock's CUDA;
3. the sdist (``sdist.py``), fetched by sha256 and unpacked;
4. the isolated build environment (``env.py``) from the lock's exact wheels;
5. the PEP 517 build with the arch flags (``runner.py``), output to a log;
6. the check (``check.py``): the arch as SASS or JIT-able PTX, every symbol bound;
7. the wheel into the store, with its build record (``envlock.buildrecord``).

The build directory (``~/.cache/envlock/build/<pkg>-<version>-sm_<arch>-<key>``,
key: the inputs' hashes) holds the venv, the unpacked tree and the log. It
is removed after a build that passed, and kept after one that failed; a
re-run with the same inputs reuses its venv and its tree (and so the object
files a backend like ninja left there).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envlock.build.check import LibraryVerdict, check_wheel
from envlock.build.env import PinPlanner, make_env, python_for
from envlock.build.runner import BuildFailed, arch_flags, build_env, run_backend
from envlock.build.sdist import build_system, fetch_sdist, find_sdist, unpack
from envlock.build.toolchain import find_toolchain
from envlock.buildrecord import BuildInput, BuildRecord, record_path, write_record
from envlock.errors import EnvlockError, ProfileError
from envlock.hosts import load_profile
from envlock.index import IndexClient
from envlock.lock.model import Lock
from envlock.reporter import Reporter
from envlock.store import Store
from envlock.workspace import Workspace, cache_dir

_CC = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True, slots=True)
class BuildResult:
    record: BuildRecord
    wheel: Path  # in the store
    record_file: Path
    build_dir: Path  # removed by now
    reused: bool  # the build environment of an earlier run was reused
    libraries: tuple[LibraryVerdict, ...]


def build_package(
    workspace: Workspace,
    name: str,
    host: str,
    *,
    gpu: str | None = None,
    version: str | None = None,
    extra: tuple[str, ...] = (),
    reporter: Reporter | None = None,
) -> BuildResult:
    reporter = reporter or Reporter()
    started = time.monotonic()
    phases: dict[str, float] = {}
    mark = [started]

    def lap(phase: str) -> None:
        now = time.monotonic()
        phases[phase] = round(now - mark[0], 1)
        mark[0] = now

    profile = load_profile(workspace, host)
    lock, lock_shown = _pinning_lock(workspace, host, profile.reference)
    own = lock.host == host  # the host's own lock, not its reference's (another GPU, maybe another Python)
    profile_shown = workspace.shown(profile.path)
    ccs = _gpus(gpu, profile.gpu.cc if profile.gpu else (), lock if own else None, profile_shown)
    if not own and profile.target is not None:
        _same_python(profile.target.python, lock, lock_shown, profile_shown)
    sms = tuple(cc.replace(".", "") for cc in ccs)
    toolchain = find_toolchain(sms, lock, lock_shown)
    python = python_for(lock.interpreter.version)
    urls = profile.index.urls if profile.index else lock.indexes
    links = profile.index.find_links if profile.index else lock.find_links
    client = IndexClient(tuple(urls), tuple(links))
    store = Store(workspace.store_dir)
    locked = lock.package(name)
    file = find_sdist(client, name, version or (locked.version if locked else None))
    reporter.step(f"sdist {file.filename}")
    sdist = fetch_sdist(store, workspace.locks_dir, file)
    lap("sdist")

    key = hashlib.sha256(
        "\n".join([sdist.sha256, lock.digest, *ccs, toolchain.nvcc_version, python, *extra]).encode()
    ).hexdigest()[:12]
    label = "-".join(f"sm_{sm}" for sm in sms)
    build_dir = cache_dir() / "build" / f"{sdist.name}-{sdist.version}-{label}-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    with open(log, "a", encoding="utf-8") as stream:
        stream.write(
            f"# envlock build {name} --host {host} ({', '.join(ccs)}) {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
        )
    reporter.step(f"build directory {build_dir} (log: {log})")
    tree = unpack(sdist, build_dir / "src")
    system = build_system(tree, sdist.filename)

    planner = PinPlanner(lock, lock_shown, workspace.locks_dir, store, client)
    pins = planner.plan(planner.roots(system.requires, system.requires_dist, extra))
    shown = ", ".join(f"{p.name} {p.version}" for p in pins) or "nothing"
    reporter.step(f"build environment (Python {lock.interpreter.major_minor}): {shown}")
    reused = make_env(build_dir / "env", python, pins, log)
    lap("environment")

    flags = arch_flags(ccs)
    env = build_env(build_dir / "env", toolchain, flags)
    reporter.step(f"build for {label} with nvcc {toolchain.nvcc_version} (CUDA {toolchain.cuda_version})")
    wheel = run_backend(
        venv=build_dir / "env",
        tree=tree,
        backend=system.backend,
        backend_path=system.backend_path,
        out=build_dir / "dist",
        env=env,
        log=log,
        on_line=lambda n, line: reporter.progress("build", n, 0, line),
    )
    lap("build")
    _is_the_sdists_wheel(wheel, sdist.name, sdist.version, log)
    reporter.step(f"check {wheel.name} on {', '.join(ccs)}")
    libraries = check_wheel(wheel, build_dir / "env", ccs, log)
    lap("check")

    stored, sha = store.put_wheel(wheel.read_bytes(), wheel.name)
    log_sha = store.put_blob(log.read_bytes())
    notes = () if any(lib.device_code for lib in libraries) else ("the wheel carries no GPU code",)
    record = BuildRecord(
        package=sdist.name,
        version=sdist.version,
        wheel=wheel.name,
        sha256=sha,
        host=host,
        lock=lock_shown,
        lock_digest=lock.digest,
        gpu=ccs,
        python=python_version(build_dir / "env"),
        toolchain=toolchain,
        flags=flags,
        env={k: v for k, v in env.items() if k != "HOME"},
        inputs=(
            BuildInput(
                role="sdist",
                name=sdist.name,
                version=sdist.version,
                filename=sdist.filename,
                sha256=sdist.sha256,
                url=sdist.url,
            ),
            *(p.as_input() for p in pins),
        ),
        verdicts={f"{lib.path} ({lib.gpu})": lib.verdict for lib in libraries},
        log_sha256=log_sha,
        seconds=round(time.monotonic() - started, 1),
        phases=phases,
        notes=notes,
    )
    written = write_record(store, record)
    shutil.rmtree(build_dir, ignore_errors=True)
    return BuildResult(record, stored, written, build_dir, reused, tuple(libraries))


def _is_the_sdists_wheel(wheel: Path, name: str, version: str, log: Path) -> None:
    """The backend names the wheel; a wheel of another project (or version) would enter the
    store as a built candidate for it: a build of ``gpukern`` must not plant a ``torch``."""
    try:
        got_name, got_version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise BuildFailed(
            f"the backend wrote {wheel.name!r}, not a wheel file name ({exc}); log: {log}"
        ) from exc
    if got_name != canonicalize_name(name) or got_version != Version(version):
        raise BuildFailed(
            f"the backend wrote {wheel.name}, a wheel of {got_name} {got_version}, "
            f"from the sdist of {name} {version}; log: {log}"
        )


def _pinning_lock(workspace: Workspace, host: str, reference: str | None) -> tuple[Lock, str]:
    """The host's lock, else its reference's (the lock ``envlock lock`` would derive from)."""
    own = workspace.lock_path(host)
    if own.is_file():
        return workspace.read_lock(host), workspace.shown(own)
    if reference is None:
        raise ProfileError(
            f"{workspace.shown(own)}: no such lock, and hosts/{host}.toml names no reference "
            "whose lock could pin the build"
        )
    return workspace.read_lock(reference), workspace.shown(workspace.lock_path(reference))


def _same_python(target: str, lock: Lock, lock_shown: str, profile_shown: str) -> None:
    """The reference's wheels pin the build only for a host of the reference's Python minor
    version: a cp311 torch does not install on 3.12, and the wheel would not fit the host."""
    minor = ".".join(target.split(".")[:2])
    if minor != lock.interpreter.major_minor:
        raise ProfileError(
            f"{profile_shown}: target.python {target}, but the build would be pinned by {lock_shown} "
            f"(Python {lock.interpreter.version}): envlock builds against a lock of the host's Python; "
            "lock the host without the package first, or build on a host lock"
        )


def _gpus(
    asked: str | None, profile_cc: tuple[str, ...], lock: Lock | None, profile_shown: str
) -> tuple[str, ...]:
    if asked is not None:
        ccs = tuple(c.strip() for c in asked.split(",") if c.strip())
        bad = [c for c in ccs if not _CC.match(c)]
        if bad or not ccs:
            raise EnvlockError(f'--gpu: expected compute capabilities like "12.0", got {asked!r}')
        return ccs
    if profile_cc:
        return tuple(profile_cc)
    if lock is not None and lock.gpu is not None and lock.gpu.ccs:
        return lock.gpu.ccs
    raise ProfileError(
        f"{profile_shown}: no [gpu] cc and no host lock that records a GPU: pass --gpu (e.g. --gpu 12.0)"
    )


def python_version(venv: Path) -> str:
    """The build venv's Python version, from its pyvenv.cfg (``version_info`` or ``version``)."""
    try:
        for line in (venv / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version_info", "version"):
                return value.strip()
    except OSError:
        pass
    return ""


__all__ = ["BuildResult", "build_package", "record_path"]
