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
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import partial
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
    PullAnswer,
    PulledArtifact,
    PullItem,
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
from envlock.lock.head import LockHead, head_of
from envlock.pyvenv import interpreter_paths
from envlock.reporter import Reporter
from envlock.transport import Transport, agent_answer, open_transport, run_agent
from envlock.transport.local import LocalTransport
from envlock.workspace import LockedVenv, Workspace

# What only a real apply needs (fetch, push, drift, the smoke report, bundles) is
# imported where it is used: a no-op apply starts, asks the host, and ends without them.
if TYPE_CHECKING:
    from envlock.airgap import ImportedBundle
    from envlock.drift import VerifyResult
    from envlock.lock.model import Artifact, FileEntry, Lock, Package
    from envlock.smokereport import SmokeResult
    from envlock.store import Store
    from envlock.transfer import Item, PushResult

REMOTE_ARTIFACTS = "~/.cache/envlock/artifacts"


@dataclass(frozen=True, slots=True)
class ApplyOptions:
    dry_run: bool = False
    jobs: int = 0
    allow_smoke_failures: bool = False
    force: bool = False  # replace a venv another tool built
    discard_drift: bool = False  # replace a venv whose files were edited since envlock wrote them
    keep_staging: bool = False  # keep the staged venv after any failure, not only verify and smoke
    bundle: Path | None = None  # apply from an air-gapped bundle (envlock bundle), no network


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
    pulled_files: int = 0  # fetched by the host itself (shared store, indexes)
    pulled_bytes: int = 0
    pull_failures: tuple[str, ...] = ()  # what the host could not fetch (pushed instead), and why
    bytes_sent: int = 0  # everything the controller sent the host: pushed artifacts, pull list, plan
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


@dataclass(frozen=True, slots=True)
class Wanted:
    """An artifact the host needs in its drop: where the host could fetch it itself (``urls``),
    and how the controller gets it to push it instead (``local``: into the store, hash checked)."""

    sha256: str
    name: str  # in the drop: <sha256>/<name>
    size: int | None
    urls: tuple[str, ...]
    local: Callable[[], Path]
    held: bool = False  # the controller already holds a checked copy (its store, its uv)

    def item(self) -> Item:
        from envlock.transfer import Item

        return Item(self.sha256, self.name, self.local())


def _wheel_urls(store: Store, art: Artifact) -> tuple[str, ...]:
    """Where a host can read a wheel: its index URL, or the shared store for store wheels."""
    from envlock.store import wheel_key

    if art.url is not None:
        return (art.url,)
    if art.path is not None and store.remote is not None:
        return (store.remote + wheel_key(art.sha256, art.filename),)
    return ()


def _blob_urls(store: Store, sha: str) -> tuple[str, ...]:
    from envlock.store import blob_key

    return (store.remote + blob_key(sha),) if store.remote is not None else ()


