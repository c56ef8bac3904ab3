"""envlock build of a torch.utils.cpp_extension CUDAExtension against the locked torch 2.14.1 (cu13).

The reference lock lists the real torch 2.14.1 CUDA wheels of the machine's
local index (the one bench/common.py's GPU venv is built from), by sha256;
the build installs exactly those into its environment, compiles one tiny
kernel for sm_120 with MAX_JOBS=2, and checks the extension's torch symbols
against that torch. Slow (gigabytes of wheels): marked ``slow``, built once
per module, and deselected by default (``make test-torch`` runs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import pytest

from build_helpers import NINJA, cuobjdump_elf_arches, registry_wheel, sha256, torch_extension_sdist
from envlock.buildrecord import BuildRecord, read_record
from envlock.index import IndexClient
from envlock.lock.model import Artifact, Package
from envlock.store import Store
from helpers import ENVLOCK, build_simple_index
from lockfactory import make_lock, write_lock_files

pytestmark = [pytest.mark.slow, pytest.mark.torch_build]

BENCH_INDEX = Path("/var/tmp/envlock-bench/index/simple")


def _torch_index() -> str:
    if not (BENCH_INDEX / "torch" / "index.html").is_file():
        pytest.skip(f"{BENCH_INDEX}: no local torch index (make bench builds it: bench/common.py gpu_venv)")
    return BENCH_INDEX.as_uri()


def _locked_package(file: Any, index: str) -> Package:
    path = Path(file.url.removeprefix("file://"))
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        message = HeaderParser().parsestr(archive.read(meta).decode("utf-8"))
    name = message["Name"].lower().replace("_", "-").replace(".", "-")
    return Package(
        name=name,
        version=message["Version"],
        wheel=Artifact(filename=file.filename, sha256=file.sha256, size=path.stat().st_size, url=file.url),
        source="index",
        index=index,
        requires_dist=tuple(v.strip() for v in message.get_all("Requires-Dist") or []),
        tree_digest="sha256:" + "0" * 64,
    )


@dataclass(frozen=True)
class TorchBuild:
    root: Path
    result: dict[str, Any]
    record: BuildRecord
    seconds: float
    torch_sha256: str


@pytest.fixture(scope="module")
def torch_build(tmp_path_factory: pytest.TempPathFactory) -> TorchBuild:
    index = _torch_index()
    client = IndexClient((index,))
    projects = sorted(p.name for p in BENCH_INDEX.iterdir() if p.is_dir())
    packages = [_locked_package(f, index) for name in projects for f in client.files(name)]
    root = tmp_path_factory.mktemp("torchbuild") / "fleet"
    write_lock_files(root / "locks", make_lock("gpuref", packages, python="3.11.7", indexes=(index,)))
    work = tmp_path_factory.mktemp("tinyext")
    sdist = torch_extension_sdist(work / "sdist")
    ext_index = build_simple_index(work / "idx", [registry_wheel(NINJA)])
    shutil.copy(sdist, work / "idx" / "files")
    page = work / "idx" / "simple" / "tinyext"
    page.mkdir(parents=True)
    link = f'<a href="../../files/{sdist.name}#sha256={sha256(sdist)}">{sdist.name}</a>'
    (page / "index.html").write_text(f"<html><body>{link}</body></html>\n")
    (root / "hosts").mkdir()
    (root / "hosts" / "ct700.toml").write_text(
        f'venv = "{root}/venv"\nreference = "gpuref"\n[gpu]\ncc = ["12.0"]\n'
        f'[index]\nurls = ["{ext_index}", "{index}"]\n'
    )
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(root / ".cache"),
        "MAX_JOBS": "2",
        "UV_LINK_MODE": "hardlink",  # gigabytes of torch: link from uv's cache, do not copy twice
    }
    started = time.monotonic()
    proc = subprocess.run(
        [ENVLOCK, "build", "tinyext", "--host", "ct700", "--format", "json", "--root", str(root)],
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["result"]
    record = read_record(Store(root / "store"), result["sha256"])
    assert record is not None
    torch = next(p for p in packages if p.name == "torch")
    return TorchBuild(root, result, record, seconds, torch.wheel.sha256)


def test_cuda_extension_is_built_for_sm120_against_the_locked_torch(
    torch_build: TorchBuild, tmp_path: Path
) -> None:
    result, record = torch_build.result, torch_build.record
    wheel = torch_build.root / result["path"]
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.startswith("tinyext/_C.") and n.endswith(".so"))
        library = tmp_path / "ext.so"
        library.write_bytes(archive.read(member))
    assert cuobjdump_elf_arches(library) == ["sm_120"]
    # the CUDA reader and the loader, inside the build env's torch: native, every symbol bound
    assert [(lib["path"], lib["verdict"]) for lib in result["libraries"]] == [(member, "native")]
    inputs = {i.name: (i.role, i.sha256) for i in record.inputs}
    assert inputs["torch"] == ("locked", torch_build.torch_sha256)  # the lock's own torch bytes
    assert inputs["ninja"][0] == "index"  # the lock lacks it: the newest fitting index wheel
    assert inputs["nvidia-cuda-runtime"][0] == "locked"  # torch's CUDA wheels came along
    assert "transformers" not in inputs  # in the lock, but nothing the build needs
    assert record.flags["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert record.env["MAX_JOBS"] == "2"
    print(f"\ntinyext build: {torch_build.seconds:.1f}s wall; phases {dict(record.phases)}")
