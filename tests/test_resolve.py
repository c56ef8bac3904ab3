"""envlock lock: per-host resolution against a real index of nvcc-built wheels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import UV, build_simple_index, make_venv, make_wheel, run_envlock, walk_payload

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
KERNEL = (
    "__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }\n"
    'extern "C" int gpukern_version() { return 1; }\n'
)


def _python(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    assert found, f"CPython {minor} missing under {PYENV}"
    return str(found[-1])


def _nvcc_library(out: Path, arches: list[str]) -> bytes:
    src = out.parent / "kern.cu"
    src.write_text(KERNEL)
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in arches]
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", *gencode, "-o", str(out), str(src)], check=True)
    return out.read_bytes()


@dataclass(frozen=True)
class GpuIndex:
    full: str  # cu126 and cu128 variants, cext for cp311 and cp312
    old: str  # cu126 only


@pytest.fixture(scope="session")
def gpu_index(tmp_path_factory: pytest.TempPathFactory) -> GpuIndex:
    work = tmp_path_factory.mktemp("gpuwheels")
    sm90 = _nvcc_library(work / "sm90.so", ["90"])
    sm90_120 = _nvcc_library(work / "sm90_120.so", ["90", "120"])
    tag = "py3-none-linux_x86_64"
    kern = "gpukern/_k.so"
    cu126 = make_wheel(
        work / "cu126", "gpukern", "1.0+cu126", {"gpukern/__init__.py": b"", kern: sm90}, tag=tag
    )
    cu128 = make_wheel(
        work / "cu128", "gpukern", "1.0+cu128", {"gpukern/__init__.py": b"", kern: sm90_120}, tag=tag
    )
    app = make_wheel(
        work / "app",
        "gpuapp",
        "1.0",
        {"gpuapp/__init__.py": b"import gpukern\n"},
        requires=("gpukern==1.0",),
        console_scripts={"gpuapp": "gpuapp:main"},
    )
    cexts = [
        make_wheel(
            work / f"c{py}",
            "cext",
            "2.0",
            {"cext/__init__.py": f"PY = {py}\n".encode()},
            tag=f"cp{py}-cp{py}-manylinux_2_17_x86_64",
        )
        for py in ("311", "312")
    ]
    full = build_simple_index(tmp_path_factory.mktemp("gpuindex"), [cu126, cu128, app, *cexts])
    old = build_simple_index(tmp_path_factory.mktemp("oldindex"), [cu126, app, *cexts])
    return GpuIndex(full, old)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory, gpu_index: GpuIndex) -> Path:
    """ct129: a Python 3.11 sm_90 host with gpukern 1.0+cu126, captured."""
    root = tmp_path_factory.mktemp("fleet")
    venv = make_venv(root / "venv-ct129", _python("3.11"))
    pins = ["gpukern==1.0+cu126", "gpuapp==1.0", "cext==2.0"]
    python = str(venv / "bin/python")
    subprocess.run(
        [UV, "pip", "install", "-q", "--python", python, "--index-url", gpu_index.full, *pins], check=True
    )
    hosts = root / "hosts"
    hosts.mkdir()
    (hosts / "ct129.toml").write_text(
        f'venv = "{venv}"\n[gpu]\ncc = ["9.0"]\ndriver = "580.65.06"\n[index]\nurls = ["{gpu_index.full}"]\n'
    )
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return root


def _target(fleet: Path, host: str, body: str) -> None:
    (fleet / "hosts" / f"{host}.toml").write_text(
        f'venv = "{fleet}/venv-{host}"\nreference = "ct129"\n{body}'
    )


def _lock(fleet: Path, host: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_envlock(fleet, "lock", host, "--format", "json", *extra)


def _packages(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)["result"]["packages"]}


def test_sm120_target_gets_the_cu128_build_and_says_why(fleet: Path) -> None:
    _target(fleet, "ct200", '[gpu]\ncc = ["12.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n')
    packages = _packages(_lock(fleet, "ct200"))
    kern = packages["gpukern"]
    assert kern["version"] == "1.0+cu128"
    assert "no image for sm_120" in kern["reason"] and "the same version, another artifact" in kern["reason"]
    assert packages["gpuapp"]["kept"] and packages["cext"]["kept"]
    check = run_envlock(fleet, "lock", "ct200", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    lock = fleet / "locks" / "pylock.ct200.toml"
    written = lock.read_text()
    lock.write_text(written.replace("1.0+cu128", "1.0+cu126", 1))
    edited = run_envlock(fleet, "lock", "ct200", "--check")
    assert edited.returncode == 1
    assert "locks/pylock.ct200.toml: stale; a rewrite would change:" in edited.stdout
    # a hand edit: the lock on disk cannot be compared, and it says why
    assert "is not consistent with package version" in edited.stdout, edited.stdout
    lock.write_text(written)
    # The host moves to an sm_90 GPU: the reference's cu126 build runs there again.
    _target(fleet, "ct200", '[gpu]\ncc = ["9.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n')
    moved = run_envlock(fleet, "lock", "ct200", "--check")
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "  gpukern 1.0+cu128 -> 1.0+cu126 (" in moved.stdout, moved.stdout
    moved_json = run_envlock(fleet, "lock", "ct200", "--check", "--format", "json")
    because = json.loads(moved_json.stdout)["result"]["stale_because"]
    assert [(p["name"], p["from"], p["to"]) for p in because["packages"]] == [
        ("gpukern", "1.0+cu128", "1.0+cu126")
    ]
    assert [e["what"] for e in because["environment"]] == ["gpu"], because
    assert lock.read_text() == written  # --check writes nothing


def test_old_driver_is_refused_with_the_driver_message(fleet: Path) -> None:
    _target(fleet, "ct201", '[gpu]\ncc = ["12.0"]\ndriver = "560.35.03"\n[target]\npython = "3.11.7"\n')
    proc = _lock(fleet, "ct201")
    assert proc.returncode == 2
    assert "gpu.driver 560.35.03 is too old for sm_120" in proc.stderr and ">= 570.26" in proc.stderr
    assert not (fleet / "locks" / "pylock.ct201.toml").exists()


def test_unsatisfiable_names_package_check_and_fix(fleet: Path, gpu_index: GpuIndex, tmp_path: Path) -> None:
    # A workspace of its own: the shared one's store may hold the cu128 build by now.
    root = tmp_path / "fleet"
    (root / "locks").mkdir(parents=True)
    shutil.copytree(fleet / "hosts", root / "hosts")
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(fleet / "locks" / f"pylock.ct129{suffix}", root / "locks")
    body = '[gpu]\ncc = ["12.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n'
    _target(root, "ct202", body + f'[index]\nurls = ["{gpu_index.old}"]\n')
    proc = _lock(root, "ct202")
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "gpukern 1.0+cu126" in line and "no image for sm_120" in line
    assert "rebuild with TORCH_CUDA_ARCH_LIST=12.0 or add an index that has one" in line
    assert not (root / "locks" / "pylock.ct202.toml").exists()


def test_python_312_target_gets_cp312_wheels_and_applies(fleet: Path) -> None:
    python = _python("3.12")
    _target(fleet, "ct300", f'python = "{python}"\n[gpu]\ncc = ["9.0"]\n[target]\npython = "3.12.1"\n')
    packages = _packages(_lock(fleet, "ct300"))
    assert packages["cext"]["wheel"] == "cext-2.0-cp312-cp312-manylinux_2_17_x86_64.whl"
    assert "do not fit" in packages["cext"]["reason"]
    assert packages["gpukern"]["kept"] and packages["gpuapp"]["kept"]
    assert sys.version_info[:2] == (3, 11)  # envlock itself runs on 3.11
    proc = run_envlock(fleet, "apply", "ct300", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    venv = fleet / "venv-ct300"
    out = subprocess.run(
        [str(venv / "bin/python"), "-c", "import cext, gpuapp; print(cext.PY)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "312", out.stderr
    assert (venv / "bin" / "gpuapp").read_text().startswith(f"#!{venv}/bin/python")


def test_lock_errors_name_the_field(fleet: Path) -> None:
    (fleet / "hosts" / "ct203.toml").write_text(f'venv = "{fleet}/x"\n[target]\npython = "3.12.1"\n')
    proc = run_envlock(fleet, "lock", "ct203")
    assert proc.returncode == 2 and "hosts/ct203.toml: reference: missing" in proc.stderr
    shutil.rmtree(fleet / "x", ignore_errors=True)
    _ = walk_payload  # the apply test above compares by import instead: paths differ by design


def test_profile_pins_and_overrides_steer_the_resolution(fleet: Path) -> None:
    _target(
        fleet,
        "ct204",
        '[gpu]\ncc = ["9.0"]\n[target]\npython = "3.11.7"\n[lock]\npins = ["gpukern==1.0+cu128"]\n',
    )
    packages = _packages(_lock(fleet, "ct204"))
    assert packages["gpukern"]["version"] == "1.0+cu128" and not packages["gpukern"]["kept"]
    bad = '[gpu]\ncc = ["9.0"]\n[target]\npython = "3.11.7"\n[lock]\noverrides = ["gpukern>=2"]\n'
    _target(fleet, "ct205", bad)
    proc = _lock(fleet, "ct205")
    assert proc.returncode == 2 and "gpukern" in proc.stderr, proc.stderr
    _target(fleet, "ct206", '[target]\npython = "3.11.7"\n[lock]\npins = ["not a requirement!"]\n')
    proc = _lock(fleet, "ct206")
    assert proc.returncode == 2 and "lock.pins[0]: not a requirement" in proc.stderr


def test_a_wheel_put_in_the_store_is_a_candidate(fleet: Path, gpu_index: GpuIndex) -> None:
    """Someone rebuilt gpukern for sm_120 and dropped it in the store: no index has it."""
    import hashlib

    built = next(Path(gpu_index.full.removeprefix("file://")).parent.glob("files/gpukern-1.0+cu128-*.whl"))
    sha = hashlib.sha256(built.read_bytes()).hexdigest()
    (fleet / "store" / "wheels" / sha).mkdir(parents=True, exist_ok=True)
    shutil.copy(built, fleet / "store" / "wheels" / sha / built.name)
    body = '[gpu]\ncc = ["12.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n'
    _target(fleet, "ct207", body + f'[index]\nurls = ["{gpu_index.old}"]\n')
    packages = _packages(_lock(fleet, "ct207"))
    assert packages["gpukern"]["version"] == "1.0+cu128" and packages["gpukern"]["sha256"] == sha
    lock = (fleet / "locks" / "pylock.ct207.toml").read_text()
    assert 'source = "store"' in lock and f'path = "../store/wheels/{sha}/' in lock


def _lock_modules(fleet: Path, host: str) -> tuple[dict[str, Any], set[str]]:
    """``envlock lock HOST --format json`` in a fresh interpreter: its result and the modules it loaded."""
    code = (
        "import atexit, sys\n"
        "report = lambda: sys.__stderr__.write('\\nMODULES ' + ' '.join(sorted(sys.modules)) + '\\n')\n"
        "atexit.register(report)\n"
        "sys.argv = ['envlock', *sys.argv[1:]]\n"
        "from envlock.cli import main\n"
        "raise SystemExit(main())\n"
    )
    args = ["lock", host, "--format", "json", "--root", str(fleet)]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = next(line for line in proc.stderr.splitlines() if line.startswith("MODULES ")).split()[1:]
    return json.loads(proc.stdout)["result"], set(modules)


def test_a_warm_lock_reports_the_cold_one_without_reading_a_lock(fleet: Path) -> None:
    """An unchanged lock is not resolved again, and its report still follows the reference's bytes."""
    from dataclasses import replace

    from envlock.lock.digest import lock_digest
    from envlock.lock.io import read_lock, render_lock

    shutil.copy(fleet / "locks" / "pylock.ct129.files.tsv", fleet / "locks" / "pylock.warmref.files.tsv")
    reference = read_lock(fleet / "locks" / "pylock.ct129.toml")
    warmref = replace(reference, host="warmref")
    (fleet / "locks" / "pylock.warmref.toml").write_bytes(
        render_lock(replace(warmref, digest=lock_digest(warmref)))
    )
    profile = (fleet / "hosts" / "ct129.toml").read_text()
    (fleet / "hosts" / "warmref.toml").write_text(profile)
    # no glibc in [target]: the target's comes from the reference lock
    _target(fleet, "ct210", '[gpu]\ncc = ["9.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n')
    (fleet / "hosts" / "ct210.toml").write_text(
        (fleet / "hosts" / "ct210.toml").read_text().replace('"ct129"', '"warmref"')
    )
    cold, cold_modules = _lock_modules(fleet, "ct210")
    assert cold["written"] and "resolvelib" in cold_modules
    warm, warm_modules = _lock_modules(fleet, "ct210")
    assert not warm["written"]
    assert {**warm, "written": True, "changed": True} == cold
    assert not {"resolvelib", "envlock.lock.io", "envlock.resolve.solve"} & warm_modules
    # Nor what the warm path never needs: the TOML parser (profile tables remembered per bytes),
    # the transports and zip/temp-file machinery (code_key), a thread pool (one host).
    assert not {"tomllib", "envlock.transport", "zipfile", "tempfile", "concurrent.futures"} & warm_modules
    assert f"glibc {reference.platform.libc_version}" in warm["target"]
    # The reference moves to another glibc (re-captured elsewhere): a warm run sees it at once.
    moved = replace(warmref, platform=replace(warmref.platform, libc_version="2.41"))
    (fleet / "locks" / "pylock.warmref.toml").write_bytes(
        render_lock(replace(moved, digest=lock_digest(moved)))
    )
    after, _modules = _lock_modules(fleet, "ct210")
    assert "glibc 2.41" in after["target"], after["target"]


def test_a_warm_lock_sees_a_profile_edit_at_once(fleet: Path) -> None:
    """The profile's parsed tables are remembered per its bytes: an edit is read again, and checked."""
    _target(fleet, "ct211", '[gpu]\ncc = ["9.0"]\ndriver = "580.65.06"\n[target]\npython = "3.11.7"\n')
    assert _lock(fleet, "ct211").returncode == 0
    warm, modules = _lock_modules(fleet, "ct211")
    assert not warm["written"] and "tomllib" not in modules
    # Same length, one digit changed: a driver too old for the GPU must be refused, not the old tables reused.
    path = fleet / "hosts" / "ct211.toml"
    path.write_text(path.read_text().replace('driver = "580.65.06"', 'driver = "510.35.03"'))
    proc = _lock(fleet, "ct211")
    assert proc.returncode == 2 and "gpu.driver 510.35.03 is too old" in proc.stderr, proc.stderr
