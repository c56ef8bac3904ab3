"""Whole-process benchmarks: the real ``envlock`` command, as a user runs it, against an anchor.

``python bench/run.py whole`` (or ``python bench/whole [--only NAME,...]
[--repeat N]``) runs every row below and writes ``bench/results/whole.json``;
its report is the Markdown table that opens docs/benchmarks.md.

What "whole process" means here: every measurement is a fresh process
started with ``subprocess`` (interpreter start, imports, the work, exit),
timed from the parent, the same for envlock and for its anchor. Rounds are
interleaved (envlock, anchor, envlock, anchor, ...) after one unmeasured
warm-up of each, so load from other work on a shared machine hits both
alike; the table gives medians of ``--repeat`` runs, and the JSON also keeps
the best run and the children's CPU time (user + system), which varies less
than wall time under load.

Adding a row (one small module per area; the apply rows live beside these):

1. Write ``bench/whole/<area>.py`` with ``rows(ctx: Context) -> list[Row]``.
   Prepare inputs there (cached under ``ctx.work``), then describe each
   row: the envlock argv, the anchor argv (use ``sh -c`` for a pipeline),
   and the goal (``Goal.speedup(50)``: the anchor takes at least 50x as long;
   ``Goal.ratio(1.3)``: envlock takes at most 1.3x the anchor;
   ``Goal.seconds(0.08)``: envlock's median is at most 0.08 s, the anchor
   being shown for scale). A row whose inputs cannot be had returns a
   ``Row`` with ``skipped`` set to the reason, never a made-up figure.
   ``before``/``after`` (optional) run unmeasured around every envlock run
   (e.g. to undo what the run changed).
2. Add the module's name to ``AREAS`` below.

envlock's bytecode is compiled first (``compile_bytecode``), as a wheel
install does; without that an editable install under
PYTHONDONTWRITEBYTECODE recompiles every module on every run (+0.1 s).

Nothing here asserts timing: the numbers are for docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from common import BIN, DEFAULT_WORK, ROOT, save_result  # noqa: E402

# Row modules, in the order the table lists them.
AREAS = ("inspect_rows", "startup_rows", "capture_rows", "lock_rows")


@dataclass(frozen=True)
class Goal:
    """What the row must show: a kind and a bound (see the module docstring)."""

    kind: str  # "speedup" (anchor / envlock >= bound), "ratio" (envlock / anchor <= bound), "seconds"
    bound: float

    @classmethod
    def speedup(cls, bound: float) -> Goal:
        return cls("speedup", bound)

    @classmethod
    def ratio(cls, bound: float) -> Goal:
        return cls("ratio", bound)

    @classmethod
    def seconds(cls, bound: float) -> Goal:
        return cls("seconds", bound)

    def text(self) -> str:
        return {
            "speedup": f">= {self.bound:g}x faster",
            "ratio": f"<= {self.bound:g}x",
            "seconds": f"<= {self.bound:g} s",
        }[self.kind]

    def figure(self, envlock: float, anchor: float) -> float:
        """The row's figure: a speedup, a ratio, or envlock's seconds."""
        if self.kind == "speedup":
            return anchor / envlock
        if self.kind == "ratio":
            return envlock / anchor
        return envlock

    def met(self, figure: float) -> bool:
        return figure >= self.bound if self.kind == "speedup" else figure <= self.bound


@dataclass
class Row:
    """One line of the table: an envlock command against an anchor command."""

    name: str
    goal: Goal
    envlock: Sequence[str] = ()
    anchor: Sequence[str] = ()
    anchor_label: str = ""
    # other anchors for the same work, (label, argv): the fastest median counts
    more_anchors: list[tuple[str, Sequence[str]]] = field(default_factory=list)
    # exit codes that count as a normal run (inspect exits 1 on findings)
    ok_codes: tuple[int, ...] = (0,)
    env: dict[str, str] | None = None
    before: Callable[[], object] | None = None
    after: Callable[[], object] | None = None
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    """What row modules get: where to keep inputs, the envlock under test, the interpreter."""

    work: Path
    repeat: int
    envlock: str = str(BIN / "envlock")
    python: str = sys.executable
    cores: int = os.cpu_count() or 1


def _one(argv: Sequence[str], ok_codes: tuple[int, ...], env: dict[str, str] | None) -> tuple[float, float]:
    """Wall seconds and children CPU seconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        list(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in ok_codes:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = [s[0] for s in samples]
    return {
        "median": statistics.median(walls),
        "best": min(walls),
        "cpu_median": statistics.median(s[1] for s in samples),
        "runs": len(samples),
    }


def measure(row: Row, repeat: int) -> dict[str, object]:
    """Interleaved runs of the row's commands; the row's figure from the medians (fastest anchor)."""
    result: dict[str, object] = {
        "name": row.name,
        "goal": row.goal.text(),
        "envlock_cmd": " ".join(row.envlock),
        "notes": row.notes,
    }
    if row.skipped:
        return {**result, "anchor_cmd": row.anchor_label, "skipped": row.skipped}
    anchors = [(row.anchor_label or " ".join(row.anchor), row.anchor)] if row.anchor else []
    anchors += row.more_anchors
    ours: list[tuple[float, float]] = []
    theirs: dict[str, list[tuple[float, float]]] = {label: [] for label, _argv in anchors}
    for round_ in range(repeat + 1):  # round 0 warms everything up, unmeasured
        if row.before:
            row.before()
        sample = _one(row.envlock, row.ok_codes, row.env)
        if row.after:
            row.after()
        if round_:
            ours.append(sample)
        for label, argv in anchors:
            sample = _one(argv, (0,), None)
            if round_:
                theirs[label].append(sample)
    result["envlock"] = _summary(ours)
    summaries = {label: _summary(samples) for label, samples in theirs.items()}
    result["anchors"] = summaries
    anchor_median = anchor_cpu = float("nan")
    if summaries:
        label = min(summaries, key=lambda k: summaries[k]["median"])
        result["anchor_cmd"], result["anchor"] = label, summaries[label]
        anchor_median, anchor_cpu = summaries[label]["median"], summaries[label]["cpu_median"]
    ours_summary = _summary(ours)
    figure = row.goal.figure(ours_summary["median"], anchor_median)
    result["figure"] = figure
    result["met"] = row.goal.met(figure)
    # The same figure from CPU time (user + system of the whole process): on a loaded
    # machine wall time is mostly waiting for a core, and this is what varies less.
    result["figure_cpu"] = row.goal.figure(ours_summary["cpu_median"], anchor_cpu)
    result["met_cpu"] = row.goal.met(result["figure_cpu"])  # type: ignore[arg-type]
    return result


def machine() -> dict[str, object]:
    load = os.getloadavg()
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "load_before": [round(x, 2) for x in load],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def compile_bytecode(python: str) -> str:
    """Write envlock's .pyc files, as installing a wheel does, and keep children writing them.

    An editable install has none until a run writes them, and a shell with
    PYTHONDONTWRITEBYTECODE set (this project's sandboxes have it) never
    does: every command would then compile every module it imports, which
    is not what a user's installed envlock pays.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    import importlib.util

    spec = importlib.util.find_spec("envlock")
    assert spec is not None and spec.submodule_search_locations
    package = spec.submodule_search_locations[0]
    subprocess.run([python, "-m", "compileall", "-q", package], check=True, stdout=subprocess.DEVNULL)
    return package


def main(work: Path = DEFAULT_WORK, repeat: int = 5, only: Sequence[str] = ()) -> dict[str, object]:
    import importlib

    ctx = Context(work=work, repeat=repeat)
    package = compile_bytecode(ctx.python)
    results: dict[str, object] = {"machine": machine(), "repeat": repeat, "envlock": package}
    rows_out: list[dict[str, object]] = []
    for area in AREAS:
        if only and area.removesuffix("_rows") not in only and area not in only:
            continue
        module = importlib.import_module(f"whole.{area}")
        for row in module.rows(ctx):
            print(f"-- {row.name}", file=sys.stderr, flush=True)
            rows_out.append({"area": area, **measure(row, repeat)})
    results["rows"] = rows_out
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    save_result("whole" if not only else "whole-" + "-".join(only), results)
    return results


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def _figure(kind: str, figure: float) -> str:
    if kind == "speedup":
        return f"{figure:.0f}x faster"
    if kind == "ratio":
        return f"{figure:.2f}x"
    return _seconds(figure)


def report(results: dict[str, object]) -> str:
    """The Markdown table for docs/benchmarks.md."""
    info = results["machine"]
    assert isinstance(info, dict)
    lines = [
        f"{info['date']}, {info['cores']} cores ({info['cpu']}), Python {info['python']}, "
        f"load average {info['load_before']} before, {results.get('load_after')} after; "
        f"medians of {results['repeat']} interleaved runs",
        "",
        "| row | envlock | anchor | figure | goal | met? | CPU: envlock / anchor, figure, met? |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = results["rows"]
    assert isinstance(rows, list)
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['name']} | — | — | — | {row['goal']} | skipped: {row['skipped']} |")
            continue
        kind = Goal(*_goal_parts(row["goal"])).kind
        anchor = row.get("anchor")
        anchor_text = _seconds(anchor["median"]) if anchor else "—"
        cpu_anchor = _seconds(anchor["cpu_median"]) if anchor else "—"
        cpu = (
            f"{_seconds(row['envlock']['cpu_median'])} / {cpu_anchor}, "
            f"{_figure(kind, row['figure_cpu'])}, {'met' if row['met_cpu'] else 'missed'}"
        )
        lines.append(
            f"| {row['name']} | {_seconds(row['envlock']['median'])} | {anchor_text} "
            f"({row['anchor_cmd']}) | {_figure(kind, row['figure'])} | {row['goal']} | "
            f"{'met' if row['met'] else 'missed'} | {cpu} |"
        )
    return "\n".join(lines)


def _goal_parts(text: str) -> tuple[str, float]:
    """Goal.text() back to (kind, bound), so a saved whole.json renders the same table."""
    words = text.split()
    if text.endswith("faster"):
        return "speedup", float(words[1].rstrip("x"))
    if text.endswith(" s"):
        return "seconds", float(words[1])
    return "ratio", float(words[1].rstrip("x"))


__all__ = ["ROOT", "Context", "Goal", "Row", "main", "measure", "report"]
