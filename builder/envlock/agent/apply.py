"""Host side of ``envlock apply``: stage, install, put back bin/, verify, smoke, swap.

One agent process does it all while holding an exclusive ``flock`` on
``<venv>.envlock/lock``, so two applies never interleave, and a ``kill -9``
releases the lock with the process. The live venv is touched only by the
swap, an atomic ``renameat2(RENAME_EXCHANGE)``: at every instant ``<venv>``
is either the old venv or the new, verified one.

Every step is journaled in ``<venv>.envlock/journal.json`` before it starts
(``envlock.agent.journal``: where the state lives, the fault hooks), so the
next apply or rollback finishes or undoes a killed one
(``envlock.agent.swap``: the swap and its recovery). What apply may replace
at all is ``envlock.agent.venvguard``'s to say, checked before anything is
written beside the venv. The no-op stamp is ``envlock.agent.stamp``.
"""

from __future__ import annotations

import base64
import csv
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Dict, List, Optional, Set, Tuple

from envlock.agent import journal
from envlock.agent.hashing import CacheEntry, StatCache
from envlock.agent.journal import JournalError, StateDir, fault, ident
from envlock.agent.layout import BOOKKEEPING, is_bookkeeping, is_bytecode, is_scaffold, relocate
from envlock.agent.pathguard import check_script_key, safe_join
from envlock.agent.protocol import (
    AGENT_PROTOCOL,
    ApplyAnswer,
    ApplyPlan,
    ApplyStatus,
    ProgressEvent,
    RestoredSource,
    RollbackAnswer,
    SmokeReport,
    SmokeSummary,
)
from envlock.agent.snapshot import default_cache_path, find_site_packages, inventory
from envlock.agent.stamp import applied, read_stamp, stamp_matches
from envlock.agent.steps import AFTER_SWAP
from envlock.agent.swap import SwapError, recover, swap_in
from envlock.agent.venvguard import path_refusal, replace_refusal

__all__ = ["ApplyError", "applied", "apply_status", "rollback", "run_apply"]


class ApplyError(Exception):
    """Apply stopped; the message names the step and where the live venv stands."""


def sibling(venv: str, suffix: str) -> str:
    return venv.rstrip("/") + suffix


def progress(phase: str, done: int, total: int, detail: str = "") -> None:
    line: ProgressEvent = {"phase": phase, "done": done, "total": total, "detail": detail}
    sys.stderr.write("@progress " + json.dumps(line) + "\n")
    sys.stderr.flush()


# ------------------------------------------------------------------ state and locking


def open_state(venv: str, force: bool) -> StateDir:
    """The venv's state directory, created only once ``venv`` passed the guard."""
    refused = path_refusal(venv) or replace_refusal(venv, StateDir(venv).root, force)
    if refused is not None:
        raise ApplyError(refused)
    state = StateDir(venv)
    state.create()
    return state


def take_lock(state: StateDir) -> IO[str]:
    handle = open(state.lock, "a+")  # noqa: SIM115 - held open for the whole apply, closed by the caller
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise ApplyError(
            "another envlock apply is running on %s (pid %s holds %s)" % (state.venv, holder, state.lock)
        ) from exc
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _recover(state: StateDir) -> Optional[str]:
    try:
        return recover(state)
    except (JournalError, SwapError) as exc:
        raise ApplyError("recovering an interrupted apply: %s" % exc) from exc


def _migrate_legacy(state: StateDir) -> Optional[str]:
    """Envlock before the state directory kept ``<venv>.envlock-previous`` beside the venv."""
    legacy = state.venv + ".envlock-previous"
    stamp = state.venv + ".envlock-applied.json"
    if os.path.lexists(stamp):
        os.unlink(stamp)
    if os.path.isdir(legacy) and not os.path.islink(legacy) and not os.path.lexists(state.previous):
        os.rename(legacy, state.previous)
        return "moved the rollback copy %s to %s" % (legacy, state.previous)
    return None


# ------------------------------------------------------------------ status


