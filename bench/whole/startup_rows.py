"""Rows: start-up, the floor every command pays (issue 17: <= 0.08 s).

``envlock inspect`` of a small extension (the interpreter's ``math`` .so:
ELF facts, no device code, the load check against this host's libraries),
``envlock --version`` and ``envlock --help``. The anchor is the same
interpreter doing nothing (``python -c pass``, with the same site-packages),
shown for scale: the goal is envlock's own median.
"""

from __future__ import annotations

from whole import Context, Goal, Row
from whole.inputs import small_extension


def rows(ctx: Context) -> list[Row]:
    floor = [ctx.python, "-c", "pass"]
    small = str(small_extension())
    goal = Goal.seconds(0.08)
    return [
        Row(
            "start-up: envlock inspect of a small .so",
            goal,
            envlock=[ctx.envlock, "inspect", small],
            anchor=floor,
            anchor_label="python -c pass",
            ok_codes=(0, 1),
        ),
        Row("start-up: envlock --version", goal, [ctx.envlock, "--version"], floor, "python -c pass"),
        Row("start-up: envlock --help", goal, [ctx.envlock, "--help"], floor, "python -c pass"),
    ]