def build_plan(
    profile: HostProfile,
    lock: Lock,
    rows: list[FileEntry],
    store: Store,
    fetch_wheel: Callable[[Package], Path],
    uv: Wanted,
    options: ApplyOptions,
    python: str,
    force: bool = False,
) -> tuple[ApplyPlan, list[Wanted]]:
    from envlock.binary.driver import DRIVER_LIBRARY_PREFIXES
    from envlock.fetch import blob
    from envlock.pyvenv import render_pyvenv, with_home
    from envlock.smokereport import host_has_gpu

    wanted = [uv]
    wheels: list[PlanWheel] = []
    for pkg in lock.packages:
        art = pkg.wheel
        held = store.has_wheel(art.sha256, art.filename)
        get = partial(fetch_wheel, pkg)
        wanted.append(Wanted(art.sha256, art.filename, art.size, _wheel_urls(store, art), get, held))
        wheels.append(
            {
                "name": pkg.name,
                "sha256": art.sha256,
                "path": f"{REMOTE_ARTIFACTS}/{art.sha256}/{art.filename}",
            }
        )
    sources: list[PlanSource] = []
    for pkg in lock.packages:
        if pkg.source_tree is not None:
            sha = pkg.source_tree.sha256
            get = partial(blob, store, sha, f"{pkg.name} source tree")
            held = store.blob_path(sha).is_file()
            wanted.append(
                Wanted(sha, "source.tar.gz", pkg.source_tree.size, _blob_urls(store, sha), get, held)
            )
            sources.append(
                {"path": pkg.source_tree.path, "archive": f"{REMOTE_ARTIFACTS}/{sha}/source.tar.gz"}
            )
    kinds = {row.path: row.kind for row in rows}
    bin_files: dict[str, PlanBinFile] = {}
    for pkg in lock.packages:
        for rel, sha in pkg.scripts.items():
            get = partial(blob, store, sha, f"{pkg.name} {rel}")
            wanted.append(
                Wanted(sha, "blob", None, _blob_urls(store, sha), get, store.blob_path(sha).is_file())
            )
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
        "uv": f"{REMOTE_ARTIFACTS}/{uv.sha256}/uv",
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
    return plan, wanted


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
    with ExitStack() as stack:
        imported = None
        if options.bundle is not None:
            into = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="envlock-bundle-")))
            imported = _from_bundle(workspace, host, options.bundle, into)
            profile = replace(profile, pull="never")  # no network: everything comes from the bundle
        return _apply_host(workspace, profile, options, reporter, imported)


def _from_bundle(workspace: Workspace, host: str, bundle: Path, into: Path) -> ImportedBundle:
    """The bundle, checked and its objects in the store; refused when the workspace holds
    another lock for the host (apply what was reviewed, or say why not).

    The bundle's uv is checked only against the bundle's own listing, and nothing reviewed
    names it: a tampered bundle could carry any program there, and the host runs it. So
    the host gets this controller's own uv (as every other apply ships it) unless the
    bundle's is byte for byte the same."""
    from envlock.airgap import import_bundle
    from envlock.fetch import hash_file
    from envlock.lock.io import read_lock
    from envlock.transfer import uv_binary

    imported = import_bundle(workspace, bundle, host, into)
    own_uv = uv_binary()
    if hash_file(own_uv) != hash_file(imported.uv):
        imported = replace(imported, uv=own_uv)
    mine = workspace.lock_path(host)
    if mine.is_file():
        digest = read_lock(mine, shown=workspace.shown(mine)).digest
        if digest != imported.locked.lock.digest:
            raise EnvlockError(
                f"{bundle}: made from another lock than {workspace.shown(mine)} "
                f"({imported.locked.lock.digest[:19]} vs {digest[:19]}); bundle the current lock again"
            )
    return imported


def _apply_host(
    workspace: Workspace,
    profile: HostProfile,
    options: ApplyOptions,
    reporter: Reporter,
    imported: ImportedBundle | None,
) -> ApplyResult:
    host = profile.name
    # The lock's own digest must match what it says before it is trusted even
    # for the no-op check; the manifest and every tree digest are checked
    # (checked_lock) before anything is changed.
    # (read_lock_head: parsed and checked, or the same bytes were).
    if imported is not None:
        head, shown = head_of(imported.locked.lock), imported.locked.shown
    else:
        head = workspace.read_lock_head(host)
        shown = workspace.shown(workspace.lock_path(host))
    with open_transport(profile) as transport:
        python, state = ask_host(transport, profile, head, shown)
        bytecode = tuple((str(p), str(why)) for p, why in state.get("bytecode") or [])
        if state["matches"]:
            return ApplyResult(host=host, venv=profile.venv, noop=True, dry_run=options.dry_run, changes=())
        if imported is not None:
            lock = imported.locked.lock
        else:
            lock = workspace.read_lock(host)
            if lock.digest != head.digest:
                raise LockError(f"{shown}: changed while envlock apply read it; run it again")
        changes = plan_changes(lock, state["dists"])
        known = _built_from(lock, state)
        refusal = state.get("refused")
        if refusal is not None and not (state.get("foreign") and (known or options.force)):
            raise EnvlockError(f"host {host}: {refusal}")
        locked = imported.locked if imported is not None else workspace.read_locked(host)
        lock, rows = locked.lock, locked.rows()
        drift = _drift(workspace, host, locked) if state["exists"] and _describes(lock, host, state) else None
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
            uv_from=imported.uv if imported is not None else None,
        )  # fmt: skip
        return replace(result, drift=drift, bytecode=bytecode)


