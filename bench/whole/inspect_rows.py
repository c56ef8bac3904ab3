"""Row: ``envlock inspect libtorch_cuda.so`` against ``cuobjdump --list-elf --list-ptx`` (issue 17).

Both list every device-code image of torch's ~500 MB CUDA library; envlock
also decides whether the library loads and runs on the GPU. The default
text output, as a user would run it (exit 1 is a finding, not a failure).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from whole import Context, Goal, Row
from whole.inputs import gpu_venv_ready


def cuobjdump() -> str | None:
    found = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/*/bin/cuobjdump"))
    return str(found[-1]) if found else None


def rows(ctx: Context) -> list[Row]:
    name = "inspect libtorch_cuda.so vs cuobjdump --list-elf --list-ptx"
    goal = Goal.speedup(50)
    tool = cuobjdump()
    if tool is None:
        return [Row(name, goal, skipped="cuobjdump missing: pip install nvidia-cuda-cuobjdump (dev extra)")]
    venv = gpu_venv_ready(ctx.work)
    if venv is None:
        return [Row(name, goal, skipped=f"GPU venv not built under {ctx.work}")]
    library = str(next(venv.glob("lib/python*/site-packages/torch/lib/libtorch_cuda.so")))
    return [
        Row(
            name,
            goal,
            envlock=[ctx.envlock, "inspect", library],
            anchor=[tool, "--list-elf", "--list-ptx", library],
            anchor_label="cuobjdump --list-elf --list-ptx",
            ok_codes=(0, 1),
        )
    ]
