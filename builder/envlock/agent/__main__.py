"""Agent entry point: ``python envlock-agent.pyz snapshot --venv PATH``.

Answers are JSON lines on stdout, one message of ``envlock.agent.protocol``
each. A failure is one ``@error`` line on stderr (:class:`ErrorMessage`:
a code per kind of failure, the one-line message, details) and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

from envlock.agent.protocol import (
    AGENT_PROTOCOL,
    ApplyPlan,
    ErrorMessage,
    HaveAnswer,
    PingAnswer,
    PullItem,
    ReceiveAnswer,
)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="envlock-agent")
    sub = parser.add_subparsers(dest="command")
    snap = sub.add_parser("snapshot", help="report the venv as JSON on stdout")
    snap.add_argument("--venv", required=True)
    snap.add_argument("--jobs", type=int, default=0)
    snap.add_argument("--no-cache", action="store_true")
    snap.add_argument("--bytecode", action="store_true", help="also list damaged .pyc files")
    repack = sub.add_parser("repack", help="stream repacked wheels: a JSON header line, then the bytes")
    repack.add_argument("--venv", required=True)
    repack.add_argument("dist_infos", nargs="+")
    have_p = sub.add_parser("have", help="which SHA256/NAME artifacts are already in DIR")
    have_p.add_argument("--dir", required=True)
    have_p.add_argument("items", nargs="*")
    receive_p = sub.add_parser("receive", help="store framed artifacts from stdin into DIR")
    receive_p.add_argument("--dir", required=True)
    pull_p = sub.add_parser("pull", help="fetch artifacts listed as JSON on stdin into DIR from their URLs")
    pull_p.add_argument("--dir", required=True)
    pull_p.add_argument("--jobs", type=int, default=4)
    apply_p = sub.add_parser(
        "apply", help="build, verify, smoke and swap in a venv from a JSON plan on stdin"
    )
    apply_p.add_argument("--jobs", type=int, default=0)
    applied_p = sub.add_parser("applied", help="is VENV what the last apply of DIGEST left?")
    applied_p.add_argument("--venv", required=True)
    applied_p.add_argument("--digest", required=True)
    applied_p.add_argument("--force", action="store_true", help="a venv from another tool may be replaced")
    status_p = sub.add_parser("apply-status", help="where the last apply of VENV stands (read only)")
    status_p.add_argument("--venv", required=True)
    rollback_p = sub.add_parser("rollback", help="swap the previous venv back in")
    rollback_p.add_argument("--venv", required=True)
    rollback_p.add_argument("--again", action="store_true", help="the last change was a rollback: undo it")
    source_p = sub.add_parser(
        "pack-source", help="a deterministic tar.gz of an editable install's source on stdout"
    )
    source_p.add_argument("--dir", required=True)
    sub.add_parser("ping", help="report the interpreter")
    smoke_p = sub.add_parser("smoke", help="import modules in parallel worker interpreters; report each")
    smoke_p.add_argument("--venv", required=True)
    smoke_p.add_argument("--jobs", type=int, default=0)
    smoke_p.add_argument("--timeout", type=float, default=60.0)
    smoke_p.add_argument("--deep", action="store_true")
    smoke_p.add_argument("--fail-fast", action="store_true")
    smoke_p.add_argument("--from-venv", action="store_true", help="also every dist's top-level modules")
    smoke_p.add_argument("--check", action="append", default=[], help="a statement to run")
    smoke_p.add_argument("--skip-missing", action="append", default=[], help="skip if this library is absent")
    smoke_p.add_argument("modules", nargs="*")
    args = parser.parse_args(argv)

    from envlock.agent.apply import ApplyError
    from envlock.agent.dists import DistError
    from envlock.agent.hashing import UnreadableFile
    from envlock.agent.journal import JournalError
    from envlock.agent.receive import ReceiveError
    from envlock.agent.snapshot import SnapshotError
    from envlock.agent.sources import SourceError

    try:
        if args.command == "snapshot":
            # Two JSON lines: the venv's description first, so the controller
            # can trace wheels while the files are still being hashed.
            from envlock.agent.snapshot import describe_venv, inventory

            jobs = args.jobs or min(32, (os.cpu_count() or 1) * 2)
            described = describe_venv(args.venv)
            _emit(described)
            found, stats, entries = inventory(
                args.venv, described["dists"], jobs=jobs, use_cache=not args.no_cache
            )
            if not os.environ.get("ENVLOCK_NO_ABI_FACTS"):
                # ABI facts: which symbols each library binds from another distribution's.
                from envlock.agent.abi import cached_abi_imports
                from envlock.agent.snapshot import default_cache_path

                venv = os.path.abspath(args.venv)
                stat_cache = default_cache_path(venv) if not args.no_cache else None
                found["abi"] = cached_abi_imports(
                    venv,
                    described["site"],
                    described["dists"],
                    found["native"],
                    {rel: entry[4] for rel, entry in entries.items() if rel in found["native"]},
                    stat_cache.replace("stat-", "abi-") if stat_cache else None,
                )
            if args.bytecode:
                from envlock.agent.bytecode import damaged_bytecode

                found["bytecode"] = damaged_bytecode(args.venv)
            # Statistics go to stderr, so stdout depends on the venv's content
            # alone and an unchanged venv is recognised by its hash.
            sys.stderr.write("@stats " + json.dumps(stats) + "\n")
            _emit(found)
        elif args.command == "repack":
            return _repack(args.venv, args.dist_infos)
        elif args.command == "have":
            from envlock.agent.receive import have

            present: HaveAnswer = {"present": have(args.dir, args.items)}
            _emit(present)
        elif args.command == "receive":
            from envlock.agent.receive import receive

            received: ReceiveAnswer = {"received": receive(args.dir, sys.stdin.buffer)}
            _emit(received)
        elif args.command == "pull":
            from envlock.agent.pull import pull

            items: List[PullItem] = json.loads(sys.stdin.buffer.read())
            _emit(pull(args.dir, items, jobs=args.jobs))
        elif args.command == "applied":
            # Only the no-op check's modules: this answer is all a no-op apply waits for.
            from envlock.agent.stamp import applied

            _emit(applied(args.venv, args.digest, force=args.force))
        elif args.command in ("apply", "apply-status", "rollback"):
            from envlock.agent import apply as host_apply

            if args.command == "apply":
                plan: ApplyPlan = json.loads(sys.stdin.buffer.read())
                _emit(host_apply.run_apply(plan, jobs=args.jobs or min(32, (os.cpu_count() or 1) * 2)))
            elif args.command == "apply-status":
                _emit(host_apply.apply_status(args.venv))
            else:
                _emit(host_apply.rollback(args.venv, again=args.again))
        elif args.command == "pack-source":
            from envlock.agent.sources import pack_source

            pack_source(args.dir, sys.stdout.buffer)
            sys.stdout.flush()
        elif args.command == "smoke":
            return _smoke(args)
        elif args.command == "ping":
            from envlock.agent.hostfacts import gpu_facts, interpreter_facts, platform_facts

            pong: PingAnswer = {
                "protocol": AGENT_PROTOCOL,
                "interpreter": interpreter_facts(),
                "platform": platform_facts(),
                "gpu": gpu_facts(),
            }
            _emit(pong)
        else:
            parser.print_usage(sys.stderr)
            return 2
    except (
        SnapshotError,
        UnreadableFile,
        DistError,
        ReceiveError,
        ApplyError,
        JournalError,
        SourceError,
        OSError,
        ValueError,
    ) as exc:
        return _fail(exc)
    return 0


def _emit(result: Mapping[str, Any]) -> None:
    """One message on stdout, as one JSON line."""
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def error_code(exc: BaseException) -> str:
    """The protocol's code for an exception (``envlock.agent.protocol.ERROR_CODES``).

    Matched by class name (most derived first): the smoke's modules, which
    define SmokeError, are imported only by the smoke command.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    for name, code in (
        ("UnreadableFile", "unreadable-file"),
        ("PathError", "path"),
        ("SnapshotError", "snapshot"),
        ("DistError", "dist"),
        ("ReceiveError", "receive"),
        ("SourceError", "source"),
        ("JournalError", "journal"),
        ("ApplyError", "apply"),
        ("SmokeError", "smoke"),
        ("OSError", "os"),
    ):
        if name in names:
            return code
    return "value"


