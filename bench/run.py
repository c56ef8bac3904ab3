"""Run envlock's benchmarks: ``python bench/run.py [capture] [--repeat N] [--work DIR]``.

Each benchmark measures envlock against its anchors in the same run and
prints ratios; results land in bench/results/<name>.json and are copied by
hand into docs/benchmarks.md. Timing is never asserted in tests.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import abi_bench
import apply_bench
import capture_bench
import diff_bench
import fleet_bench
import inspect_bench
import lock_bench
import smoke_bench
import ssh_bench
import whole
from common import DEFAULT_WORK

BENCHES = {
    "capture": capture_bench,
    "diff": diff_bench,
    "inspect": inspect_bench,
    "ssh": ssh_bench,
    "apply": apply_bench,
    "lock": lock_bench,
    "smoke": smoke_bench,
    "abi": abi_bench,
    "fleet": fleet_bench,
    "whole": whole,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHES, []], default=list(BENCHES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where the GPU venv and wheels live")
    args = parser.parse_args()
    for name in args.names or list(BENCHES):
        module = BENCHES[name]
        print(f"== {name}", flush=True)
        print(module.report(module.main(args.work, args.repeat)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
