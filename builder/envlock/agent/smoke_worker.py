"""Smoke workers: the program each one runs, and the pool that keeps them.

A worker is a fresh interpreter of the target venv, started with this file's
source as ``python -I -c SOURCE CMD_FD RES_FD PARENT_PID``. ``-I`` keeps the
agent's own bundle (which carries copies of ``envlock`` and ``elftools``) and
the current directory off ``sys.path``, so every import resolves exactly as
it does for the venv's own programs. Requests arrive as JSON lines on CMD_FD
(``{"id": 3, "module": "torch"}`` or ``{"id": 4, "check": "from xgrammar
import StructuralTag"}``); one JSON line per request goes back on RES_FD.
Those are private pipes rather than stdin/stdout because imported modules
print to stdout and some read stdin; stdout and stderr go to a log file.

``faulthandler`` writes the Python stack to that log on a fatal signal, and
on SIGUSR1 (what the pool sends a hung worker before killing it), so a crash
or a hang still names the line it happened on. The pool reads the log's
part since the module started, and replaces a worker that crashed or hung.

Stdlib only, Python 3.8+. The worker runs the whole file; it uses only the
part above ``Pool`` and imports nothing else before the modules under test
(the stdlib modules imported here are ones nearly every program loads).
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import select
import selectors
import signal
import subprocess
import sys
import time
import traceback
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

MAX_TEXT = 2000
MAX_FRAMES = 12
MAX_CHAIN = 6
OWN_FILE = "<string>"  # this program's frames, run with -c
_KILL_GRACE = 1.0  # seconds a hung worker gets to write its stack after SIGUSR1
_START_GRACE = 30.0  # seconds an interpreter may take to start (site, .pth files), whatever --timeout
_FAULT_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


# ---------------------------------------------------------------- the worker's side


def _text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not take the worker down
        text = "<unprintable %s>" % type(exc).__name__
    return text[:MAX_TEXT]


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module == "builtins" else "%s.%s" % (module, cls.__qualname__)


def _frames(exc: BaseException) -> List[List[Any]]:
    """The traceback as ``[file, line, function, code]``, importlib and this program left out."""
    try:
        summary = traceback.extract_tb(exc.__traceback__)
    except Exception:
        return []
    frames = [
        [f.filename, f.lineno, f.name, (f.line or "").strip()[:200]]
        for f in summary
        if not f.filename.startswith("<frozen") and f.filename != OWN_FILE
    ]
    return frames[-MAX_FRAMES:]


def describe(exc: BaseException) -> List[Dict[str, Any]]:
    """The exception and its causes, outermost first, each with its own traceback.

    Wrappers (``raise ImportError("...") from e``) often carry the message
    that classifies a failure only in a cause, with the line that matters
    in the cause's traceback, so every link is kept.
    """
    chain: List[Dict[str, Any]] = []
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        link: Dict[str, Any] = {"type": _type_name(current), "message": _text(current)}
        link["frames"] = _frames(current)
        if isinstance(current, ImportError):
            # Set by the import system: the missing module, the .so that failed to load.
            for attr in ("name", "path"):
                value = getattr(current, attr, None)
                link[attr] = value if isinstance(value, str) else None
        chain.append(link)
        if current.__cause__ is not None:
            current = current.__cause__
        else:
            current = None if current.__suppress_context__ else current.__context__
    return chain


def attempt(request: Dict[str, Any]) -> Dict[str, Any]:
    import importlib

    started = time.perf_counter()
    answer: Dict[str, Any] = {"id": request["id"]}
    try:
        if "module" in request:
            importlib.import_module(request["module"])
        else:
            exec(compile(request["check"], "<smoke check>", "exec"), {"__name__": "__smoke_check__"})
        answer["ok"] = True
    except BaseException as exc:  # SystemExit and KeyboardInterrupt at import are failures too
        answer["ok"] = False
        answer["chain"] = describe(exc)
    answer["seconds"] = round(time.perf_counter() - started, 6)
    return answer


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flush_output() -> None:
    """So the pool's log offsets mark where each module's output starts."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _die_with_parent(parent: int) -> None:
    """Linux: be killed when the agent dies, even by SIGKILL (a hung import would linger)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def main(argv: List[str]) -> None:
    cmd_fd, res_fd, parent = int(argv[0]), int(argv[1]), int(argv[2])
    _die_with_parent(parent)
    with contextlib.suppress(Exception):
        import resource  # no core files from modules that crash on purpose or not

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _write(res_fd, b'{"ready":true}\n')
    with open(cmd_fd, "rb") as requests:
        for line in requests:
            answer = attempt(json.loads(line.decode("utf-8")))
            _flush_output()
            _write(res_fd, (json.dumps(answer) + "\n").encode("utf-8"))
    os._exit(0)  # skip atexit hooks and non-daemon threads that imported modules left behind


# ---------------------------------------------------------------- the pool's side


class SmokeError(Exception):
    """The smoke could not run at all (the venv's interpreter does not start)."""


def fault_frames(dump: str, prefer_current: bool) -> Tuple[Optional[str], List[List[Any]]]:
    """The fatal-error line and the frames (innermost last) of a faulthandler dump.

    faulthandler lists every thread, most recent call first. The crashing
    thread is the "Current thread"; for a hang (dumped on SIGUSR1) the
    importing thread is the one running this program's loop (``<string>``).
    """
    fatal = None
    blocks: List[Tuple[bool, List[List[Any]]]] = []
    for line in dump.splitlines():
        if line.startswith("Fatal Python error") and fatal is None:
            fatal = line.strip()
        elif line.startswith(("Current thread 0x", "Thread 0x")):
            blocks.append((line.startswith("Current"), []))
        elif blocks:
            match = _FAULT_FRAME.match(line)
            if match:
                blocks[-1][1].append([match.group(1), int(match.group(2)), match.group(3), ""])
    chosen: List[List[Any]] = blocks[-1][1] if blocks else []
    for current, frames in blocks:
        if (prefer_current and current) or (not prefer_current and any(f[0] == OWN_FILE for f in frames)):
            chosen = frames
            break
    return fatal, [f for f in reversed(chosen) if not f[0].startswith("<")]


class _Worker:
    def __init__(self, proc: subprocess.Popen[bytes], cmd: int, res: int, log: str) -> None:
        self.proc, self.cmd, self.res, self.log = proc, cmd, res, log
        self.buffer = b""
        self.ready = False
        self.used = 0  # requests answered: 0 means nothing imported yet
        self.item: Optional[Dict[str, Any]] = None
        self.item_alone = False  # the item is the first this worker imports
        self.started = 0.0
        self.deadline = 0.0
        self.log_offset = 0


Answer = Callable[[Dict[str, Any], Dict[str, Any]], None]


class Pool:
    """Runs items (``{"id": N, "module" | "check": ..., "fresh": bool}``) on up to ``jobs`` workers.

    ``on_answer(item, answer)`` gets the worker's answer, or for a worker that
    died ``{"crashed": {...}}`` and for one that hung ``{"timeout": S}``, both
    with ``message``, ``frames`` and ``seconds``; ``alone`` says whether the
    worker had imported nothing before. An item marked ``fresh`` runs in a
    worker that has imported nothing before it.
    """

    def __init__(
        self,
        jobs: int,
        timeout: float,
        workdir: str,
        on_answer: Answer,
        python: Optional[str] = None,
        write_bytecode: bool = True,
    ) -> None:
        import pkgutil

        self.jobs, self.timeout, self.workdir, self.on_answer = jobs, timeout, workdir, on_answer
        # The venv's interpreter: apply runs the agent in the base interpreter
        # and smokes a staging venv, so it names that venv's python.
        self.python = python or sys.executable
        # -B: no bytecode written into the venv the workers import from.
        self.flags = ["-I"] if write_bytecode else ["-I", "-B"]
        data = pkgutil.get_data("envlock.agent", "smoke_worker.py")  # from a directory or a zipapp
        assert data is not None
        self.source = data.decode("utf-8")
        self.pending: Deque[Dict[str, Any]] = deque()
        self.fresh: Deque[Dict[str, Any]] = deque()
        self.fresh_first = False  # fail-fast: confirm a failure before anything else
        self.workers: List[_Worker] = []
        self.spawned: List[subprocess.Popen[bytes]] = []
        self.selector = selectors.DefaultSelector()
        self.stopping = False

    def add_fresh(self, item: Dict[str, Any]) -> None:
        self.fresh.append(dict(item, fresh=True))

    def stop(self) -> None:
        """Start nothing more; the busy workers are killed."""
        self.stopping = True

    def run(self, items: List[Dict[str, Any]]) -> None:
        self.pending.extend(items)
        try:
            for _ in range(min(self.jobs, len(items))):
                self._feed(self._spawn())
            while self.workers and not self.stopping:
                self._step()
        finally:
            for worker in list(self.workers):
                self._retire(worker, kill=True)
            for proc in self.spawned:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                _kill_group(proc)  # whatever an imported module left running
            self.selector.close()

    def _spawn(self) -> _Worker:
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        log = os.path.join(self.workdir, "worker-%d.log" % len(self.spawned))
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [self.python, *self.flags, "-c", self.source, str(cmd_r), str(res_w), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(cmd_r, res_w),
                cwd=self.workdir,  # where a module that writes files at import writes them
                start_new_session=True,  # its own process group: kill whatever it started too
            )
        os.close(cmd_r)
        os.close(res_w)
        worker = _Worker(proc, cmd_w, res_r, log)
        self.spawned.append(proc)
        self.workers.append(worker)
        self.selector.register(res_r, selectors.EVENT_READ, worker)
        return worker

    def _retire(self, worker: _Worker, kill: bool = False) -> None:
        self.selector.unregister(worker.res)
        self.workers.remove(worker)
        for fd in (worker.cmd, worker.res):
            with contextlib.suppress(OSError):
                os.close(fd)  # the worker reads end-of-file and exits
        if kill:
            _kill_group(worker.proc)

    def _next(self, worker: _Worker) -> Optional[Dict[str, Any]]:
        # Fresh items wait for the end (or a worker that is fresh anyway), so
        # a worker keeps what it has imported for as long as there is other work.
        if self.fresh and (self.fresh_first or not self.pending or worker.used == 0):
            return self.fresh.popleft()
        return self.pending.popleft() if self.pending else None

    def _feed(self, worker: _Worker) -> None:
        item = None if self.stopping else self._next(worker)
        if item is None:
            self._retire(worker)
            return
        if item.get("fresh") and worker.used:
            self._retire(worker)
            worker = self._spawn()
        worker.item, worker.item_alone = item, not worker.used
        worker.log_offset = os.path.getsize(worker.log)
        worker.started = time.monotonic()
        # Restarted when the worker says it is ready: its start-up is not the module's time.
        worker.deadline = worker.started + (self.timeout if worker.ready else max(self.timeout, _START_GRACE))
        kind = "module" if "module" in item else "check"
        request = json.dumps({"id": item["id"], kind: item[kind]}) + "\n"
        with contextlib.suppress(OSError):  # it just died: noticed below, reported as a crash
            os.write(worker.cmd, request.encode("utf-8"))

    def _step(self) -> None:
        now = time.monotonic()
        wait = min([0.5] + [max(0.0, w.deadline - now) for w in self.workers if w.item is not None])
        for key, _events in self.selector.select(wait):
            if key.data in self.workers and not self._read(key.data):
                self._lost(key.data)
        now = time.monotonic()
        for worker in list(self.workers):
            if worker not in self.workers or self.stopping:
                continue
            if worker.proc.poll() is not None:
                # Exited, yet no end-of-file: a process it started holds the pipe.
                while worker in self.workers and _readable(worker.res) and self._read(worker):
                    pass
                if worker in self.workers:
                    self._lost(worker)
            elif worker.item is not None and now >= worker.deadline:
                self._hung(worker)

    def _read(self, worker: _Worker) -> bool:
        """Handle what the worker sent; False at end-of-file."""
        data = os.read(worker.res, 1 << 16)
        worker.buffer += data
        while b"\n" in worker.buffer and worker in self.workers and not self.stopping:
            line, worker.buffer = worker.buffer.split(b"\n", 1)
            self._answer(worker, json.loads(line.decode("utf-8")))
        return bool(data)

    def _answer(self, worker: _Worker, message: Dict[str, Any]) -> None:
        if message.get("ready"):
            worker.ready = True
            worker.deadline = time.monotonic() + self.timeout
            return
        item, worker.item = worker.item, None
        worker.used += 1
        assert item is not None and item["id"] == message["id"]
        message["alone"] = worker.item_alone
        self.on_answer(item, message)
        if worker.proc.poll() is None:  # else ``_lost`` retires it and starts a replacement
            self._feed(worker)

    def _tail(self, worker: _Worker) -> str:
        """The worker's output since its current module started (at most 64 KiB)."""
        with open(worker.log, "rb") as stream:
            stream.seek(max(worker.log_offset, os.path.getsize(worker.log) - (1 << 16)))
            return stream.read().decode("utf-8", errors="replace")

    def _lost(self, worker: _Worker) -> None:
        """The worker exited: the import it was on crashed it, or the interpreter cannot start."""
        code = worker.proc.wait()
        self._retire(worker, kill=True)
        if not worker.ready:
            tail = self._tail(worker).strip()[-500:]
            raise SmokeError("%s cannot start (exit status %s): %s" % (sys.executable, code, tail))
        if worker.item is not None:
            fatal, frames = fault_frames(self._tail(worker), prefer_current=True)
            if code < 0:
                facts: Dict[str, Any] = {"signal": -code, "signal_name": _signal_name(-code)}
                message = fatal or "killed by %s" % facts["signal_name"]
            else:
                facts = {"exit_status": code}
                message = "the interpreter exited with status %d during the import" % code
            self._report(worker, {"crashed": facts, "message": message, "frames": frames})
        self._replace()

    def _hung(self, worker: _Worker) -> None:
        if not worker.ready:
            self._retire(worker, kill=True)
            raise SmokeError("%s did not start in %g s" % (sys.executable, max(self.timeout, _START_GRACE)))
        size = os.path.getsize(worker.log)
        with contextlib.suppress(OSError):
            os.kill(worker.proc.pid, signal.SIGUSR1)  # faulthandler writes the stack
            limit = time.monotonic() + _KILL_GRACE
            while time.monotonic() < limit and os.path.getsize(worker.log) == size:
                time.sleep(0.02)
            time.sleep(0.05)  # let it finish writing
        self._retire(worker, kill=True)
        _fatal, frames = fault_frames(self._tail(worker), prefer_current=False)
        message = "no answer in %g s" % self.timeout
        self._report(worker, {"timeout": self.timeout, "message": message, "frames": frames})
        self._replace()

    def _report(self, worker: _Worker, answer: Dict[str, Any]) -> None:
        assert worker.item is not None
        answer["seconds"] = round(time.monotonic() - worker.started, 6)
        answer["alone"] = worker.item_alone
        item, worker.item = worker.item, None
        self.on_answer(item, answer)

    def _replace(self) -> None:
        if not self.stopping and (self.pending or self.fresh) and len(self.workers) < self.jobs:
            self._feed(self._spawn())


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


if __name__ == "__main__":
    main(sys.argv[1:])
