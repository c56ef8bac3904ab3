"""``envlock apply HOST``: make the host's venv exactly what its lock says.

Controller side: check the lock against its manifest (a tampered lock is
refused), ask the host whether the venv already is that lock (no-op), fetch
every artifact into the store with its sha256 checked, push what the host
lacks, and hand the host agent a plan. The agent (``envlock.agent.apply``)
builds a staging venv beside the live one with uv, puts back the exact bin/
bytes, verifies every file against the lock, import-smokes it, and swaps it
in atomically, keeping the old venv for ``envlock rollback``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.agent.protocol import (
    AppliedAnswer,
    ApplyAnswer,
    ApplyPlan,
    ApplyStatus,
    PlanBinFile,
    PlanSource,
    PlanWheel,
    RollbackAnswer,
    RunningPython,
)
from envlock.agent.steps import AFTER_SWAP
from envlock.agent.venvguard import path_refusal
from envlock.errors import (
    AgentProtocolError,
    AgentReportedError,
    EnvlockError,
    ExitCode,
    LockError,
    TransportError,
)
from envlock.hostpython import HostPython, find_base_python
from envlock.hosts import HostProfile, load_profile
from envlock.lock.head import LockHead
from envlock.pyvenv import interpreter_paths
from envlock.reporter import Reporter
from envlock.transport import Transport, agent_answer, open_transport, run_agent
from envlock.workspace import Workspace

# What only a real apply needs (fetch, push, drift, the smoke report) is imported
# where it is used: a no-op apply starts, asks the host, and ends without them.
if TYPE_CHECKING:
    from envlock.drift import VerifyResult
    from envlock.fetch import Fetched
    from envlock.lock.model import FileEntry, Lock
    from envlock.smokereport import SmokeResult
    from envlock.store import Store
    from envlock.transfer import Item

REMOTE_ARTIFACTS = "~/.cache/envlock/artifacts"


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    dry_run: bool = False
    jobs: int = 0
    allow_smoke_failures: bool = False
    force: bool = False  # replace a venv another tool built
    discard_drift: bool = False  # replace a venv whose files were edited since envlock wrote them
    keep_staging: bool = False  # keep the staged venv after any failure, not only verify and smoke


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    name: str
    kind: str  # added | removed | upgrade | downgrade | rebuilt
    before: str | None
    after: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyResult:
    host: str
    venv: str
    noop: bool
    dry_run: bool
    changes: tuple[Change, ...]
    pushed_files: int = 0
    pushed_bytes: int = 0
    host_report: Mapping[str, Any] = field(default_factory=dict)  # the agent's ApplyAnswer
    # Hand edits in the live venv (verify's findings against this very lock);
    # apply refuses to discard them without --discard-drift.
    drift: VerifyResult | None = None
    drift_refused: bool = False
    bytecode: tuple[tuple[str, str], ...] = ()  # damaged .pyc files in the live venv
    smoke_failure: SmokeResult | None = None  # imports failed in the staged venv: nothing swapped
    kept_staging: str | None = None  # where the failed staged venv waits to be examined

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FINDINGS if self.drift_refused or self.smoke_failure else ExitCode.OK


def checked_lock(workspace: Workspace, host: str) -> tuple[Lock, list[FileEntry]]:
    """The lock and its manifest, refused when either was edited after envlock wrote them."""
    locked = workspace.read_locked(host)
    return locked.lock, locked.rows()


def check_digest(lock: Lock, shown: str) -> None:
    """The lock digest must cover what it says (packages, scripts, source trees, pyvenv); cheap."""
    from envlock.lock.digest import check_lock_digest

    check_lock_digest(lock, shown)


def plan_changes(lock: Lock, live: list[tuple[str, str]] | None) -> tuple[Change, ...]:
    from packaging.utils import canonicalize_name

    from envlock.lock.compare import version_kind

    # The live venv reports dist-info names as written (PyYAML, typing_extensions).
    before: dict[str, str] = {canonicalize_name(name): version for name, version in live or []}
    after = {p.name: p.version for p in lock.packages}
    changes = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old == new:
            changes.append(Change(name=name, kind="rebuilt", before=old, after=new))
            continue
        kind = "added" if old is None else "removed" if new is None else version_kind(old, new)
        changes.append(Change(name=name, kind=kind, before=old, after=new))
    return tuple(changes)


def base_python(profile: HostProfile, lock: LockHead) -> str | None:
    """The interpreter the profile or the lock names, without asking the host (None: neither)."""
    if profile.python:
        return profile.python
    paths = interpreter_paths(lock.pyvenv, lock.python)
    return paths[0] if paths else None


def lock_python(transport: Transport, profile: HostProfile, lock: LockHead, shown: str) -> HostPython:
    """The base interpreter that builds the lock's venv on the host (docs/design.md).

    It must be the lock's Python to the patch level, and where the lock names
    its home, that home: pyvenv.cfg and the bin/python links point there.
    """
    version = lock.python
    minor = ".".join(version.split(".")[:2])
    found = find_base_python(
        transport, profile, want=minor, hints=interpreter_paths(lock.pyvenv, version), venv_decides=False
    )
    fix = f"run `envlock lock {profile.name}` to lock for it" if lock.role == "target" else "recapture"
    if found.version != version:
        raise LockError(
            f"{shown}: made for Python {version}, but host {profile.name} has {found.version} "
            f"at {found.path} ({found.how}); {fix}"
        )
    if not _right_home(profile, lock, found.path):
        raise LockError(
            f"{shown}: its interpreter home {lock.pyvenv.get('home')} is not on host {profile.name} "
            f"(found {found.path}, {found.how}); {fix}"
        )
    return found


def _right_home(profile: HostProfile, lock: LockHead, path: str) -> bool:
    """Where the lock names its interpreter's home (and the profile no interpreter), it is there."""
    home = lock.pyvenv.get("home")
    return not (home and profile.python is None and os.path.dirname(path) != home.rstrip("/"))


