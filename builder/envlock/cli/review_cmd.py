"""``envlock review --base REV [--head REV]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from envlock.cli.commands import summary
from envlock.errors import EnvlockError, ExitCode
from envlock.render import envelope, set_color
from envlock.workspace import open_workspace

FORMATS = ("text", "markdown", "json")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "review",
        parents=[common],
        help=summary("review"),
        description="Compare every locks/*.toml changed between --base and --head (default: the "
        "working tree) and classify what changed: block (same file name with other bytes, GPU "
        "arch coverage lost, a library that will not load), warn (local builds, local version "
        "label, downgrade, new native code or DT_NEEDED, yanked, index changed), info (upgrade, "
        "added, removed). Exit 0 ran fine, 1 findings at or above --fail-on, 2 could not run.",
    )
    p.add_argument("--base", required=True, metavar="REV", help="git revision to compare against")
    p.add_argument("--head", metavar="REV", help="git revision to review (default: the working tree)")
    p.add_argument(
        "--fail-on",
        choices=("block", "warn", "info", "never"),
        default="block",
        help="exit 1 when a finding is at least this severe (default: block)",
    )
    p.add_argument("--no-index", action="store_true", help="do not ask indexes whether wheels are yanked")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from envlock.review import ReviewOptions, review_git
    from envlock.review.jsonout import review_json
    from envlock.review.markdown import render_markdown
    from envlock.review.text import render_text

    fmt = args.format
    workspace = open_workspace(args.root, need_hosts=False)
    review = review_git(workspace.root, args.base, args.head, ReviewOptions(check_yanked=not args.no_index))
    if args.output:
        set_color(False)  # a report file gets no terminal styling
    failed = review.fails(args.fail_on)
    if fmt == "json":
        out = envelope("review", not failed, {"result": review_json(review, args.fail_on)})
    elif fmt == "markdown":
        out = render_markdown(review, args.fail_on)
    else:
        out = render_text(review, args.fail_on)
    if args.output:
        try:
            Path(args.output).write_text(out if out.endswith("\n") else out + "\n", encoding="utf-8")
        except OSError as exc:
            raise EnvlockError(f"{args.output}: cannot write: {exc.strerror}") from exc
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return int(ExitCode.FINDINGS if failed else ExitCode.OK)
