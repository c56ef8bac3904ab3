"""ABI facts in the lock (issue 16): what an extension takes from another package's libraries.

Real parts: g++ builds three versions of a provider wheel (``abitorch``,
a ``libc10.so`` exporting ``c10::`` functions like torch's, plus a C entry
point under a symbol version) and a consumer extension linked against the
first (``abikern``'s ``common_ops.abi3.so``, like sgl-kernel's against
torch; no Requires-Dist on it, as sgl-kernel has none). 1.1 adds a
function (compatible); 2.0 replaces ``c10::check(int)`` by
``c10::check(long)`` (the consumer's import fails, checked with ctypes).
Installed with uv into real venvs from a PEP 503 tree, captured, locked,
reviewed and diffed through the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envlock.lock.io import read_lock
from envlock.lock.model import Lock, NativeLib
from helpers import GIT_ENV, build_simple_index, make_venv, make_wheel, run_envlock, uv_install

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

CHECK_INT = "void check(int x) { if (x < 0) throw x; }\n"
PROVIDER = {
    "1.0": "int device_count() { return 1; }\n" + CHECK_INT,
    "1.1": "int device_count() { return 2; }\n" + CHECK_INT + "int extra() { return 3; }\n",
    "2.0": "int device_count() { return 1; }\nvoid check(long x) { if (x < 0) throw x; }\n",
}
CONSUMER = """
namespace c10 { int device_count(); void check(int); }
extern "C" int abi_c_entry(void);
extern "C" int kern_run(void) { c10::check(1); return c10::device_count() + abi_c_entry(); }
"""
TAKEN = ("_ZN3c1012device_countEv", "_ZN3c105checkEi", "abi_c_entry@ABITORCH_1")
LIB = "site-packages/abikern/common_ops.abi3.so"
C10 = "site-packages/abitorch/lib/libc10.so"
TAG = "py3-none-linux_x86_64"


def _gxx(*args: str) -> None:
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", *args], check=True, capture_output=True)


def _provider(work: Path, version: str) -> Path:
    src = work / f"c10-{version}.cpp"
    src.write_text(
        f'namespace c10 {{\n{PROVIDER[version]}}}\nextern "C" int abi_c_entry(void) {{ return 7; }}\n'
    )
    script = work / "c10.map"
    script.write_text("ABITORCH_1 { global: abi_c_entry; };\n")
    out = work / version / "libc10.so"
    out.parent.mkdir()
    _gxx("-Wl,-soname,libc10.so", f"-Wl,--version-script={script}", "-o", str(out), str(src))
    return out


@dataclass(frozen=True)
class AbiIndex:
    url: str
    libraries: tuple[Path, ...]  # the providers' libc10.so and the consumer, as built


@pytest.fixture(scope="session")
def abi_index(tmp_path_factory: pytest.TempPathFactory) -> AbiIndex:
    """The provider's three versions and the consumer, built once per session."""
    work = tmp_path_factory.mktemp("abiwheels")
    libs = {version: _provider(work, version) for version in PROVIDER}
    builds = {}
    for version, extra in (("1.0", ""), ("1.1", 'extern "C" int kern_version(void) { return 11; }\n')):
        src = work / f"common_ops-{version}.cpp"
        src.write_text(CONSUMER + extra)
        ops = builds[version] = work / f"common_ops-{version}.abi3.so"
        rpath = "-Wl,-rpath,$ORIGIN/../abitorch/lib"
        _gxx(f"-L{libs['1.0'].parent}", rpath, "-o", str(ops), str(src), "-lc10")
    wheels = [
        make_wheel(
            work / "wheels",
            "abitorch",
            version,
            {"abitorch/__init__.py": b"", "abitorch/lib/libc10.so": lib.read_bytes()},
            tag=TAG,
        )
        for version, lib in libs.items()
    ]
    wheels += [
        make_wheel(
            work / "wheels",
            "abikern",
            version,
            {"abikern/__init__.py": b"", "abikern/common_ops.abi3.so": ops.read_bytes()},
            tag=TAG,
        )
        for version, ops in builds.items()
    ]
    return AbiIndex(build_simple_index(work / "index", wheels), (*libs.values(), builds["1.0"]))


