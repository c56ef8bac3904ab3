"""The round trip on venvs as users make them: capture REF; lock TGT; apply TGT; capture TGT.

Each reference venv here is built the ordinary way, with ``python -m venv``
and pip from the package registry (pip and setuptools inside, console
scripts, a maturin wheel whose WHEEL has a compressed tag set, a package
built from its sdist). Each target starts with no venv and a profile holding
only ``venv``, ``reference`` (and ``ssh``, or ``python`` where the target
runs another Python). The invariant (docs/lock-format.md, "Round trip"):

- the applied venv captures back to the lock it was applied from: the same
  packages, wheels, sha256 and sources, and ``diff TGT live:TGT`` exits 0;
- its payload is what an independent oracle says: the reference's files
  (same Python) or what ``uv pip sync`` of the lock installs (another
  Python), bin/ scripts byte for byte, pyvenv.cfg as the target's own
  ``python -m venv`` writes it for that path;
- ``envlock smoke`` passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import UV, run_envlock, walk_payload
from sshrig import VENV_PATH, SshRig

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
pytestmark = pytest.mark.slow


def _python(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    assert found, f"CPython {minor} missing under {PYENV} (the test rig provides 3.8 to 3.13)"
    return str(found[-1])


def _pip_venv(path: Path, minor: str, *pip_args: list[str]) -> Path:
    """``pythonX.Y -m venv`` and pip from the registry, as a user does it."""
    subprocess.run([_python(minor), "-m", "venv", str(path)], check=True)
    for args in pip_args:
        proc = subprocess.run(
            [str(path / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
    return path


def _workspace(root: Path, ref: Path, target: str) -> Path:
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "ref.toml").write_text(f'venv = "{ref}"\n')
    (root / "hosts" / "tgt.toml").write_text(target)
    # The same venv under a second name: its capture must not overwrite tgt's lock.
    (root / "hosts" / "tgt-again.toml").write_text(target.replace('reference = "ref"\n', ""))
    return root


def _envlock(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_envlock(root, *args)
    assert proc.returncode == 0, f"envlock {' '.join(args)}: {proc.stderr}{proc.stdout[-2000:]}"
    return proc


def _packages(lock: Path) -> dict[str, tuple[object, ...]]:
    data = tomllib.loads(lock.read_text())
    out: dict[str, tuple[object, ...]] = {}
    for pkg in data["packages"]:
        (wheel,) = pkg["wheels"]
        tool = pkg["tool"]["envlock"]
        out[pkg["name"]] = (
            pkg["version"],
            wheel["name"],
            wheel.get("url") or wheel.get("path"),
            wheel["hashes"]["sha256"],
            tool["source"],
        )
    return out


def _round_trip(root: Path) -> dict[str, object]:
    """capture ref; lock tgt; apply tgt; then the applied venv read back."""
    _envlock(root, "capture", "ref")
    _envlock(root, "lock", "tgt")
    _envlock(root, "apply", "tgt")
    assert run_envlock(root, "diff", "tgt", "live:tgt").returncode == 0
    _envlock(root, "capture", "tgt-again")
    assert _packages(root / "locks/pylock.tgt-again.toml") == _packages(root / "locks/pylock.tgt.toml")
    _envlock(root, "verify", "tgt")
    smoke = json.loads(_envlock(root, "smoke", "tgt", "--format", "json").stdout)
    return dict(smoke["result"])


def _unpathed(venv: Path, shown_as: str, name: str) -> bytes:
    return (venv / name).read_bytes().replace(shown_as.encode(), b"{venv}")


def _same_scaffold(applied: Path, applied_at: str, ref: Path) -> None:
    """pyvenv.cfg and activate scripts: the reference's, at the target's path."""
    for name in ("pyvenv.cfg", "bin/activate", "bin/activate.csh", "bin/activate.fish"):
        # The prompt is the directory's name, in parentheses.
        want = _unpathed(ref, str(ref), name).replace(f"({ref.name})".encode(), b"({name})")
        got = _unpathed(applied, applied_at, name)
        got = got.replace(f"({os.path.basename(applied_at)})".encode(), b"({name})")
        assert got == want, name
    assert not (applied / ".lock").exists()


@pytest.fixture(scope="module")
def pip_made_311(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip, setuptools, console scripts (pygmentize, markdown-it, flake8...), a maturin wheel
    with a compressed tag set (llguidance), a C extension wheel (pyyaml)."""
    base = tmp_path_factory.mktemp("corpus")
    return _pip_venv(base / "ref311", "3.11", ["install", "rich", "pyyaml", "flake8", "llguidance==1.3.0"])


