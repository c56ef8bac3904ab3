"""envlock build: real sdists built by setuptools and nvcc for sm_120, checked, locked and applied."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from build_helpers import (
    INIT,
    SETUPTOOLS,
    cuobjdump_elf_arches,
    nvcc_sdist,
    registry_wheel,
    sha256,
)
from envlock.buildrecord import BuildRecordError, read_record
from envlock.lock.io import read_lock
from envlock.store import Store
from helpers import ENVLOCK, UV, build_simple_index, make_venv, make_wheel
from lockfactory import make_lock, pkg, write_lock_files

PYTHON = "python3.11"
GPU_HOST = '[gpu]\ncc = ["12.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n'


def envlock(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env=env or _env(root)
    )


def _env(root: Path) -> dict[str, str]:
    """The build directories go under the test's own cache, not the user's."""
    return {**os.environ, "XDG_CACHE_HOME": str(root / ".cache")}


def _build_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    return result


@dataclass(frozen=True)
class Seed:
    root: Path
    index: str  # gpukern 1.0+cu126 (sm_90 only), the gpukern 1.0 sdist, setuptools
    sdist: Path


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Seed:
    """ct129: an sm_90 host with gpukern 1.0+cu126, captured; the index has no sm_120 build."""
    work = tmp_path_factory.mktemp("seedwheels")
    (work / "kern.cu").write_text("__global__ void scale(float *x) { x[0] *= 2; }\n"
                                  'extern "C" int kern_version() { return 7; }\n')  # fmt: skip
    lib = work / "sm90.so"
    subprocess.run(
        ["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90,code=sm_90",
         "-o", str(lib), str(work / "kern.cu")],
        check=True,
    )  # fmt: skip
    cu126 = make_wheel(
        work / "cu126",
        "gpukern",
        "1.0+cu126",
        {"gpukern/__init__.py": INIT.encode(), "gpukern/_k.so": lib.read_bytes()},
        tag="py3-none-linux_x86_64",
    )
    sdist = nvcc_sdist(work / "sdist", "gpukern", "1.0")
    index_root = tmp_path_factory.mktemp("seedindex")
    index = build_simple_index(index_root, [cu126, registry_wheel(SETUPTOOLS)])
    files = index_root / "files"
    shutil.copy(sdist, files)
    page = index_root / "simple" / "gpukern" / "index.html"
    link = f'<a href="../../files/{sdist.name}#sha256={sha256(sdist)}">{sdist.name}</a>\n'
    page.write_text(page.read_text().replace("</body>", link + "</body>"))

    root = tmp_path_factory.mktemp("seed") / "fleet"
    venv = make_venv(root / "venv-ct129", shutil.which(PYTHON))
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(venv / "bin/python"), "--index-url", index,
         "gpukern==1.0+cu126"],
        check=True,
    )  # fmt: skip
    (root / "hosts").mkdir()
    (root / "hosts" / "ct129.toml").write_text(
        f'venv = "{venv}"\n[gpu]\ncc = ["9.0"]\ndriver = "580.65.06"\n[index]\nurls = ["{index}"]\n'
    )
    proc = envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return Seed(root, index, sdist)


def _host(seed: Seed, host: str, body: str = GPU_HOST, index: str | None = None) -> None:
    (seed.root / "hosts" / f"{host}.toml").write_text(
        f'venv = "{seed.root}/venv-{host}"\nreference = "ct129"\n{body}'
        f'[index]\nurls = ["{index or seed.index}"]\n'
    )


def _wheel_member(wheel: Path, member: str, out: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        out.write_bytes(archive.read(member))
    return out


def test_the_seed_story_sm120_end_to_end(seed: Seed, tmp_path: Path) -> None:
    """No wheel for sm_120 -> lock explains -> build -> lock picks it -> apply -> inspect: native."""
    root = seed.root
    _host(seed, "ct500")
    refused = envlock(root, "lock", "ct500")
    assert refused.returncode == 2
    assert "gpukern 1.0+cu126" in refused.stderr and "no image for sm_120" in refused.stderr
    assert "`envlock build gpukern --host ct500` builds one from its sdist" in refused.stderr

    built = _build_json(envlock(root, "build", "gpukern", "--host", "ct500", "--format", "json"))
    assert built["gpu"] == ["12.0"] and built["wheel"].startswith("gpukern-1.0-cp311-cp311-")
    wheel = root / built["path"]
    assert sha256(wheel) == built["sha256"]
    # NVIDIA's own tool finds sm_120 SASS in the built library (and only the arch asked for)
    so = _wheel_member(wheel, "gpukern/_k.so", tmp_path / "_k.so")
    assert cuobjdump_elf_arches(so) == ["sm_120"]
    assert [(lib["path"], lib["verdict"]) for lib in built["libraries"]] == [("gpukern/_k.so", "native")]
    # the record names every input by sha256: the sdist, and setuptools (from the index: ct129 lacks it)
    record = read_record(Store(root / "store"), built["sha256"])
    assert record is not None
    inputs = {(i.role, i.name): i.sha256 for i in record.inputs}
    assert inputs[("sdist", "gpukern")] == sha256(seed.sdist)
    assert inputs[("index", "setuptools")] == sha256(registry_wheel(SETUPTOOLS))
    assert record.flags["TORCH_CUDA_ARCH_LIST"] == "12.0" and record.flags["CUDAARCHS"] == "120"
    assert record.flags["NVCC_APPEND_FLAGS"] == "-gencode=arch=compute_120,code=sm_120"
    assert record.toolchain.cuda_version == "13.0" and record.toolchain.nvcc_version.startswith("13.0")
    assert record.log_sha256 is not None
    log = (root / "store" / "blobs" / record.log_sha256[:2] / record.log_sha256).read_text()
    assert "sm_120" in log  # the build's own output, kept with the record

    locked = envlock(root, "lock", "ct500", "--format", "json")
    assert locked.returncode == 0, locked.stderr
    listed = {p["name"]: p for p in json.loads(locked.stdout)["result"]["packages"]}
    assert listed["gpukern"]["source"] == "built" and not listed["gpukern"]["kept"]
    lock = read_lock(root / "locks" / "pylock.ct500.toml")
    kern = lock.package("gpukern")
    assert kern is not None and kern.source == "built" and kern.version == "1.0"
    assert kern.wheel.sha256 == built["sha256"]
    assert kern.reason is not None
    assert kern.reason.startswith("built for sm_120: no index wheel has sm_120 SASS or PTX"), kern.reason

    applied = envlock(root, "apply", "ct500", "--format", "json")
    assert applied.returncode == 0, applied.stderr
    venv = root / "venv-ct500"
    installed = next(venv.glob("lib/python3.11/site-packages/gpukern/_k.so"))
    assert installed.read_bytes() == so.read_bytes()  # byte for byte
    loaded = subprocess.run(
        [str(venv / "bin/python"), "-c", "import gpukern; print(gpukern.version())"],
        capture_output=True,
        text=True,
    )
    assert loaded.stdout.strip() == "7", loaded.stderr
    verified = envlock(root, "verify", "ct500")  # the live venv is its lock, file by file
    assert verified.returncode == 0, verified.stdout + verified.stderr
    inspected = envlock(root, "inspect", str(venv), "--gpu", "12.0", "--format", "json")
    assert inspected.returncode == 0, inspected.stdout
    result = json.loads(inspected.stdout)["result"]
    verdicts = {lib["path"]: lib["verdict"] for lib in result["libraries"]}
    assert verdicts["gpukern/_k.so"] == "native" and result["verdict"] == "native"

    # Round trip (docs/lock-format.md): the live venv's packages diff clean against the lock, and a
    # capture of the host reads the built wheel back as built, by the same path and sha256.
    live = envlock(root, "diff", "ct500", "live:ct500")
    # (the offline [target] lock cannot know the host interpreter's path: pyvenv `home` differs)
    assert "ct500 -> live:ct500: no package changes; 1 identical" in live.stdout, live.stdout
    assert envlock(root, "capture", "ct500").returncode == 0
    captured = read_lock(root / "locks" / "pylock.ct500.toml").package("gpukern")
    assert captured is not None and captured.source == "built"
    assert (captured.version, captured.wheel.path, captured.wheel.sha256) == (
        kern.version,
        kern.wheel.path,
        kern.wheel.sha256,
    )


def test_no_nvcc_exits_2_naming_it(seed: Seed) -> None:
    _host(seed, "ct501")
    bare = {k: v for k, v in _env(seed.root).items() if k != "CUDA_HOME"}
    bare["PATH"] = f"{Path(ENVLOCK).parent}:/usr/bin:/bin"
    assert shutil.which("nvcc", path=bare["PATH"]) is None
    proc = envlock(seed.root, "build", "gpukern", "--host", "ct501", env=bare)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "envlock: error: nvcc not found: no CUDA_HOME and no nvcc on PATH; install the CUDA toolkit "
        "(nvcc) and put it on PATH, or set CUDA_HOME"
    )


def test_a_lock_for_another_cuda_major_exits_2(tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    runtime = pkg("nvidia-cuda-runtime-cu12", "12.8.90")
    write_lock_files(root / "locks", make_lock("cu12ref", [runtime, pkg("gpukern", "1.0")], cc=["12.0"]))
    (root / "hosts").mkdir()
    (root / "hosts" / "ct600.toml").write_text(
        f'venv = "{root}/v"\nreference = "cu12ref"\n[gpu]\ncc = ["12.0"]\n'
    )
    proc = envlock(root, "build", "gpukern", "--host", "ct600")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "locks/pylock.cu12ref.toml pins CUDA 12 wheels (nvidia-cuda-runtime-cu12 12.8.90)" in line
    assert "is CUDA 13.0: install the CUDA 12 toolkit" in line


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        # the reference's GPU (9.0 here) is not the host's: never built for by default
        ("", "hosts/ct601.toml: no [gpu] cc and no host lock that records a GPU: pass --gpu"),
        (
            '[gpu]\ncc = ["12.0"]\n[target]\npython = "3.12.1"\n',
            "hosts/ct601.toml: target.python 3.12.1, but the build would be pinned by "
            "locks/pylock.ref90.toml (Python 3.11.9)",
        ),
    ],
)
def test_the_reference_lock_pins_only_what_it_can_say_about_the_host(
    tmp_path: Path, profile: str, message: str
) -> None:
    root = tmp_path / "fleet"
    write_lock_files(root / "locks", make_lock("ref90", [pkg("gpukern", "1.0")], cc=["9.0"]))
    (root / "hosts").mkdir()
    (root / "hosts" / "ct601.toml").write_text(f'venv = "{root}/v"\nreference = "ref90"\n{profile}')
    proc = envlock(root, "build", "gpukern", "--host", "ct601")
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr


def _sdist_index(tmp_path: Path, sdist: Path) -> str:
    url = build_simple_index(tmp_path / "idx", [registry_wheel(SETUPTOOLS)])
    files = tmp_path / "idx" / "files"
    shutil.copy(sdist, files)
    project = sdist.name.rsplit("-", 1)[0].replace("_", "-")
    page = tmp_path / "idx" / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    link = f'<a href="../../files/{sdist.name}#sha256={sha256(sdist)}">{sdist.name}</a>\n'
    (page / "index.html").write_text(f"<html><body>\n{link}</body></html>\n")
    return url


def test_a_build_that_ignores_the_arch_is_refused(seed: Seed, tmp_path: Path) -> None:
    """A setup.py that pins sm_90 whatever it is asked: the CUDA reader's verdict stops it."""
    sdist = nvcc_sdist(tmp_path / "s", "pinnedarch", "1.0", hardcoded_arch="90")
    _host(seed, "ct502", index=_sdist_index(tmp_path, sdist))
    proc = envlock(seed.root, "build", "pinnedarch", "--host", "ct502")
    assert proc.returncode == 2, proc.stderr
    assert "pinnedarch-1.0-cp311-cp311-linux_x86_64.whl does not run on the GPU" in proc.stderr
    assert "pinnedarch/_k.so: no-image on 12.0" in proc.stderr
    assert not list((seed.root / "store" / "wheels").glob("*/pinnedarch-*.whl"))


