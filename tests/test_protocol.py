"""The agent wire protocol: what the real agent says matches ``envlock.agent.protocol``.

Every answer of the real agent (run as envlock runs it: ``python -I`` on the
unpacked bundle, in a real venv) is checked key by key against the
TypedDict annotations, required and optional keys apart, so a key renamed on
either side fails here. A stale agent bundle is refused with one line; an
agent's failure arrives as a typed error with its code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest

from conftest import Reference, write_profile
from envlock.agent import protocol
from envlock.errors import AgentProtocolError, AgentReportedError
from envlock.reporter import Reporter
from envlock.transport import agent_answer, run_agent
from envlock.transport.bundle import bundle_dir
from envlock.transport.local import LocalTransport
from envlock.workspace import cache_dir
from helpers import copy_lock, run_envlock

PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"

# ------------------------------------------------------------------ checking a message against its type


def conforms(value: Any, hint: Any, where: str) -> list[str]:
    """What in ``value`` does not match ``hint`` (empty: it matches), each problem with its key path."""
    if hint is Any:
        return []
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        hints = get_type_hints(hint)
        problems = [f"{where}.{key}: missing" for key in sorted(hint.__required_keys__ - value.keys())]
        problems += [f"{where}.{key}: not in {hint.__name__}" for key in sorted(value.keys() - hints.keys())]
        for key in sorted(value.keys() & hints.keys()):
            problems += conforms(value[key], hints[key], f"{where}.{key}")
        return problems
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [conforms(value, option, where) for option in get_args(hint)]
        return [] if any(not found for found in options) else min(options, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        return [p for i, item in enumerate(value) for p in conforms(item, get_args(hint)[0], f"{where}[{i}]")]
    if origin is tuple:  # JSON arrays of a fixed shape
        args = get_args(hint)
        if not isinstance(value, list) or len(value) != len(args):
            return [f"{where}: expected an array of {len(args)}, got {value!r}"]
        return [
            p
            for i, (item, arg) in enumerate(zip(value, args, strict=True))
            for p in conforms(item, arg, f"{where}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        return [p for key, item in value.items() for p in conforms(item, get_args(hint)[1], f"{where}.{key}")]
    if hint is type(None):
        return [] if value is None else [f"{where}: expected null, got {value!r}"]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [f"{where}: expected {hint.__name__}, got {value!r}"]


def assert_message(value: Any, hint: Any) -> None:
    problems = conforms(value, hint, hint.__name__)
    assert not problems, "\n".join(problems[:20])


def test_the_checker_catches_a_renamed_key() -> None:
    """The check itself can fail: a renamed, a missing and a mistyped key are each found."""
    good: dict[str, Any] = {"phase": "hash", "done": 1, "total": 2, "detail": "1/2 files"}
    assert_message(good, protocol.ProgressEvent)
    assert conforms({**good, "target": "x"}, protocol.ProgressEvent, "e") == [
        "e.target: not in ProgressEvent"
    ]
    assert conforms({k: v for k, v in good.items() if k != "detail"}, protocol.ProgressEvent, "e") == [
        "e.detail: missing"
    ]
    assert conforms({**good, "done": "1"}, protocol.ProgressEvent, "e") == ["e.done: expected int, got '1'"]
    status = {"protocol": 2, "running": None, "step": None, "swapped": None, "stamp_digest": None}
    assert_message(status, protocol.ApplyStatus)
    assert conforms({**status, "swapped": "yes"}, protocol.ApplyStatus, "s")


# ------------------------------------------------------------------ the real agent


def agent(
    venv: Path, *args: str, stdin: bytes = b"", python: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The agent as envlock runs it locally: the venv's Python, isolated, on the unpacked bundle."""
    interpreter = python or venv / "bin" / "python"
    return subprocess.run(
        [str(interpreter), "-I", str(bundle_dir(cache_dir())), *args], input=stdin, capture_output=True
    )


def stderr_events(stderr: bytes, word: str) -> list[Any]:
    prefix = f"@{word} "
    return [
        json.loads(line[len(prefix) :]) for line in stderr.decode().splitlines() if line.startswith(prefix)
    ]


