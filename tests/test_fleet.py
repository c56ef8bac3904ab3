"""Fleet operation: apply, verify, smoke, capture and lock over several SSH hosts and @groups.

Four real sshd hosts on loopback, each in its own mount namespace with its own
directory at the same venv path (tests/sshrig.py). One reference lock (the
session's reference venv, captured) is applied to all of them in parallel;
each workspace below points the hosts' profiles at venv paths of its own, so
what a test finds on a host is what that test did.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import Reference, write_profile
from envlock.tmpname import private_sibling
from envlock.transport.bundle import bundle_path
from helpers import ENVLOCK, ROOT, copy_lock, run_envlock
from sshrig import HOST_ROOT, SshRig

HOSTS = ("fl1", "fl2", "fl3", "fl4")
SCHEMA = json.loads((ROOT / "docs" / "envelope.schema.json").read_text())
FAILING_SMOKE = '[smoke]\nchecks = ["import envlock_fleet_no_such_module"]\n'
MISSING_PYTHON = 'python = "/nonexistent/bin/python3"\n'


@pytest.fixture(scope="session")
def fleet_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshRig]:
    rig = SshRig.start(tmp_path_factory.mktemp("fleet-ssh"), HOSTS)
    try:
        yield rig
    finally:
        rig.stop()


@pytest.fixture(scope="session")
def reference_lock(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Path:
    """The reference venv captured once (ct129's lock and manifest) in a workspace of its own."""
    root = tmp_path_factory.mktemp("fleet-ref")
    write_profile(root, "ct129", reference.venv, reference.index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    return root


def _workspace(
    root: Path, rig: SshRig, reference_lock: Path, venv: str, extra: dict[str, str] | None = None
) -> Path:
    """Every rig host with a profile whose venv is HOST_ROOT/<venv>, and the reference's lock;
    ``extra`` adds profile lines per host (a failing smoke, a missing Python)."""
    (root / "locks").mkdir(parents=True)
    index = (reference_lock / "hosts" / "ct129.toml").read_text().split("[index]", 1)[1]
    index = "[index]" + index
    for suffix in (".toml", ".files.tsv"):
        shutil.copy(reference_lock / "locks" / f"pylock.ct129{suffix}", root / "locks")
    shutil.copytree(reference_lock / "hosts", root / "hosts")
    shutil.copytree(reference_lock / "store", root / "store")  # the repacked wheels
    for host in HOSTS:
        # top-level keys first, then the tables: the index (capture traces wheels there), the smoke
        lines = (extra or {}).get(host, "")
        top, tables = (lines, "") if lines.startswith("python") else ("", lines)
        text = rig.profile(host, venv=f"{HOST_ROOT}/{venv}", extra=top + index + tables)
        (root / "hosts" / f"{host}.toml").write_text(text)
        copy_lock(root, "ct129", host)
    (root / "hosts" / "groups.toml").write_text('good = ["fl1", "fl2", "fl3"]\nfleet = ["@good", "fl4"]\n')
    return root


def _json(proc: subprocess.CompletedProcess[str], command: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["command"] == command
    assert data["ok"] is (proc.returncode == 0)
    return data


def _by_host(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in data["result"]["hosts"]}


@pytest.fixture(scope="module")
def applied(
    fleet_rig: SshRig, reference_lock: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """@fleet applied once, 3 at a time, fl1 as the canary; fl4's smoke fails there.

    A fresh controller cache (XDG_CACHE_HOME): the agent bundle is built by
    the hosts' threads at once, as on a first run."""
    root = _workspace(
        tmp_path_factory.mktemp("fleet-apply"), fleet_rig, reference_lock, "venv", {"fl4": FAILING_SMOKE}
    )
    cache = tmp_path_factory.mktemp("controller-cache")
    proc = subprocess.run(
        [ENVLOCK, "apply", "@fleet", "--canary", "1", "--parallel", "3", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        cwd=root,
    )
    return root, proc


def test_fleet_apply_runs_every_host_and_reports_each(
    applied: tuple[Path, subprocess.CompletedProcess[str]], fleet_rig: SshRig
) -> None:
    root, proc = applied
    assert proc.returncode == 1, proc.stdout  # every host ran; one has findings
    data = _json(proc, "apply")
    hosts = _by_host(data)
    assert [h["host"] for h in data["result"]["hosts"]] == list(HOSTS)
    for host in ("fl1", "fl2", "fl3"):
        assert hosts[host]["outcome"] == "ok" and hosts[host]["state"] == "changed", hosts[host]
        assert hosts[host]["exit_code"] == 0 and hosts[host]["result"]["host"] == host
        assert (fleet_rig.venv_dir(host) / "bin" / "alpha").is_file()
        ran = fleet_rig.run(host, [f"{HOST_ROOT}/venv/bin/alpha"])
        assert ran.stdout.strip() == "alpha", ran.stderr
    bad = hosts["fl4"]
    assert bad["outcome"] == "findings" and bad["state"] == "smoke failed" and bad["exit_code"] == 1
    assert "live venv is untouched" in bad["cause"]
    failed = bad["result"]["smoke_failure"]["results"]
    assert any(r["target"] == "import envlock_fleet_no_such_module" for r in failed), failed
    assert not fleet_rig.venv_dir("fl4").exists()  # nothing swapped in there
    summary = data["result"]["summary"]
    assert summary == {
        "hosts": 4,
        "ok": 3,
        "findings": 1,
        "error": 0,
        "skipped": 0,
        "states": {"changed": 3, "failed": 1},
    }
    assert data["result"]["fleet"] == {
        "targets": ["@fleet"],
        "parallel": 3,
        "canary": 1,
        "max_failures": None,
        "stopped": None,
    }

    again = run_envlock(root, "apply", "@good", "fl4", "--allow-smoke-failures")
    assert again.returncode == 0, again.stdout + again.stderr
    table = {line.split()[0]: line.split()[1] for line in again.stdout.splitlines()[2:6]}
    assert table == {"fl1": "no-op", "fl2": "no-op", "fl3": "no-op", "fl4": "changed"}, again.stdout
    assert "apply over 4 hosts: 3 no-op, 1 changed" in again.stdout
    # --parallel's default (4): every host started before any finished (one line per event, no TTY)
    events = [line.split("]", 1)[1].split(maxsplit=1)[1] for line in again.stderr.splitlines()]
    assert events[:4] == ["started"] * 4, again.stderr


def test_a_failing_canary_stops_the_rest(fleet_rig: SshRig, reference_lock: Path, tmp_path: Path) -> None:
    root = _workspace(tmp_path, fleet_rig, reference_lock, "canary", {"fl4": FAILING_SMOKE})
    proc = run_envlock(root, "apply", "fl4", "@good", "--canary", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr  # hosts skipped: not run
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[2:6]}
    assert rows["fl4"].split()[1] == "failed" and "smoke failed" in rows["fl4"]
    for host in ("fl1", "fl2", "fl3"):
        assert rows[host].split()[1:3] == ["skipped", "-"] and rows[host].endswith("canary fl4 failed")
        assert not (fleet_rig.hosts[host].root / "canary").exists()
        assert f"{host}  started" not in proc.stderr  # never started
    assert "stopped: canary fl4 failed" in proc.stdout
    # not a terminal: one line per event on stderr, the smoke report of the failed host on stdout
    assert "fl4  started" in proc.stderr and "fl4  failed: " in proc.stderr, proc.stderr
    assert "── fl4 ──" in proc.stdout, proc.stdout
    assert "not swapped in, imports failed in the staged venv" in proc.stdout, proc.stdout


def test_max_failures_stops_starting_new_hosts(
    fleet_rig: SshRig, reference_lock: Path, tmp_path: Path
) -> None:
    root = _workspace(
        tmp_path, fleet_rig, reference_lock, "budget", {"fl2": MISSING_PYTHON, "fl3": MISSING_PYTHON}
    )
    argv = ["fl2", "fl3", "fl1", "fl4", "--parallel", "1", "--max-failures", "2", "--format", "json"]
    proc = run_envlock(root, "apply", *argv)
    assert proc.returncode == 2, proc.stderr
    data = _json(proc, "apply")
    hosts = _by_host(data)
    assert [h["host"] for h in data["result"]["hosts"]] == ["fl2", "fl3", "fl1", "fl4"]
    for host in ("fl2", "fl3"):
        assert hosts[host]["outcome"] == "error" and hosts[host]["exit_code"] == 2
        assert hosts[host]["error"] == {
            "message": f"host {host}: no Python at /nonexistent/bin/python3 (hosts/{host}.toml: python)",
            "code": "error",
        }
        assert hosts[host]["result"] is None and hosts[host]["seconds"] is not None
    stopped = "--max-failures 2 reached (2 hosts failed)"
    for host in ("fl1", "fl4"):
        assert hosts[host] == {
            "host": host,
            "outcome": "skipped",
            "state": "skipped",
            "exit_code": None,
            "cause": f"not started: {stopped}",
            "seconds": None,
            "result": None,
            "error": None,
        }
        assert not (fleet_rig.hosts[host].root / "budget").exists()
    assert data["result"]["fleet"]["stopped"] == stopped
    assert data["result"]["summary"]["states"] == {"failed": 2, "skipped": 2}


def test_verify_smoke_capture_and_lock_over_a_group(
    applied: tuple[Path, subprocess.CompletedProcess[str]], fleet_rig: SshRig
) -> None:
    root, _ = applied
    clean = run_envlock(root, "verify", "@good", "--format", "json")
    assert clean.returncode == 0, clean.stderr
    assert {h: o["state"] for h, o in _by_host(_json(clean, "verify")).items()} == dict.fromkeys(
        ("fl1", "fl2", "fl3"), "clean"
    )

    edited = fleet_rig.venv_dir("fl2") / "lib"
    (target,) = edited.glob("python*/site-packages/alpha/__init__.py")
    original = target.read_bytes()
    target.write_bytes(original + b"# edited on fl2\n")
    try:
        drift = run_envlock(root, "verify", "@good", "--format", "json")
    finally:
        target.write_bytes(original)
    assert drift.returncode == 1, drift.stderr
    states = _by_host(_json(drift, "verify"))
    assert states["fl2"]["outcome"] == "findings" and states["fl2"]["state"] == "drift"
    (changed,) = states["fl2"]["result"]["files"]
    assert changed["path"].endswith("alpha/__init__.py") and changed["state"] == "changed"
    assert states["fl1"]["state"] == states["fl3"]["state"] == "clean"

    smoked = run_envlock(root, "smoke", "@good", "--format", "json")
    assert smoked.returncode == 0, smoked.stderr
    assert {o["state"] for o in _json(smoked, "smoke")["result"]["hosts"]} == {"passed"}

    captured = run_envlock(root, "capture", "@good", "--format", "json")
    assert captured.returncode == 0, captured.stderr
    for host, outcome in _by_host(_json(captured, "capture")).items():
        assert outcome["result"]["lock"] == f"locks/pylock.{host}.toml"
        assert f'host = "{host}"' in (root / "locks" / f"pylock.{host}.toml").read_text()

    for host in ("fl1", "fl2", "fl3"):  # lock each from the reference, the target probed over SSH
        profile = root / "hosts" / f"{host}.toml"
        profile.write_text(profile.read_text().replace("[index]", 'reference = "ct129"\n[index]'))
    locked = run_envlock(root, "lock", "@good", "--format", "json")
    assert locked.returncode == 0, locked.stderr
    for outcome in _json(locked, "lock")["result"]["hosts"]:
        assert outcome["outcome"] == "ok" and outcome["result"]["reference"] == "ct129", outcome
    checked = run_envlock(root, "lock", "--check", "@good", "--format", "json")
    assert checked.returncode == 0, checked.stderr
    assert {o["state"] for o in _json(checked, "lock")["result"]["hosts"]} == {"up to date"}


# Groups and the fleet options, refused before any host is touched (no SSH needed).


def _local_workspace(tmp_path: Path, groups: str | None) -> Path:
    for host in ("ct1", "ct2", "ct3"):
        write_profile(tmp_path, host, tmp_path / f"venv-{host}", None)
    if groups is not None:
        (tmp_path / "hosts" / "groups.toml").write_text(groups)
    return tmp_path


@pytest.mark.parametrize(
    ("groups", "argv", "message"),
    [
        (
            'a = ["ct1"]\n',
            ["@nope"],
            "hosts/groups.toml: unknown group '@nope' (known groups: @a)",
        ),
        (
            None,
            ["@gpu"],
            "@gpu: unknown group, there is no hosts/groups.toml "
            '(define groups there: blackwell = ["ct200", "ct201"])',
        ),
        (
            'a = ["ct1", "@b"]\nb = ["@c"]\nc = ["@a"]\n',
            ["@a"],
            "hosts/groups.toml: group cycle @a -> @b -> @c -> @a",
        ),
        (
            'gpu = ["ct1", "ct9"]\n',
            ["@gpu"],
            "hosts/groups.toml: @gpu names an unknown host: hosts/ct9.toml: unknown host 'ct9', "
            "no such profile (did you mean 'ct3'? known hosts: ct1, ct2, ct3)",
        ),
        (
            'gpu = "ct1"\nother = ["ct1", 7, "@missing"]\n',
            ["ct1", "@other"],
            "hosts/groups.toml: gpu: expected a list of host names or \"@group\"s, got 'ct1'; "
            'other[1]: expected a host name or "@group", got 7; '
            "other: unknown group '@missing' (known groups: @other)",
        ),
        ("gpu = [", ["@gpu"], "hosts/groups.toml: not valid TOML: "),
        (None, ["ct1", "ct7"], "hosts/ct7.toml: unknown host 'ct7', no such profile"),
        (None, ["groups", "ct1"], "'groups': not a host name: hosts/groups.toml holds the host groups"),
        (None, ["ct1", "ct2", "--parallel", "0"], "--parallel must be at least 1, got 0"),
        (None, ["ct1", "ct2", "--max-failures", "0"], "--max-failures must be at least 1, got 0"),
    ],
)
def test_group_and_option_errors_are_one_line_before_anything_runs(
    tmp_path: Path, groups: str | None, argv: list[str], message: str
) -> None:
    root = _local_workspace(tmp_path, groups)
    proc = run_envlock(root, "verify", *argv)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"envlock: error: {message}"), proc.stderr
    assert "started" not in proc.stdout + proc.stderr
    as_json = run_envlock(root, "apply", *argv, "--format", "json")
    data = _json(as_json, "apply")
    assert as_json.returncode == 2 and data["error"]["message"].startswith(message)
    assert data["error"]["code"] in ("group", "profile", "error"), data


def test_nested_groups_expand_in_order_each_host_once(tmp_path: Path) -> None:
    """@all names @b (ct2, ct1) and ct1 again, then ct3; every venv is missing, so each host fails fast."""
    root = _local_workspace(tmp_path, 'b = ["ct2", "ct1"]\nall = ["@b", "ct1", "ct3"]\n')
    proc = run_envlock(root, "verify", "@all", "ct2", "--format", "json")
    assert proc.returncode == 2, proc.stderr
    data = _json(proc, "verify")
    assert [h["host"] for h in data["result"]["hosts"]] == ["ct2", "ct1", "ct3"]
    assert {h["outcome"] for h in data["result"]["hosts"]} == {"error"}
    assert data["result"]["summary"]["error"] == 3


def test_one_host_keeps_the_single_host_json(tmp_path: Path) -> None:
    """A host named alone answers as before (no per-host list); a group of one is a fleet."""
    root = _local_workspace(tmp_path, 'one = ["ct1"]\n')
    single = _json(run_envlock(root, "verify", "ct1", "--format", "json"), "verify")
    assert "error" in single and "result" not in single  # ct1's venv does not exist
    fleet = _json(run_envlock(root, "verify", "@one", "--format", "json"), "verify")
    assert [h["host"] for h in fleet["result"]["hosts"]] == ["ct1"]


def test_private_temp_names_differ_between_threads(tmp_path: Path) -> None:
    names: set[Path] = set()
    lock = threading.Lock()

    def name() -> None:
        with lock:
            names.add(private_sibling(tmp_path / "store" / "x.whl", ".part"))

    threads = [threading.Thread(target=name) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names) == 8 and all(n.name.startswith(".x.whl.") for n in names)


def test_threads_building_the_agent_bundle_at_once_all_get_it(tmp_path: Path) -> None:
    """A fleet's first run: every host's thread wants the bundle before any wrote it."""
    barrier = threading.Barrier(16)
    got: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        barrier.wait()
        try:
            got.append(bundle_path(tmp_path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(got)) == 1
    with zipfile.ZipFile(got[0]) as bundle:
        assert bundle.testzip() is None and "__main__.py" in bundle.namelist()
    assert [p.name for p in tmp_path.iterdir()] == [got[0].name]  # no temp file left behind


def test_on_a_terminal_the_live_table_is_redrawn_in_place_then_removed(tmp_path: Path) -> None:
    """stderr on a real pseudo-terminal: the table is drawn, redrawn over itself, and erased."""
    import pty

    root = _local_workspace(tmp_path, None)
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [ENVLOCK, "verify", "ct1", "ct2", "ct3", "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
            env={**os.environ, "TERM": "xterm"},
        )
        os.close(slave)
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty's other end is closed: all read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(master)
    assert proc.returncode == 2
    text = drawn.decode()
    rows = 4  # three hosts and the count line
    assert text.count("\033[2K") >= 2 * rows, text  # drawn at least twice
    assert f"\033[{rows}F\033[2K" in text, text  # redrawn over itself
    assert text.endswith(f"\033[{rows}F\033[J"), text  # and taken away at the end
    assert "[   0.0s]" not in text  # not the line-per-event form
    assert "verify over 3 hosts: 3 failed" in proc.stdout