def test_an_unbound_symbol_is_refused(seed: Seed, tmp_path: Path) -> None:
    """The library links, but needs a symbol nothing it loads exports: the loader check stops it."""
    kernel = (
        '__global__ void scale(float *x) { x[0] *= 2; }\nextern "C" int absent_helper();\n'
        'extern "C" int kern_version() { return absent_helper(); }\n'
    )
    sdist = nvcc_sdist(tmp_path / "s", "unbound", "1.0", kernel=kernel)
    _host(seed, "ct503", index=_sdist_index(tmp_path, sdist))
    proc = envlock(seed.root, "build", "unbound", "--host", "ct503")
    assert proc.returncode == 2, proc.stderr
    assert "unbound/_k.so: wont-load on 12.0: undefined symbol absent_helper" in proc.stderr


def test_a_failed_build_keeps_its_directory_and_a_rerun_resumes(seed: Seed, tmp_path: Path) -> None:
    go = tmp_path / "go"
    setup = (
        "import os, pathlib\nfrom setuptools import setup\n"
        "runs = pathlib.Path('runs.txt')\n"
        "runs.write_text(runs.read_text() + 'x' if runs.exists() else 'x')\n"
        "print('build run', len(runs.read_text()))\n"
        f"if not os.path.exists({str(go)!r}):\n    raise SystemExit('the build tree is not ready')\n"
        "setup(name='flaky', version='1.0', packages=['flaky'])\n"
    )
    from build_helpers import PYPROJECT, write_sdist

    sdist = write_sdist(
        tmp_path / "s",
        "flaky",
        "1.0",
        # a build requirement whose marker is false for the host's Python: not wanted
        {"pyproject.toml": PYPROJECT.format(requires='"setuptools>=61", "nosuchdep; python_version < \'3\'"'),
         "setup.py": setup,
         "flaky/__init__.py": ""},
    )  # fmt: skip
    _host(seed, "ct504", index=_sdist_index(tmp_path, sdist))
    # --with: an undeclared build dependency, taken from the lock (ct129's gpukern wheel)
    failed = envlock(seed.root, "build", "flaky", "--host", "ct504", "--with", "gpukern")
    assert failed.returncode == 2
    message = failed.stderr.strip()
    assert "the build failed (exit 1); build directory kept, log: " in message, message
    log = Path(message.rsplit("log: ", 1)[1])
    assert log.is_file() and "the build tree is not ready" in log.read_text()
    go.touch()
    again = _build_json(
        envlock(seed.root, "build", "flaky", "--host", "ct504", "--with", "gpukern", "--format", "json")
    )
    assert again["reused_environment"] is True
    record = read_record(Store(seed.root / "store"), again["sha256"])
    assert record is not None and record.log_sha256 is not None
    text = (seed.root / "store" / "blobs" / record.log_sha256[:2] / record.log_sha256).read_text()
    assert "build run 2" in text  # the same tree, resumed (its runs.txt kept)
    ct129 = read_lock(seed.root / "locks" / "pylock.ct129.toml").package("gpukern")
    assert ct129 is not None
    assert [(i.role, i.name, i.version, i.sha256) for i in record.inputs if i.name == "gpukern"] == [
        ("locked", "gpukern", "1.0+cu126", ct129.wheel.sha256)
    ]
    assert not log.parent.exists()  # removed once the build passed
    assert again["notes"] == ["the wheel carries no GPU code"]


