"""Fleet commands' shared CLI: host/@group arguments, the live table, the summary, the JSON.

``apply``, ``verify``, ``smoke``, ``capture`` and ``lock`` take several hosts
and ``@group``s. One host named alone keeps the command's single-host output
(text and JSON) exactly; more than one word, or any ``@group``, runs the
command's per-host work through ``envlock.fleet`` and answers in the fleet
shape (docs/fleet.md, docs/json.md).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from envlock.errors import ExitCode
from envlock.fleet import (
    DEFAULT_PARALLEL,
    FleetOptions,
    FleetReporter,
    FleetResult,
    HostOutcome,
    Work,
    run_fleet,
)
from envlock.groups import Targets, expand_targets, is_fleet
from envlock.render import bold, envelope, human_size, plural, table
from envlock.workspace import Workspace

REDRAW_EVERY = 0.5  # seconds between redraws of the live table when nothing happens (elapsed ticks)


def add_target_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``HOST [HOST ...]`` (each may be ``@group``) and the fleet options."""
    p.add_argument(
        "hosts",
        nargs="+",
        metavar="HOST",
        help=f"{what}; several hosts, or @group from hosts/groups.toml, run as a fleet (docs/fleet.md)",
    )
    fleet = p.add_argument_group("fleet (several hosts or a @group)")
    fleet.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        metavar="N",
        help=f"hosts at once (default {DEFAULT_PARALLEL})",
    )
    fleet.add_argument(
        "--canary",
        type=int,
        default=0,
        metavar="K",
        help="run the first K hosts first; if any fails, start no other (they are reported skipped)",
    )
    fleet.add_argument(
        "--max-failures",
        type=int,
        default=None,
        metavar="M",
        help="start no new host after M hosts failed (default: no limit)",
    )


def wants_fleet(args: argparse.Namespace) -> bool:
    return is_fleet(args.hosts)


def run_fleet_command(
    args: argparse.Namespace, command: str, workspace: Workspace, work: Work[dict[str, Any]]
) -> int:
    """Expand the targets, run ``work`` on each under the fleet options, print, and exit by the fleet rule."""
    targets = expand_targets(workspace, args.hosts)
    options = FleetOptions(parallel=args.parallel, canary=args.canary, max_failures=args.max_failures)
    stream = sys.stderr
    tty = stream.isatty()
    view = FleetView(
        command,
        targets.hosts,
        stream,
        live=tty and not args.quiet,
        lines=not tty and not args.quiet and args.format == "text",
    )
    try:
        result = run_fleet(targets.hosts, work, options, view)
    finally:
        view.close()
    if args.format == "json":
        payload = fleet_json(targets, options, result)
        print(envelope(command, result.exit_code == ExitCode.OK, {"result": payload}))
    else:
        print(render_summary(command, result, verbose=bool(args.verbose)))
    return int(result.exit_code)


@dataclass
class _Row:
    state: str = "waiting"
    step: str = ""
    phase: str = ""
    started: float | None = None
    seconds: float | None = None  # when finished


