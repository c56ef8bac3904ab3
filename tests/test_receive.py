"""The host's artifact drop: concurrent receives into one directory, each with its own partial files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _frame(data: bytes, name: str) -> tuple[bytes, bytes, str]:
    sha = hashlib.sha256(data).hexdigest()
    header = json.dumps({"sha256": sha, "name": name, "size": len(data)}).encode() + b"\n"
    return header, data, sha


def _agent_receive(directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "envlock.agent", "receive", "--dir", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_part(incoming: Path, proc: subprocess.Popen[bytes]) -> Path:
    """The partial file of ``proc``'s transfer, once it exists (a bounded wait on a condition)."""
    # A deadline, not a count of spins: on a loaded machine the agent's interpreter alone can
    # take longer to start than any fixed number of yields (seen: a spurious failure in CI).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        parts = list(incoming.glob("*/*.part")) if incoming.is_dir() else []
        if parts:
            return parts[0]
        if proc.poll() is not None:
            pytest.fail(f"receive exited early: {proc.stderr.read() if proc.stderr else b''!r}")
        time.sleep(0.002)
    pytest.fail("the first transfer never created its partial file")


def test_two_concurrent_receives_into_one_directory_both_succeed(tmp_path: Path) -> None:
    drop = tmp_path / "artifacts"
    first_header, first_data, first_sha = _frame(os.urandom(3 << 20), "first.whl")
    second_header, second_data, second_sha = _frame(os.urandom(1 << 20), "second.whl")
    # The first transfer is mid-file (its .part exists, half written) when the
    # second one starts and runs to the end: a receive that clears the shared
    # incoming directory on start deletes the first one's partial file.
    first = _agent_receive(drop)
    assert first.stdin is not None
    first.stdin.write(first_header + first_data[: len(first_data) // 2])
    first.stdin.flush()
    part = _wait_for_part(drop / ".incoming", first)
    second = _agent_receive(drop)
    out, err = second.communicate(second_header + second_data, timeout=120)
    assert second.returncode == 0, err
    assert json.loads(out)["received"][0]["sha256"] == second_sha
    assert part.exists(), "the second receive removed the first one's partial file"
    out, err = first.communicate(first_data[len(first_data) // 2 :], timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out)["received"][0]["sha256"] == first_sha
    assert (drop / first_sha / "first.whl").read_bytes() == first_data
    assert (drop / second_sha / "second.whl").read_bytes() == second_data
    assert list((drop / ".incoming").iterdir()) == []  # each removed its own directory


def test_a_killed_transfer_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    drop = tmp_path / "artifacts"
    header, data, sha = _frame(os.urandom(1 << 20), "x.whl")
    killed = _agent_receive(drop)
    assert killed.stdin is not None
    killed.stdin.write(header + data[:1000])
    killed.stdin.flush()
    _wait_for_part(drop / ".incoming", killed)
    killed.kill()
    killed.wait()
    assert len(list((drop / ".incoming").iterdir())) == 1
    # A directory of a live process on another host (same home over NFS) is left alone.
    foreign = drop / ".incoming" / "otherhost-1-abcd"
    foreign.mkdir()
    proc = _agent_receive(drop)
    _out, err = proc.communicate(header + data, timeout=120)
    assert proc.returncode == 0, err
    assert list((drop / ".incoming").iterdir()) == [foreign]
    assert (drop / sha / "x.whl").read_bytes() == data
