"""Row: warm ``envlock lock`` of 300 packages against ``uv pip compile --generate-hashes`` (issue 17: <= 2x).

The setup is ``lock_bench``'s (300 small wheels on a loopback PEP 503
index served by ``http.server`` in this process, a captured reference venv
holding all of them, a target host with the same Python), kept in its own
directory so the two benchmarks never share a workspace. Warm: both tools
have run once (the warm-up round), so uv's cache and envlock's resolution
memo are filled, as on a developer's machine re-locking an unchanged host.
"""

from __future__ import annotations

from lock_bench import COUNT, _serve, index_tree, prepare
from whole import Context, Goal, Row


def rows(ctx: Context) -> list[Row]:
    _server, url = _serve(index_tree(ctx.work))  # a daemon thread: serves until this process exits
    root, compile_cmd = prepare(ctx.work / "whole-lock", url)
    return [
        Row(
            f"envlock lock, {COUNT} packages, warm vs uv pip compile --generate-hashes",
            Goal.ratio(2.0),
            envlock=[ctx.envlock, "lock", "target", "--root", str(root), "-q"],
            anchor=compile_cmd,
            anchor_label="uv pip compile --generate-hashes",
        )
    ]
