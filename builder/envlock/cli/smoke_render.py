"""Text rendering of a smoke result: ``envlock smoke`` and ``envlock apply`` (a staged venv's smoke)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from envlock.render import plural, table
from envlock.smokereport import ModuleResult, SmokeResult

CASCADE_SHOWN = 5  # modules named per cause before the rest is counted


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


def render_text(result: SmokeResult, elapsed: float) -> str:
    """One row per cause of failure, most serious first; what else it takes down below the table."""
    groups = result.by_cause()
    lines = []
    if groups:
        rows = []
        for first, *rest in groups:
            target = f"check: {first.target}" if first.check else first.target
            target += f" (+{len(rest)})" if rest else ""
            rows.append([first.status, first.kind or "", target, str(first.where or ""), first.why or ""])
        lines += [table(["result", "kind", "module", "at", "why"], rows), ""]
    for first, *rest in groups:
        if rest:
            names = [f"check: {r.target}" if r.check else r.target for r in rest]
            more = len(names) - CASCADE_SHOWN
            listed = ", ".join(names[:CASCADE_SHOWN]) + (f" and {more} more" if more > 0 else "")
            lines.append(f"{first.target}: the same cause also {first.status} {listed}")
    for r in result.results:
        if r.order_dependent:
            lines.append(f"note: {r.target} {r.order_dependent}")
    for warning in result.warnings:
        lines.append(f"warning: {warning}")
    lines.append(_summary(result, elapsed))
    return "\n".join(lines)


def _summary(result: SmokeResult, elapsed: float) -> str:
    checks = result.checks
    modules = len(result.results) + len(result.not_run) - checks
    what = plural(modules, "module") + (f" + {plural(checks, 'check')}" if checks else "")
    ok = sum(r.status == "ok" for r in result.results)
    causes = sum(1 for g in result.by_cause() if g[0].status == "failed")
    counts = f"{ok} ok, {len(result.failures)} failed, {len(result.skipped)} skipped"
    counts += f" ({plural(causes, 'cause')})" if causes != len(result.failures) else ""
    if result.stopped:
        counts += f"; stopped at the first failure, {len(result.not_run)} not run"
    source = f", modules from {result.lock} and the venv" if result.lock else ""
    return (
        f"smoke {result.host}: {what} in {elapsed:.1f} s, {result.jobs} workers, "
        f"python {result.python}{source}: {counts}"
    )
