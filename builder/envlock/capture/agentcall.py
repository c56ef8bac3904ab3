"""The agent's ``snapshot`` call, shared by capture and verify."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envlock.transport import ProgressCallback


def snapshot_args(venv: str, jobs: int = 0, use_cache: bool = True, bytecode: bool = False) -> list[str]:
    args = ["snapshot", "--venv", venv] + (["--bytecode"] if bytecode else [])
    if jobs:
        args += ["--jobs", str(jobs)]
    if not use_cache:
        args.append("--no-cache")
    return args


def stats_relay(
    on_progress: ProgressCallback | None,
) -> tuple[dict[str, int], Callable[[dict[str, Any]], None]]:
    """A progress callback that keeps the agent's ``@stats`` line and forwards the rest."""
    stats: dict[str, int] = {}

    def relay(event: dict[str, Any]) -> None:
        if event.get("phase") == "stats":
            stats.update({k: v for k, v in event.items() if k != "phase"})
        elif on_progress is not None:
            on_progress(event)

    return stats, relay
