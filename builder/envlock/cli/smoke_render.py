"""Text rendering of a smoke result: ``envlock smoke`` and ``envlock apply`` (a staged venv's smoke)."""

from __future__ import annotations

import textwrap
from dataclasses import asdict
from typing import Any

from envlock.render import plural, table
from envlock.smokereport import ModuleResult, SmokeResult

CASCADE_SHOWN = 5  # modules named per cause before the rest is counted
WIDTH = 100  # the text output fits a 100-column terminal; -v and --format json give the rest
MODULE_WIDTH = 40  # module column cut beyond this (the full name is in -v and JSON)


def _result_json(r: ModuleResult) -> dict[str, Any]:
    out: dict[str, Any] = {"target": r.target, "check": r.check, "status": r.status, "seconds": r.seconds}
    if r.status != "ok":
        out.update(
            kind=r.kind,
            type=r.error_type,
            message=r.message,
            why=r.why,
            where=asdict(r.where) if r.where else None,
            frames=[asdict(f) for f in r.frames],
            facts=dict(r.facts),
            alone=r.alone,
            same_as=r.same_as,
        )
    if r.status == "failed":
        out["expected"] = r.expected
    if r.order_dependent:
        out["order_dependent"] = r.order_dependent
    return out


def result_json(result: SmokeResult, elapsed: float) -> dict[str, Any]:
    return {
        "host": result.host,
        "venv": result.venv,
        "python": result.python,
        "lock": result.lock,
        "has_gpu": result.has_gpu,
        "jobs": result.jobs,
        "passed": result.passed,
        "counts": {
            "ok": sum(r.status == "ok" for r in result.results),
            "failed": len(result.failures),
            "expected": len(result.expected_failures),
            "skipped": len(result.skipped),
            "not_run": len(result.not_run),
        },
        "stopped": result.stopped,
        "not_run": list(result.not_run),
        "seconds": round(elapsed, 3),
        "agent_seconds": result.seconds,
        "warnings": list(result.warnings),
        "results": [_result_json(r) for r in result.results],
    }


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _fit(rows: list[list[str]], last_min: int = 20) -> list[list[str]]:
    """Cut the module column, then the last one, so that each table line fits WIDTH."""
    if not rows:
        return rows
    cut = [[*row[:-2], _cut(row[-2], MODULE_WIDTH), row[-1]] for row in rows]
    widths = [max(len(row[i]) for row in cut) for i in range(len(cut[0]) - 1)]
    room = max(WIDTH - sum(widths) - 2 * len(widths), last_min)
    return [[*row[:-1], _cut(row[-1], room)] for row in cut]


def _wrap(line: str) -> list[str]:
    return textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def render_text(result: SmokeResult, elapsed: float, verbose: bool = False) -> str:
    """One row per cause of real failure, most serious first; what else it takes down below the
    table; expected failures counted by reason (listed with ``verbose``). Fits WIDTH columns,
    except with ``verbose``, which adds the line that matters and never cuts."""
    groups = result.by_cause()
    lines = []
    if groups:
        rows = []
        for first, *rest in groups:
            target = f"check: {first.target}" if first.check else first.target
            target += f" (+{len(rest)})" if rest else ""
            where = [str(first.where or "")] if verbose else []
            rows.append([first.status, first.kind or "", target, *where, first.why or ""])
        headers = ["result", "kind", "module", *(["at"] if verbose else []), "why"]
        lines += [table(headers, rows if verbose else _fit(rows)), ""]
    for first, *rest in groups:
        if rest:
            names = [f"check: {r.target}" if r.check else r.target for r in rest]
            more = len(names) - CASCADE_SHOWN
            listed = ", ".join(names[:CASCADE_SHOWN]) + (f" and {more} more" if more > 0 else "")
            lines += _wrap(f"{first.target}: the same cause also {first.status} {listed}")
    expected = result.expected_failures
    if expected and verbose:
        rows = [[r.target, r.expected or ""] for r in expected]
        lines += ["expected failures (they do not gate):", table(["module", "why expected"], rows), ""]
    elif expected:
        counts: dict[str, int] = {}
        for r in expected:
            label = (r.expected or "").split(":", 1)[0]
            counts[label] = counts.get(label, 0) + 1
        by_reason = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
        lines += _wrap(
            f"expected failures, not gating: {len(expected)} ({by_reason}); "
            "-v or --format json lists them with their reasons"
        )
    noted = [r for r in result.results if r.order_dependent]
    if verbose or len(noted) <= CASCADE_SHOWN:
        for r in noted:
            lines += _wrap(f"note: {r.target} {r.order_dependent}")
    else:  # one line for many: a shared import side effect (distutils, say) makes them alike
        shown = ", ".join(r.target for r in noted[:CASCADE_SHOWN])
        lines += _wrap(
            f"note: {len(noted)} modules ({shown} and {len(noted) - CASCADE_SHOWN} more) failed after "
            "other imports in the same interpreter and import alone; -v shows each"
        )
    for warning in result.warnings:
        lines += _wrap(f"warning: {warning}")
    lines.append(_summary(result, elapsed))  # one line, whatever its length: scripts grep it
    return "\n".join(lines)


def _summary(result: SmokeResult, elapsed: float) -> str:
    checks = result.checks
    modules = len(result.results) + len(result.not_run) - checks
    what = plural(modules, "module") + (f" + {plural(checks, 'check')}" if checks else "")
    ok = sum(r.status == "ok" for r in result.results)
    causes = sum(1 for g in result.by_cause() if g[0].status == "failed")
    counts = f"{ok} ok, {len(result.failures)} failed, {len(result.skipped)} skipped"
    counts += f", {len(result.expected_failures)} expected" if result.expected_failures else ""
    counts += f" ({plural(causes, 'cause')})" if causes != len(result.failures) else ""
    if result.stopped:
        counts += f"; stopped at the first failure, {len(result.not_run)} not run"
    source = f", modules from {result.lock} and the venv" if result.lock else ""
    return (
        f"smoke {result.host}: {what} in {elapsed:.1f} s, {result.jobs} workers, "
        f"python {result.python}{source}: {counts}"
    )
