"""envlock smoke: real venvs with a broken package of every kind, through the real CLI.

One venv (the host's Python) holds a package per way an import fails and is
captured into a lock before it drifts (xgram downgraded under servekit,
llguid uninstalled), so the explanations draw on both the lock and the live
venv. A second, small venv on Python 3.8 without a lock exercises --deep,
order-dependence and the agent on the oldest target Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import write_profile
from envlock.agent.smoke import classify, dotted, top_level_from_record
from envlock.agent.smoke_worker import fault_frames
from envlock.hosts import load_profile
from envlock.smoke import SmokeOptions, smoke_host
from envlock.transport import open_transport
from envlock.workspace import Workspace
from helpers import UV, build_simple_index, make_venv, run_envlock, uv_install
from smoke_helpers import deep_wheels, native_wheels, python_wheels
from sshrig import VENV_PATH, SshRig

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
TIMEOUT = "4"
CHECKS = '[smoke]\nchecks = ["from xgram import StructuralTag", "servekit", "fine"]\n'


@dataclass(frozen=True)
class Broken:
    root: Path  # workspace: hosts/ct200.toml, locks/pylock.ct200.toml
    venv: Path
    index_url: str


@pytest.fixture(scope="session")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Broken:
    base = tmp_path_factory.mktemp("smoke")
    wheels = python_wheels(base / "wheels") + native_wheels(base / "wheels", base / "build")
    url = build_simple_index(base / "index", wheels)
    venv = make_venv(base / "venv")
    names = ["servekit", "xgram==0.1.32", "usesllguid", "soundish", "crashy", "hangs", "gpuctypes"]
    names += ["raiser", "fine", "nativeext", "abiext", "gpuext", "shipext", "shiplib"]
    uv_install(venv, "--index-url", url, *names)
    root = base / "fleet"
    write_profile(root, "ct200", venv, url, CHECKS)
    proc = run_envlock(root, "capture", "ct200")
    assert proc.returncode == 0, proc.stderr
    # Drift after the lock was written, as on ct200: an older xgram, llguid gone.
    uv_install(venv, "--index-url", url, "--no-deps", "xgram==0.1.10")
    py = str(venv / "bin" / "python")
    subprocess.run([UV, "pip", "uninstall", "-q", "--python", py, "llguid"], check=True)
    return Broken(root, venv, url)


def smoke_json(root: Path, host: str, *args: str) -> tuple[int, dict[str, Any]]:
    proc = run_envlock(root, "smoke", host, "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def full(broken: Broken) -> tuple[int, dict[str, Any]]:
    return smoke_json(broken.root, "ct200", "--timeout", TIMEOUT, "--jobs", "2")


def by_target(envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["target"]: r for r in envelope["result"]["results"]}


def test_every_failure_is_classified_with_the_line_that_matters(full: tuple[int, dict[str, Any]]) -> None:
    code, envelope = full
    assert code == 1
    r = by_target(envelope)

    servekit = r["servekit"]
    assert (servekit["status"], servekit["kind"], servekit["check"]) == ("failed", "missing-name", False)
    assert servekit["facts"] == {"name": "StructuralTag", "module": "xgram"}
    assert servekit["where"]["path"] == "site-packages/servekit/grammar.py"
    assert (servekit["where"]["line"], servekit["where"]["owner"]) == (1, "servekit")
    assert servekit["where"]["code"] == "from xgram import StructuralTag"
    assert "xgram 0.1.10 is installed, the lock has 0.1.32" in servekit["why"]
    assert "servekit 1.0 requires xgram>=0.1.32" in servekit["why"]

    assert [r[t]["same_as"] for t in ("from xgram import StructuralTag", "servekit")] == ["servekit", None]
    for target in ("usesllguid", "llguid"):
        assert r[target]["kind"] == "missing-module", r[target]
        assert "llguid comes from llguid 1.0 in the lock, which is not installed" in r[target]["why"]
    assert r["usesllguid"]["where"]["path"] == "site-packages/usesllguid/__init__.py"
    assert (r["usesllguid"]["same_as"], r["llguid"]["same_as"]) == ("llguid", None)
    soundish = r["soundish"]
    assert soundish["kind"] == "missing-module" and soundish["where"]["line"] == 2
    assert soundish["why"] == "no locked distribution provides soundfile_missing; soundish imports it"

    nativeext = r["nativeext"]
    assert nativeext["kind"] == "missing-library"
    assert nativeext["facts"]["library"] == "libgone.so.1"
    assert nativeext["facts"]["needed_by"] == "site-packages/nativeext/_core.abi3.so"
    assert nativeext["facts"]["needed_by_owner"] == "nativeext"
    assert nativeext["why"] == (
        "_core.abi3.so (nativeext 1.0) needs libgone.so.1, which no locked package ships: "
        "a system library missing on this host"
    )
    assert nativeext["where"]["path"] == "site-packages/nativeext/__init__.py"
    assert r["shipext"]["why"] == (
        "_core.abi3.so (shipext 1.0) needs libshipped.so.1, which is in shiplib "
        "(site-packages/shiplib/lib/libshipped.so.1), but the loader's search path does not reach it"
    )

    abiext = r["abiext"]
    assert abiext["kind"] == "undefined-symbol" and abiext["facts"]["symbol"] == "dep_v2_fn"
    assert abiext["facts"]["library"] == "site-packages/abiext/_core.abi3.so"
    assert abiext["why"].startswith("ABI mismatch: _core.abi3.so (abiext 1.0) needs dep_v2_fn, which none")
    assert "(libdep.so.1)" in abiext["why"]

    crashy = r["crashy"]
    assert crashy["kind"] == "crash" and crashy["facts"]["signal_name"] == "SIGSEGV"
    assert crashy["where"]["path"] == "site-packages/crashy/__init__.py" and crashy["where"]["line"] == 2
    assert "Segmentation fault" in crashy["message"] and crashy["alone"]

    hangs = r["hangs"]
    assert hangs["kind"] == "timeout" and f"still importing after {TIMEOUT} s" in hangs["why"]
    assert hangs["where"]["path"] == "site-packages/hangs/__init__.py" and hangs["where"]["line"] == 2

    raiser = r["raiser"]
    assert raiser["kind"] == "error" and raiser["why"] == "RuntimeError: CUDA_HOME is not set"

    for target in ("gpuext", "gpuctypes"):
        assert (r[target]["status"], r[target]["kind"]) == ("skipped", "needs-gpu-driver"), r[target]
        assert r[target]["facts"]["library"] == "libcuda.so.1"
        assert "this host has no GPU" in r[target]["why"]
    assert r["gpuctypes"]["where"]["path"] == "site-packages/gpuctypes.py"

    for target in ("fine", "xgram", "shiplib", "fine"):
        assert r[target]["status"] == "ok", r[target]


def test_profile_checks_run_first_as_statements_or_imports(full: tuple[int, dict[str, Any]]) -> None:
    _code, envelope = full
    results = envelope["result"]["results"]
    assert [x["target"] for x in results[:3]] == ["from xgram import StructuralTag", "servekit", "fine"]
    assert all(x["check"] for x in results[:3]) and not any(x["check"] for x in results[3:])
    statement = results[0]
    assert (statement["status"], statement["kind"]) == ("failed", "missing-name")
    assert "xgram 0.1.10 is installed, the lock has 0.1.32" in statement["why"]
    assert results[1]["kind"] == "missing-name" and results[2]["status"] == "ok"


def test_json_envelope_contract(full: tuple[int, dict[str, Any]]) -> None:
    _code, envelope = full
    assert (envelope["schema_version"], envelope["command"], envelope["ok"]) == (
        2,
        "smoke",
        False,
    )  # ok follows the exit status (schema 2)
    result = envelope["result"]
    assert result["passed"] is False and result["has_gpu"] is False
    assert result["lock"] == "locks/pylock.ct200.toml"
    assert result["counts"] == {"ok": 4, "failed": 12, "expected": 0, "skipped": 2, "not_run": 0}
    assert result["jobs"] == 2 and result["stopped"] is False


def test_text_output_lists_failures_most_serious_first(broken: Broken) -> None:
    proc = run_envlock(broken.root, "smoke", "ct200", "--timeout", TIMEOUT)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["result", "kind", "module", "why"]  # "at" under -v
    rows = [line.split()[:3] for line in lines[2:] if line.startswith(("failed", "skipped"))]
    assert rows == [  # one row per cause, most serious first
        ["failed", "crash", "crashy"],
        ["failed", "timeout", "hangs"],
        ["failed", "undefined-symbol", "abiext"],
        ["failed", "missing-library", "nativeext"],
        ["failed", "missing-library", "shipext"],
        ["failed", "missing-name", "servekit"],
        ["failed", "missing-module", "llguid"],
        ["failed", "missing-module", "soundish"],
        ["failed", "error", "raiser"],
        ["skipped", "needs-gpu-driver", "gpuext"],
    ]
    assert "servekit (+2)" in proc.stdout and "llguid (+1)" in proc.stdout
    assert (
        "servekit: the same cause also failed check: from xgram import StructuralTag, check: servekit"
        in lines
    )
    assert "gpuext: the same cause also skipped gpuctypes" in lines
    assert lines[-1].startswith("smoke ct200: 15 modules + 3 checks in ")
    assert lines[-1].endswith("4 ok, 12 failed, 2 skipped (9 causes)")


def test_fail_fast_stops_at_the_first_failure(broken: Broken) -> None:
    started = time.monotonic()
    code, envelope = smoke_json(broken.root, "ct200", "--fail-fast", "--jobs", "1", "--timeout", "30")
    assert time.monotonic() - started < 30, "the hang was waited for"
    result = envelope["result"]
    assert code == 1 and result["stopped"] is True
    failed = [x for x in result["results"] if x["status"] == "failed"]
    assert [x["target"] for x in failed] == ["from xgram import StructuralTag"]
    assert "hangs" in result["not_run"] and "crashy" in result["not_run"]
    assert result["counts"]["not_run"] == len(result["not_run"]) == 17


def test_exit_2_when_it_cannot_run(broken: Broken, tmp_path: Path) -> None:
    proc = run_envlock(broken.root, "smoke", "nosuchhost")
    assert proc.returncode == 2 and "unknown host 'nosuchhost'" in proc.stderr
    write_profile(tmp_path, "gone", tmp_path / "nowhere", None)
    proc = run_envlock(tmp_path, "smoke", "gone")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.count("\n") == 1 and "no such directory" in proc.stderr


# ---------------------------------------------------------------- Python 3.8 and 3.13, no lock, --deep


def _python(minor: str) -> str:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    if not found:
        pytest.fail(f"CPython {minor} is not installed under {PYENV}")
    return str(found[-1])


@pytest.fixture(scope="module", params=["3.8", "3.13"])
def small(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the oldest or newest target Python, without a lock: hosts/old.toml (no GPU)
    and hosts/oldgpu.toml (a GPU host)."""
    base = tmp_path_factory.mktemp("smoke" + request.param)
    wheels = deep_wheels(base / "wheels") + python_wheels(base / "wheels")
    url = build_simple_index(base / "index", wheels)
    venv = make_venv(base / "venv", _python(request.param))
    names = ["deeppkg", "aaa-poison", "bbb-orderdep", "gpuctypes", "crashy", "xgram==0.1.10", "fine"]
    uv_install(venv, "--index-url", url, *names)
    uv_install(venv, "--index-url", url, "--no-deps", "servekit")
    root = base / "fleet"
    write_profile(root, "old", venv, url)
    write_profile(root, "oldgpu", venv, url, '[gpu]\ncc = ["12.0"]\n')
    return root


