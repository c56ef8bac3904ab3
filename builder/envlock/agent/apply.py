"""Host side of ``envlock apply``: stage, install, put back bin/, verify, smoke, swap.

One agent process does it all while holding an exclusive ``flock`` on
``<venv>.envlock.lock``, so two applies never interleave, and a ``kill -9``
releases the lock with the process. The live venv is touched only by the
final swap, an atomic ``renameat2(RENAME_EXCHANGE)``: at every instant
``<venv>`` is either the old venv or the new, verified one.

Paths beside the venv: ``.envlock-staging`` (the venv being built; it holds
a marker file until the swap), ``.envlock-previous`` (what the last apply
replaced, for rollback), ``.envlock-applied.json`` (a stamp: the lock digest
and the stat keys of every file, for the no-op check).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional, Tuple

from envlock.agent.hashing import StatCache
from envlock.agent.layout import is_bookkeeping, is_bytecode, is_scaffold
from envlock.agent.snapshot import default_cache_path, find_site_packages, inventory, walk

MARKER = ".envlock-staging"
RENAME_EXCHANGE = 2
AT_FDCWD = -100


class ApplyError(Exception):
    """Apply stopped; the live venv is untouched. The message names the step."""


def sibling(venv: str, suffix: str) -> str:
    return venv.rstrip("/") + suffix


def progress(phase: str, done: int, total: int, detail: str = "") -> None:
    line = {"phase": phase, "done": done, "total": total, "detail": detail}
    sys.stderr.write("@progress " + json.dumps(line) + "\n")
    sys.stderr.flush()


# ------------------------------------------------------------------ locking


def take_lock(venv: str) -> IO[str]:
    path = sibling(venv, ".envlock.lock")
    os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the whole apply, closed by the caller
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise ApplyError(
            "another envlock apply is running on %s (pid %s holds %s)" % (venv, holder, path)
        ) from exc
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


# ------------------------------------------------------------------ swapping


def exchange(a: str, b: str) -> None:
    """Swap two paths atomically (Linux renameat2); refuse rather than fake it."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise ApplyError("this host's libc has no renameat2: cannot swap atomically")
    if renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise ApplyError("cannot swap %s and %s: %s" % (a, b, os.strerror(err)))


def recover(venv: str) -> Optional[str]:
    """Clean up after an apply that was killed; return what was done, if anything."""
    staging = sibling(venv, ".envlock-staging")
    if not os.path.lexists(staging):
        return None
    if os.path.exists(os.path.join(staging, MARKER)):
        shutil.rmtree(staging)
        return "removed an unfinished staging venv"
    # No marker: the swap happened and the old venv sits at the staging path.
    previous = sibling(venv, ".envlock-previous")
    if os.path.lexists(previous):
        shutil.rmtree(previous)
    os.rename(staging, previous)
    return "kept the venv replaced by an interrupted apply as the rollback copy"


def swap_in(venv: str, staging: str) -> Optional[str]:
    """Put ``staging`` at ``venv``; the old venv becomes ``.envlock-previous``."""
    os.unlink(os.path.join(staging, MARKER))
    previous = sibling(venv, ".envlock-previous")
    if not os.path.lexists(venv):
        os.rename(staging, venv)
        return None
    exchange(staging, venv)
    if os.path.lexists(previous):
        shutil.rmtree(previous)
    os.rename(staging, previous)
    return previous


def rollback(venv: str) -> Dict[str, Any]:
    handle = take_lock(venv)
    try:
        recover(venv)
        previous = sibling(venv, ".envlock-previous")
        if not os.path.isdir(previous):
            raise ApplyError("no previous venv to roll back to (%s does not exist)" % previous)
        if os.path.lexists(venv):
            exchange(previous, venv)
        else:
            os.rename(previous, venv)
        _forget_stamp(venv)
        return {"venv": venv, "restored_from": previous}
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


def create_staging(plan: Dict[str, Any], staging: str) -> None:
    base = plan["base_python"]
    if not os.path.exists(base):
        raise ApplyError("no Python %s at %s (the lock's pyvenv home)" % (plan["python_version"], base))
    if plan["creator"] == "uv":
        _run([plan["uv"], "venv", "-q", "--python", base, staging], "creating the staging venv")
    else:
        _run([base, "-m", "venv", "--without-pip", staging], "creating the staging venv")
    with open(os.path.join(staging, MARKER), "w") as marker:
        marker.write(str(os.getpid()))