class FleetView(FleetReporter):
    """The live table on stderr: redrawn in place on a terminal, else one line per event.

    Events come from several threads at once; one lock guards the rows and the stream.
    """

    def __init__(self, command: str, hosts: tuple[str, ...], stream: TextIO, live: bool, lines: bool) -> None:
        self.command, self.stream, self.live, self.lines = command, stream, live, lines
        self.rows = {host: _Row() for host in hosts}
        self.width = max((len(h) for h in hosts), default=4)
        self.begin = time.monotonic()
        self.lock = threading.Lock()
        self.drawn = 0
        self.last_draw = 0.0
        self.done = threading.Event()
        self.ticker: threading.Thread | None = None
        if live:
            self.ticker = threading.Thread(target=self._tick, name="envlock-fleet-view", daemon=True)
            self.ticker.start()

    # FleetReporter hooks

    def started(self, host: str) -> None:
        with self.lock:
            row = self.rows[host]
            row.state, row.started = "running", time.monotonic()
            self._event(host, "started")

    def step(self, host: str, message: str) -> None:
        with self.lock:
            self.rows[host].step = message
            self._event(host, message)

    def progress(self, host: str, phase: str, done: int, total: int, detail: str) -> None:
        with self.lock:
            row = self.rows[host]
            amount = f"{human_size(done)}/{human_size(total)}" if phase == "hash" else f"{done}/{total}"
            row.step = f"{phase} {amount} {detail}".rstrip()
            if phase != row.phase:  # a line per phase, not per event
                row.phase = phase
                self._event(host, phase)
            elif self.live and time.monotonic() - self.last_draw > 0.1:
                self._redraw()

    def finished(self, outcome: HostOutcome[object]) -> None:
        with self.lock:
            row = self.rows[outcome.host]
            row.state, row.step, row.seconds = label(outcome), outcome.cause, outcome.seconds
            self._event(outcome.host, f"{row.state}: {outcome.cause}")

    # drawing

    def _event(self, host: str, what: str) -> None:
        if self.lines:
            at = time.monotonic() - self.begin
            self.stream.write(f"[{at:6.1f}s] {host:<{self.width}}  {_one_line(what)}\n")
            self.stream.flush()
        elif self.live:
            self._redraw()

    def _lines(self) -> list[str]:
        now = time.monotonic()
        out = []
        for host, row in self.rows.items():
            if row.seconds is not None:
                elapsed = f"{row.seconds:.1f}s"
            elif row.started is not None:
                elapsed = f"{now - row.started:.1f}s"
            else:
                elapsed = ""
            out.append(f"{host:<{self.width}}  {row.state:<10} {elapsed:>7}  {_one_line(row.step)}"[:160])
        counts: dict[str, int] = {}
        for row in self.rows.values():
            counts[row.state] = counts.get(row.state, 0) + 1
        out.append(f"{self.command}: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
        return out

    def _redraw(self) -> None:
        lines = self._lines()
        up = f"\033[{self.drawn}F" if self.drawn else ""
        self.stream.write(up + "".join(f"\033[2K{line}\n" for line in lines))
        self.stream.flush()
        self.drawn = len(lines)
        self.last_draw = time.monotonic()

    def _tick(self) -> None:
        while not self.done.wait(REDRAW_EVERY):
            with self.lock:
                self._redraw()

    def close(self) -> None:
        self.done.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            if self.live and self.drawn:  # the summary says it all: take the live table away
                self.stream.write(f"\033[{self.drawn}F\033[J")
                self.stream.flush()
                self.drawn = 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def label(outcome: HostOutcome[Any]) -> str:
    """The result column: the command's state for a host that ran, else failed/skipped."""
    if outcome.outcome == "ok":
        return outcome.state
    return "skipped" if outcome.outcome == "skipped" else "failed"


def render_summary(command: str, result: FleetResult[dict[str, Any]], verbose: bool = False) -> str:
    rows = []
    for o in result.outcomes:
        seconds = "-" if o.seconds is None else f"{o.seconds:.1f}s"
        cause = o.cause if o.outcome != "findings" else f"{o.state}: {o.cause}"
        rows.append([o.host, label(o), seconds, _one_line(cause)])
    lines = [table(["host", "result", "time", "detail"], rows, right=(2,))]
    for o in result.outcomes:
        if o.text and (o.outcome == "findings" or verbose):
            lines += ["", bold(f"── {o.host} ──"), o.text]
    counts: dict[str, int] = {}
    for o in result.outcomes:
        counts[label(o)] = counts.get(label(o), 0) + 1
    tally = ", ".join(f"{n} {state}" for state, n in counts.items())
    lines += ["", f"{command} over {plural(len(result.outcomes), 'host')}: {tally}"]
    if result.stopped:
        lines.append(f"stopped: {result.stopped}")
    return "\n".join(lines)


def outcome_json(o: HostOutcome[dict[str, Any]]) -> dict[str, Any]:
    return {
        "host": o.host,
        "outcome": o.outcome,
        "state": o.state,
        "exit_code": None if o.exit_code is None else int(o.exit_code),
        "cause": o.cause,
        "seconds": None if o.seconds is None else round(o.seconds, 3),
        "result": o.result,
        "error": {"message": o.cause, "code": o.error_code} if o.outcome == "error" else None,
    }


def fleet_json(
    targets: Targets, options: FleetOptions, result: FleetResult[dict[str, Any]]
) -> dict[str, Any]:
    counts = result.counts()
    states: dict[str, int] = {}
    for o in result.outcomes:
        states[label(o)] = states.get(label(o), 0) + 1
    return {
        "fleet": {
            "targets": list(targets.words),
            "parallel": options.parallel,
            "canary": options.canary,
            "max_failures": options.max_failures,
            "stopped": result.stopped,
        },
        "summary": {"hosts": len(result.outcomes), **counts, "states": states},
        "hosts": [outcome_json(o) for o in result.outcomes],
    }


SingleHost = Callable[[str], int]
