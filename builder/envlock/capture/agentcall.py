"""The agent's ``snapshot`` call, shared by capture and verify."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from envlock.agent.protocol import AGENT_PROTOCOL, HashStats, Inventory, VenvDescription
from envlock.capture.files import LiveFiles
from envlock.errors import AgentError
from envlock.transport import StatsCallback, Transport, agent_answer


def snapshot_args(venv: str, jobs: int = 0, use_cache: bool = True, bytecode: bool = False) -> list[str]:
    args = ["snapshot", "--venv", venv] + (["--bytecode"] if bytecode else [])
    if jobs:
        args += ["--jobs", str(jobs)]
    if not use_cache:
        args.append("--no-cache")
    return args


@dataclass(frozen=True)
class Snapshot:
    """The agent's two snapshot lines: the venv's description, then its inventory."""

    description: VenvDescription
    inventory: Inventory

    @classmethod
    def parse(cls, transport: Transport, raw: bytes) -> Snapshot:
        """Both lines of a snapshot answer, the protocol version checked."""
        described, _, rest = raw.partition(b"\n")
        description: VenvDescription = agent_answer(transport, described, "snapshot")
        try:
            inventory: Inventory = json.loads(rest)
        except ValueError as exc:
            raise AgentError(
                f"host {transport.host}: the agent's snapshot inventory is not JSON: {exc}"
            ) from exc
        return cls(description, inventory)

    @staticmethod
    def check_protocol(transport: Transport, raw: bytes) -> None:
        """Refuse a snapshot answer from an agent of another protocol, without parsing all of it.

        The description leads with ``protocol`` (the agent writes its keys in
        order); only an answer that does not start with this envlock's is
        parsed, to say which version the agent speaks.
        """
        if not raw.startswith(b'{"protocol":%d,' % AGENT_PROTOCOL):
            agent_answer(transport, raw.partition(b"\n")[0], "snapshot")

    @cached_property
    def files(self) -> LiveFiles:
        """Files and links by path, built once for every distribution's lookups."""
        return LiveFiles.of(self.description, self.inventory)


def stats_keeper(stats: dict[str, int]) -> StatsCallback:
    """An ``on_stats`` callback that keeps the agent's ``@stats`` line in ``stats``."""

    def keep(got: HashStats) -> None:
        stats.update(hashed=got["hashed"], cached=got["cached"], bytes_hashed=got["bytes_hashed"])

    return keep
