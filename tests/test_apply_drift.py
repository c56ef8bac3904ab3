"""apply and the live venv's own state: hand edits (drift) and bytecode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from conftest import Reference, write_profile
from helpers import ENVLOCK, copy_lock, make_venv, run_envlock, uv_install, wait_stopped, walk_payload


def _fleet(tmp_path: Path, reference: Reference) -> tuple[Path, Path]:
    root = tmp_path / "fleet"
    target = tmp_path / "target-venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    copy_lock(root, "ct129", "ct200")
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    return root, target


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def test_hand_edits_are_shown_and_kept_unless_discarded(tmp_path: Path, reference: Reference) -> None:
    root, target = _fleet(tmp_path, reference)
    six = _site(target) / "six.py"
    edited = six.read_text() + "PATCHED = True\n"
    six.write_text(edited)
    (_site(target) / "alpha" / "extra.py").write_text("x = 1\n")
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 1, proc.stderr
    assert "hand edits in" in proc.stdout and "refusing to discard them" in proc.stdout, proc.stdout
    assert "S5..     six" in proc.stdout and "site-packages/six.py" in proc.stdout, proc.stdout
    assert "extra" in proc.stdout and "site-packages/alpha/extra.py" in proc.stdout, proc.stdout
    assert six.read_text() == edited and not Path(f"{target}.envlock/previous").exists()
    dry = run_envlock(root, "apply", "ct200", "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    drift = json.loads(dry.stdout)["result"]["drift"]
    assert {f["path"] for f in drift["files"]} == {"site-packages/six.py", "site-packages/alpha/extra.py"}
    for i in range(25):  # more than a real apply's refusal lists
        (_site(target) / "alpha" / f"more{i:02}.py").write_text("y = 2\n")
    dry = run_envlock(root, "apply", "ct200", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"files apply would repair in {target} (hand edits since it matched its lock, 27):" in dry.stdout
    listed = [line.split()[-1] for line in dry.stdout.splitlines() if "site-packages/" in line]
    assert len(listed) == 27 and "site-packages/alpha/more24.py" in listed, dry.stdout
    assert "refuses to discard them without --discard-drift" in dry.stdout and "… and" not in dry.stdout
    for i in range(25):
        (_site(target) / "alpha" / f"more{i:02}.py").unlink()
    proc = run_envlock(root, "apply", "ct200", "--discard-drift")
    assert proc.returncode == 0, proc.stderr
    assert walk_payload(target) == walk_payload(reference.venv)
    previous = Path(f"{target}.envlock/previous")
    assert (_site(previous) / "six.py").read_text() == edited  # the rollback copy keeps the edits
    assert (_site(previous) / "alpha" / "extra.py").is_file()


def test_staged_smoke_writes_no_bytecode_into_the_new_venv(tmp_path: Path, reference: Reference) -> None:
    _, target = _fleet(tmp_path, reference)
    assert not list(target.rglob("*.pyc")), list(target.rglob("*.pyc"))[:3]


def test_a_truncated_pyc_is_reported_and_makes_apply_rebuild(tmp_path: Path, reference: Reference) -> None:
    root, target = _fleet(tmp_path, reference)
    python = str(target / "bin" / "python")
    use = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([python, "-c", "import six, alpha"], check=True, env=use)  # ordinary use writes bytecode
    again = run_envlock(root, "apply", "ct200", "--format", "json")
    assert json.loads(again.stdout)["result"]["noop"] is True, again.stdout  # valid bytecode is no change
    pyc = next((_site(target) / "__pycache__").glob("six.*.pyc"))
    pyc.write_bytes(pyc.read_bytes()[:200])  # what a full disk leaves
    broken = subprocess.run([python, "-c", "import six"], capture_output=True, text=True)
    assert broken.returncode != 0 and "marshal" in broken.stderr, broken.stderr
    proc = run_envlock(root, "verify", "ct200")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    shown = str(pyc.relative_to(target))
    assert f"damaged  (bytecode)           {shown}: truncated or corrupt code" in proc.stdout, proc.stdout
    proc = run_envlock(root, "apply", "ct200")
    assert proc.returncode == 0, proc.stderr
    assert "damaged bytecode" in proc.stdout and shown in proc.stdout, proc.stdout
    assert "swapped in" in proc.stdout
    fixed = subprocess.run([python, "-c", "import six"], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    assert run_envlock(root, "verify", "ct200").returncode == 0


def test_a_full_disk_during_the_staged_smoke_swaps_in_no_truncated_bytecode(
    tmp_path: Path, reference: Reference
) -> None:
    """The disk fills exactly while the staged venv is smoked, and is freed before the swap."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(small)], check=True)
    try:
        root = tmp_path / "fleet"
        target = small / "venv"
        write_profile(root, "ct129", reference.venv, reference.index.url)
        write_profile(root, "ct200", target, reference.index.url)
        assert run_envlock(root, "capture", "ct129").returncode == 0
        copy_lock(root, "ct129", "ct200")
        env = dict(os.environ, ENVLOCK_FAULT="stop:before:smoke,stop:after:smoke")
        proc = subprocess.Popen(
            [ENVLOCK, "apply", "ct200", "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        agent = wait_stopped(proc.pid, proc)
        filler = small / "filler"
        free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
        with open(filler, "wb") as fill:  # leave 48 KiB: small .pyc files fit, a large one is cut short
            fill.write(b"\0" * (free - 48 * 1024))
        os.kill(agent, signal.SIGCONT)
        assert wait_stopped(proc.pid, proc) == agent
        filler.unlink()
        os.kill(agent, signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        damaged = []
        for pyc in target.rglob("*.pyc"):
            ok = subprocess.run(
                [
                    str(target / "bin" / "python"),
                    "-c",
                    f"import marshal; marshal.loads(open({str(pyc)!r}, 'rb').read()[16:])",
                ],
                capture_output=True,
            )
            if ok.returncode != 0:
                damaged.append(pyc)
        assert damaged == []
        assert run_envlock(root, "verify", "ct200").returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_apply_to_the_venv_a_lock_was_captured_from_shows_edits_since(
    tmp_path: Path, reference: Reference
) -> None:
    """No stamp there (uv made it), but the lock was captured from it: edits since are drift."""
    venv = make_venv(tmp_path / "venv")
    uv_install(venv, "--index-url", reference.index.url, "idna==3.20")
    root = tmp_path / "fleet"
    write_profile(root, "cta", venv, reference.index.url)
    assert run_envlock(root, "capture", "cta").returncode == 0
    core = _site(venv) / "idna" / "core.py"
    core.write_text(core.read_text() + "# tuned by hand\n")
    proc = run_envlock(root, "apply", "cta")
    assert proc.returncode == 1, proc.stderr
    assert "site-packages/idna/core.py" in proc.stdout and "refusing to discard" in proc.stdout
    proc = run_envlock(root, "apply", "cta", "--discard-drift")
    assert proc.returncode == 0, proc.stderr
    assert "# tuned by hand" not in core.read_text()
    assert "# tuned by hand" in (_site(Path(f"{venv}.envlock/previous")) / "idna" / "core.py").read_text()
