"""Run one command's per-host work over many hosts: parallel, canary first, a failure budget.

The caller (a ``cli/`` command) passes the per-host function, so this module
knows no use case: it calls ``work(host, reporter)``, which returns a
``HostReport`` (or raises ``EnvlockError``), and collects one typed
``HostOutcome`` per host, in the order the hosts were named.

- ``parallel``: at most that many hosts at once (threads: the work is mostly
  waiting on agents over SSH; every file a host writes has a private temp
  name, see ``envlock.tmpname``, and each host writes only its own lock).
- ``canary``: the first K hosts run first; if any of them fails, no other host
  starts and each is reported as skipped, with the canary that failed.
- ``max_failures``: after M failures no new host starts (those running finish);
  the rest are skipped, with the count that stopped them.

Exit rule (``FleetResult.exit_code``): 0 when every host is ok; 2 when any
host could not run or was skipped; else 1 (every host ran, some had findings).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from envlock.errors import EnvlockError, ExitCode
from envlock.render import error_code, plural
from envlock.reporter import Reporter

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")

DEFAULT_PARALLEL = 4
Outcome = Literal["ok", "findings", "error", "skipped"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "findings", "error", "skipped")


@dataclass(frozen=True, slots=True)
class FleetOptions:
    parallel: int = DEFAULT_PARALLEL
    canary: int = 0
    max_failures: int | None = None  # None: no limit

    def problems(self) -> list[str]:
        wrong = []
        if self.parallel < 1:
            wrong.append(f"--parallel must be at least 1, got {self.parallel}")
        if self.canary < 0:
            wrong.append(f"--canary must not be negative, got {self.canary}")
        if self.max_failures is not None and self.max_failures < 1:
            wrong.append(f"--max-failures must be at least 1, got {self.max_failures}")
        return wrong


@dataclass(frozen=True, slots=True)
class HostReport(Generic[T]):
    """What the per-host work returns when it ran to an answer."""

    exit_code: ExitCode  # OK or FINDINGS (could not run: raise EnvlockError instead)
    state: str  # one word or two for the table: "changed", "no-op", "clean", "drift", ...
    detail: str  # one line: what happened, or why it failed
    result: T  # the command's single-host answer (its JSON result, for the cli)
    text: str = ""  # the single-host text report: shown for hosts with findings, for all with -v


@dataclass(frozen=True, slots=True)
class HostOutcome(Generic[T]):
    host: str
    outcome: Outcome
    state: str  # the report's state; "error" or "skipped" otherwise
    cause: str  # the report's detail, the error's message, or why the host was skipped
    seconds: float | None  # None: never started
    result: T | None = None
    text: str = ""
    error_code: str | None = None  # for "error": the kind, as the JSON envelope names it

    @property
    def exit_code(self) -> ExitCode | None:
        """The host's own exit status; None for a host that never ran."""
        return {
            "ok": ExitCode.OK,
            "findings": ExitCode.FINDINGS,
            "error": ExitCode.COULD_NOT_RUN,
            "skipped": None,
        }[self.outcome]

    @property
    def failed(self) -> bool:
        return self.outcome in ("findings", "error")


@dataclass(frozen=True, slots=True)
class FleetResult(Generic[T]):
    outcomes: tuple[HostOutcome[T], ...]  # in the order the hosts were named
    stopped: str | None  # why hosts were skipped (a canary failed, --max-failures reached)

    @property
    def exit_code(self) -> ExitCode:
        kinds = {o.outcome for o in self.outcomes}
        if kinds & {"error", "skipped"}:
            return ExitCode.COULD_NOT_RUN
        return ExitCode.FINDINGS if "findings" in kinds else ExitCode.OK

    def counts(self) -> dict[str, int]:
        return {kind: sum(1 for o in self.outcomes if o.outcome == kind) for kind in OUTCOMES}


class FleetInterrupted(KeyboardInterrupt):
    """Ctrl-C during a fleet run: which hosts were still running (their agents go on alone;
    each host's journal lets its next apply finish or undo what was cut short)."""

    def __init__(self, running: Sequence[str]) -> None:
        super().__init__()
        self.running = tuple(running)

    def __str__(self) -> str:
        if not self.running:
            return "no host was running"
        return (
            f"{', '.join(self.running)} still running: each finishes or stops on its own, "
            "and the next apply of it finishes or undoes what was cut short"
        )


class FleetReporter:
    """Hooks the runner calls as hosts go; each does nothing here (``cli/`` draws the table).

    Called from worker threads, and ``progress`` also from the threads reading
    agents' stderr: several at once. A subclass guards its own state.
    """

    def started(self, host: str) -> None:
        """``host`` starts."""

    def step(self, host: str, message: str) -> None:
        """A step of ``host``'s work starts (the single-host command's step line)."""

    def progress(self, host: str, phase: str, done: int, total: int, detail: str) -> None:
        """``done`` of ``total`` in ``phase`` on ``host`` (``envlock.reporter.Reporter.progress``)."""

    def finished(self, outcome: HostOutcome[object]) -> None:
        """``host`` is done: ran to an answer, failed, or was skipped (then never started)."""