def _built_from(lock: Lock, state: AppliedAnswer) -> bool:
    """Is the live venv one this lock describes: the lock last applied there, or the same
    distributions (a venv captured into it)?"""
    from packaging.utils import canonicalize_name

    if state.get("stamp_digest") == lock.digest:
        return True
    live = {(canonicalize_name(n), v) for n, v in state.get("dists") or []}
    return bool(live) and live == {(canonicalize_name(p.name), p.version) for p in lock.packages}


def _describes(lock: Lock, host: str, state: AppliedAnswer) -> bool:
    """Does this lock describe the live venv file for file: the lock last applied there, or the
    lock captured from it? (Another lock's venv differs from it by design, not by hand.)"""
    if state.get("stamp_digest") == lock.digest:
        return True
    return state.get("stamp_digest") is None and lock.role == "reference" and lock.host == host


def _drift(workspace: Workspace, host: str, locked: LockedVenv) -> VerifyResult | None:
    """Hand edits an apply of this lock would discard: verify's findings."""
    from envlock.capture.live import snapshot_live
    from envlock.drift import compare

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
    uv_from: Path | None = None,
) -> ApplyResult:
    from envlock.fetch import VerifiedCache, fetch_one
    from envlock.store import open_store

    store = open_store(workspace)
    verified = VerifiedCache(store)

    def fetch_wheel(pkg: Package) -> Path:
        return fetch_one(store, workspace.locks_dir, pkg, verified).path

    uv = _uv_wanted(workspace, store) if uv_from is None else _uv_at(uv_from)
    plan, wanted = build_plan(profile, lock, rows, store, fetch_wheel, uv, options, python, force)
    plan_bytes = json.dumps(plan).encode()
    try:
        delivered = deliver(transport, profile, wanted, reporter, python)
    finally:
        verified.save()
    reporter.step(f"build, verify, smoke and swap in {profile.venv} on {profile.name}")
    try:
        raw = run_agent(
            transport,
            profile.venv,
            ["apply", *(["--jobs", str(options.jobs)] if options.jobs else [])],
            stdin=_as_stdin(plan_bytes),
            reporter=reporter,
            python=python,
        )
    except EnvlockError as exc:
        raise _what_the_host_reached(profile, python, lock.digest, exc) from exc
    report: ApplyAnswer = agent_answer(transport, raw, "apply")
    result = ApplyResult(
        host=profile.name, venv=profile.venv, noop=False, dry_run=False, changes=changes,
        pushed_files=len(delivered.pushed.sent), pushed_bytes=delivered.pushed.bytes_sent,
        pulled_files=len(delivered.pulled), pulled_bytes=sum(p["size"] for p in delivered.pulled),
        pull_failures=delivered.failures,
        bytes_sent=delivered.pushed.bytes_sent + delivered.request_bytes + len(plan_bytes),
        host_report=report,
    )  # fmt: skip
    if report.get("failed") == "smoke":
        # Explained exactly as `envlock smoke` explains it, against the lock being applied.
        from envlock.smokereport import build_result, host_has_gpu

        lock_shown = workspace.shown(workspace.lock_path(profile.name))
        smoked = build_result(profile, lock, lock_shown, host_has_gpu(profile, lock), report["smoke_report"])
        return replace(result, smoke_failure=smoked, kept_staging=report.get("kept"))
    return result


@dataclass(frozen=True, slots=True)
class Delivered:
    pushed: PushResult
    pulled: tuple[PulledArtifact, ...]
    failures: tuple[str, ...]
    request_bytes: int  # the pull list sent to the host


