"""envlock apply / rollback end to end, locally and over SSH, with faults."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from conftest import Reference, write_profile
from helpers import ENVLOCK, UV, content_listing, copy_lock, make_venv, run_envlock, uv_install, walk_payload


def _fleet(tmp_path: Path, reference: Reference, target_venv: Path) -> Path:
    """ct129 = the session reference venv, captured; ct200 = a target with ct129's lock."""
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(
        root, "ct200", target_venv, reference.index.url, '[smoke]\nchecks = ["import alpha, beta"]\n'
    )
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    copy_lock(root, "ct129", "ct200")
    return root


def _apply(root: Path, host: str = "ct200", *extra: str) -> dict[str, Any]:
    proc = run_envlock(root, "apply", host, "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    return result


def _dists(venv: Path) -> set[str]:
    site = next((venv / "lib").glob("python*/site-packages"))
    return {p.name.split("-")[0] for p in site.glob("*.dist-info")}


def test_apply_to_another_path_rebuilds_the_payload(tmp_path: Path, reference: Reference) -> None:
    target = tmp_path / "target-venv"
    root = _fleet(tmp_path, reference, target)
    plan = _apply(root, "ct200", "--dry-run")
    assert plan["dry_run"] and not target.exists()
    assert {c["package"] for c in plan["changes"] if c["kind"] == "added"} >= {"alpha", "six", "localpkg"}
    result = _apply(root)
    assert result["host_report"]["verified_files"] > 20
    assert walk_payload(target) == walk_payload(reference.venv)
    proc = subprocess.run([str(target / "bin/alpha")], capture_output=True, text=True)
    assert proc.stdout.strip() == "alpha"
    again = _apply(root)
    assert again["noop"] is True
    # apply left the new venv's stat cache behind: the next capture hashes nothing.
    captured = run_envlock(root, "capture", "ct200", "--format", "json")
    assert captured.returncode == 0, captured.stderr
    stats = json.loads(captured.stdout)["result"]["stats"]
    assert stats["hashed"] == 0 and stats["cached"] > 20, stats


def test_apply_over_existing_venv_keeps_previous_and_rolls_back(tmp_path: Path, reference: Reference) -> None:
    target = make_venv(tmp_path / "target-venv")
    uv_install(target, "--index-url", reference.index.url, "idna==3.20")
    root = _fleet(tmp_path, reference, target)
    # A venv that uv made, not envlock: replaced only with --force.
    refused = run_envlock(root, "apply", "ct200")
    assert refused.returncode == 2 and "pass --force" in refused.stderr, refused.stderr
    result = _apply(root, "ct200", "--force")
    assert result["host_report"]["previous"] == f"{target}.envlock/previous"
    assert "alpha" in _dists(target)
    assert _dists(Path(f"{target}.envlock/previous")) == {"idna"}
    lock_digest = tomllib.loads((root / "locks" / "pylock.ct200.toml").read_text())["tool"]["envlock"][
        "digest"
    ]
    proc = run_envlock(root, "rollback", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert _dists(target) == {"idna"}
    assert "alpha" in _dists(Path(f"{target}.envlock/previous"))
    # It says what it swapped: the uv-made venv (no lock) is live, the applied lock's venv is the copy.
    assert "  now live:      a venv envlock has no lock for\n" in proc.stdout, proc.stdout
    assert f"  rollback copy: lock {lock_digest[:19]}, applied 20" in proc.stdout, proc.stdout
    # Running it twice by mistake does not silently undo it.
    twice = run_envlock(root, "rollback", "ct200")
    assert twice.returncode == 2, twice.stdout
    assert "the last change to" in twice.stderr and "was a rollback" in twice.stderr, twice.stderr
    assert f"swaps back in the venv of lock {lock_digest[:19]}" in twice.stderr and "--again" in twice.stderr
    assert _dists(target) == {"idna"}
    again = run_envlock(root, "rollback", "ct200", "--again", "--format", "json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)["result"]
    assert report["again"] is True and report["restored"]["digest"] == lock_digest
    assert report["replaced"] is None
    assert "alpha" in _dists(target) and _dists(Path(f"{target}.envlock/previous")) == {"idna"}


def test_corrupted_artifact_is_refused_before_install(tmp_path: Path, reference: Reference) -> None:
    target = tmp_path / "target-venv"
    root = _fleet(tmp_path, reference, target)
    wheel = next((root / "store" / "wheels").rglob("localpkg-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "is corrupt" in proc.stderr and "localpkg" in proc.stderr
    assert "quarantine" in proc.stderr and not wheel.exists()  # moved aside, never reused
    assert not target.exists()


def test_tampered_lock_is_refused(tmp_path: Path, reference: Reference) -> None:
    target = tmp_path / "target-venv"
    root = _fleet(tmp_path, reference, target)
    lock = root / "locks" / "pylock.ct200.toml"
    text = lock.read_text()
    manifest = root / "locks" / "pylock.ct200.files.tsv"
    lines = manifest.read_text().splitlines(keepends=True)
    six_row = next(i for i, line in enumerate(lines) if line.startswith("six\t"))
    owner, path, _sha, size, kind = lines[six_row].rstrip("\n").split("\t")
    lines[six_row] = "\t".join([owner, path, "0" * 64, size, kind]) + "\n"
    manifest.write_text("".join(lines))
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "locks/pylock.ct200.files.tsv: sha256 does not match locks/pylock.ct200.toml's" in proc.stderr
    shutil.copy(root / "locks" / "pylock.ct129.files.tsv", manifest)
    tree = 'tree-digest = "sha256:'
    start = text.index(tree, text.index('name = "six"')) + len(tree)
    forged = text[:start] + "0" * 64 + text[start + 64 :]
    lock.write_text(forged)
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "tool.envlock.digest does not match its packages" in proc.stderr
    # A careful forger also fixes the venv digest: the manifest still gives it away.
    import tomllib

    from envlock.lock.digest import lock_digest
    from envlock.lock.io import parse_lock, read_lock

    doc = tomllib.loads(forged)
    fixed = lock_digest(parse_lock(doc, "forged"))
    lock.write_text(forged.replace(doc["tool"]["envlock"]["digest"], fixed))
    assert read_lock(lock).digest == fixed
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "six: tree-digest does not match the manifest" in proc.stderr
    assert not target.exists()


def test_second_apply_fails_clearly_while_one_holds_the_lock(tmp_path: Path, reference: Reference) -> None:
    target = tmp_path / "target-venv"
    root = _fleet(tmp_path, reference, target)
    Path(f"{target}.envlock").mkdir()
    with open(f"{target}.envlock/lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write("4242")
        held.flush()
        proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 2
    assert "another envlock apply is running" in proc.stderr and "4242" in proc.stderr
    assert not target.exists()
    procs = [
        subprocess.Popen(
            [ENVLOCK, "apply", "ct200", "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = [(p.wait(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert any(code == 0 for code, _ in outcomes), outcomes
    for code, err in outcomes:
        assert code == 0 or "another envlock apply is running" in err, err
    assert walk_payload(target) == walk_payload(reference.venv)


@pytest.fixture
def small_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_too_small_is_refused_before_staging(
    tmp_path: Path, reference: Reference, small_tmpfs: Path
) -> None:
    target = small_tmpfs / "venv"
    subprocess.run(
        [
            UV,
            "venv",
            "-q",
            "--python",
            str(next(reference.venv.glob("bin/python3.*")).resolve()),
            str(target),
        ],
        check=True,
    )
    before = hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file())
    ).hexdigest()
    root = _fleet(tmp_path, reference, target)
    proc = run_envlock(root, "apply", "ct200", "--force")
    assert proc.returncode == 2, proc.stdout
    # The exact refusal, numbers included: the payload from the lock's
    # manifest plus the documented margin (a tenth, and 16 MB of scaffold),
    # against what statvfs says is free.
    rows = (root / "locks" / "pylock.ct200.files.tsv").read_text().splitlines()
    payload = sum(int(r.split("\t")[3]) for r in rows if r and not r.startswith(("#", ":")))
    needed_mb = (payload + payload // 10 + (16 << 20)) >> 20
    st = os.statvfs(small_tmpfs)
    free_mb = (st.f_bavail * st.f_frsize) >> 20
    assert proc.stderr == (
        f"envlock: error: host ct200: not enough space in {small_tmpfs}: "
        f"the new venv needs about {needed_mb} MB, {free_mb} MB are free\n"
    )
    assert not Path(f"{target}.envlock/staging").exists()
    after = hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file())
    ).hexdigest()
    assert after == before


def test_smoke_failure_stops_the_swap_and_keeps_the_staged_venv(tmp_path: Path, reference: Reference) -> None:
    target = make_venv(tmp_path / "target-venv")
    root = _fleet(tmp_path, reference, target)
    profile = root / "hosts" / "ct200.toml"
    profile.write_text(
        profile.read_text().replace(
            'checks = ["import alpha, beta"]',
            'checks = ["from alpha import nothing_here", "import six.nope"]',
        )
    )
    before = content_listing(target)
    proc = run_envlock(root, "apply", "ct200", "--force")
    # A finding, reported as `envlock smoke` reports it: every failure, its class and its cause.
    assert proc.returncode == 1, proc.stderr
    assert "missing-name" in proc.stdout and "alpha has no nothing_here" in proc.stdout, proc.stdout
    assert "missing-module" in proc.stdout and "six.nope" in proc.stdout, proc.stdout
    assert "2 failed" in proc.stdout and "None" not in proc.stdout, proc.stdout
    kept = Path(f"{target}.envlock/failed")
    assert f"the staged venv is kept at {kept}" in proc.stdout
    assert content_listing(target) == before
    assert not Path(f"{target}.envlock/staging").exists()
    # The kept venv is the staged one, there to be examined.
    assert "alpha" in _dists(kept)
    out = subprocess.run([str(kept / "bin/python"), "-c", "import alpha"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    proc = run_envlock(root, "apply", "ct200", "--force", "--allow-smoke-failures", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["result"]["host_report"]["smoke"]["failed"]) == 2
    assert not kept.exists()  # until the next apply


def test_editable_source_tree_travels_with_the_lock(tmp_path: Path) -> None:
    from helpers import make_local_project

    project = make_local_project(tmp_path / "src-tree" / "edpkg", "edpkg", body="ANSWER = 42\n")
    reference = make_venv(tmp_path / "ref-venv")
    uv_install(reference, "-e", str(project))
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference, None, "[index]\nurls = []\n")
    write_profile(root, "ct200", tmp_path / "target-venv", None, "[index]\nurls = []\n")
    proc = run_envlock(root, "capture", "ct129", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    lock_text = (root / "locks" / "pylock.ct129.toml").read_text()
    assert "[packages.tool.envlock.source-tree]" in lock_text and f'path = "{project}"' in lock_text
    copy_lock(root, "ct129", "ct200")
    shutil.move(str(project), str(tmp_path / "moved-away"))  # the target host has no checkout
    result = _apply(root)
    assert result["host_report"]["sources"] == [{"path": str(project), "action": "restored"}]
    out = subprocess.run(
        [str(tmp_path / "target-venv/bin/python"), "-c", "import edpkg; print(edpkg.ANSWER)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "42", out.stderr
    assert (project / "src" / "edpkg" / "__init__.py").read_text() == "ANSWER = 42\n"


@pytest.mark.parametrize("fault", ["ENOSPC:before:install", "kill:before:swap", "ENOSPC:before:stamp"])
def test_a_failed_apply_leaves_nothing_beside_the_venv_but_its_state_dir(
    tmp_path: Path, reference: Reference, fault: str
) -> None:
    """docs/apply.md: everything envlock keeps for a venv is in ``<venv>.envlock/``."""
    parent = tmp_path / "srv"
    parent.mkdir()
    target = parent / "venv"
    root = _fleet(tmp_path, reference, target)
    env = dict(os.environ, ENVLOCK_FAULT=fault)
    failed = subprocess.run(
        [ENVLOCK, "apply", "ct200", "--root", str(root)], capture_output=True, text=True, env=env
    )
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert {p.name for p in parent.iterdir()} <= {"venv", "venv.envlock"}, sorted(parent.iterdir())
    assert (parent / "venv.envlock").is_dir()
    finished = run_envlock(root, "apply", "ct200")
    assert finished.returncode == 0, finished.stderr
    assert sorted(p.name for p in parent.iterdir()) == ["venv", "venv.envlock"]