def _fail(exc: BaseException) -> int:
    """Say why on stderr, as one ``@error`` line (``ErrorMessage``); exit status 2."""
    details: Dict[str, Any] = {}
    for attr in ("path", "filename", "errno"):
        value = getattr(exc, attr, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            details[attr] = value
    message: ErrorMessage = {"code": error_code(exc), "message": str(exc), "details": details}
    sys.stderr.write("@error " + json.dumps(message) + "\n")
    sys.stderr.flush()
    return 2


def _smoke(args: argparse.Namespace) -> int:
    """Imported only here: the smoke's modules stay out of every other command's start-up."""
    from envlock.agent.smoke import SmokeError, run_smoke

    try:
        _emit(
            run_smoke(
                args.venv,
                args.modules,
                args.check,
                jobs=args.jobs,
                timeout=args.timeout,
                deep=args.deep,
                fail_fast=args.fail_fast,
                from_venv=args.from_venv,
                skip_missing=args.skip_missing,
            )
        )
    except SmokeError as exc:
        return _fail(exc)
    return 0


def _repack(venv: str, dist_infos: List[str]) -> int:
    import hashlib
    import io

    from envlock.agent.repack import write_wheel
    from envlock.agent.snapshot import find_site_packages

    site = find_site_packages(venv, sys.version_info[:2])
    out = sys.stdout.buffer
    for dist_info in dist_infos:
        buffer = io.BytesIO()
        filename = write_wheel(venv, site, dist_info, buffer)
        data = buffer.getvalue()
        header = {
            "dist_info": dist_info,
            "filename": filename,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        out.write(json.dumps(header).encode() + b"\n")
        out.write(data)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
