"""``envlock smoke HOST``: import every module of a host's venv and say why each failure happened.

The agent does the importing, on the host, in parallel worker interpreters of
the venv (``envlock.agent.smoke``), and classifies each failure by its
exception: a missing module, a missing name, an undefined symbol, a missing
shared library, a crash or a hang, each with the line that matters (the last
traceback frame inside the venv). This side adds what only the lock knows and
turns each failure into one sentence: which package would provide a missing
module, the installed and the locked version of the package a name is
missing from, which package ships a missing library.

What to import: every top-level module of every distribution the lock names
(``Package.top_level``) and every one the live venv has (a package installed
outside the lock is imported too), plus the profile's ``[smoke] checks``. A
module that needs the GPU driver (``libcuda.so.1``) on a host that the
profile and the lock say has no GPU is skipped, not failed.

The explanation of the agent's report is ``envlock.smokereport``, which
apply's staged smoke shares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from envlock.agent.protocol import SmokeReport
from envlock.binary.driver import DRIVER_LIBRARY_PREFIXES
from envlock.errors import AgentError
from envlock.hosts import HostProfile, load_profile
from envlock.lock.io import read_lock
from envlock.lock.model import Lock
from envlock.reporter import Reporter
from envlock.smokereport import SmokeResult, build_result, host_has_gpu, lock_modules
from envlock.transport import Transport, open_transport, run_agent
from envlock.workspace import Workspace, lock_name


@dataclass(frozen=True, slots=True, kw_only=True)
class SmokeOptions:
    deep: bool = False  # also every submodule, found from the files
    fail_fast: bool = False  # stop at the first failure
    timeout: float = 60.0  # seconds per module before its worker is killed
    jobs: int = 0  # worker interpreters; 0: one per core of the host


def smoke(
    workspace: Workspace,
    host: str,
    options: SmokeOptions | None = None,
    reporter: Reporter | None = None,
) -> SmokeResult:
    """Smoke ``hosts/<host>.toml``'s venv, against ``locks/pylock.<host>.toml`` when it exists."""
    profile = load_profile(workspace, host)
    with open_transport(profile) as transport:
        return smoke_host(workspace, profile, transport, options, reporter=reporter)


def smoke_host(
    workspace: Workspace,
    profile: HostProfile,
    transport: Transport,
    options: SmokeOptions | None = None,
    *,
    venv: str | None = None,
    lock: Lock | None = None,
    reporter: Reporter | None = None,
) -> SmokeResult:
    """Import every module of the venv on an open transport and explain each failure.

    ``venv`` overrides the profile's (apply smokes a staging venv); ``lock``
    overrides the workspace's ``locks/pylock.<host>.toml`` (read when present).
    """
    options = options or SmokeOptions()
    lock_path = workspace.lock_path(profile.name)
    lock_shown = None
    if lock is None and lock_path.is_file():
        lock_shown = workspace.shown(lock_path)
        lock = read_lock(lock_path, shown=lock_shown)
    elif lock is not None:
        lock_shown = f"pylock.{lock_name(lock.host)}.toml"
    has_gpu = host_has_gpu(profile, lock)
    args = ["smoke", "--venv", venv or profile.venv, "--from-venv", f"--timeout={options.timeout:g}"]
    args += [f"--jobs={options.jobs}"] if options.jobs else []
    args += ["--deep"] if options.deep else []
    args += ["--fail-fast"] if options.fail_fast else []
    args += [] if has_gpu else [f"--skip-missing={prefix}" for prefix in DRIVER_LIBRARY_PREFIXES]
    args += [f"--check={check}" for check in profile.smoke_checks]
    args += ["--", *lock_modules(lock)] if lock is not None else []

    raw = run_agent(transport, venv or profile.venv, args, reporter=reporter)
    try:
        report: SmokeReport = json.loads(raw)
    except ValueError as exc:
        raise AgentError(f"host {profile.name}: the agent's smoke report is not JSON: {exc}") from exc
    return build_result(profile, lock, lock_shown, has_gpu, report)
