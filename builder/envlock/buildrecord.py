"""What ``envlock build`` made, and from what: one JSON record per built wheel, in the store.

``store/builds/<wheel sha256>.json`` says which sdist and which exact wheels
of the lock went into the build environment (each by sha256), the toolchain
(nvcc and its CUDA version, the host compiler), the arch flags and every
environment variable set for the build, and the verdict the CUDA reader gave
the result. That is enough to run the same build again and to explain where a
``source = "built"`` package in a lock came from. ``envlock build`` writes
records; the resolver reads them (a store wheel with a record is ``built``).

The store is a directory anyone can write to: a record is read as hostile
input, every field type-checked, and a record whose wheel sha256 is not its
file name is refused.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envlock.errors import EnvlockError
from envlock.store import Store
from envlock.tmpname import create_exclusive, private_sibling

RECORD_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class BuildRecordError(EnvlockError):
    """A build record in the store is unreadable or does not describe its wheel."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildInput:
    """One file that went into a build: the sdist, or a wheel installed into the build environment."""

    role: str  # "sdist"; "locked" (the lock's own wheel); "index" (a build requirement the lock lacks)
    name: str
    version: str
    filename: str
    sha256: str
    url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Toolchain:
    nvcc: str  # the nvcc that ran
    nvcc_version: str  # "13.0.88"
    cuda_version: str  # "13.0"
    cuda_home: str
    compiler: str  # the host C++ compiler's first `--version` line
    compiler_path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRecord:
    package: str
    version: str
    wheel: str  # the built wheel's file name
    sha256: str  # ... and its sha256 (the record's name)
    host: str  # the host profile it was built for
    lock: str  # the lock whose wheels pinned the build environment (workspace-relative)
    lock_digest: str
    gpu: tuple[str, ...]  # compute capabilities built for ("12.0",)
    python: str  # the build environment's interpreter version
    toolchain: Toolchain
    flags: Mapping[str, str]  # the arch variables, as build systems read them
    env: Mapping[str, str]  # every variable the build ran with that envlock set
    inputs: tuple[BuildInput, ...]
    verdicts: Mapping[str, str]  # library in the wheel -> its verdict on the GPU
    log_sha256: str | None = None  # the build log, a store blob
    seconds: float = 0.0
    phases: Mapping[str, float] = field(default_factory=dict)  # seconds per step: sdist, env, build, check
    record_version: int = RECORD_VERSION
    notes: tuple[str, ...] = field(default=())


def record_path(store: Store, sha256: str) -> Path:
    return store.root / "builds" / f"{sha256}.json"


def write_record(store: Store, record: BuildRecord) -> Path:
    path = record_path(store, record.sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_sibling(path, ".part")
    with create_exclusive(tmp) as out:
        out.write((json.dumps(asdict(record), indent=1, sort_keys=True) + "\n").encode())
    os.replace(tmp, path)
    return path


def read_record(store: Store, sha256: str) -> BuildRecord | None:
    """The record of the store wheel with ``sha256``; None when envlock did not build it."""
    if not _SHA256.match(sha256):
        return None
    path = record_path(store, sha256)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BuildRecordError(f"{path}: not a readable build record: {exc}") from exc
    record = _parse(data, str(path))
    if record.sha256 != sha256:
        raise BuildRecordError(f"{path}: sha256: {record.sha256!r} is not the file's name")
    return record


def _parse(data: Any, where: str) -> BuildRecord:
    if not isinstance(data, dict):
        raise BuildRecordError(f"{where}: expected a JSON object")
    if data.get("record_version") != RECORD_VERSION:
        raise BuildRecordError(f"{where}: record_version: expected {RECORD_VERSION}")
    tool = _get(data, "toolchain", dict, where)
    sha = _get(data, "sha256", str, where)
    if not _SHA256.match(sha):
        raise BuildRecordError(f"{where}: sha256: expected 64 hex digits")
    inputs = []
    for i, item in enumerate(_get(data, "inputs", list, where)):
        at = f"{where}: inputs[{i}]"
        if not isinstance(item, dict):
            raise BuildRecordError(f"{at}: expected an object")
        inputs.append(
            BuildInput(
                role=_get(item, "role", str, at),
                name=_get(item, "name", str, at),
                version=_get(item, "version", str, at),
                filename=_get(item, "filename", str, at),
                sha256=_get(item, "sha256", str, at),
                url=_get(item, "url", str, at, required=False),
            )
        )
    log = _get(data, "log_sha256", str, where, required=False)
    return BuildRecord(
        package=_get(data, "package", str, where),
        version=_get(data, "version", str, where),
        wheel=_get(data, "wheel", str, where),
        sha256=sha,
        host=_get(data, "host", str, where),
        lock=_get(data, "lock", str, where),
        lock_digest=_get(data, "lock_digest", str, where),
        gpu=_strings(data, "gpu", where),
        python=_get(data, "python", str, where),
        toolchain=Toolchain(**{k: _get(tool, k, str, f"{where}: toolchain") for k in _TOOLCHAIN_KEYS}),
        flags=_string_map(data, "flags", where),
        env=_string_map(data, "env", where),
        inputs=tuple(inputs),
        verdicts=_string_map(data, "verdicts", where),
        log_sha256=log if log is not None and _SHA256.match(log) else None,
        seconds=float(_get(data, "seconds", (int, float), where)),
        phases=_seconds_map(data, "phases", where),
        notes=_strings(data, "notes", where),
    )


_TOOLCHAIN_KEYS = ("nvcc", "nvcc_version", "cuda_version", "cuda_home", "compiler", "compiler_path")


def _get(table: dict[str, Any], key: str, kind: Any, where: str, required: bool = True) -> Any:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BuildRecordError(f"{where}: {key}: missing or of the wrong type")
    return value


def _strings(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = _get(table, key, list, where)
    if not all(isinstance(v, str) for v in value):
        raise BuildRecordError(f"{where}: {key}: expected a list of strings")
    return tuple(value)


def _seconds_map(table: dict[str, Any], key: str, where: str) -> dict[str, float]:
    value = _get(table, key, dict, where)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
        raise BuildRecordError(f"{where}: {key}: expected numbers")
    return {k: float(v) for k, v in value.items()}


def _string_map(table: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = _get(table, key, dict, where)
    if not all(isinstance(v, str) for v in value.values()):
        raise BuildRecordError(f"{where}: {key}: expected strings")
    return dict(value)