def test_snapshot_lines_match_the_protocol(reference: Reference) -> None:
    proc = agent(reference.venv, "snapshot", "--venv", str(reference.venv), "--no-cache", "--bytecode")
    assert proc.returncode == 0, proc.stderr
    described, inventory = (json.loads(line) for line in proc.stdout.splitlines())
    assert_message(described, protocol.VenvDescription)
    assert_message(inventory, protocol.Inventory)
    assert described["protocol"] == protocol.AGENT_PROTOCOL
    # Every optional part is really exercised: a direct_url, a WHEEL, a library read, a bin/ file.
    assert any(d["direct_url"] for d in described["dists"]) and inventory["native"] and inventory["bin_files"]
    assert "bytecode" in inventory
    (stats,) = stderr_events(proc.stderr, "stats")
    assert_message(stats, protocol.HashStats)
    progress = stderr_events(proc.stderr, "progress")
    assert progress, "a cold snapshot reports its hashing"
    for event in progress:
        assert_message(event, protocol.ProgressEvent)


def test_ping_applied_status_have_receive_match_the_protocol(reference: Reference, tmp_path: Path) -> None:
    venv = reference.venv
    ping = agent(venv, "ping")
    assert ping.returncode == 0, ping.stderr
    assert_message(json.loads(ping.stdout), protocol.PingAnswer)

    applied = agent(venv, "applied", "--venv", str(venv), "--digest", "sha256:" + "0" * 64)
    assert applied.returncode == 0, applied.stderr
    answer = json.loads(applied.stdout)
    assert_message(answer, protocol.AppliedAnswer)
    assert set(answer) == set(get_type_hints(protocol.AppliedAnswer)), "a venv that exists: every key"
    refused = agent(venv, "applied", "--venv", "/", "--digest", "sha256:" + "0" * 64)
    assert refused.returncode == 0, refused.stderr
    short = json.loads(refused.stdout)
    assert_message(short, protocol.AppliedAnswer)
    assert short["refused"] and set(short) == protocol.AppliedAnswer.__required_keys__

    status = agent(venv, "apply-status", "--venv", str(tmp_path / "never-applied"))
    assert status.returncode == 0, status.stderr
    assert_message(json.loads(status.stdout), protocol.ApplyStatus)

    data = b"artifact bytes"
    sha = hashlib.sha256(data).hexdigest()
    frame = json.dumps({"sha256": sha, "name": "a.whl", "size": len(data)}).encode() + b"\n" + data
    drop = tmp_path / "drop"
    received = agent(venv, "receive", "--dir", str(drop), stdin=frame)
    assert received.returncode == 0, received.stderr
    assert_message(json.loads(received.stdout), protocol.ReceiveAnswer)
    have = agent(venv, "have", "--dir", str(drop), f"{sha}/a.whl", f"{'1' * 64}/b.whl")
    assert have.returncode == 0, have.stderr
    assert json.loads(have.stdout) == {"present": [f"{sha}/a.whl"]}
    assert_message(json.loads(have.stdout), protocol.HaveAnswer)


def test_smoke_report_and_events_match_the_protocol(reference: Reference) -> None:
    proc = agent(reference.venv, "smoke", "--venv", str(reference.venv), "--from-venv", "--jobs=2")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert_message(report, protocol.SmokeReport)
    assert report["results"]
    events = stderr_events(proc.stderr, "progress")
    assert events and all(e["phase"] == "smoke" for e in events)
    for event in events:
        assert_message(event, protocol.ProgressEvent)


def test_the_agent_speaks_the_protocol_on_python_3_8(tmp_path: Path) -> None:
    """The protocol module is the agent's too: it must load on the oldest Python a host may have."""
    found = sorted(PYENV.glob("3.8.*/bin/python3.8"))
    if not found:
        pytest.fail(f"CPython 3.8 is not installed under {PYENV} (the test rig provides 3.8 to 3.13)")
    python = str(found[-1])
    venv = tmp_path / "venv38"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    ping = agent(venv, "ping")
    assert ping.returncode == 0, ping.stderr
    answer = json.loads(ping.stdout)
    assert_message(answer, protocol.PingAnswer)
    assert answer["interpreter"]["version"].startswith("3.8.")
    snap = agent(venv, "snapshot", "--venv", str(venv), "--no-cache")
    assert snap.returncode == 0, snap.stderr
    described, inventory = (json.loads(line) for line in snap.stdout.splitlines())
    assert_message(described, protocol.VenvDescription)
    assert_message(inventory, protocol.Inventory)


class Recorder(Reporter):
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int, str]] = []
        self.steps: list[str] = []

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        self.events.append((phase, done, total, detail))

    def step(self, message: str) -> None:
        self.steps.append(message)