def _nm(path: Path, *args: str) -> dict[str, str]:
    """``nm -D --with-symbol-versions``: the oracle for symbol versions (``@@`` = default).
    Symbol -> nm's type letter (``U`` strong undefined, ``w`` weak, ``A`` absolute, ...)."""
    out = subprocess.run(
        ["nm", "-D", "--with-symbol-versions", *args, str(path)], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[-1].replace("@@", "@"): line.split()[-2] for line in out.splitlines()}


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils nm")
def test_symbol_versions_match_nm(abi_index: AbiIndex) -> None:
    from envlock.binary.elf import read_link_facts

    libstdcxx = Path("/lib/x86_64-linux-gnu/libstdc++.so.6")
    for path in (*abi_index.libraries, *([libstdcxx] if libstdcxx.exists() else [])):
        with open(path, "rb") as stream:
            facts = read_link_facts(stream, symbol_versions=True)
        # Weak references ("w") are left out on purpose: unresolved, they are no error.
        strong = {s for s, kind in _nm(path, "--undefined-only").items() if kind == "U"}
        assert set(facts.undefined_versioned) == strong, path
        defined = _nm(path, "--defined-only")
        # The version definitions' own absolute symbols (ABITORCH_1@ABITORCH_1): nm shows them as "A".
        named = {s for s in facts.exported_versioned if s.partition("@")[0] != s.partition("@")[2]}
        assert named == {s for s, kind in defined.items() if "@" in s and kind != "A"}, path
    with open(abi_index.libraries[-1], "rb") as stream:
        assert "abi_c_entry@ABITORCH_1" in read_link_facts(stream, symbol_versions=True).undefined_versioned


def _workspace(root: Path, index: AbiIndex, provider: str) -> Path:
    venv = make_venv(root / "venv-ref")
    uv_install(venv, "--index-url", index.url, f"abitorch=={provider}", "abikern==1.0")
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "ref.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index.url}"]\n')
    proc = run_envlock(root, "capture", "ref")
    assert proc.returncode == 0, proc.stderr
    return venv


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory, abi_index: AbiIndex) -> Path:
    """ref: abitorch 1.0 with abikern built against it, captured."""
    root = tmp_path_factory.mktemp("abifleet")
    _workspace(root, abi_index, "1.0")
    return root


def _native(lock: Lock, package: str, path: str) -> NativeLib:
    pkg = lock.package(package)
    assert pkg is not None
    return next(lib for lib in pkg.native if lib.path == path)


def _kern_loads(venv: Path) -> subprocess.CompletedProcess[str]:
    """Load the consumer with ctypes in the venv's Python: what an import would do."""
    code = "import ctypes, abikern, os; ctypes.CDLL(os.path.join(abikern.__path__[0], 'common_ops.abi3.so'))"
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)


def test_capture_records_what_each_library_takes_and_provides(fleet: Path) -> None:
    lock = read_lock(fleet / "locks" / "pylock.ref.toml")
    assert dict(_native(lock, "abikern", LIB).takes) == {"abitorch": TAKEN}
    assert _native(lock, "abitorch", C10).provides == TAKEN
    assert not _native(lock, "abitorch", C10).takes
    text = (fleet / "locks" / "pylock.ref.toml").read_text()
    assert "'abi_c_entry@ABITORCH_1'," in text  # the version stays part of the symbol


def _target(fleet: Path, host: str, pins: str) -> None:
    ref = read_lock(fleet / "locks" / "pylock.ref.toml")
    profile = fleet / "hosts" / "ref.toml"
    index = profile.read_text().split("[index]", 1)[1]
    (fleet / "hosts" / f"{host}.toml").write_text(
        f'venv = "{fleet}/venv-{host}"\nreference = "ref"\n'
        f'[target]\npython = "{ref.interpreter.version}"\n[lock]\npins = [{pins}]\n[index]{index}'
    )