def install(plan: Dict[str, Any], staging: str) -> None:
    lines = []
    for wheel in plan["wheels"]:
        path = os.path.expanduser(wheel["path"])
        lines.append("%s @ file://%s --hash=sha256:%s" % (wheel["name"], path, wheel["sha256"]))
    requirements = sibling(plan["venv"], ".envlock-requirements.txt")
    with open(requirements, "w") as out:
        out.write("\n".join(lines) + "\n")
    try:
        _run(
            [
                plan["uv"], "pip", "install", "--python", os.path.join(staging, "bin", "python"),
                "--offline", "--no-index", "--no-deps", "--require-hashes", "--link-mode", "copy",
                "--cache-dir", os.path.expanduser("~/.cache/envlock/uv"), "-q", "-r", requirements,
            ],
            "installing %d wheels" % len(lines),
        )  # fmt: skip
    finally:
        os.unlink(requirements)


def relocate(data: bytes, old: str, new: str) -> bytes:
    """Point a script's interpreter line at ``new`` instead of ``old``."""
    head, tail = data[:512], data[512:]
    return head.replace(old.encode() + b"/bin/", new.encode() + b"/bin/") + tail


def place_bin_files(plan: Dict[str, Any], staging: str) -> int:
    """Put back bin/ files byte for byte; repoint every other script at the final path."""
    venv = plan["venv"]
    placed = 0
    for rel, spec in sorted(plan["bin_files"].items()):
        with open(os.path.expanduser(spec["path"]), "rb") as blob:
            data = relocate(blob.read(), plan["source_venv"], venv)
        target = os.path.join(staging, rel)
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
        moved = (
            data.replace(staging.encode(), venv.encode())
            if is_scaffold(rel)
            else relocate(data, staging, venv)
        )
        if moved != data:
            mode = os.stat(path).st_mode
            with open(path, "wb") as out:
                out.write(moved)
            os.chmod(path, mode & 0o7777)
    return placed


def restore_sources(plan: Dict[str, Any]) -> List[Dict[str, str]]:
    """Put editable installs' source trees where their ``.pth`` files point, when missing.

    An existing directory is somebody's working copy: it is left alone.
    """
    from envlock.agent.sources import SourceError, unpack_source

    done = []
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


def verify_staging(plan: Dict[str, Any], staging: str, jobs: int) -> Tuple[int, Dict[str, Any]]:
    """Every expected payload file present with the locked bytes; nothing else."""
    site = find_site_packages(staging, tuple(int(x) for x in plan["python_version"].split(".")[:2]))  # type: ignore[arg-type]
    expected: Dict[str, List[Any]] = {}
    for path, sha, size, kind in plan["expected"]:
        rel = site + path[len("site-packages") :] if path.startswith("site-packages/") else path
        expected[rel] = [sha, size, kind]
    # ELF facts too: these entries become the live venv's stat cache after
    # the swap, so the first capture or verify after an apply is a warm one.
    found = inventory(staging, [], jobs=jobs, use_cache=False, read_elf=True, keep_entries=True)
    normalized = found["bin_normalized"]
    problems: List[str] = []
    seen = set()
    for rel, sha, size, executable in found["files"]:
        if is_bytecode(rel) or is_bookkeeping(rel) or is_scaffold(rel) or rel == MARKER:
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
    if problems:
        more = " (and %d more)" % (len(problems) - 3) if len(problems) > 3 else ""
        raise ApplyError("staged venv differs from the lock: %s%s" % ("; ".join(problems[:3]), more))
    return len(seen), found


# ------------------------------------------------------------------ smoke


def smoke(plan: Dict[str, Any], staging: str) -> Dict[str, Any]:
    """Import every module of the staged venv and run the profile's checks.

    The same parallel, crash- and hang-proof smoke as ``envlock smoke``
    (``envlock.agent.smoke``), run in the staged venv's interpreter.
    """
    from envlock.agent.smoke import SmokeError, run_smoke

    try:
        report = run_smoke(
            staging,
            plan["smoke_modules"],
            plan["smoke_checks"],
            timeout=plan.get("smoke_timeout", 60.0),
            from_venv=True,
            skip_missing=plan.get("smoke_skip_missing", []),
            python=os.path.join(staging, "bin", "python"),
        )
    except SmokeError as exc:
        raise ApplyError("smoke: %s" % exc) from exc
    results = report["results"]
    failed = [r for r in results if r["status"] == "failed"]
    return {
        "ok": sum(1 for r in results if r["status"] == "ok"),
        "skipped": sum(1 for r in results if r["status"] == "skipped"),
        "failed": failed,
        "seconds": report["seconds"],
    }


