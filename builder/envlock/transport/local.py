"""The local host: the agent runs as a subprocess of the venv's own Python."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from envlock.errors import EnvlockError
from envlock.transport.bundle import bundle_dir
from envlock.workspace import cache_dir


@dataclass
class LocalTransport:
    host: str

    def agent_argv(self, venv: str, args: list[str], python: str | None = None) -> list[str]:
        if python is not None:
            if not os.path.exists(python):
                raise EnvlockError(f"host {self.host}: no Python at {python}")
            return [python, "-I", str(bundle_dir(cache_dir())), *args]
        python = os.path.join(venv, "bin", "python")
        if not os.path.exists(python):
            if not os.path.isdir(venv):
                raise EnvlockError(f"host {self.host}: venv {venv}: no such directory")
            raise EnvlockError(f"host {self.host}: {venv} is not a venv (no bin/python)")
        return [python, "-I", str(bundle_dir(cache_dir())), *args]

    def diagnose(
        self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None
    ) -> EnvlockError | None:
        return None

    def repair(self, venv: str, returncode: int, stderr_lines: list[str], python: str | None = None) -> bool:
        return False

    def run_shell(self, script: str, args: list[str]) -> bytes:
        proc = subprocess.run(
            ["sh", "-c", script, "envlock", *args], stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
        return proc.stdout

    def stale_agent_fix(self) -> str:
        unpacked = bundle_dir(cache_dir())
        return f"remove {unpacked} and {unpacked}.pyz (envlock builds them again from its own code)"

    def close(self) -> None:
        return None
