"""``python bench/whole [--only inspect,startup] [--repeat N] [--work DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import whole
from common import DEFAULT_WORK


def cli() -> int:
    parser = argparse.ArgumentParser(description=whole.__doc__.splitlines()[0] if whole.__doc__ else None)
    parser.add_argument("--only", default="", help="comma-separated areas (inspect, startup, capture, lock)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = parser.parse_args()
    only = [name for name in args.only.split(",") if name]
    print(whole.report(whole.main(args.work, args.repeat, only)))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
