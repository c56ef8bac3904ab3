"""Push artifacts to a host's content-addressed drop (``DIR/<sha256>/<name>``).

One ``have`` round trip finds what is already there, so a re-run sends only
what is missing; the rest streams over one agent process, each file checked
against its sha256 on arrival before it takes its final name.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envlock.agent.protocol import HaveAnswer
from envlock.errors import EnvlockError
from envlock.reporter import Reporter
from envlock.tmpname import private_sibling
from envlock.transport import Transport, run_agent
from envlock.transport.local import LocalTransport

DEFAULT_REMOTE_DIR = "~/.cache/envlock/artifacts"


@dataclass(frozen=True, slots=True)
class Item:
    sha256: str
    name: str
    path: Path

    @property
    def key(self) -> str:
        return f"{self.sha256}/{self.name}"


@dataclass(frozen=True, slots=True)
class PushResult:
    sent: tuple[Item, ...]
    already_there: tuple[Item, ...]

    @property
    def bytes_sent(self) -> int:
        return sum(item.path.stat().st_size for item in self.sent)


def uv_binary() -> Path:
    """The uv that envlock itself depends on (shipped to hosts as one file)."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return beside
    found = shutil.which("uv")
    if found is None:
        raise EnvlockError("uv not found beside envlock's Python nor on PATH (pip install uv)")
    return Path(found)


def push(
    transport: Transport,
    venv: str,
    items: Sequence[Item],
    remote_dir: str = DEFAULT_REMOTE_DIR,
    reporter: Reporter | None = None,
    python: str | None = None,
) -> PushResult:
    """Make every item present on the host; return what had to be sent."""
    unique = list({i.key: i for i in items}.values())
    if isinstance(transport, LocalTransport):
        return _push_local(unique, remote_dir)
    answer = run_agent(
        transport, venv, ["have", "--dir", remote_dir, *(i.key for i in unique)], python=python
    )
    have: HaveAnswer = json.loads(answer)
    present = set(have["present"])
    missing = [i for i in unique if i.key not in present]
    if missing:
        read_end, write_end = os.pipe()
        writer = threading.Thread(target=_write_frames, args=(write_end, missing, reporter), daemon=True)
        writer.start()
        try:
            with os.fdopen(read_end, "rb") as stdin:
                run_agent(transport, venv, ["receive", "--dir", remote_dir], stdin=stdin, python=python)
        finally:
            writer.join()
    return PushResult(tuple(missing), tuple(i for i in unique if i.key in present))


def _push_local(items: list[Item], remote_dir: str) -> PushResult:
    """Same machine: hard-link (or copy) into the drop, no agent, no second copy of the bytes.

    The items were hashed when they were fetched into the store, so the drop
    keeps its rule that a final name only ever holds the named bytes.
    """
    root = Path(os.path.expanduser(remote_dir))
    sent, present = [], []
    for item in items:
        final = root / item.sha256 / item.name
        if final.is_file():
            present.append(item)
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = private_sibling(final, ".part")
        try:
            os.link(item.path, tmp)
        except OSError:
            shutil.copyfile(item.path, tmp)
        os.replace(tmp, final)
        sent.append(item)
    return PushResult(tuple(sent), tuple(present))


def _write_frames(fd: int, items: list[Item], reporter: Reporter | None) -> None:
    total = sum(i.path.stat().st_size for i in items)
    done = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for item in items:
                size = item.path.stat().st_size
                header = {"sha256": item.sha256, "name": item.name, "size": size}
                out.write(json.dumps(header).encode() + b"\n")
                with open(item.path, "rb") as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                        done += len(chunk)
                        if reporter is not None:
                            reporter.progress("push", done, total, "")
    except BrokenPipeError:
        pass  # the agent died; run_agent reports why