def test_deep_walks_submodules_from_files_on_old_and_new_pythons(small: Path) -> None:
    code, envelope = smoke_json(small, "old", "--deep", "--jobs", "1")
    assert code == 1
    result = envelope["result"]
    assert result["python"].startswith(("3.8.", "3.13.")) and result["lock"] is None
    r = by_target(envelope)
    deep = sorted(t for t in r if t.startswith("deeppkg"))
    assert deep == ["deeppkg", "deeppkg.a", "deeppkg.sub", "deeppkg.sub.broken"]
    broken = r["deeppkg.sub.broken"]
    assert broken["kind"] == "missing-module"
    assert broken["why"] == "no installed distribution provides deep_missing_dep; deeppkg imports it"
    assert broken["where"] == {
        "path": "site-packages/deeppkg/sub/broken.py",
        "line": 1,
        "function": "<module>",
        "code": "import deep_missing_dep",
        "owner": "deeppkg",
    }
    crashy = r["crashy"]
    assert crashy["facts"]["signal_name"] == "SIGSEGV" and crashy["where"]["line"] == 2
    servekit = r["servekit"]
    assert servekit["why"] == "xgram has no StructuralTag (xgram 0.1.10); servekit 1.0 requires xgram>=0.1.32"
    assert r["gpuctypes"]["status"] == "skipped"
    # One worker: aaa_poison was imported just before bbb_orderdep, in the same interpreter.
    victim = r["bbb_orderdep"]
    assert victim["status"] == "ok"
    assert victim["order_dependent"].startswith("failed after other imports in the same interpreter")
    assert "AssertionError: poisoned" in victim["order_dependent"]

    _code, shallow = smoke_json(small, "old", "--jobs", "1")
    assert sorted(t for t in by_target(shallow) if t.startswith("deeppkg")) == ["deeppkg"]