def test_pip_made_venv_to_a_fresh_local_host(tmp_path: Path, pip_made_311: Path) -> None:
    target = tmp_path / "opt" / "venv_sglang211"
    root = _workspace(tmp_path / "ws", pip_made_311, f'venv = "{target}"\nreference = "ref"\n')
    _round_trip(root)
    ref_lock = tomllib.loads((root / "locks/pylock.ref.toml").read_text())
    llg = next(p for p in ref_lock["packages"] if p["name"] == "llguidance")
    assert llg["tool"]["envlock"]["source"] == "index", "a compressed WHEEL tag set must still trace"
    assert walk_payload(target) == walk_payload(pip_made_311)
    _same_scaffold(target, str(target), pip_made_311)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshRig]:
    rig = SshRig.start(tmp_path_factory.mktemp("corpus-ssh"), ("fresh",))
    try:
        yield rig
    finally:
        rig.stop()


def test_pip_made_venv_to_a_fresh_host_over_ssh(tmp_path: Path, pip_made_311: Path, rig: SshRig) -> None:
    assert not rig.venv_dir("fresh").exists()
    root = _workspace(tmp_path / "ws", pip_made_311, rig.profile("fresh", extra='reference = "ref"\n'))
    _round_trip(root)
    applied = rig.venv_dir("fresh")
    assert walk_payload(applied).keys() == walk_payload(pip_made_311).keys()
    # walk_payload normalises the venv path as this machine sees it; on the
    # host the venv is at VENV_PATH.
    ref = {k: v for k, v in walk_payload(pip_made_311).items() if k.startswith("site/")}
    assert {k: v for k, v in walk_payload(applied).items() if k.startswith("site/")} == ref
    _same_scaffold(applied, VENV_PATH, pip_made_311)


def test_sdist_build_linking_a_system_library(tmp_path: Path) -> None:
    """PyYAML built from its sdist against libyaml: repacked into the store, applied from there."""
    ref = _pip_venv(tmp_path / "sdist311", "3.11", ["install", "--no-binary", "pyyaml", "pyyaml", "six"])
    target = tmp_path / "target"
    root = _workspace(tmp_path / "ws", ref, f'venv = "{target}"\nreference = "ref"\n')
    _round_trip(root)
    lock = tomllib.loads((root / "locks/pylock.tgt.toml").read_text())
    pyyaml = next(p for p in lock["packages"] if p["name"] == "pyyaml")
    assert pyyaml["tool"]["envlock"]["source"] == "repacked"
    needed = {n for lib in pyyaml["tool"]["envlock"]["native"] for n in lib.get("needed", [])}
    assert "libyaml-0.so.2" in needed, "built against the system's libyaml (make test installs libyaml-dev)"
    assert walk_payload(target) == walk_payload(ref)
    _same_scaffold(target, str(target), ref)


def _oracle_payload(lock: Path, python: str, where: Path) -> dict[str, str]:
    """What uv installs from the lock into a fresh venv of the target's Python."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True)
    subprocess.run(
        [UV, "pip", "sync", "-q", "--python", str(where / "bin/python"), str(lock)],
        check=True,
        env={**os.environ, "UV_LINK_MODE": "copy"},
    )
    return walk_payload(where)


def _pyvenv_oracle(python: str, target: Path, scratch: Path) -> bytes:
    """pyvenv.cfg as the target's own ``python -m venv`` writes it for the target path."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(scratch)], check=True)
    text = (scratch / "pyvenv.cfg").read_text().replace(" --without-pip", "")
    return text.replace(str(scratch), str(target)).encode()


@pytest.mark.parametrize(
    ("ref_minor", "target_minor", "pip_args"),
    [
        # pip 23.2 and setuptools 65 as ensurepip leaves them do not import on 3.12.
        (
            "3.11",
            "3.12",
            [["install", "-U", "pip"], ["uninstall", "-y", "setuptools"], ["install", "six", "orjson"]],
        ),
        (
            "3.8",
            "3.13",
            [["install", "-U", "pip"], ["uninstall", "-y", "setuptools"], ["install", "six", "idna"]],
        ),
    ],
)
def test_another_python_on_the_target(
    tmp_path: Path, ref_minor: str, target_minor: str, pip_args: list[list[str]]
) -> None:
    ref = _pip_venv(tmp_path / f"ref{ref_minor}", ref_minor, *pip_args)
    target = tmp_path / "target"
    python = _python(target_minor)
    profile = f'venv = "{target}"\nreference = "ref"\npython = "{python}"\n'
    root = _workspace(tmp_path / "ws", ref, profile)
    _round_trip(root)
    lock = root / "locks/pylock.tgt.toml"
    applied = walk_payload(target)
    oracle = _oracle_payload(lock, python, tmp_path / "oracle")
    assert {k: v for k, v in applied.items() if k.startswith("site/")} == {
        k: v for k, v in oracle.items() if k.startswith("site/")
    }
    # bin/ keeps the reference's script bytes, named for the target's Python.
    ref_bin = {
        k.replace(ref_minor, target_minor) if k.startswith("bin/pip") else k: v
        for k, v in walk_payload(ref).items()
        if k.startswith("bin/")
    }
    assert {k: v for k, v in applied.items() if k.startswith("bin/")} == ref_bin
    assert f"bin/pip{target_minor}" in applied
    if target_minor >= "3.11":
        assert (target / "pyvenv.cfg").read_bytes() == _pyvenv_oracle(python, target, tmp_path / "scratch")
