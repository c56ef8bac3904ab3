"""``envlock build PKG --host HOST``: a wheel for the host's GPU, from the package's sdist."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from envlock.cli.commands import summary
from envlock.errors import ExitCode
from envlock.render import envelope, table
from envlock.reporter import Reporter
from envlock.workspace import open_workspace

if TYPE_CHECKING:
    from envlock.build import BuildResult


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "build",
        parents=[common],
        help=summary("build"),
        description="Build PKG from its sdist (on the lock's indexes) for the host's GPU, in an "
        "isolated environment of the host lock's own wheels (torch, numpy, CUDA wheels; the host's "
        "lock, else its reference's), with the arch passed as TORCH_CUDA_ARCH_LIST, "
        "CMAKE_CUDA_ARCHITECTURES/CUDAARCHS and nvcc -gencode flags. The wheel must have the arch "
        "as SASS (or PTX that JITs) and bind every symbol; it goes into the store with a build "
        'record, and `envlock lock HOST` then picks it (source = "built"). Exit 2 without nvcc '
        "or a CUDA toolkit that matches; a failed build keeps its directory and prints its log.",
    )
    p.add_argument("package", help="the distribution to build, e.g. gpukern")
    p.add_argument("--host", required=True, help="the host to build for: hosts/<host>.toml")
    p.add_argument("--gpu", help="compute capabilities to build for, e.g. 12.0 (default: the host's)")
    p.add_argument("--version", help="the sdist version (default: the lock's version, else the newest)")
    p.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        metavar="REQ",
        help="also put this locked package in the build environment (a build dependency the sdist "
        "does not declare, e.g. torch); repeatable",
    )
    p.set_defaults(run=run)


class _Reporter(Reporter):
    """Steps on stderr; the build's output as one redrawn line on a terminal (-v: every line)."""

    def __init__(self, text: bool, quiet: int, verbose: int) -> None:
        self.show_steps = text and not quiet
        self.verbose = verbose
        self.tty = sys.stderr.isatty() and not quiet
        self.started = time.monotonic()
        self.drawn = False
        self.last = 0.0

    def step(self, message: str) -> None:
        self.close()
        if self.show_steps or self.verbose:
            print(f"• {message}", file=sys.stderr, flush=True)

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        if self.verbose:
            print(f"  | {detail}", file=sys.stderr, flush=True)
            return
        now = time.monotonic()
        if not self.tty or now - self.last < 0.1:
            return
        self.last = now
        elapsed = int(now - self.started)
        line = f"\r{phase} {elapsed // 60}m{elapsed % 60:02d}s {done} lines | {detail}"
        sys.stderr.write(line[:118].ljust(119))
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\r" + " " * 120 + "\r")
            sys.stderr.flush()
            self.drawn = False


def run(args: argparse.Namespace) -> int:
    from envlock.build import build_package  # imported late: `envlock --help` stays fast

    workspace = open_workspace(args.root)
    reporter = _Reporter(args.format == "text", args.quiet, args.verbose)
    try:
        result = build_package(
            workspace,
            args.package,
            args.host,
            gpu=args.gpu,
            version=args.version,
            extra=tuple(args.extra),
            reporter=reporter,
        )
    finally:
        reporter.close()
    if args.format == "json":
        print(envelope("build", True, {"result": result_json(result, workspace.root)}))
    else:
        print(render_text(result, workspace.root))
    return int(ExitCode.OK)


def _shown(path: Any, root: Any) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def result_json(result: BuildResult, root: Any) -> dict[str, Any]:
    record = result.record
    tool = record.toolchain
    return {
        "package": record.package,
        "version": record.version,
        "host": record.host,
        "gpu": list(record.gpu),
        "wheel": record.wheel,
        "sha256": record.sha256,
        "path": _shown(result.wheel, root),
        "record": _shown(result.record_file, root),
        "lock": record.lock,
        "reused_environment": result.reused,
        "seconds": record.seconds,
        "phases": dict(record.phases),
        "toolchain": {
            "nvcc": tool.nvcc,
            "nvcc_version": tool.nvcc_version,
            "cuda_version": tool.cuda_version,
            "cuda_home": tool.cuda_home,
            "compiler": tool.compiler,
        },
        "flags": dict(record.flags),
        "inputs": [
            {"role": i.role, "name": i.name, "version": i.version, "filename": i.filename, "sha256": i.sha256}
            for i in record.inputs
        ],
        "libraries": [
            {
                "path": lib.path,
                "gpu": lib.gpu,
                "verdict": lib.verdict,
                "reason": lib.reason,
                "arches": list(lib.arches),
            }
            for lib in result.libraries
        ],
        "notes": list(record.notes),
    }


def render_text(result: BuildResult, root: Any) -> str:
    record = result.record
    tool = record.toolchain
    lines = [
        f"built {record.wheel} for {', '.join('sm_' + cc.replace('.', '') for cc in record.gpu)} "
        f"in {record.seconds:.0f}s",
        f"  nvcc {tool.nvcc_version} (CUDA {tool.cuda_version}, {tool.cuda_home}), {tool.compiler}",
        f"  pinned by {record.lock}: "
        + ", ".join(f"{i.name} {i.version}" for i in record.inputs if i.role != "sdist"),
    ]
    if result.libraries:
        rows = [[lib.path, lib.gpu, lib.verdict, ",".join(lib.arches)] for lib in result.libraries]
        lines += ["", table(["library", "gpu", "verdict", "arches"], rows), ""]
    lines += [f"note: {note}" for note in record.notes]
    lines.append(f"wheel: {_shown(result.wheel, root)}")
    lines.append(f"record: {_shown(result.record_file, root)}")
    lines.append(f"next: envlock lock {record.host}")
    return "\n".join(lines)