def test_apply_plan_and_answer_match_the_protocol(
    tmp_path: Path, reference: Reference, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real apply: the plan the controller sends and the answer the host gives, both checked."""
    import envlock.apply as apply_module
    from envlock.workspace import Workspace

    root = tmp_path / "fleet"
    target = tmp_path / "target-venv"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    write_profile(root, "ct200", target, reference.index.url)
    proc = run_envlock(root, "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    copy_lock(root, "ct129", "ct200")

    plans: list[Any] = []
    real_build_plan = apply_module.build_plan

    def keep_plan(*args: Any, **kwargs: Any) -> Any:
        plan, items = real_build_plan(*args, **kwargs)
        plans.append(json.loads(json.dumps(plan)))  # as the agent reads it
        return plan, items

    monkeypatch.setattr(apply_module, "build_plan", keep_plan)
    recorder = Recorder()
    result = apply_module.apply(Workspace(root=root), "ct200", reporter=recorder)
    assert not result.noop and (target / "bin" / "python").exists()
    (plan,) = plans
    assert_message(plan, protocol.ApplyPlan)
    assert_message(dict(result.host_report), protocol.ApplyAnswer)
    assert result.host_report["verified_files"] > 20
    phases = {phase for phase, *_ in recorder.events}
    assert {"fetch", "install", "verify", "smoke"} <= phases, phases
    assert any(step.startswith("build, verify, smoke and swap in") for step in recorder.steps)


# ------------------------------------------------------------------ a stale agent is refused


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An agent bundle of this run's own, in a cache only this test uses."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return bundle_dir(cache_dir())


def make_stale(bundle: Path) -> int:
    """Turn the unpacked bundle into one of another envlock: the same key, another protocol."""
    source = bundle / "envlock" / "agent" / "protocol.py"
    other = protocol.AGENT_PROTOCOL + 7
    text, count = re.subn(
        r"^AGENT_PROTOCOL = \d+$", f"AGENT_PROTOCOL = {other}", source.read_text(), flags=re.M
    )
    assert count == 1
    source.write_text(text)
    shutil.rmtree(source.parent / "__pycache__", ignore_errors=True)
    return other


def test_a_stale_agent_bundle_is_refused_with_one_line(
    tmp_path: Path, reference: Reference, private_cache: Path
) -> None:
    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    target = tmp_path / "target-venv"
    write_profile(root, "ct200", target, reference.index.url)
    captured = run_envlock(root, "capture", "ct129")
    assert captured.returncode == 0, captured.stderr
    copy_lock(root, "ct129", "ct200")
    lock_bytes = (root / "locks" / "pylock.ct129.toml").read_bytes()

    other = make_stale(private_cache)
    wanted = (
        f"its agent speaks protocol {other}, this envlock speaks protocol {protocol.AGENT_PROTOCOL}: "
        f"the agent bundle there is stale; remove {private_cache} and {private_cache}.pyz"
    )
    for host, command in (("ct129", "capture"), ("ct129", "verify"), ("ct200", "apply")):
        proc = run_envlock(root, command, host)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"host {host}: {wanted}" in lines[0], (command, proc.stderr)
    assert (root / "locks" / "pylock.ct129.toml").read_bytes() == lock_bytes
    assert not target.exists(), "nothing was built by a stale agent"

    # ping, as `envlock lock` asks a target host
    transport = LocalTransport("ct129")
    raw = run_agent(transport, str(reference.venv), ["ping"])
    with pytest.raises(AgentProtocolError, match=f"host ct129: its agent speaks protocol {other}"):
        agent_answer(transport, raw, "ping")

    # Doing what the message says brings this envlock's agent back.
    shutil.rmtree(private_cache)
    Path(f"{private_cache}.pyz").unlink()
    again = run_envlock(root, "verify", "ct129")
    assert again.returncode == 0, again.stderr


def test_an_answer_without_a_protocol_is_from_an_older_agent(reference: Reference) -> None:
    transport = LocalTransport("old")
    with pytest.raises(
        AgentProtocolError, match=r"^host old: its agent speaks no protocol version \(an older"
    ):
        agent_answer(transport, b'{"interpreter": {}, "platform": {}, "gpu": null}\n', "ping")


# ------------------------------------------------------------------ a failure arrives with its code


def test_agent_failures_arrive_typed_with_their_code(tmp_path: Path, reference: Reference) -> None:
    transport = LocalTransport("local")
    venv = str(reference.venv)
    not_a_venv = tmp_path / "plain"
    not_a_venv.mkdir()
    with pytest.raises(AgentReportedError) as caught:
        run_agent(transport, venv, ["snapshot", "--venv", str(not_a_venv)])
    assert caught.value.code == "snapshot"
    assert str(caught.value) == f"host local: {not_a_venv}: not a venv (no pyvenv.cfg)"

    frame = json.dumps({"sha256": "0" * 64, "name": "a.whl", "size": 5}).encode() + b"\nabc"
    with tempfile.TemporaryFile() as stdin, pytest.raises(AgentReportedError) as caught:
        stdin.write(frame)
        stdin.seek(0)
        run_agent(transport, venv, ["receive", "--dir", str(tmp_path / "drop")], stdin=stdin)
    assert caught.value.code == "receive"
    assert str(caught.value) == "host local: a.whl: stream ended after 3 of 5 bytes"

    never = tmp_path / "never-applied"
    with pytest.raises(AgentReportedError) as caught:
        run_agent(transport, venv, ["rollback", "--venv", str(never)])
    assert caught.value.code == "apply"
    assert str(caught.value) == (
        f"host local: no previous venv to roll back to ({never}.envlock/previous does not exist)"
    )

    source = tmp_path / "no-such-source"
    with pytest.raises(AgentReportedError) as caught:
        run_agent(transport, venv, ["pack-source", "--dir", str(source)])
    assert caught.value.code == "source"
    assert str(caught.value).endswith("the editable install's source directory does not exist")


def test_an_older_agents_plain_error_line_is_still_understood(
    tmp_path: Path, reference: Reference, private_cache: Path
) -> None:
    """An agent from before structured errors said why in one plain line; it still reaches the user."""
    main = private_cache / "envlock" / "agent" / "__main__.py"
    text = main.read_text()
    old = '    sys.stderr.write("@error " + json.dumps(message) + "\\n")'
    assert old in text
    main.write_text(
        text.replace(old, '    sys.stderr.write("envlock-agent: error: %s\\n" % message["message"])')
    )
    shutil.rmtree(main.parent / "__pycache__", ignore_errors=True)
    not_a_venv = tmp_path / "plain"
    not_a_venv.mkdir()
    with pytest.raises(AgentReportedError) as caught:
        run_agent(LocalTransport("local"), str(reference.venv), ["snapshot", "--venv", str(not_a_venv)])
    assert caught.value.code == "unspecified"
    assert str(caught.value) == f"host local: {not_a_venv}: not a venv (no pyvenv.cfg)"


def test_the_bundle_carries_no_controller_code() -> None:
    from envlock.transport.bundle import _sources

    names = [arcname for arcname, _path in _sources()]
    assert "envlock/agent/protocol.py" in names
    assert not [
        n
        for n in names
        if n.startswith("envlock/") and n.split("/")[1] not in ("agent", "binary", "__init__.py")
    ]
    assert "envlock/agent/bundle.py" not in names
    assert sys.modules.get("envlock.agent.bundle") is None


def test_a_remembered_snapshot_answer_is_checked_too(
    tmp_path: Path, reference: Reference, private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify recognises an unchanged venv by its answer's hash, without parsing it: the
    protocol is still checked (here: this envlock moved on to a newer protocol meanwhile)."""
    import envlock.capture.agentcall as agentcall
    import envlock.transport as transport_module
    from envlock.verify import verify
    from envlock.workspace import Workspace

    root = tmp_path / "fleet"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    captured = run_envlock(root, "capture", "ct129")
    assert captured.returncode == 0, captured.stderr
    workspace = Workspace(root=root)
    assert not verify(workspace, "ct129").files  # remembers the answer
    assert list((private_cache.parent / "verify").glob("*.json")), "the answer was remembered"
    newer = protocol.AGENT_PROTOCOL + 1
    monkeypatch.setattr(agentcall, "AGENT_PROTOCOL", newer)
    monkeypatch.setattr(transport_module, "AGENT_PROTOCOL", newer)
    with pytest.raises(
        AgentProtocolError,
        match=f"speaks protocol {protocol.AGENT_PROTOCOL}, this envlock speaks protocol {newer}",
    ):
        verify(workspace, "ct129")
