"""Repack distributions on the host into the store, reusing earlier repacks."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envlock.agent.protocol import DistFacts
from envlock.capture.files import DistFiles
from envlock.errors import CaptureError
from envlock.lock.digest import tree_digest
from envlock.lock.model import Artifact
from envlock.store import Store
from envlock.tmpname import private_sibling
from envlock.transport import Transport, run_agent
from envlock.workspace import Workspace, cache_dir


def repack_key(dist: DistFacts, files: DistFiles) -> str:
    """Same dist-info, same RECORD, same live bytes: the same repacked wheel."""
    text = "|".join([dist["dist_info"], dist["record_sha256"], tree_digest(files.entries)])
    return hashlib.sha256(text.encode()).hexdigest()


def repack_dists(
    workspace: Workspace,
    transport: Transport,
    venv: str,
    wanted: list[tuple[DistFacts, DistFiles]],
    store: Store,
    step: Callable[[str], None],
    use_cache: bool,
) -> dict[str, Artifact]:
    """Repacked wheels by dist-info name; reuses store wheels whose content key matches."""
    cache_path = cache_dir() / "repack.json"
    known: dict[str, Any] = {}
    if use_cache and cache_path.is_file():
        try:
            known = json.loads(cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = {}
    result: dict[str, Artifact] = {}
    todo: list[str] = []
    keys: dict[str, str] = {}
    for dist, files in wanted:
        key = keys[dist["dist_info"]] = repack_key(dist, files)
        hit = known.get(key)
        if hit and store.has_wheel(hit["sha256"], hit["filename"]):
            result[dist["dist_info"]] = store_artifact(
                workspace, store, hit["filename"], hit["sha256"], hit["size"]
            )
        else:
            todo.append(dist["dist_info"])
    if todo:
        step(f"repack {len(todo)} distribution(s) into the store")
        raw = run_agent(transport, venv, ["repack", "--venv", venv, *todo])
        pos = 0
        while pos < len(raw):
            end = raw.index(b"\n", pos)
            header = json.loads(raw[pos:end])
            data = raw[end + 1 : end + 1 + header["size"]]
            pos = end + 1 + header["size"]
            _path, sha = store.put_wheel(data, header["filename"], expected_sha256=header["sha256"])
            result[header["dist_info"]] = store_artifact(workspace, store, header["filename"], sha, len(data))
            known[keys[header["dist_info"]]] = {
                "filename": header["filename"],
                "sha256": sha,
                "size": len(data),
            }
        missing = set(todo) - set(result)
        if missing:
            raise CaptureError(f"host {transport.host}: agent did not repack {', '.join(sorted(missing))}")
        if use_cache:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = private_sibling(cache_path)
            tmp.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            os.replace(tmp, cache_path)
    return result


def store_artifact(workspace: Workspace, store: Store, filename: str, sha: str, size: int) -> Artifact:
    relative = os.path.relpath(store.wheel_path(sha, filename), workspace.locks_dir)
    return Artifact(filename=filename, sha256=sha, size=size, path=Path(relative).as_posix())