def test_driver_library_missing_on_a_gpu_host_is_a_failure(small: Path) -> None:
    _code, envelope = smoke_json(small, "oldgpu", "--jobs", "2")
    gpu = by_target(envelope)["gpuctypes"]
    assert (gpu["status"], gpu["kind"]) == ("failed", "needs-gpu-driver")
    assert "missing on a host with a GPU" in gpu["why"]
    assert envelope["result"]["has_gpu"] is True


def test_smoke_host_is_callable_for_apply_on_another_venv_path(small: Path, tmp_path: Path) -> None:
    """apply smokes its staging venv: same host, another path, an explicit lock (none here)."""
    staging = load_profile(Workspace(small), "old").venv
    write_profile(tmp_path, "old", tmp_path / "not-yet-swapped", None)
    workspace = Workspace(tmp_path)
    profile = load_profile(workspace, "old")
    with open_transport(profile) as transport:
        result = smoke_host(workspace, profile, transport, SmokeOptions(jobs=1), venv=staging)
    assert result.venv == staging
    failed = {r.target for r in result.failures}
    assert failed == {"crashy", "servekit"}
    assert result.failures[0].target == "crashy"  # a crash is the most serious


# ---------------------------------------------------------------- classification, unit by unit


@pytest.mark.parametrize(
    ("link", "kind", "facts"),
    [
        (
            {"type": "ModuleNotFoundError", "message": "No module named 'sf'", "name": "sf"},
            "missing-module",
            {"module": "sf"},
        ),
        (
            {"type": "ImportError", "message": "cannot import name 'T' from 'xg' (/v/xg/__init__.py)"},
            "missing-name",
            {"name": "T", "module": "xg"},
        ),
        (
            {"type": "ImportError", "message": "/v/site/k/ops.so: undefined symbol: _ZN3c10"},
            "undefined-symbol",
            {"library": "/v/site/k/ops.so", "symbol": "_ZN3c10"},
        ),
        (
            {
                "type": "ImportError",
                "message": "/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by /v/x.so)",
            },
            "symbol-version",
            {"version": "GLIBCXX_3.4.32", "library": "/v/x.so"},
        ),
        (
            {
                "type": "ImportError",
                "message": "libcudart.so.12: cannot open shared object file: No such file or directory",
                "path": "/v/site/k/ops.so",
            },
            "missing-library",
            {"library": "libcudart.so.12", "needed_by": "/v/site/k/ops.so"},
        ),
        ({"type": "ValueError", "message": "bad"}, "error", {}),
    ],
)
def test_classify(link: dict[str, Any], kind: str, facts: dict[str, Any]) -> None:
    verdict = classify([{"frames": [], **link}], ())
    assert (verdict["status"], verdict["kind"], verdict["facts"]) == ("failed", kind, facts)