def test_lock_refuses_a_provider_that_lost_a_symbol_a_kept_extension_takes(fleet: Path) -> None:
    _target(fleet, "newtorch", '"abitorch==2.0"')
    proc = run_envlock(fleet, "lock", "newtorch")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line
    for part in (
        "ABI break for newtorch",
        "abikern common_ops (abikern): takes c10::check(int) (_ZN3c105checkEi) from abitorch",
        "(libc10.so in 1.0), which abitorch 2.0 no longer exports",
        'pins = ["abitorch==1.0"]',
        "rebuild abikern against abitorch 2.0",
    ):
        assert part in line, line
    assert "device_count" not in line  # 2.0 still exports it
    assert not (fleet / "locks" / "pylock.newtorch.toml").exists()
    as_json = run_envlock(fleet, "lock", "newtorch", "--format", "json")
    error = json.loads(as_json.stdout)["error"]
    assert as_json.returncode == 2 and "c10::check(int)" in error["message"]


def test_lock_accepts_a_compatible_provider_and_records_what_it_provides(fleet: Path) -> None:
    _target(fleet, "minor", '"abitorch==1.1"')
    proc = run_envlock(fleet, "lock", "minor", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    packages = {p["name"]: p for p in json.loads(proc.stdout)["result"]["packages"]}
    assert packages["abitorch"]["version"] == "1.1" and packages["abikern"]["kept"]
    lock = read_lock(fleet / "locks" / "pylock.minor.toml")
    assert _native(lock, "abitorch", C10).provides == TAKEN
    assert dict(_native(lock, "abikern", LIB).takes) == {"abitorch": TAKEN}


def test_lock_checks_a_changed_extension_against_a_changed_provider(fleet: Path) -> None:
    """abikern 1.1 is a new build that still references c10::check(int): with abitorch 2.0
    it is refused too (``still takes``); with abitorch 1.1 both upgrades pass."""
    _target(fleet, "both", '"abitorch==2.0", "abikern==1.1"')
    proc = run_envlock(fleet, "lock", "both")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "abikern common_ops (abikern 1.1): still takes c10::check(int) (_ZN3c105checkEi)" in proc.stderr
    assert "which abitorch 2.0 no longer exports" in proc.stderr
    _target(fleet, "both", '"abitorch==1.1", "abikern==1.1"')
    proc = run_envlock(fleet, "lock", "both", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    lock = read_lock(fleet / "locks" / "pylock.both.toml")
    assert dict(_native(lock, "abikern", LIB).takes) == {"abitorch": TAKEN}
    assert _native(lock, "abitorch", C10).provides == TAKEN


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV}
    )


def _review(root: Path) -> tuple[int, list[dict[str, Any]]]:
    proc = run_envlock(root, "review", "--base", "HEAD", "--format", "json", "--no-index")
    assert proc.returncode in (0, 1), proc.stderr
    result = json.loads(proc.stdout)["result"]
    findings = [f for lock in result["locks"] for f in lock["findings"]]
    findings += [f for change in result["changes"] for f in change["findings"]]
    return proc.returncode, findings