class _HostReporter(Reporter):
    """The single-host ``Reporter`` a host's work gets: its events, tagged with the host."""

    def __init__(self, host: str, fleet: FleetReporter) -> None:
        self.host, self.fleet = host, fleet

    def step(self, message: str) -> None:
        self.fleet.step(self.host, message)

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        self.fleet.progress(self.host, phase, done, total, detail)


Work = Callable[[str, Reporter], HostReport[T]]


def run_fleet(
    hosts: Sequence[str],
    work: Work[T],
    options: FleetOptions,
    reporter: FleetReporter | None = None,
) -> FleetResult[T]:
    """Run ``work`` for every host under ``options``; one outcome per host, in ``hosts``' order."""
    wrong = options.problems()
    if wrong:
        raise EnvlockError("; ".join(wrong))
    runner = _Runner(work, options, reporter or FleetReporter())
    canaries, rest = list(hosts[: options.canary]), list(hosts[options.canary :])
    runner.run(canaries)
    failed = [o.host for o in runner.outcomes.values() if o.failed]
    if canaries and rest and failed:
        runner.skip(rest, f"canary {', '.join(failed)} failed")
    else:
        runner.run(rest)
    return FleetResult(tuple(runner.outcomes[h] for h in hosts), runner.stopped)


class _Runner(Generic[T]):
    def __init__(self, work: Work[T], options: FleetOptions, reporter: FleetReporter) -> None:
        self.work, self.options, self.reporter = work, options, reporter
        self.outcomes: dict[str, HostOutcome[T]] = {}
        self.running: list[str] = []  # started, not yet recorded
        self.stopped: str | None = None
        self.lock = threading.Lock()

    def failures(self) -> int:
        return sum(1 for o in self.outcomes.values() if o.failed)

    def over_budget(self) -> bool:
        limit = self.options.max_failures
        return limit is not None and self.failures() >= limit

    def run(self, hosts: list[str]) -> None:
        """Start hosts in order, at most ``parallel`` at once, none after the failure budget is spent."""
        # Imported here: a single-host command (lock, verify) never starts a pool.
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        pending = list(hosts)
        pool = ThreadPoolExecutor(max_workers=self.options.parallel, thread_name_prefix="envlock-host")
        running: set[Future[None]] = set()
        try:
            while pending or running:
                while pending and len(running) < self.options.parallel and not self.over_budget():
                    running.add(pool.submit(self._one, pending.pop(0)))
                if not running:
                    break
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # _one catches what the work raises; this re-raises only our bugs
        except KeyboardInterrupt as exc:
            # Ctrl-C: start nothing more, and do not wait for the running hosts: a host's
            # output pipe is held by the shared SSH master, not by the ssh client Ctrl-C
            # killed, so a thread reading it may wait as long as that host's agent runs.
            pool.shutdown(wait=False, cancel_futures=True)
            with self.lock:
                running_hosts = list(self.running)
            raise FleetInterrupted(running_hosts) from exc
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if pending:
            failed = self.failures()
            self.stopped = (
                f"--max-failures {self.options.max_failures} reached ({plural(failed, 'host')} failed)"
            )
            self.skip(pending, f"not started: {self.stopped}")

    def skip(self, hosts: list[str], why: str) -> None:
        if self.stopped is None:
            self.stopped = why
        for host in hosts:
            outcome: HostOutcome[T] = HostOutcome(host, "skipped", "skipped", why, None)
            self._record(outcome)

    def _record(self, outcome: HostOutcome[T]) -> None:
        with self.lock:
            self.outcomes[outcome.host] = outcome
            if outcome.host in self.running:
                self.running.remove(outcome.host)
        self.reporter.finished(outcome)  # type: ignore[arg-type]  # T is invariant; the hook only reads

    def _one(self, host: str) -> None:
        with self.lock:
            self.running.append(host)
        self.reporter.started(host)
        started = time.monotonic()
        try:
            report = self.work(host, _HostReporter(host, self.reporter))
        except EnvlockError as exc:
            outcome: HostOutcome[T] = HostOutcome(
                host, "error", "error", str(exc), time.monotonic() - started, error_code=error_code(exc)
            )
        except Exception as exc:  # one host's unexpected failure must not stop the others' report
            cause = f"internal error: {type(exc).__name__}: {exc}"
            outcome = HostOutcome(
                host, "error", "error", cause, time.monotonic() - started, error_code="internal"
            )
        else:
            kind: Outcome = "ok" if report.exit_code == ExitCode.OK else "findings"
            outcome = HostOutcome(
                host,
                kind,
                report.state,
                report.detail,
                time.monotonic() - started,
                result=report.result,
                text=report.text,
            )
        self._record(outcome)
