"""apply and rollback under faults: kill -9 at every journal step, a busy venv, refused targets.

Each fault is deterministic: ``ENVLOCK_FAULT`` makes the host agent kill
itself (or fail with an errno) at exactly one step, and the venvs are
compared by content (every file's sha256), not by existence.

The starting state of every scenario: the live venv was built by envlock
from lock A (one package), the rollback copy is the venv it replaced (Z,
made by uv); the apply under test is of lock B (the session reference).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Reference, write_profile
from helpers import ENVLOCK, content_listing, make_venv, run_envlock, uv_install, wait_stopped


def envlock(root: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("ENVLOCK_FAULT", None)
    if fault is not None:
        env["ENVLOCK_FAULT"] = fault
    return subprocess.run([ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env=env)


@dataclass
class Scene:
    root: Path
    target: Path
    state: Path  # <target>.envlock
    pristine: Path  # copies of target and state with A live and Z as the rollback copy
    z: dict[str, str]
    a: dict[str, str]
    b: dict[str, str]

    def reset(self) -> None:
        for path in (self.target, self.state):
            if path.exists():
                subprocess.run(["rm", "-rf", str(path)], check=True)
            subprocess.run(["cp", "-a", str(self.pristine / path.name), str(path)], check=True)

    def live(self) -> dict[str, str]:
        return content_listing(self.target, skip_bytecode=True)

    def previous(self) -> dict[str, str]:
        return content_listing(self.state / "previous", skip_bytecode=True)

    def use_lock(self, host: str) -> None:
        for suffix in (".toml", ".files.tsv"):
            shutil.copy(
                self.root / "locks" / f"pylock.{host}{suffix}", self.root / "locks" / f"pylock.ct200{suffix}"
            )

    def assert_settled(self) -> None:
        """No apply left half done: no journal, no staging venv."""
        assert not (self.state / "journal.json").exists()
        assert not (self.state / "staging").exists()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Iterator[Scene]:
    base = tmp_path_factory.mktemp("faults")
    root = base / "fleet"
    small = make_venv(base / "small-venv")
    uv_install(small, "--index-url", reference.index.url, "idna==3.20")
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "cta", small, reference.index.url)
    target = make_venv(base / "target-venv")  # Z: made by uv, not envlock
    uv_install(target, "--index-url", reference.index.url, "six==1.17.0")
    write_profile(root, "ct200", target, reference.index.url)
    for host in ("ct129", "cta"):
        proc = run_envlock(root, "capture", host)
        assert proc.returncode == 0, proc.stderr
    z = content_listing(target, skip_bytecode=True)
    scene = Scene(root, target, Path(f"{target}.envlock"), base / "pristine", z, {}, {})
    scene.use_lock("cta")
    proc = run_envlock(root, "apply", "ct200", "--force")
    assert proc.returncode == 0, proc.stderr
    scene.a = scene.live()
    assert scene.previous() == scene.z
    scene.pristine.mkdir()
    for path in (target, scene.state):
        subprocess.run(["cp", "-a", str(path), str(scene.pristine / path.name)], check=True)
    scene.use_lock("ct129")
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    scene.b = scene.live()
    assert scene.previous() == scene.a and len({str(scene.a), str(scene.b), str(scene.z)}) == 3
    yield scene


# Where a kill leaves the live venv: before the exchange, A; after it, B.
KILLS = [
    ("kill:after:stage", "a"),
    ("kill:after:install", "a"),
    ("kill:before:verify", "a"),
    ("kill:before:smoke", "a"),
    ("kill:before:swap", "a"),
    ("kill:after:swap", "b"),
    ("kill:after:keep", "b"),
    ("kill:after:cleanup", "b"),
    ("kill:after:stamp", "b"),
]


@pytest.mark.parametrize(("fault", "live_after_kill"), KILLS)
def test_kill_9_then_rerun_finishes_and_keeps_the_last_good_venv(
    scene: Scene, fault: str, live_after_kill: str
) -> None:
    scene.reset()
    proc = envlock(scene.root, "apply", "ct200", fault=fault)
    assert proc.returncode == 2, proc.stdout
    assert scene.live() == getattr(scene, live_after_kill)
    # The agent died without a word: the controller asked the host how far it got.
    where = "before the swap: the live venv" if live_after_kill == "a" else "the new venv is swapped in at"
    assert "killed by signal 9 (SIGKILL); on the host: " in proc.stderr, proc.stderr
    assert where in proc.stderr, proc.stderr
    proc = envlock(scene.root, "apply", "ct200", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["result"]["host_report"]
    assert report.get("recovered"), report
    assert scene.live() == scene.b
    assert scene.previous() == scene.a  # the rollback copy is the venv before B, whatever the kill
    scene.assert_settled()
    again = envlock(scene.root, "apply", "ct200", "--format", "json")
    assert json.loads(again.stdout)["result"]["noop"] is True, again.stdout


@pytest.mark.parametrize(("fault", "live_after_kill"), KILLS)
def test_kill_9_then_rollback_restores_the_venv_before(
    scene: Scene, fault: str, live_after_kill: str
) -> None:
    scene.reset()
    proc = envlock(scene.root, "apply", "ct200", fault=fault)
    assert proc.returncode == 2, proc.stdout
    proc = envlock(scene.root, "rollback", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert "note: an earlier apply was interrupted" in proc.stdout, proc.stdout
    if live_after_kill == "a":
        # The swap never happened: rollback goes back from A to Z.
        assert (scene.live(), scene.previous()) == (scene.z, scene.a)
    else:
        # The swap happened and recovery finished it: rollback goes back from B to A.
        assert (scene.live(), scene.previous()) == (scene.a, scene.b)
    scene.assert_settled()


def test_a_swap_that_fails_with_ebusy_leaves_everything_as_it_was(scene: Scene) -> None:
    scene.reset()
    proc = envlock(scene.root, "apply", "ct200", fault="EBUSY:before:swap")
    assert proc.returncode == 2
    assert "cannot swap the new venv into" in proc.stderr and "mount point or in use" in proc.stderr
    assert "the live venv is untouched" in proc.stderr, proc.stderr
    assert (scene.live(), scene.previous()) == (scene.a, scene.z)
    scene.assert_settled()
    proc = envlock(scene.root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert (scene.live(), scene.previous()) == (scene.b, scene.a)


def test_a_venv_mounted_while_the_apply_runs_fails_the_swap_with_ebusy_and_is_left_as_it_was(
    scene: Scene,
) -> None:
    """A real EBUSY: the venv becomes a mount point (a bind mount) just before the swap."""
    scene.reset()
    env = dict(os.environ, ENVLOCK_FAULT="stop:before:swap")
    proc = subprocess.Popen(
        [ENVLOCK, "apply", "ct200", "--root", str(scene.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    agent = wait_stopped(proc.pid, proc)
    subprocess.run(["mount", "--bind", str(scene.target), str(scene.target)], check=True)
    try:
        os.kill(agent, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2
        assert "Device or resource busy" in err and "is a mount point or in use" in err, err
        assert "the live venv is untouched" in err, err
        assert (scene.live(), scene.previous()) == (scene.a, scene.z)
        scene.assert_settled()
    finally:
        subprocess.run(["umount", str(scene.target)], check=True)
    proc2 = envlock(scene.root, "apply", "ct200")
    assert proc2.returncode == 0, proc2.stderr
    assert (scene.live(), scene.previous()) == (scene.b, scene.a)


def test_a_failure_after_the_swap_is_finished_by_the_next_run(scene: Scene) -> None:
    scene.reset()
    proc = envlock(scene.root, "apply", "ct200", fault="EBUSY:before:keep")
    assert proc.returncode == 2
    assert "the new venv is live" in proc.stderr and "next apply or rollback finishes it" in proc.stderr
    assert scene.live() == scene.b
    assert (scene.state / "staging").exists()  # the replaced venv A, not deleted
    proc = envlock(scene.root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert "had swapped it in" in proc.stdout, proc.stdout
    assert (scene.live(), scene.previous()) == (scene.b, scene.a)
    scene.assert_settled()


def test_a_venv_that_is_a_mount_point_is_refused_before_building(scene: Scene) -> None:
    scene.reset()
    subprocess.run(["mount", "--bind", str(scene.target), str(scene.target)], check=True)
    try:
        proc = envlock(scene.root, "apply", "ct200")
        assert proc.returncode == 2
        assert f"{scene.target} is a mount point" in proc.stderr, proc.stderr
        assert (scene.live(), scene.previous()) == (scene.a, scene.z)
        scene.assert_settled()
    finally:
        subprocess.run(["umount", str(scene.target)], check=True)
    proc = envlock(scene.root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert (scene.live(), scene.previous()) == (scene.b, scene.a)


def test_a_staging_dir_no_journal_explains_is_left_alone(scene: Scene) -> None:
    scene.reset()
    stray = scene.state / "staging"
    shutil.copytree(scene.pristine / scene.target.name, stray, symlinks=True)
    before = content_listing(stray, skip_bytecode=True)
    proc = envlock(scene.root, "apply", "ct200")
    assert proc.returncode == 2
    assert "no apply journal explains it" in proc.stderr and "nothing was deleted" in proc.stderr
    assert content_listing(stray, skip_bytecode=True) == before
    assert (scene.live(), scene.previous()) == (scene.a, scene.z)


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("ENOSPC:after:install", "the live venv"),
        ("ENOSPC:before:verify", "the staged venv is kept at"),
        ("ENOSPC:before:stamp", "the new venv is live at"),
    ],
)
def test_a_full_disk_at_each_phase_says_so_and_the_next_apply_finishes(
    scene: Scene, fault: str, says: str
) -> None:
    scene.reset()
    proc = envlock(scene.root, "apply", "ct200", fault=fault)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "No space left on device" in proc.stderr, proc.stderr
    assert says in proc.stderr, proc.stderr
    assert scene.previous() in (scene.z, scene.a)
    assert scene.live() == (scene.b if "stamp" in fault else scene.a)
    proc = envlock(scene.root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert (scene.live(), scene.previous()) == (scene.b, scene.a)
    scene.assert_settled()