def test_classify_reads_the_cause_and_skips_driver_libraries() -> None:
    wrapper = {"type": "RuntimeError", "message": "failed to load kernels", "frames": []}
    cause = {"type": "OSError", "message": "libcuda.so.1: cannot open shared object file", "frames": []}
    verdict = classify([wrapper, cause], ("libcuda.so",))
    assert (verdict["status"], verdict["kind"], verdict["type"]) == ("skipped", "needs-gpu-driver", "OSError")
    assert classify([wrapper, cause], ())["kind"] == "missing-library"


def test_fault_frames_pick_the_crashing_or_the_importing_thread() -> None:
    dump = (
        "Fatal Python error: Segmentation fault\n\n"
        "Thread 0x00007f01 (most recent call first):\n"
        '  File "/v/site/bg.py", line 9 in run\n\n'
        "Current thread 0x00007f02 (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        '  File "/v/site/crashy/__init__.py", line 2 in <module>\n'
        '  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed\n'
        '  File "<string>", line 150 in main\n'
    )
    fatal, frames = fault_frames(dump, prefer_current=True)
    assert fatal == "Fatal Python error: Segmentation fault"
    assert [f[:2] for f in frames] == [
        ["/v/site/crashy/__init__.py", 2],
        ["/usr/lib/python3.11/ctypes/__init__.py", 519],
    ]
    _fatal, hung = fault_frames(dump.replace("Current thread", "Thread"), prefer_current=False)
    assert hung[-1][:2] == ["/usr/lib/python3.11/ctypes/__init__.py", 519]