def apply_status(venv: str) -> ApplyStatus:
    """Where the last apply of ``venv`` stands, for a controller whose session was cut.

    Read only: ``running`` is the pid of an apply or rollback holding the
    lock (probed with a shared lock, released at once); ``step`` is the
    unfinished journal's; ``swapped`` whether the live venv is the one that
    apply built; ``stamp_digest`` the lock last applied completely.
    """
    refused = path_refusal(venv)
    if refused is not None:
        raise ApplyError(refused)
    state = StateDir(venv)
    result: ApplyStatus = {
        "protocol": AGENT_PROTOCOL,
        "running": None,
        "step": None,
        "swapped": None,
        "stamp_digest": None,
    }
    if not os.path.isdir(state.root):
        return result
    if os.path.isfile(state.lock):
        with open(state.lock) as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                result["running"] = handle.read().strip() or "?"
    entry = journal.read(state)
    if entry is not None:
        result["step"] = entry["step"]
        result["swapped"] = entry.get("new") is not None and ident(venv) == entry["new"]
    stamp = read_stamp(state)
    result["stamp_digest"] = stamp.get("digest") if stamp else None
    return result


# ------------------------------------------------------------------ rollback


def rollback(venv: str, again: bool = False) -> RollbackAnswer:
    refused = path_refusal(venv)
    if refused is not None:
        raise ApplyError(refused)
    state = StateDir(venv)
    if not os.path.isdir(state.root) and not os.path.isdir(venv + ".envlock-previous"):
        raise ApplyError("no previous venv to roll back to (%s does not exist)" % state.previous)
    state.create()
    handle = take_lock(state)
    try:
        _migrate_legacy(state)
        recovered = _recover(state)
        from envlock.agent.swap import rollback as swap_back

        try:
            report = swap_back(state, again=again)
        except SwapError as exc:
            raise ApplyError(str(exc)) from exc
        report["recovered"] = recovered
        return report
    finally:
        handle.close()


# ------------------------------------------------------------------ staging