def ask_host(
    transport: Transport, profile: HostProfile, lock: LockHead, shown: str
) -> tuple[str, AppliedAnswer]:
    """The lock's base interpreter on the host and the host's ``applied`` answer (no-op or not).

    The interpreter that the profile or the lock names is asked first: when
    its own answer shows it is the one ``lock_python`` would pick (the first
    hint at the lock's exact version, in the lock's home), the search is not
    run at all. That saves one interpreter start, and over SSH one session,
    on every apply. Otherwise the search runs (its errors say what it tried)
    and its interpreter is asked.
    """
    args = ["applied", "--venv", profile.venv, "--digest", lock.digest]
    hint = base_python(profile, lock)
    if hint is not None:
        state = _applied_at(transport, profile, args, hint)
        if state is not None and _vouched(state.get("python"), profile, lock):
            return state["python"]["executable"], state
    python = lock_python(transport, profile, lock, shown).path
    # The first answer of the host's agent: a stale one is refused before anything is sent.
    state = agent_answer(transport, run_agent(transport, profile.venv, args, python=python), "applied")
    return python, state


def _applied_at(
    transport: Transport, profile: HostProfile, args: list[str], python: str
) -> AppliedAnswer | None:
    """The agent's ``applied`` answer in ``python``; None when nothing runs there (the search says why)."""
    try:
        raw = run_agent(transport, profile.venv, args, python=python)
    except (TransportError, AgentProtocolError):
        raise  # the host or its agent bundle, not the interpreter: searching would not help
    except EnvlockError:
        return None
    answer: AppliedAnswer = agent_answer(transport, raw, "applied")
    return answer


def _vouched(seen: RunningPython | None, profile: HostProfile, lock: LockHead) -> bool:
    """Is the interpreter that answered the one ``lock_python`` accepts: the lock's exact
    version and, where the lock names a home, in it?"""
    if not isinstance(seen, dict) or not seen.get("executable") or seen.get("version") != lock.python:
        return False
    return _right_home(profile, lock, seen["executable"])