def deliver(
    transport: Transport, profile: HostProfile, wanted: list[Wanted], reporter: Reporter, python: str
) -> Delivered:
    """Get every wanted artifact into the host's drop: the host fetches what it can from the
    URLs (profile ``pull``), the controller pushes the rest (docs/store.md)."""
    from envlock.fetch import ArtifactError
    from envlock.transfer import push

    # A host on the controller itself gets what the controller holds as hard links (no copy,
    # no network) unless its profile says pull = true; it fetches the rest itself.
    linked = isinstance(transport, LocalTransport) and profile.pull == "auto"
    pullable = [w for w in wanted if w.urls and not (linked and w.held)] if profile.pull != "never" else []
    pulled: list[PulledArtifact] = []
    failures: list[str] = []
    request_bytes = 0
    left = wanted
    if pullable:
        reporter.step(f"{profile.name} fetches {len(pullable)} artifacts itself (sha256 checked)")
        items: list[PullItem] = [
            {"sha256": w.sha256, "name": w.name, "size": w.size, "urls": list(w.urls)} for w in pullable
        ]
        request = json.dumps(items).encode()
        request_bytes = len(request)
        answer: PullAnswer = json.loads(
            run_agent(
                transport, profile.venv, ["pull", "--dir", REMOTE_ARTIFACTS],
                stdin=_as_stdin(request), reporter=reporter, python=python,
            )
        )  # fmt: skip
        pulled = list(answer["pulled"])
        failed = {(f["sha256"], f["name"]) for f in answer["failed"]}
        failures = [f"{f['name']}: {f['error']}" for f in answer["failed"]]
        if failures and profile.pull == "always":
            raise ArtifactError(
                f"host {profile.name} could not fetch {len(failures)} artifact(s) itself and its profile "
                f"says pull = true: {failures[0]}"
            )
        done = {(w.sha256, w.name) for w in pullable} - failed
        left = [w for w in wanted if (w.sha256, w.name) not in done]
    reporter.step(f"fetch and push what {profile.name} lacks")
    pushed = push(transport, profile.venv, _local_items(left, reporter), REMOTE_ARTIFACTS,
                  reporter=reporter, python=python)  # fmt: skip
    return Delivered(pushed, tuple(pulled), tuple(failures), request_bytes)


def _local_items(wanted: list[Wanted], reporter: Reporter) -> list[Item]:
    """The controller's own copies (fetched into the store, sha256 checked)."""
    total = sum(w.size or 0 for w in wanted)
    items, done = [], 0
    for w in wanted:
        items.append(w.item())
        done += w.size or 0
        reporter.progress("fetch", done, total, "")
    return items


def _uv_at(path: Path) -> Wanted:
    from envlock.fetch import hash_file

    return Wanted(hash_file(path), "uv", path.stat().st_size, (), lambda: path, held=True)


def _uv_wanted(workspace: Workspace, store: Store) -> Wanted:
    """The uv the host installs with. With a shared store that takes writes, it is put there once
    (a blob), so hosts fetch it like any artifact instead of the controller sending it."""
    from envlock.fetch import hash_file
    from envlock.store import blob_key
    from envlock.storepush import push_objects
    from envlock.transfer import uv_binary

    path = uv_binary()
    sha = hash_file(path)
    urls: tuple[str, ...] = ()
    target = workspace.config().store.push
    if store.remote is not None and target is not None:
        push_objects(target, [(blob_key(sha), path)])
        urls = (store.remote + blob_key(sha),)
    return Wanted(sha, "uv", path.stat().st_size, urls, lambda: path, held=True)


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
    from envlock.lock.io import read_lock

    profile = load_profile(workspace, host)
    refused = path_refusal(profile.venv, local=False)
    if refused is not None:
        raise EnvlockError(f"{profile.path}: {refused}")
    lock_path = workspace.lock_path(host)
    python = profile.python
    if python is None and lock_path.is_file():
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
