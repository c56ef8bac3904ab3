"""The isolated build environment: a fresh venv holding the lock's own wheels, and nothing else.

Which packages: the sdist's build requirements (``[build-system] requires``),
the build-relevant packages it depends on that the lock pins (torch, numpy,
nvidia-* CUDA wheels, ...), and ``--with`` names; then, transitively, their
Requires-Dist under the host's markers. Each comes from the lock when the lock
has it: the exact wheel, fetched by sha256, so a CUDA extension compiles
against the very torch headers and libraries the host will load it next to.
A requirement the lock lacks (setuptools, wheel, ninja in a runtime venv) is
the newest fitting wheel on the lock's indexes, recorded by sha256 too.

uv installs them with ``--no-deps --offline`` from the store's files into a
venv of the host's Python minor version. The venv is stamped with its inputs:
a re-run with the same inputs reuses it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging import tags as _tags
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envlock.buildrecord import BuildInput
from envlock.errors import EnvlockError
from envlock.fetch import fetch_one
from envlock.index import IndexClient
from envlock.lock.model import Artifact, Lock, Package
from envlock.store import Store

# Packages a compiled extension builds against or with: taken from the lock when the
# sdist depends on them, whether or not it declares them as build requirements.
BUILD_RELEVANT = frozenset(
    {"torch", "numpy", "triton", "jax", "jaxlib", "cupy", "pybind11", "nanobind", "ninja", "cmake", "cython"}
)


class BuildEnvError(EnvlockError):
    """A build requirement the lock contradicts or no index has, or a venv that could not be made."""


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    version: str
    role: str  # "locked" or "index"
    artifact: Artifact
    path: Path  # the wheel in the store

    def as_input(self) -> BuildInput:
        art = self.artifact
        return BuildInput(
            role=self.role, name=self.name, version=self.version, filename=art.filename,
            sha256=art.sha256, url=art.url or art.path,
        )  # fmt: skip


@dataclass
class PinPlanner:
    lock: Lock
    lock_shown: str
    lock_dir: Path
    store: Store
    client: IndexClient

    def __post_init__(self) -> None:
        minor = tuple(int(p) for p in self.lock.interpreter.version.split(".")[:2])
        self.markers: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
        self.markers["python_version"] = ".".join(map(str, minor))
        self.markers["python_full_version"] = self.lock.interpreter.version
        self.tags = frozenset([*_tags.cpython_tags(minor), *_tags.compatible_tags(minor)])

    def roots(
        self, requires: tuple[str, ...], requires_dist: tuple[str, ...], extra: tuple[str, ...]
    ) -> list[str]:
        roots = list(requires) + list(extra)
        for text in requires_dist:
            req = _requirement(text, "the sdist's Requires-Dist")
            name = canonicalize_name(req.name)
            if self.lock.package(name) is None or not (name in BUILD_RELEVANT or name.startswith("nvidia-")):
                continue
            if req.marker is None or req.marker.evaluate({**self.markers, "extra": ""}):
                roots.append(text)
        return roots

    def plan(self, roots: list[str]) -> list[Pin]:
        pins: dict[str, Pin] = {}
        seen_extras: dict[str, set[str]] = {}
        queue = []
        for text in roots:
            req = _requirement(text, "a build requirement")
            if req.marker is None or req.marker.evaluate({**self.markers, "extra": ""}):
                queue.append((req, "the build"))
        while queue:
            req, wanted_by = queue.pop(0)
            name = canonicalize_name(req.name)
            first = name not in pins
            if first:
                pins[name] = self._pin(req, name, wanted_by)
            elif not req.specifier.contains(pins[name].version, prereleases=True):
                raise BuildEnvError(
                    f"{wanted_by} requires {req}, but the build environment has {name} {pins[name].version}"
                )
            done = seen_extras.setdefault(name, set())
            extras = ({""} if first else set()) | (set(req.extras) - done)
            done.update(extras)
            if not extras:
                continue
            for text in self._requires(pins[name]):
                dep = _requirement(text, f"{name}'s Requires-Dist")
                if dep.marker is not None and not any(
                    dep.marker.evaluate({**self.markers, "extra": e}) for e in extras
                ):
                    continue
                queue.append((dep, f"{name} {pins[name].version}"))
        return [pins[n] for n in sorted(pins)]

    def _pin(self, req: Requirement, name: str, wanted_by: str) -> Pin:
        pkg = self.lock.package(name)
        if pkg is not None:
            if not req.specifier.contains(pkg.version, prereleases=True):
                raise BuildEnvError(
                    f"{wanted_by} requires {req}, but {self.lock_shown} pins {name} {pkg.version}: "
                    "envlock builds against the lock's own packages"
                )
            path = fetch_one(self.store, self.lock_dir, pkg).path
            return Pin(name, pkg.version, "locked", pkg.wheel, path)
        best = None
        for file in self.client.files(name):
            try:
                _n, version, _b, wheel_tags = parse_wheel_filename(file.filename)
            except InvalidWheelFilename:
                continue
            if file.yanked or not (wheel_tags & self.tags) or not req.specifier.contains(version):
                continue
            if best is None or (version, file.filename) > (best[0], best[1].filename):
                best = (version, file)
        where = ", ".join(self.client.urls + self.client.find_links) or "no index"
        if best is None:
            raise BuildEnvError(
                f"{wanted_by} requires {req}: {self.lock_shown} does not pin {name} and no fitting wheel "
                f"is on {where}"
            )
        version, file = best
        if not file.sha256:
            raise BuildEnvError(
                f"{file.url}: the index gives no sha256; envlock will not build with it blind"
            )
        art = Artifact(filename=file.filename, sha256=file.sha256, url=file.url)
        path = fetch_one(
            self.store, self.lock_dir, Package(name=name, version=str(version), wheel=art, source="index")
        ).path
        return Pin(name, str(version), "index", art, path)

    def _requires(self, pin: Pin) -> tuple[str, ...]:
        pkg = self.lock.package(pin.name)
        if pkg is not None and pin.role == "locked":
            return pkg.requires_dist
        with zipfile.ZipFile(pin.path) as archive:
            name = next(
                n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            )
            message = HeaderParser().parsestr(archive.read(name).decode("utf-8"))
        return tuple(v.strip() for v in message.get_all("Requires-Dist") or [])


def _requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise BuildEnvError(f"{where}: {text!r} is not a requirement: {exc}") from exc


def python_for(version: str) -> str:
    """An interpreter of the host's Python minor version, here (pyenv's python3.X on PATH)."""
    minor = ".".join(version.split(".")[:2])
    found = shutil.which(f"python{minor}")
    if found is None:
        raise BuildEnvError(
            f"no python{minor} on PATH: the build must run on the host's Python {version} "
            f"(install CPython {minor}, e.g. with pyenv)"
        )
    return found


def uv_binary() -> Path:
    """The uv envlock ships to hosts installs the build environment too (``build-env`` when absent)."""
    from envlock.transfer import uv_binary as shipped_uv

    try:
        return shipped_uv()
    except EnvlockError as exc:
        raise BuildEnvError(str(exc)) from exc


def make_env(venv: Path, python: str, pins: list[Pin], log: Path) -> bool:
    """Create (or reuse) the build venv; True when an existing one was reused."""
    stamp_path = venv / ".envlock-build-env.json"
    stamp = {"python": python, "wheels": sorted(p.artifact.sha256 for p in pins)}
    try:
        if json.loads(stamp_path.read_text()) == stamp:
            return True
    except (OSError, ValueError):
        pass
    if venv.exists():
        shutil.rmtree(venv)
    uv = str(uv_binary())
    with open(log, "a", encoding="utf-8") as out:
        for argv in (
            [uv, "venv", "-q", "--python", python, str(venv)],
            [uv, "pip", "install", "-q", "--no-deps", "--offline", "--no-index",
             "--python", str(venv / "bin" / "python"), *[str(p.path) for p in pins]],
        ):  # fmt: skip
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
            if proc.returncode != 0:
                raise BuildEnvError(
                    f"the build environment could not be made (exit {proc.returncode}); see {log}"
                )
    stamp_path.write_text(json.dumps(stamp))
    return False
