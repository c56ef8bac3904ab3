"""``envlock capture HOST``: freeze a live venv into ``locks/pylock.<host>.toml``.

Flow: the agent describes the venv (interpreter, platform, every dist-info)
and then hashes every file and reads every ELF library; meanwhile each
distribution is traced to the exact wheel on an index (``origins``), or
repacked into the store when no index can give its bytes back (``repack``);
``build`` assembles the lock and its file manifest, written atomically and
only when their bytes change. ``memo`` recognises an unchanged venv.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from envlock.agent.protocol import VenvDescription
from envlock.capture.agentcall import Snapshot, snapshot_args, stats_keeper
from envlock.capture.build import build_lock
from envlock.capture.memo import UnchangedMemo
from envlock.capture.origins import Origin, StoreBuilds, trace_origins
from envlock.capture.result import CaptureOptions, CaptureResult
from envlock.hosts import HostProfile, load_profile
from envlock.reporter import Reporter
from envlock.store import Store
from envlock.transport import Transport, agent_answer, open_transport, run_agent
from envlock.workspace import Workspace

__all__ = ["CaptureOptions", "CaptureResult", "capture"]


def capture(
    workspace: Workspace,
    host: str,
    options: CaptureOptions | None = None,
    reporter: Reporter | None = None,
) -> CaptureResult:
    profile = load_profile(workspace, host)
    with open_transport(profile) as transport:
        return run_capture(workspace, profile, transport, options or CaptureOptions(), reporter or Reporter())


def run_capture(
    workspace: Workspace,
    profile: HostProfile,
    transport: Transport,
    options: CaptureOptions,
    reporter: Reporter,
) -> CaptureResult:
    host = profile.name

    reporter.step(f"snapshot {profile.venv} on {host}")
    args = snapshot_args(profile.venv, options.jobs, options.use_cache)
    stats: dict[str, int] = {}

    # The agent sends the venv's description first and hashes afterwards:
    # tracing every dist to its wheel runs here meanwhile, on the spare core
    # time that hashing (bound by reads as much as by SHA) leaves.
    pool = ThreadPoolExecutor(max_workers=1)
    tracing: list[Future[dict[str, Origin]]] = []
    stop = threading.Event()

    def on_description(line: bytes) -> None:
        # The protocol is checked here, before a stale agent's answer is traced.
        described: VenvDescription = agent_answer(transport, line, "snapshot")
        builds = StoreBuilds(Store(workspace.store_dir), workspace.locks_dir)
        tracing.append(pool.submit(trace_origins, profile, described, options, stop, builds))

    try:
        raw = run_agent(
            transport,
            profile.venv,
            args,
            reporter=reporter,
            on_stats=stats_keeper(stats),
            on_first_line=on_description,
        )
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
        snapshot = Snapshot.parse(transport, raw)
        reporter.step(f"trace {len(snapshot.description['dists'])} distributions to their wheels")
        traced = tracing[0].result()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    result = build_lock(workspace, profile, snapshot, traced, reporter.step, transport, stats, options)
    if options.write:
        memo.remember()
    return result