def _uv_binary() -> Path:
    """The uv that envlock itself depends on (shipped to hosts as one file)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return beside
    found = shutil.which("uv")
    if found is None:
        raise EnvlockError("uv not found beside envlock's Python nor on PATH (pip install uv)")
    return Path(found)


def build_plan(
    profile: HostProfile,
    lock: Lock,
    rows: list[FileEntry],
    fetched: list[Fetched],
    store: Store,
    uv_item: Item,
    options: ApplyOptions,
    python: str,
    force: bool = False,
) -> tuple[ApplyPlan, list[Item]]:
    from envlock.binary.driver import DRIVER_LIBRARY_PREFIXES
    from envlock.fetch import blob
    from envlock.pyvenv import render_pyvenv, with_home
    from envlock.smokereport import host_has_gpu
    from envlock.transfer import Item

    items = [uv_item]
    wheels: list[PlanWheel] = []
    for f in fetched:
        art = f.package.wheel
        items.append(Item(art.sha256, art.filename, f.path))
        wheels.append(
            {
                "name": f.package.name,
                "sha256": art.sha256,
                "path": f"{REMOTE_ARTIFACTS}/{art.sha256}/{art.filename}",
            }
        )
    sources: list[PlanSource] = []
    for pkg in lock.packages:
        if pkg.source_tree is not None:
            sha = pkg.source_tree.sha256
            items.append(Item(sha, "source.tar.gz", blob(store, sha, f"{pkg.name} source tree")))
            sources.append(
                {"path": pkg.source_tree.path, "archive": f"{REMOTE_ARTIFACTS}/{sha}/source.tar.gz"}
            )
    kinds = {row.path: row.kind for row in rows}
    bin_files: dict[str, PlanBinFile] = {}
    for pkg in lock.packages:
        for rel, sha in pkg.scripts.items():
            items.append(Item(sha, "blob", blob(store, sha, f"{pkg.name} {rel}")))
            bin_files[rel] = {"path": f"{REMOTE_ARTIFACTS}/{sha}/blob", "executable": kinds.get(rel) == "x"}
    plan: ApplyPlan = {
        "venv": profile.venv,
        "digest": lock.digest,
        "python_version": lock.interpreter.version,
        "base_python": python,
        "creator": "uv" if "version_info" in lock.pyvenv else "venv",
        "pyvenv_cfg": render_pyvenv(with_home(lock.pyvenv, python)).decode("utf-8"),
        "prompt": _prompt(lock.pyvenv),
        "keep_uv_lock": any(r.owner == ":venv" and r.path == ".lock" for r in rows),
        # Bookkeeping as the lock records it, so a capture reads the lock back.
        "dists": [
            {
                "name": p.name,
                "version": p.version,
                "installer": p.installer,
                "requested": p.requested,
                "direct_url": dict(p.direct_url) if p.direct_url is not None else None,
            }
            for p in lock.packages
        ],
        "uv": f"{REMOTE_ARTIFACTS}/{uv_item.sha256}/uv",
        "wheels": wheels,
        "bin_files": bin_files,
        "sources": sources,
        "source_venv": lock.venv,
        "expected": [(r.path, r.sha256, r.size, r.kind) for r in rows if not r.owner.startswith(":")],
        "smoke_modules": sorted({m for p in lock.packages for m in p.top_level}),
        "smoke_checks": list(profile.smoke_checks),
        # A host without a GPU skips modules that only lack the driver's libraries.
        "smoke_skip_missing": [] if host_has_gpu(profile, lock) else list(DRIVER_LIBRARY_PREFIXES),
        "allow_smoke_failures": options.allow_smoke_failures,
        "force": force,
        "keep_staging": options.keep_staging,
    }
    return plan, items


def apply(
    workspace: Workspace,
    host: str,
    options: ApplyOptions | None = None,
    reporter: Reporter | None = None,
) -> ApplyResult:
    options = options or ApplyOptions()
    reporter = reporter or Reporter()
    profile = load_profile(workspace, host)
    refused = path_refusal(profile.venv, local=False)
    if refused is not None:
        raise EnvlockError(f"{profile.path}: {refused}")
    # The lock's own digest must match what it says before it is trusted even
    # for the no-op check (read_lock_head: parsed and checked, or the same bytes
    # were); the manifest and every tree digest are checked (checked_lock)
    # before anything is changed.
    head = workspace.read_lock_head(host)
    shown = workspace.shown(workspace.lock_path(host))
    with open_transport(profile) as transport:
        python, state = ask_host(transport, profile, head, shown)
        bytecode = tuple((str(p), str(why)) for p, why in state.get("bytecode") or [])
        if state["matches"]:
            return ApplyResult(host=host, venv=profile.venv, noop=True, dry_run=options.dry_run, changes=())
        lock = workspace.read_lock(host)
        if lock.digest != head.digest:
            raise LockError(f"{shown}: changed while envlock apply read it; run it again")
        changes = plan_changes(lock, state["dists"])
        known = _built_from(lock, state)
        refusal = state.get("refused")
        if refusal is not None and not (state.get("foreign") and (known or options.force)):
            raise EnvlockError(f"host {host}: {refusal}")
        lock, rows = checked_lock(workspace, host)
        drift = _drift(workspace, host, lock) if state["exists"] and _describes(lock, host, state) else None
        if drift is not None and not options.discard_drift:
            return ApplyResult(
                host=host, venv=profile.venv, noop=False, dry_run=options.dry_run, changes=changes,
                drift=drift, drift_refused=not options.dry_run, bytecode=bytecode,
            )  # fmt: skip
        if options.dry_run:
            return ApplyResult(
                host=host, venv=profile.venv, noop=False, dry_run=True, changes=changes, drift=drift,
                bytecode=bytecode,
            )  # fmt: skip
        force = bool(state.get("foreign")) and (known or options.force)
        result = _apply(
            workspace, profile, lock, rows, transport,
            python=python, changes=changes, options=options, reporter=reporter, force=force,
        )  # fmt: skip
        return replace(result, drift=drift, bytecode=bytecode)


def _built_from(lock: Lock, state: AppliedAnswer) -> bool:
    """Is the live venv one this lock describes: the lock last applied there, or the same
    distributions (a venv captured into it)?"""
    if state.get("stamp_digest") == lock.digest:
        return True
    from packaging.utils import canonicalize_name

    live = {(canonicalize_name(n), v) for n, v in state.get("dists") or []}
    return bool(live) and live == {(canonicalize_name(p.name), p.version) for p in lock.packages}


def _describes(lock: Lock, host: str, state: AppliedAnswer) -> bool:
    """Does this lock describe the live venv file for file: the lock last applied there, or the
    lock captured from it? (Another lock's venv differs from it by design, not by hand.)"""
    if state.get("stamp_digest") == lock.digest:
        return True
    return state.get("stamp_digest") is None and lock.role == "reference" and lock.host == host


def _drift(workspace: Workspace, host: str, lock: Lock) -> VerifyResult | None:
    """Hand edits an apply of this lock would discard: verify's findings."""
    from envlock.capture.live import snapshot_live
    from envlock.drift import compare

    locked = workspace.read_locked(host)
    found = compare(locked.lock, locked.manifest, snapshot_live(workspace, host), workspace.lock_path(host))
    # Damaged bytecode is not a hand edit: the plan lists it, the apply rebuilds it.
    return found if found.files or found.dists else None


def _apply(
    workspace: Workspace,
    profile: HostProfile,
    lock: Lock,
    rows: list[FileEntry],
    transport: Transport,
    *,
    python: str,
    changes: tuple[Change, ...],
    options: ApplyOptions,
    reporter: Reporter,
    force: bool,
) -> ApplyResult:
    from envlock.fetch import fetch_all, hash_file
    from envlock.store import Store
    from envlock.transfer import Item, push

    store = Store(workspace.store_dir)
    reporter.step(f"fetch {len(lock.packages)} artifacts (sha256 checked)")

    def fetch_progress(done: int, total: int) -> None:
        reporter.progress("fetch", done, total, "")

    fetched = fetch_all(store, workspace.locks_dir, lock.packages, fetch_progress)
    uv = _uv_binary()
    uv_item = Item(hash_file(uv), "uv", uv)
    plan, items = build_plan(profile, lock, rows, fetched, store, uv_item, options, python, force)
    reporter.step(f"push what {profile.name} lacks")
    pushed = push(transport, profile.venv, items, REMOTE_ARTIFACTS, reporter=reporter, python=python)
    reporter.step(f"build, verify, smoke and swap in {profile.venv} on {profile.name}")
    try:
        raw = run_agent(
            transport,
            profile.venv,
            ["apply", *(["--jobs", str(options.jobs)] if options.jobs else [])],
            stdin=_as_stdin(json.dumps(plan).encode()),
            reporter=reporter,
            python=python,
        )
    except EnvlockError as exc:
        raise _what_the_host_reached(profile, python, lock.digest, exc) from exc
    report: ApplyAnswer = agent_answer(transport, raw, "apply")
    result = ApplyResult(
        host=profile.name, venv=profile.venv, noop=False, dry_run=False, changes=changes,
        pushed_files=len(pushed.sent), pushed_bytes=pushed.bytes_sent, host_report=report,
    )  # fmt: skip
    if report.get("failed") == "smoke":
        # Explained exactly as `envlock smoke` explains it, against the lock being applied.
        from envlock.smokereport import build_result, host_has_gpu

        lock_shown = workspace.shown(workspace.lock_path(profile.name))
        smoked = build_result(profile, lock, lock_shown, host_has_gpu(profile, lock), report["smoke_report"])
        return replace(result, smoke_failure=smoked, kept_staging=report.get("kept"))
    return result


def _prompt(pyvenv: Mapping[str, str]) -> str | None:
    """A prompt given to the reference's creator (``python -m venv`` writes it quoted)."""
    value = pyvenv.get("prompt")
    if value is None:
        return None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


STATUS_POLLS = 60  # seconds to wait for an apply still running on the host after its session was cut


def _what_the_host_reached(
    profile: HostProfile, python: str, digest: str, error: EnvlockError
) -> EnvlockError:
    """The apply's session ended without an answer: ask the host (a new connection) how far
    the apply got, so the message says whether the venv was swapped in."""
    if isinstance(error, AgentReportedError):
        return error  # the agent said why itself, and where the venvs stand
    cause = str(error)  # a killed agent is already named by its signal (transport.describe_exit)
    if isinstance(error, TransportError):
        detail = cause.split(": ", 2)[-1]
        shown = "" if detail == "ssh failed" else f" ({detail})"
        cause = f"host {profile.name}: the connection was lost during the apply{shown}"
    try:
        state = _apply_status(profile, python)
        for _ in range(STATUS_POLLS):
            if state.get("running") is None:
                break
            time.sleep(1)
            state = _apply_status(profile, python)
    except EnvlockError as exc:
        return type(error)(f"{cause}; the host could not be asked how far the apply got: {exc}")
    return type(error)(f"{cause}; on the host: {_describe_status(state, digest, profile)}")


def _apply_status(profile: HostProfile, python: str) -> ApplyStatus:
    with open_transport(profile) as transport:
        state: ApplyStatus = agent_answer(
            transport,
            run_agent(transport, profile.venv, ["apply-status", "--venv", profile.venv], python=python),
            "apply-status",
        )
    return state


def _describe_status(state: ApplyStatus, digest: str, profile: HostProfile) -> str:
    again = f"`envlock apply {profile.name}` again finishes or cleans up"
    if state.get("running") is not None:
        return f"the apply is still running (pid {state['running']}); {again} once it ends"
    step = state.get("step")
    if step is None:
        if state.get("stamp_digest") == digest:
            return f"the apply finished: the new venv is swapped in at {profile.venv}"
        return f"the apply stopped before the swap: the live venv {profile.venv} is untouched"
    if step in ("stage", "verify") or (step == "swap" and not state.get("swapped")):
        untouched = f"the live venv {profile.venv} is untouched"
        return f"the apply stopped at {step}, before the swap: {untouched}; {again}"
    return (
        f"the new venv is swapped in at {profile.venv}, the apply stopped at {step} "
        f"({AFTER_SWAP.get(str(step), '?')}); {again}"
    )


def _as_stdin(data: bytes) -> Any:
    """A real file for the agent's stdin (a pipe would need a writer thread)."""
    handle = tempfile.TemporaryFile()  # noqa: SIM115 - the agent process reads and closes it
    handle.write(data)
    handle.seek(0)
    return handle


def rollback(workspace: Workspace, host: str, *, again: bool = False) -> RollbackAnswer:
    """Swap the previous venv back in; ``again``: also when the last change was a rollback.

    The agent's report: ``venv``, ``restored_from``, and ``restored`` /
    ``replaced`` (``{"digest", "at"}`` of the lock each venv was applied
    from, None when envlock does not know it), ``again``.
    """
    profile = load_profile(workspace, host)
    refused = path_refusal(profile.venv, local=False)
    if refused is not None:
        raise EnvlockError(f"{profile.path}: {refused}")
    lock_path = workspace.lock_path(host)
    python = profile.python
    if python is None and lock_path.is_file():
        from envlock.lock.head import head_of
        from envlock.lock.io import read_lock

        python = base_python(profile, head_of(read_lock(lock_path)))
    with open_transport(profile) as transport:
        report: RollbackAnswer = json.loads(
            run_agent(
                transport,
                profile.venv,
                ["rollback", "--venv", profile.venv, *(["--again"] if again else [])],
                python=python,
            )
        )
    return report