def test_review_blocks_and_diff_shows_a_provider_upgrade_under_a_kept_extension(
    tmp_path: Path, abi_index: AbiIndex
) -> None:
    root = tmp_path / "ws"
    venv = _workspace(root, abi_index, "1.0")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "ref: abitorch 1.0")
    base = tmp_path / "base.toml"
    shutil.copy(root / "locks" / "pylock.ref.toml", base)

    # Compatible: 1.1 keeps every symbol; no ABI finding, the upgrade is info.
    uv_install(venv, "--index-url", abi_index.url, "abitorch==1.1")
    assert _kern_loads(venv).returncode == 0
    assert run_envlock(root, "capture", "ref").returncode == 0
    code, findings = _review(root)
    assert code == 0 and not [f for f in findings if f["code"] == "abi-break"], findings

    # Incompatible: the extension really fails to load, and review blocks before any host imports it.
    uv_install(venv, "--index-url", abi_index.url, "abitorch==2.0")
    loaded = _kern_loads(venv)
    assert loaded.returncode != 0 and "_ZN3c105checkEi" in loaded.stderr
    assert run_envlock(root, "capture", "ref").returncode == 0
    code, findings = _review(root)
    breaks = [f for f in findings if f["code"] == "abi-break"]
    assert code == 1 and len(breaks) == 1, findings
    assert breaks[0]["severity"] == "block" and breaks[0]["package"] == "abikern"
    assert "takes c10::check(int) (_ZN3c105checkEi) from abitorch (libc10.so in 1.0)" in breaks[0]["detail"]

    proc = run_envlock(root, "diff", str(base), str(root / "locks" / "pylock.ref.toml"), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    abi = json.loads(proc.stdout)["result"]["abi"]
    assert [
        (a["package"], a["library"], a["provider"], a["symbol"], a["demangled"], a["to"]) for a in abi
    ] == [("abikern", LIB, "abitorch", "_ZN3c105checkEi", "c10::check(int)", "2.0")]
    text = run_envlock(root, "diff", str(base), str(root / "locks" / "pylock.ref.toml")).stdout
    assert "abi, kept on" in text and "c10::check(int)" in text


def test_symbol_lists_are_literal_strings_and_read_back_equal(tmp_path: Path) -> None:
    """Symbols are written as TOML literal strings (tomllib reads them ~10x faster); one
    that cannot be a literal string (a quote, a backslash, from a hand edit) stays basic."""
    from dataclasses import replace

    from envlock.lock.io import render_lock
    from lockfactory import lib, make_lock, pkg

    odd = ("_ZN3c105checkEi", "a'quote", 'back\\slash"', "abi_c_entry@ABITORCH_1")
    ops = replace(lib(LIB), takes={"abitorch": odd})
    c10 = replace(lib(C10, soname="libc10.so"), provides=odd)
    lock = make_lock("ref", [pkg("abikern", "1.0", native=[ops]), pkg("abitorch", "1.0", native=[c10])])
    text = render_lock(lock).decode()
    assert "    '_ZN3c105checkEi',\n" in text and "    'abi_c_entry@ABITORCH_1',\n" in text
    assert '    "a\'quote",\n' in text and "'back" not in text
    (tmp_path / "lock.toml").write_text(text)
    again = read_lock(tmp_path / "lock.toml")
    assert _native(again, "abikern", LIB).takes == {"abitorch": tuple(sorted(odd))}
    assert _native(again, "abitorch", C10).provides == tuple(sorted(odd))


def _facts(soname: str, *, exported: tuple[str, ...] = (), undefined: tuple[str, ...] = ()) -> Any:
    from envlock.binary.elf import LinkFacts

    plain = frozenset(s.partition("@")[0] for s in exported)
    return LinkFacts(
        machine="EM_X86_64",
        elf_class=64,
        type="ET_DYN",
        soname=soname,
        needed=(),
        rpath=(),
        runpath=(),
        version_needs={},
        version_defs=(),
        exported=plain,
        undefined=tuple(s.partition("@")[0] for s in undefined),
        sections=(),
        file_size=0,
        undefined_versioned=undefined,
        exported_versioned=frozenset(s for s in exported if "@" in s),
        version_files={"GLIBCXX_3.4.21": ("libstdc++.so.6",)},
    )


def test_a_versioned_reference_binds_only_to_the_library_its_version_names() -> None:
    """libcufile bundles std:: symbols under GLIBCXX versions: an extension's
    ``_ZNSt13runtime_errorC1EPKc@GLIBCXX_3.4.21`` is libstdc++'s, not nvidia-cufile's."""
    from envlock.binary.loader import Loader

    symbol = "_ZNSt13runtime_errorC1EPKc@GLIBCXX_3.4.21"
    files = {
        "/v/ext.so": _facts("ext.so", undefined=(symbol, "cuFileRead")),
        "/v/nvidia/lib/libcufile.so.0": _facts("libcufile.so.0", exported=(symbol, "cuFileRead")),
    }
    loader = Loader(files, lambda _path: None, preload_dirs=["/v/nvidia/lib"])
    assert loader.bindings("/v/ext.so") == {"cuFileRead": "/v/nvidia/lib/libcufile.so.0"}
    files["/v/nvidia/lib/libstdc++.so.6"] = _facts("libstdc++.so.6", exported=(symbol,))
    loader = Loader(files, lambda _path: None, preload_dirs=["/v/nvidia/lib"])
    assert loader.bindings("/v/ext.so")[symbol] == "/v/nvidia/lib/libstdc++.so.6"