def _run(argv: List[str], step: str, timeout: int = 3600) -> None:
    env = dict(os.environ, UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    try:
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ApplyError("%s: %s" % (step, exc)) from exc
    if proc.returncode != 0:
        raise ApplyError(
            "%s failed: %s" % (step, _cause(proc.stdout.decode("utf-8", "replace"), proc.returncode))
        )


def _cause(output: str, returncode: int) -> str:
    """What failed and why, from a tool's error output.

    uv nests its causes under the error, as ``Caused by:`` lines (older
    releases) or lowercase ``cause:`` lines, deepest last: ``error: Failed to
    install: x.whl`` / ``cause: Failed to copy ...`` / ``cause: ... No space
    left on device (os error 28)``. The error says what, the deepest cause
    why; both are kept. Without either, the last line; without output, how
    the process ended (a signal, say).
    """
    from envlock.agent import describe_exit

    # uv wraps messages to the terminal width (COLUMNS): a continuation is
    # indented and follows an error/cause line without a prefix of its own.
    lines = []  # type: List[str]
    heads = ("error", "cause:", "caused by:", "hint:", "warning:", "help:")
    for raw in output.splitlines():
        line = raw.strip()
        if not line:
            continue
        continues = raw[:1].isspace() and not line.lower().startswith(heads)
        if continues and lines and lines[-1].lower().startswith(("error", "cause:", "caused by:")):
            lines[-1] += " " + line
        else:
            lines.append(line)
    causes = [line.split(":", 1)[1].strip() for line in lines if line.startswith(("Caused by:", "cause:"))]
    errors = [line for line in lines if line.lower().startswith("error")]
    what = errors[-1].split(":", 1)[1].strip() if errors and ":" in errors[-1] else (errors or [""])[-1]
    if causes:
        return "%s: %s" % (what, causes[-1]) if what else causes[-1]
    if what:
        return what
    if returncode < 0 or not lines:
        return describe_exit(returncode)
    return lines[-1]


def check_space(venv: str, needed: int) -> None:
    """Refuse early when the staging venv cannot fit beside the live one."""
    parent = os.path.dirname(venv.rstrip("/")) or "/"
    stat = os.statvfs(parent)
    free = stat.f_bavail * stat.f_frsize
    margin = needed // 10 + (16 << 20)  # venv scaffold, metadata, filesystem overhead
    if free < needed + margin:
        raise ApplyError(
            "not enough space in %s: the new venv needs about %d MB, %d MB are free"
            % (parent, (needed + margin) >> 20, free >> 20)
        )


def create_staging(plan: ApplyPlan, staging: str) -> None:
    base = plan["base_python"]
    if not os.path.exists(base):
        raise ApplyError("no Python %s at %s (the lock's pyvenv home)" % (plan["python_version"], base))
    # `python -m venv` bakes the directory's name into the activate scripts as
    # the prompt: give it the final name (or the reference's own --prompt).
    # uv's scripts read the name from $VIRTUAL_ENV when they run.
    name = plan.get("prompt") or (
        os.path.basename(plan["venv"].rstrip("/")) if plan["creator"] != "uv" else None
    )
    prompt = ["--prompt", name] if name else []
    if plan["creator"] == "uv":
        _run([plan["uv"], "venv", "-q", *prompt, "--python", base, staging], "creating the staging venv")
    else:
        _run([base, "-m", "venv", "--without-pip", *prompt, staging], "creating the staging venv")


UV_CACHE = "~/.cache/envlock/uv"


def install_mode(state: StateDir) -> Tuple[str, str, Optional[str]]:
    """uv's cache directory and link mode for this venv, and why not clone when not.

    Clone (copy-on-write reflinks) when the venv's filesystem has them: from
    uv's usual cache when it is on that filesystem, else from a cache of the
    venv's own in its state directory (a clone cannot cross filesystems; the
    files it holds are shared with the venv, not copies of it). Copy
    everywhere else (``envlock.agent.reflink`` says why never hard links).
    """
    from envlock.agent.reflink import clone_probe

    cache = os.path.expanduser(UV_CACHE)
    os.makedirs(cache, exist_ok=True)
    why = clone_probe(cache, state.root)
    if why is None:
        return cache, "clone", None
    own = os.path.join(state.root, "uv-cache")
    if os.stat(cache).st_dev != os.stat(state.root).st_dev and clone_probe(state.root, state.root) is None:
        os.makedirs(own, exist_ok=True)
        return own, "clone", None
    return cache, "copy", why


def install(plan: ApplyPlan, staging: str) -> Tuple[str, Optional[str]]:
    """Install the plan's wheels into ``staging``; returns the link mode used and why not clone."""
    state = StateDir(plan["venv"])
    cache, mode, why = install_mode(state)
    lines = []
    for wheel in plan["wheels"]:
        path = os.path.expanduser(wheel["path"])
        lines.append("%s @ file://%s --hash=sha256:%s" % (wheel["name"], path, wheel["sha256"]))
    requirements = os.path.join(state.root, "requirements.txt")
    with open(requirements, "w") as out:
        out.write("\n".join(lines) + "\n")
    try:
        _run(
            [
                plan["uv"], "pip", "install", "--python", os.path.join(staging, "bin", "python"),
                "--offline", "--no-index", "--no-deps", "--require-hashes", "--link-mode", mode,
                "--cache-dir", cache, "-q", "-r", requirements,
            ],
            "installing %d wheels" % len(lines),
        )  # fmt: skip
    finally:
        os.unlink(requirements)
    return mode, why


def place_bin_files(plan: ApplyPlan, staging: str) -> int:
    """Put back bin/ files byte for byte; repoint every other script at the final path."""
    venv = plan["venv"]
    placed = 0
    for rel, spec in sorted(plan["bin_files"].items()):
        with open(os.path.expanduser(spec["path"]), "rb") as blob:
            data = relocate(blob.read(), plan["source_venv"], venv)
        # The lock's key is checked on the controller too; the host checks again
        # (bin/<name>, no symlink on the way) before writing anything.
        check_script_key(rel, "bin file %r" % rel)
        target = safe_join(staging, rel, "bin file %r" % rel)
        tmp = target + ".envlock-tmp"
        with open(tmp, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o755 if spec["executable"] else 0o644)
        os.replace(tmp, target)
        placed += 1
    bindir = os.path.join(staging, "bin")
    for name in os.listdir(bindir):
        path = os.path.join(bindir, name)
        rel = "bin/" + name
        if rel in plan["bin_files"] or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as stream:
            data = stream.read()
        moved = unstage(data, staging, venv) if is_scaffold(rel) else relocate(data, staging, venv)
        if moved != data:
            mode = os.stat(path).st_mode
            with open(path, "wb") as out:
                out.write(moved)
            os.chmod(path, mode & 0o7777)
    return placed


def finish_payload(plan: ApplyPlan, staging: str) -> int:
    """After the install: bin/ bytes, pyvenv.cfg and bookkeeping as the lock says."""
    placed = place_bin_files(plan, staging)
    finish_scaffold(plan, staging)
    site = find_site_packages(staging, tuple(int(x) for x in plan["python_version"].split(".")[:2]))  # type: ignore[arg-type]
    settle_bookkeeping(plan, staging, site)
    return placed


def unstage(data: bytes, staging: str, venv: str) -> bytes:
    """A creator's file written for the staging path, as if written for ``venv``
    (the prompt is given to the creator: see create_staging)."""
    return data.replace(staging.encode(), venv.encode())


def finish_scaffold(plan: ApplyPlan, staging: str) -> None:
    """pyvenv.cfg exactly as the lock says; no installer leftovers the lock lacks."""
    cfg = plan.get("pyvenv_cfg")
    if cfg is not None:
        _write_bytes(os.path.join(staging, "pyvenv.cfg"), cfg.encode("utf-8"))
    uv_lock = os.path.join(staging, ".lock")  # uv's install lock, empty
    if not plan.get("keep_uv_lock") and os.path.isfile(uv_lock):
        os.unlink(uv_lock)


def _write_bytes(path: str, data: bytes) -> None:
    tmp = path + ".envlock-tmp"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def settle_bookkeeping(plan: ApplyPlan, staging: str, site: str) -> None:
    changed = {os.path.normpath(os.path.join(staging, rel)) for rel in plan["bin_files"]}
    _settle(plan, staging, site, changed)


def _settle(plan: ApplyPlan, staging: str, site: str, changed: Set[str]) -> None:
    """INSTALLER, REQUESTED and direct_url.json as the lock records them, and RECORD true.

    uv installs every wheel from a local file, so it would write a
    direct_url.json pointing into envlock's artifact cache, "uv" as the
    installer and REQUESTED everywhere, and RECORD rows for the entry-point
    scripts it generated, which place_bin_files replaced. A capture of the
    applied venv must read back the lock it came from (docs/lock-format.md,
    "Round trip"), so these are set to the lock's facts and RECORD is
    rewritten to hash what is really there.
    """
    site_abs = os.path.join(staging, site)
    infos = _dist_infos(site_abs)
    for dist in plan.get("dists", []):
        info = infos.get((_canonical(dist["name"]), dist["version"]))
        if info is None:
            raise ApplyError("%s %s: no .dist-info after install" % (dist["name"], dist["version"]))
        base = os.path.join(site_abs, info)
        _set_file(os.path.join(base, "INSTALLER"), _text_or_none(dist.get("installer")))
        _set_file(os.path.join(base, "REQUESTED"), b"" if dist.get("requested") else None)
        direct = dist.get("direct_url")
        _set_file(
            os.path.join(base, "direct_url.json"),
            json.dumps(direct, sort_keys=True).encode("utf-8") if direct is not None else None,
        )
        _rewrite_record(site_abs, info, changed)


def _text_or_none(value: Optional[str]) -> Optional[bytes]:
    return None if value is None else (value + "\n").encode("utf-8")


def _set_file(path: str, data: Optional[bytes]) -> None:
    if data is None:
        if os.path.lexists(path):
            os.unlink(path)
    else:
        _write_bytes(path, data)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_infos(site_abs: str) -> Dict[Tuple[str, str], str]:
    found = {}
    for entry in os.listdir(site_abs):
        if entry.endswith(".dist-info"):
            name, _, version = entry[: -len(".dist-info")].rpartition("-")
            found[(_canonical(name), version)] = entry
    return found


def _record_hash(path: str) -> Tuple[str, int]:
    with open(path, "rb") as stream:
        data = stream.read()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "sha256=" + digest, len(data)


def _rewrite_record(site_abs: str, info: str, changed: Set[str]) -> None:
    """RECORD rows of ``changed`` files (absolute paths) and of bookkeeping rehashed."""
    record = os.path.join(site_abs, info, "RECORD")
    with open(record, newline="") as stream:
        rows = [row for row in csv.reader(stream) if row]
    listed = {row[0] for row in rows}
    for name in ("INSTALLER", "REQUESTED", "direct_url.json"):
        rel = "%s/%s" % (info, name)
        if rel not in listed and os.path.exists(os.path.join(site_abs, rel)):
            rows.append([rel, "", ""])
    out = []
    for row in rows:
        rel = row[0]
        path = os.path.normpath(os.path.join(site_abs, rel))
        if rel == "%s/RECORD" % info:
            out.append([rel, "", ""])
        elif not os.path.lexists(path):
            if rel.startswith(info + "/") and rel.split("/", 1)[1] in BOOKKEEPING:
                continue  # removed above: the lock does not have it
            out.append(row)
        elif path in changed or (rel.startswith(info + "/") and rel.split("/", 1)[1] in BOOKKEEPING):
            digest, size = _record_hash(path)
            out.append([rel, digest, str(size)])
        else:
            out.append(row)
    tmp = record + ".envlock-tmp"
    with open(tmp, "w", newline="") as stream:
        csv.writer(stream, lineterminator="\n").writerows(out)
    os.replace(tmp, record)


def restore_sources(plan: ApplyPlan) -> List[RestoredSource]:
    """Put editable installs' source trees where their ``.pth`` files point, when missing.

    An existing directory is somebody's working copy: it is left alone.
    """
    from envlock.agent.sources import SourceError, unpack_source

    done: List[RestoredSource] = []
    for source in plan.get("sources", []):
        path = source["path"]
        if os.path.exists(path):
            done.append({"path": path, "action": "kept"})
            continue
        try:
            unpack_source(os.path.expanduser(source["archive"]), path)
        except (SourceError, OSError) as exc:
            raise ApplyError(
                "cannot restore the source of an editable install at %s: %s" % (path, exc)
            ) from exc
        done.append({"path": path, "action": "restored"})
    return done


# ------------------------------------------------------------------ verifying


def verify_staging(plan: ApplyPlan, staging: str, jobs: int) -> Tuple[int, Dict[str, CacheEntry]]:
    """Every expected payload file present with the locked bytes; nothing else.

    Returns the count of files verified and the stat-cache entries of the
    staged venv's files.
    """
    site = find_site_packages(staging, tuple(int(x) for x in plan["python_version"].split(".")[:2]))  # type: ignore[arg-type]
    expected: Dict[str, List[Any]] = {}
    for path, sha, size, kind in plan["expected"]:
        rel = site + path[len("site-packages") :] if path.startswith("site-packages/") else path
        expected[rel] = [sha, size, kind]
    # ELF facts too: these entries become the live venv's stat cache after
    # the swap, so the first capture or verify after an apply is a warm one.
    found, _stats, entries = inventory(staging, [], jobs=jobs, use_cache=False, read_elf=True)
    normalized = found["bin_normalized"]
    problems: List[str] = []
    seen = set()
    for rel, sha, size, executable in found["files"]:
        if is_bytecode(rel) or is_bookkeeping(rel) or is_scaffold(rel):
            continue
        if rel in normalized:
            sha, size = normalized[rel]
        want = expected.get(rel)
        if want is None:
            problems.append("extra file %s" % rel)
            continue
        seen.add(rel)
        kind = "x" if executable else "f"
        if [sha, size, kind] != want:
            problems.append(
                "%s: got %s %d %s, locked %s %d %s"
                % (rel, sha[:12], size, kind, want[0][:12], want[1], want[2])
            )
    for rel, target in found["links"]:
        if rel in expected:
            seen.add(rel)
            if expected[rel][0] != target:
                problems.append("%s: link to %s, locked %s" % (rel, target, expected[rel][0]))
    for rel in sorted(set(expected) - seen):
        problems.append("missing %s" % rel)
    problems.extend(_scaffold_problems(plan, staging))
    if problems:
        more = " (and %d more)" % (len(problems) - 3) if len(problems) > 3 else ""
        raise ApplyError("staged venv differs from the lock: %s%s" % ("; ".join(problems[:3]), more))
    return len(seen), entries


def _scaffold_problems(plan: ApplyPlan, staging: str) -> List[str]:
    """pyvenv.cfg is the lock's; no creator file still names the staging directory."""
    problems = []
    cfg = plan.get("pyvenv_cfg")
    if cfg is not None:
        with open(os.path.join(staging, "pyvenv.cfg"), "rb") as stream:
            if stream.read() != cfg.encode("utf-8"):
                problems.append("pyvenv.cfg differs from the lock's")
    if plan.get("venv") in (None, staging):
        return problems  # verifying a venv in place: nothing to leak
    needle = staging.encode()
    bindir = os.path.join(staging, "bin")
    for name in sorted(os.listdir(bindir)):
        path = os.path.join(bindir, name)
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 1 << 20:
            continue
        with open(path, "rb") as stream:
            if needle in stream.read():
                problems.append("bin/%s names the staging directory" % name)
    return problems


# ------------------------------------------------------------------ smoke


class SmokeFailed(Exception):
    """Imports failed in the staged venv; carries the agent's full smoke report."""

    def __init__(self, report: SmokeReport) -> None:
        super().__init__("smoke failed")
        self.report = report


def smoke(plan: ApplyPlan, staging: str) -> Tuple[SmokeSummary, SmokeReport]:
    """Import every module of the staged venv and run the profile's checks.

    The same parallel, crash- and hang-proof smoke as ``envlock smoke``
    (``envlock.agent.smoke``), run in the staged venv's interpreter with
    ``-B``: bytecode the imports would write is left out of the venv that is
    swapped in (a full disk truncates it, and nothing verifies it there).
    """
    from envlock.agent.smoke import SmokeError, run_smoke

    fault("before", "smoke")
    try:
        report = run_smoke(
            staging,
            plan["smoke_modules"],
            plan["smoke_checks"],
            timeout=plan.get("smoke_timeout", 60.0),
            from_venv=True,
            skip_missing=plan.get("smoke_skip_missing", []),
            python=os.path.join(staging, "bin", "python"),
            write_bytecode=False,
        )
    except SmokeError as exc:
        raise ApplyError("smoke: %s" % exc) from exc
    fault("after", "smoke")
    results = report["results"]
    failed = [r for r in results if r["status"] == "failed"]
    summary: SmokeSummary = {
        "ok": sum(1 for r in results if r["status"] == "ok"),
        "skipped": sum(1 for r in results if r["status"] == "skipped"),
        "failed": failed,
        "seconds": report["seconds"],
    }
    return summary, report


def _catching(fn: Any, *args: Any) -> Tuple[Any, Optional[BaseException]]:
    try:
        return fn(*args), None
    except BaseException as exc:
        return None, exc


def _unwrap(box: Tuple[Any, Optional[BaseException]]) -> Any:
    value, error = box
    if error is not None:
        raise error
    return value


# ------------------------------------------------------------------ the whole apply


def run_apply(plan: ApplyPlan, jobs: int) -> ApplyAnswer:
    """Build, check and swap in the plan's venv; journaled, so a kill at any point is recovered."""
    venv = plan["venv"]
    state = open_state(venv, force=bool(plan.get("force")))
    started = time.time()
    plan["uv"] = os.path.expanduser(plan["uv"])
    if os.path.isfile(plan["uv"]):
        os.chmod(plan["uv"], 0o755)  # it arrives as plain bytes
    handle = take_lock(state)
    try:
        notes = [n for n in (_migrate_legacy(state), _recover(state)) if n]
        if notes and stamp_matches(state, plan["digest"], read_stamp(state)):
            # The interrupted apply was of this very lock and got past the
            # swap: building again would push its rollback copy out.
            previous = state.previous if os.path.isdir(state.previous) else None
            return {
                "protocol": AGENT_PROTOCOL,
                "venv": venv,
                "previous": previous,
                "recovered": "; ".join(notes),
                "finished": True,
            }
        _drop(state.failed)  # kept by the last apply for examination, until this one
        check_space(venv, sum(row[2] for row in plan["expected"]))
        timings: Dict[str, float] = {}
        clock = [time.time()]

        def lap(name: str) -> None:
            now = time.time()
            timings[name] = round(now - clock[0], 3)
            clock[0] = now

        journal.record(state, "stage", digest=plan["digest"], new=None, old=None, prev=None)
        step = ["stage"]
        try:
            built = _build_and_check(plan, state, jobs, lap, step)
        except BaseException as exc:
            keep = step[0] == "verify" or bool(plan.get("keep_staging"))
            kept = _set_aside(state) if keep else None
            if not keep:
                _drop(state.staging)
            journal.clear(state)
            if isinstance(exc, SmokeFailed):
                return _smoke_failure(plan, exc.report, kept)
            if isinstance(exc, (ApplyError, OSError)):
                shown = "; the staged venv is kept at %s" % kept if kept else ""
                raise ApplyError(
                    "%s; the live venv is untouched%s" % (_what_failed(step[0], exc), shown)
                ) from exc
            raise
        try:
            previous = swap_in(state, plan["digest"])
        except SwapError as exc:
            kept = _set_aside(state) if plan.get("keep_staging") else None
            if kept is None:
                _recover(state)  # the swap did not happen: drop the staging venv
            else:
                journal.clear(state)
            shown = "; the staged venv is kept at %s" % kept if kept else ""
            raise ApplyError("%s; the live venv is untouched%s" % (exc, shown)) from exc
        except (OSError, JournalError) as exc:
            entry = journal.read(state) or {"step": "stamp"}
            raise ApplyError(
                "the new venv is live at %s, but the apply stopped at %s (%s): %s; "
                "the next apply or rollback finishes it"
                % (venv, entry["step"], AFTER_SWAP.get(entry["step"], ""), exc)
            ) from exc
        # The files kept their inodes and times through the rename: the
        # hashes just verified are valid for the venv's own stat cache.
        StatCache(default_cache_path(venv)).save(built.entries)
        lap("swap")
        return {
            "protocol": AGENT_PROTOCOL,
            "timings": timings,
            "venv": venv,
            "previous": previous,
            "recovered": "; ".join(notes) or None,
            "installed": len(plan["wheels"]),
            "link_mode": built.link_mode,
            "link_note": built.link_note,
            "bin_files": built.placed,
            "sources": built.sources,
            "verified_files": built.verified,
            "smoke": built.smoke,
            "seconds": round(time.time() - started, 3),
        }
    finally:
        handle.close()


class _Built:
    """What the steps before the swap leave for the answer."""

    def __init__(
        self, placed: int, sources: List[RestoredSource], verified: int, entries: Dict[str, CacheEntry]
    ) -> None:
        self.placed, self.sources, self.verified, self.entries = placed, sources, verified, entries
        self.smoke: SmokeSummary = {"ok": 0, "skipped": 0, "failed": [], "seconds": 0.0}
        self.link_mode = "copy"
        self.link_note: Optional[str] = None


def _build_and_check(
    plan: ApplyPlan, state: StateDir, jobs: int, lap: Callable[[str], None], step: List[str]
) -> _Built:
    """Steps stage and verify (smoke runs beside verify): everything before the swap."""
    staging = state.staging
    progress("stage", 0, 1, "creating the staging venv")
    fault("before", "stage")
    create_staging(plan, staging)
    fault("after", "stage")
    lap("stage")
    progress("install", 0, len(plan["wheels"]))
    fault("before", "install")
    link_mode, link_note = install(plan, staging)
    fault("after", "install")
    progress("install", len(plan["wheels"]), len(plan["wheels"]))
    lap("install")
    placed = finish_payload(plan, staging)
    sources = restore_sources(plan)
    journal.record(state, "verify", new=ident(staging))
    step[0] = "verify"
    fault("before", "verify")
    # Smoke runs beside verify: the imports take seconds of mostly
    # single-threaded work that hashing leaves room for.
    smoked_box: List[Any] = []
    smoker = threading.Thread(target=lambda: smoked_box.append(_catching(smoke, plan, staging)))
    smoker.start()
    progress("verify", 0, len(plan["expected"]))
    try:
        verified, entries = verify_staging(plan, staging, jobs)
    finally:
        smoker.join()
    progress("verify", verified, len(plan["expected"]))
    lap("verify+smoke")
    smoked, report = _unwrap(smoked_box[0])
    if smoked["failed"] and not plan.get("allow_smoke_failures"):
        raise SmokeFailed(report)
    fault("after", "verify")
    built = _Built(placed, sources, verified, entries)
    built.smoke = smoked
    built.link_mode, built.link_note = link_mode, link_note
    return built


def _what_failed(step: str, exc: BaseException) -> str:
    """An error of a step before the swap, with the step named when the error does not."""
    if not isinstance(exc, OSError) or isinstance(exc, ApplyError):
        return str(exc)
    where = " (%s)" % exc.filename if exc.filename else ""
    doing = "building the staging venv" if step == "stage" else "verifying and smoking the staging venv"
    return "%s: %s%s" % (doing, exc.strerror or exc, where)


def _smoke_failure(plan: ApplyPlan, report: SmokeReport, kept: Optional[str]) -> ApplyAnswer:
    """The answer when imports failed: the whole smoke report, for the controller to explain."""
    if kept is not None:
        report["venv"] = kept
    return {
        "protocol": AGENT_PROTOCOL,
        "venv": plan["venv"],
        "failed": "smoke",
        "kept": kept,
        "smoke_report": report,
    }


def _drop(path: str) -> None:
    """Remove one of envlock's own paths (a staging venv the journal vouches for, a marker)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _set_aside(state: StateDir) -> Optional[str]:
    """Keep the staged venv at failed/ to be examined (until the next apply)."""
    if not os.path.isdir(state.staging):
        return None
    _drop(state.failed)
    os.rename(state.staging, state.failed)
    return state.failed
