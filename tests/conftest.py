"""Session fixtures: a real wheel index and a real reference venv built from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from devpirig import Devpi, start_devpi, stop_devpi
from helpers import (
    build_simple_index,
    compile_shared_library,
    make_local_project,
    make_venv,
    make_wheel,
    uv_install,
)

# uv hard-links files from its cache by default: a test that corrupts an
# installed file would corrupt the cache too. Copy, and keep a private cache.
os.environ["UV_LINK_MODE"] = "copy"

REAL_WHEELS = ("six-1.17.0-py2.py3-none-any.whl", "idna-3.20-py3-none-any.whl")
MIRROR = Path("/opt/pypi/files")


@dataclass(frozen=True)
class Index:
    url: str
    root: Path
    wheels: dict[str, Path]


def _real_wheels(cache: Path) -> list[Path]:
    """A few small wheels from the registry: the machine's mirror, else pip download."""
    found = [MIRROR / name for name in REAL_WHEELS if (MIRROR / name).is_file()]
    if len(found) == len(REAL_WHEELS):
        return found
    cache.mkdir(parents=True, exist_ok=True)
    pins = ["six==1.17.0", "idna==3.20"]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), *pins],
        check=True,
    )
    return sorted(cache.glob("*.whl"))


@pytest.fixture(scope="session")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    work = tmp_path_factory.mktemp("wheels")
    lib = compile_shared_library(work / "libenvtest.so")
    wheels = {
        "alpha": make_wheel(
            work,
            "alpha",
            "1.0",
            {
                "alpha/__init__.py": b"def main():\n    print('alpha')\n",
                "alpha-1.0.data/scripts/alpha-tool": b"#!python\nprint('tool')\n",
            },
            requires=("beta>=2",),
            console_scripts={"alpha": "alpha:main"},
        ),
        "beta": make_wheel(
            work,
            "beta",
            "2.0",
            {"beta/__init__.py": b"X = 2\n", "beta/libenvtest.so": lib.read_bytes()},
            tag="py3-none-linux_x86_64",
        ),
    }
    for path in _real_wheels(work / "registry"):
        wheels[path.name.split("-")[0]] = path
    root = tmp_path_factory.mktemp("index")
    return Index(build_simple_index(root, list(wheels.values())), root, wheels)


@dataclass(frozen=True)
class Reference:
    venv: Path
    index: Index
    projects: Path


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory, index: Index) -> Reference:
    """alpha, beta, six, idna from the index; localpkg built from a directory;
    editpkg installed editable; gamma from a wheel file on disk."""
    base = tmp_path_factory.mktemp("reference")
    venv = make_venv(base / "venv")
    uv_install(venv, "--index-url", index.url, "alpha==1.0", "six==1.17.0", "idna==3.20")
    projects = base / "projects"
    uv_install(venv, str(make_local_project(projects / "localpkg", "localpkg")))
    uv_install(venv, "-e", str(make_local_project(projects / "editpkg", "editpkg")))
    gamma = make_wheel(base / "direct", "gamma", "3.0", {"gamma.py": b"G = 3\n"})
    uv_install(venv, str(gamma))
    return Reference(venv, index, projects)


def write_profile(root: Path, host: str, venv: Path, index_url: str | None, extra: str = "") -> None:
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    text = f'venv = "{venv}"\n'
    if index_url is not None:
        text += f'[index]\nurls = ["{index_url}"]\n'
    (root / "hosts" / f"{host}.toml").write_text(text + extra)


@pytest.fixture
def workspace(tmp_path: Path, reference: Reference) -> Path:
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    return root


@pytest.fixture
def copy_venv(tmp_path: Path):  # type: ignore[no-untyped-def]
    def copy(source: Path, name: str = "venv") -> Path:
        target = tmp_path / name
        shutil.copytree(source, target, symlinks=True)
        return target

    return copy


@pytest.fixture(scope="session")
def devpi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devpi]:
    """A real devpi-server on loopback for the session (tests/devpirig.py)."""
    server = start_devpi(tmp_path_factory.mktemp("devpi"))
    yield server
    stop_devpi(server)
