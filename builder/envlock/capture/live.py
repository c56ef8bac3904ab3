"""The live side of ``envlock verify``: a venv's manifest rows, without building a lock.

A full capture (``capture(..., CaptureOptions(write=False))``) also traces
every distribution to its wheel and repacks what no index can give back:
right for ``diff live:HOST``, wasted work for verify, which only asks "are
the files still what the lock says". This path runs the same agent snapshot
(so its stat cache makes an unchanged venv cost one ``lstat`` per file) and
the same ``collect_files``/``scaffold_rows`` as capture, so a live row and a
locked row for an untouched file are equal by construction.

The agent's stdout depends on the venv's content alone (statistics go to
stderr), so the manifest digest it leads to is remembered per answer: an
unchanged venv is recognised by hashing 7 MB of JSON instead of parsing it
and rebuilding 22,000 rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cached_property
from pathlib import Path

from packaging.utils import canonicalize_name

from envlock.capture.agentcall import Snapshot, snapshot_args, stats_keeper
from envlock.capture.files import collect_files, scaffold_rows
from envlock.hosts import load_profile
from envlock.lock.manifest import manifest_sha256, render_manifest
from envlock.lock.model import FileEntry
from envlock.reporter import Reporter
from envlock.tmpname import private_sibling
from envlock.transport import Transport, open_transport, run_agent
from envlock.workspace import Workspace, cache_dir


class LiveVenv:
    """What a venv holds right now, in the lock's own terms.

    ``digest`` (manifest sha256, distributions, Python) is cheap when this
    agent answer was seen before; ``rows`` always parses the answer.
    """

    def __init__(
        self, transport: Transport, raw: bytes, stats: dict[str, int], memo_path: Path | None
    ) -> None:
        from envlock import __version__

        self.host = transport.host
        self._transport = transport  # closed by now: only names the host in errors
        self.stats = stats
        self._raw = raw
        self._memo_path = memo_path
        self._key = hashlib.sha256(__version__.encode() + b"\0" + raw).hexdigest()

    @cached_property
    def _snapshot(self) -> Snapshot:
        return Snapshot.parse(self._transport, self._raw)

    @cached_property
    def _built(self) -> tuple[tuple[FileEntry, ...], dict[str, str], tuple[str, ...]]:
        return build_rows(self._snapshot)

    @property
    def rows(self) -> tuple[FileEntry, ...]:
        """Manifest rows, exactly as capture would write them."""
        return self._built[0]

    @property
    def warnings(self) -> tuple[str, ...]:
        return self._built[2]

    @property
    def bytecode(self) -> tuple[tuple[str, str], ...]:
        """Damaged ``.pyc`` files (path, why); a clean venv's answer is not even parsed for it."""
        if b'"bytecode":[[' not in self._raw:
            return ()
        return tuple((str(p), str(why)) for p, why in self._snapshot.inventory.get("bytecode", []))

    @cached_property
    def digest(self) -> tuple[str, dict[str, str], str]:
        """(manifest sha256, {name: version}, Python version) of the live venv."""
        remembered = self._recall()
        if remembered is not None:
            return remembered
        rows, dists, _ = self._built
        result = (
            manifest_sha256(render_manifest(rows)),
            dists,
            self._snapshot.description["interpreter"]["version"],
        )
        self._remember(result)
        return result

    def _recall(self) -> tuple[str, dict[str, str], str] | None:
        if self._memo_path is None:
            return None
        try:
            memo = json.loads(self._memo_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("key") != self._key:
            return None
        return str(memo["manifest"]), dict(memo["dists"]), str(memo["python"])

    def _remember(self, result: tuple[str, dict[str, str], str]) -> None:
        if self._memo_path is None:
            return
        data = {"key": self._key, "manifest": result[0], "dists": result[1], "python": result[2]}
        try:
            self._memo_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = private_sibling(self._memo_path)
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self._memo_path)
        except OSError:
            pass  # a memo that cannot be written only costs the next run its shortcut


def snapshot_live(
    workspace: Workspace,
    host: str,
    *,
    use_cache: bool = True,
    jobs: int = 0,
    reporter: Reporter | None = None,
) -> LiveVenv:
    """Run the agent's snapshot on ``host``; ``use_cache=False`` rehashes every file."""
    profile = load_profile(workspace, host)
    # verify also asks for damaged bytecode: the lock does not record .pyc files,
    # but a truncated one breaks its module's import.
    args = snapshot_args(profile.venv, jobs, use_cache, bytecode=True)
    stats: dict[str, int] = {}

    with open_transport(profile) as transport:
        raw = run_agent(transport, profile.venv, args, reporter=reporter, on_stats=stats_keeper(stats))
        # Checked now: an unchanged venv's answer is recognised later without being parsed.
        Snapshot.check_protocol(transport, raw)
    place = hashlib.sha256(f"{workspace.root}\0{host}\0{profile.venv}".encode()).hexdigest()[:16]
    memo = cache_dir() / "verify" / f"{place}-{host}.json" if use_cache else None
    return LiveVenv(transport, raw, stats, memo)


def build_rows(snapshot: Snapshot) -> tuple[tuple[FileEntry, ...], dict[str, str], tuple[str, ...]]:
    """Manifest rows and {name: version} of a snapshot, by the same functions as capture's."""
    owners: dict[str, str] = {}
    warnings: list[str] = []
    rows: list[FileEntry] = []
    dists: dict[str, str] = {}
    for dist in snapshot.description["dists"]:
        dists[canonicalize_name(dist["name"])] = dist["version"]
        rows.extend(collect_files(snapshot.files, dist, owners, warnings).entries)
    rows.extend(scaffold_rows(snapshot.files, owners))
    return tuple(rows), dists, tuple(warnings)