def test_top_level_names_from_record_and_top_level_txt() -> None:
    rows = [
        ["torch/__init__.py"],
        ["isympy.py"],
        ["_C.cpython-311-x86_64-linux-gnu.so"],
        ["torch-2.0.dist-info/METADATA"],
        ["../../../bin/torchrun"],
        ["distutils-precedence.pth"],
        ["__pycache__/isympy.cpython-311.pyc"],
    ]
    assert top_level_from_record(rows) == ["_C", "isympy", "torch"]
    assert [dotted(n) for n in ("nvidia/cusparselt", "ok_name", "not-a-name", "")] == [
        "nvidia.cusparselt",
        "ok_name",
        None,
        None,
    ]


# ---------------------------------------------------------------- over SSH


@pytest.fixture(scope="module")
def ssh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshRig, str]]:
    """A real sshd on loopback whose host has a Python 3.12 venv at VENV_PATH."""
    base = tmp_path_factory.mktemp("smokessh")
    url = build_simple_index(base / "index", python_wheels(base / "wheels"))
    rig = SshRig.start(base / "rig", ("smoke-host",))
    try:
        python = f"{VENV_PATH}/bin/python"
        pins = ["crashy", "fine", "xgram==0.1.10", "servekit", "--no-deps"]
        for argv in (
            [UV, "venv", "-q", "--python", _python("3.12"), VENV_PATH],
            [
                "env",
                "UV_LINK_MODE=copy",
                UV,
                "pip",
                "install",
                "-q",
                "--python",
                python,
                "--index-url",
                url,
                *pins,
            ],
        ):
            proc = rig.run("smoke-host", argv)
            assert proc.returncode == 0, proc.stderr
        yield rig, url
    finally:
        rig.stop()


def test_smoke_over_ssh_quotes_checks_and_reports_like_a_local_run(
    ssh_host: tuple[SshRig, str], tmp_path: Path
) -> None:
    rig, _url = ssh_host
    checks = (
        '[smoke]\nchecks = ["from xgram import StructuralTag", "import os; os.environ[\'NO_SUCH_VAR\']"]\n'
    )
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "remote.toml").write_text(rig.profile("smoke-host", extra=checks))
    code, envelope = smoke_json(tmp_path, "remote", "--jobs", "2")
    assert code == 1
    result = envelope["result"]
    assert result["venv"] == VENV_PATH and result["python"].startswith("3.12.")
    r = by_target(envelope)
    assert r["from xgram import StructuralTag"]["kind"] == "missing-name"
    environ = r["import os; os.environ['NO_SUCH_VAR']"]
    assert (environ["kind"], environ["type"], environ["message"]) == ("error", "KeyError", "'NO_SUCH_VAR'")
    assert (
        r["crashy"]["kind"] == "crash" and r["crashy"]["where"]["path"] == "site-packages/crashy/__init__.py"
    )
    assert r["servekit"]["why"].startswith("xgram has no StructuralTag (xgram 0.1.10); servekit 1.0 requires")
    assert (r["fine"]["status"], r["xgram"]["status"]) == ("ok", "ok")