def test_a_forged_build_record_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    sha = "ab" * 32
    (store.root / "builds").mkdir(parents=True)
    (store.root / "builds" / f"{sha}.json").write_text(json.dumps({"record_version": 1, "sha256": "cd" * 32}))
    with pytest.raises(BuildRecordError, match=r"builds/abab.*\.json: toolchain: missing"):
        read_record(store, sha)
    assert read_record(store, "../../etc/passwd") is None


def test_review_warns_of_a_built_wheel_and_never_calls_it_tampered() -> None:
    """A built wheel keeps the file name an index wheel could have: a local build (warn),
    not "same name, different bytes" (block)."""
    from dataclasses import replace

    from envlock.changes import PackageChange
    from envlock.review.findings import package_findings

    index = pkg("kern", "1.0")
    reason = "built for sm_120: no index wheel has sm_120 SASS or PTX"
    built = replace(pkg("kern", "1.0", source="repacked", label="sm120"), source="built", reason=reason)
    assert index.wheel.filename == built.wheel.filename and index.wheel.sha256 != built.wheel.sha256
    found = package_findings(PackageChange("kern", "artifact", index, built), ("12.0",), None)
    assert [(f.code, f.severity, f.detail) for f in found] == [
        ("local-build", "warn", f"locally built or modified package changed: {reason}")
    ]


def test_a_backend_that_writes_another_projects_wheel_is_refused(seed: Seed, tmp_path: Path) -> None:
    """A build of one sdist must not plant a wheel of another project in the store."""
    from build_helpers import PYPROJECT, write_sdist

    setup = "from setuptools import setup\nsetup(name='torch', version='9.9', py_modules=[])\n"
    sdist = write_sdist(
        tmp_path / "s",
        "planter",
        "1.0",
        {"pyproject.toml": PYPROJECT.format(requires='"setuptools>=61"'), "setup.py": setup},
    )
    _host(seed, "ct505", index=_sdist_index(tmp_path, sdist))
    proc = envlock(seed.root, "build", "planter", "--host", "ct505")
    assert proc.returncode == 2
    assert (
        "the backend wrote torch-9.9-py3-none-any.whl, a wheel of torch 9.9, from the sdist of planter 1.0"
        in (proc.stderr)
    )
    assert not list((seed.root / "store" / "wheels").glob("*/torch-*.whl"))
