"""``envlock capture HOST``: freeze a live venv into ``locks/pylock.<host>.toml``.

Flow: the agent describes the venv (interpreter, platform, every dist-info)
and then hashes every file and reads every ELF library; meanwhile each
distribution is traced to the exact wheel on an index (``origins``), or
repacked into the store when no index can give its bytes back (``repack``);
``build`` assembles the lock and its file manifest, written atomically and
only when their bytes change. ``memo`` recognises an unchanged venv.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from envlock.capture.agentcall import snapshot_args, stats_relay
from envlock.capture.build import build_lock
from envlock.capture.memo import UnchangedMemo
from envlock.capture.origins import Origin, trace_origins
from envlock.capture.result import CaptureOptions, CaptureResult
from envlock.hosts import HostProfile, load_profile
from envlock.transport import ProgressCallback, Transport, open_transport, run_agent
from envlock.workspace import Workspace

__all__ = ["CaptureOptions", "CaptureResult", "capture"]


def capture(
    workspace: Workspace,
    host: str,
    options: CaptureOptions | None = None,
    on_progress: ProgressCallback | None = None,
    on_step: Callable[[str], None] | None = None,
) -> CaptureResult:
    profile = load_profile(workspace, host)
    with open_transport(profile) as transport:
        return run_capture(
            workspace,
            profile,
            transport,
            options or CaptureOptions(),
            on_progress,
            on_step or (lambda _m: None),
        )


def run_capture(
    workspace: Workspace,
    profile: HostProfile,
    transport: Transport,
    options: CaptureOptions,
    on_progress: ProgressCallback | None,
    step: Callable[[str], None],
) -> CaptureResult:
    host = profile.name

    step(f"snapshot {profile.venv} on {host}")
    args = snapshot_args(profile.venv, options.jobs, options.use_cache)
    stats, relay = stats_relay(on_progress)

    # The agent sends the venv's description first and hashes afterwards:
    # tracing every dist to its wheel runs here meanwhile, on the spare core
    # time that hashing (bound by reads as much as by SHA) leaves.
    pool = ThreadPoolExecutor(max_workers=1)
    tracing: list[Future[dict[str, Origin]]] = []
    stop = threading.Event()

    def on_description(line: bytes) -> None:
        described = json.loads(line)
        tracing.append(pool.submit(trace_origins, profile, described, options, stop))

    try:
        raw = run_agent(transport, profile.venv, args, on_progress=relay, on_first_line=on_description)
        memo = UnchangedMemo(workspace, profile, raw)
        if options.use_cache and options.write:
            unchanged = memo.lookup()
            if unchanged is not None:
                stop.set()
                return CaptureResult(
                    lock=unchanged,
                    lock_path=workspace.lock_path(host),
                    manifest_path=workspace.manifest_path(host),
                    changed=False,
                    stats=stats,
                )
        described, inventory = raw.split(b"\n", 1)
        snapshot = {**json.loads(described), **json.loads(inventory)}
        step(f"trace {len(snapshot['dists'])} distributions to their wheels")
        traced = tracing[0].result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    result = build_lock(workspace, profile, snapshot, traced, step, transport, stats, options)
    if options.write:
        memo.remember()
    return result
