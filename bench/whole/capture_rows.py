"""Row: cold ``envlock capture`` of the GPU venv against the fastest raw parallel hash (issue 17: <= 1.3x).

Cold means envlock's own caches are off (``--no-cache``: every file hashed,
every ELF and fatbin read, every wheel traced again); the page cache is warm
for everyone (the warm-up round reads the whole venv). Dropping the page
cache (``echo 3 > /proc/sys/vm/drop_caches``) is possible in this container
(root with CAP_SYS_ADMIN) but not done: on a machine shared with other
engineers it would slow their runs too, and both sides would then measure
the disk, not the work.

Anchors, each a whole process, the faster one counts: sha256 of every file
in Python threads (``rawhash.py``, 2 threads per core) and coreutils
``sha256sum`` through ``xargs -P<cores>``.
"""

from __future__ import annotations

from pathlib import Path

from whole import Context, Goal, Row
from whole.inputs import gpu_venv_ready

HERE = Path(__file__).resolve().parent


def rows(ctx: Context) -> list[Row]:
    name = "cold capture (--no-cache) vs fastest raw parallel hash"
    goal = Goal.ratio(1.3)
    venv = gpu_venv_ready(ctx.work)
    if venv is None:
        return [Row(name, goal, skipped=f"GPU venv not built under {ctx.work}")]
    index_url = (ctx.work / "index" / "simple").as_uri()
    root = ctx.work / "whole-capture-ws"
    (root / "hosts").mkdir(parents=True, exist_ok=True)
    (root / "hosts" / "gpu.toml").write_text(f'venv = "{venv}"\n[index]\nurls = ["{index_url}"]\n')
    sha256sum = (
        f"find {venv} -type f -not -path '*/__pycache__/*' -print0 "
        f"| xargs -0 -P{ctx.cores} -n 256 sha256sum > /dev/null"
    )
    return [
        Row(
            name,
            goal,
            envlock=[ctx.envlock, "capture", "gpu", "--root", str(root), "--no-cache", "-q"],
            anchor=[ctx.python, str(HERE / "rawhash.py"), str(venv), str(ctx.cores * 2)],
            anchor_label=f"sha256 in {ctx.cores * 2} Python threads",
            more_anchors=[(f"sha256sum, xargs -P{ctx.cores}", ["sh", "-c", sha256sum])],
        )
    ]