def _describe_failure(result: Dict[str, Any]) -> str:
    name = result.get("check") or result.get("module")
    what = result.get("type") or result.get("kind") or "failed"
    lines = (result.get("message") or "").strip().splitlines()
    return "%s: %s: %s" % (name, what, lines[0] if lines else "")


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


# ------------------------------------------------------------------ stamp (no-op check)


def _stamp_path(venv: str) -> str:
    return sibling(venv, ".envlock-applied.json")


def _forget_stamp(venv: str) -> None:
    if os.path.exists(_stamp_path(venv)):
        os.unlink(_stamp_path(venv))


def write_stamp(venv: str, digest: str) -> None:
    files, links = walk(venv)
    entries = {rel: [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns] for rel, st in files}
    tmp = _stamp_path(venv) + ".tmp"
    with open(tmp, "w") as out:
        out.write(json.dumps({"digest": digest, "files": entries, "links": links}))
    os.replace(tmp, _stamp_path(venv))


def applied(venv: str, digest: str) -> Dict[str, Any]:
    """Is ``venv`` exactly what the last apply of ``digest`` left? (stat keys, no hashing)

    When it is not, also the distributions it holds now, for the plan.
    """
    result: Dict[str, Any] = {
        "exists": os.path.isdir(venv),
        "matches": _stamp_matches(venv, digest),
        "dists": None,
    }
    if result["exists"] and not result["matches"]:
        try:
            from envlock.agent.snapshot import describe_venv

            result["dists"] = sorted([d["name"], d["version"]] for d in describe_venv(venv)["dists"])
        except Exception:  # a broken venv is exactly what apply is for
            result["dists"] = None
    return result


def _stamp_matches(venv: str, digest: str) -> bool:
    try:
        with open(_stamp_path(venv)) as stream:
            stamp = json.load(stream)
    except (OSError, ValueError):
        return False
    if stamp.get("digest") != digest or not os.path.isdir(venv):
        return False
    files, links = walk(venv)
    current = {rel: [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns] for rel, st in files}
    return bool(current == stamp["files"] and links == stamp["links"])


# ------------------------------------------------------------------ the whole apply


def run_apply(plan: Dict[str, Any], jobs: int) -> Dict[str, Any]:
    venv = plan["venv"]
    staging = sibling(venv, ".envlock-staging")
    started = time.time()
    plan["uv"] = os.path.expanduser(plan["uv"])
    if os.path.isfile(plan["uv"]):
        os.chmod(plan["uv"], 0o755)  # it arrives as plain bytes
    handle = take_lock(venv)
    try:
        recovered = recover(venv)
        check_space(venv, sum(row[2] for row in plan["expected"]))
        timings: Dict[str, float] = {}
        clock = [time.time()]

        def lap(name: str) -> None:
            now = time.time()
            timings[name] = round(now - clock[0], 3)
            clock[0] = now

        progress("stage", 0, 1, "creating the staging venv")
        try:
            create_staging(plan, staging)
            lap("stage")
            progress("install", 0, len(plan["wheels"]))
            install(plan, staging)
            progress("install", len(plan["wheels"]), len(plan["wheels"]))
            lap("install")
            placed = place_bin_files(plan, staging)
            sources = restore_sources(plan)
            # Smoke runs beside verify: the imports take seconds of mostly
            # single-threaded work that hashing leaves room for.
            smoked_box: List[Any] = []
            smoker = threading.Thread(target=lambda: smoked_box.append(_catching(smoke, plan, staging)))
            smoker.start()
            progress("verify", 0, len(plan["expected"]))
            try:
                verified, found = verify_staging(plan, staging, jobs)
            finally:
                smoker.join()
            progress("verify", verified, len(plan["expected"]))
            lap("verify+smoke")
            smoked = _unwrap(smoked_box[0])
            failures = smoked["failed"]
            if failures and not plan.get("allow_smoke_failures"):
                total = smoked["ok"] + smoked["skipped"] + len(failures)
                raise ApplyError(
                    "smoke: %d of %d imports failed in the staged venv, first %s"
                    % (len(failures), total, _describe_failure(failures[0]))
                )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        previous = swap_in(venv, staging)
        write_stamp(venv, plan["digest"])
        # The files kept their inodes and times through the rename: the
        # hashes just verified are valid for the venv's own stat cache.
        StatCache(default_cache_path(venv)).save(found["_entries"])
        lap("swap")
        return {
            "timings": timings,
            "venv": venv,
            "previous": previous,
            "recovered": recovered,
            "installed": len(plan["wheels"]),
            "bin_files": placed,
            "sources": sources,
            "verified_files": verified,
            "smoke": smoked,
            "seconds": round(time.time() - started, 3),
        }
    finally:
        handle.close()
