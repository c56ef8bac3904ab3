"""The mutation score of the integrity code, from ``mutmut results --all true``.

Run by ``make mutate`` in ``.mutate/`` after ``mutmut run``. Scope: every
function of the modules that keep wrong bytes out, and in two larger modules
only the functions that do (SSH quoting; the lock and manifest checks of
apply). A timeout counts as killed (the mutant hung the test: detected).
Mutants listed in EQUIVALENT behave exactly like the original; they are
left out of the score and printed with the reason. Exits 1 below 90%.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

GOAL = 0.90
WHOLE = (
    "envlock.provenance",
    "envlock.fetch",
    "envlock.store",
    "envlock.lock.digest",
    "envlock.lock.manifest",
    "envlock.review.findings",
)
FUNCTIONS = {
    "envlock.transport.ssh": ("x__quote", "xǁSshTransportǁssh_argv", "xǁSshTransportǁagent_argv"),
    "envlock.apply": ("x_checked_lock", "x_check_digest"),
    "envlock.workspace": ("xǁLockedVenvǁrows", "xǁWorkspaceǁread_lock", "xǁWorkspaceǁread_locked"),
}
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
HERE = Path(__file__).resolve().parent
EQUIVALENT_FILE = HERE / "equivalent.txt"


def _equivalent() -> dict[str, str]:
    """``mutant name<TAB>why`` lines; '#' starts a comment."""
    found = {}
    for line in EQUIVALENT_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("\t")
            found[name.strip()] = why.strip()
    return found


def _in_scope(name: str) -> str | None:
    module, _, rest = name.rpartition(".")
    function = rest.partition("__mutmut_")[0]
    if module in WHOLE:
        return module
    if module in FUNCTIONS and function in FUNCTIONS[module]:
        return module
    return None


def main() -> int:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "mutmut"), "results", "--all", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    equivalent = _equivalent()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: list[tuple[str, str]] = []
    for line in out.splitlines():
        match = re.match(r"^\s*(\S+): (.+)$", line)
        if not match:
            continue
        name, status = match.groups()
        module = _in_scope(name)
        if module is None:
            continue
        if name in equivalent:
            counts[module]["equivalent"] += 1
            continue
        counts[module]["killed" if status in KILLED else status] += 1
        if status not in KILLED:
            survivors.append((name, status))
    total_killed = total = 0
    print(f"{'module':28} {'killed':>7} {'of':>5} {'score':>7}  equivalent, other")
    for module in sorted(counts):
        c = counts[module]
        scored = sum(n for k, n in c.items() if k != "equivalent")
        total += scored
        total_killed += c["killed"]
        other = ", ".join(f"{k} {n}" for k, n in sorted(c.items()) if k not in ("killed", "equivalent"))
        score = c["killed"] / scored if scored else 1.0
        print(f"{module:28} {c['killed']:7} {scored:5} {score:7.1%}  {c['equivalent']}, {other or '-'}")
    score = total_killed / total if total else 1.0
    print(f"{'all':28} {total_killed:7} {total:5} {score:7.1%}")
    for name, status in survivors:
        print(f"  {status}: {name}")
    stale = sorted(set(equivalent) - {n for n in _names(out)})
    for name in stale:
        print(f"  listed as equivalent but not generated any more: {name}")
    if score < GOAL:
        print(f"below the goal of {GOAL:.0%}")
        return 1
    return 0


def _names(out: str) -> list[str]:
    return [m.group(1) for line in out.splitlines() if (m := re.match(r"^\s*(\S+): ", line))]


if __name__ == "__main__":
    raise SystemExit(main())
