"""Hash every file of a venv in parallel, skipping files a stat cache vouches for.

hashlib releases the GIL while it digests buffers, so threads give real
parallel hashing for large files; small files cost a Python-level open/read
each, which is why the stat cache matters for warm runs. The cache key is
(size, mtime_ns, inode, ctime_ns): any write, replace or chmod changes one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple

from envlock.agent.layout import is_library_name
from envlock.agent.protocol import HashStats, ProgressEvent
from envlock.binary.elf import ElfError, is_elf, read_elf_facts

CHUNK = 1 << 20
CACHE_VERSION = 2
# (size, mtime_ns, ino, ctime_ns, sha256, elf facts or None)
CacheEntry = List[Any]


class UnreadableFile(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: cannot read: {reason}")
        self.path = path


def _stat_key(st: os.stat_result) -> List[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _hash_file(path: str, want_elf: bool) -> Tuple[str, Optional[Dict[str, Any]]]:
    digest = hashlib.sha256()
    facts: Optional[Dict[str, Any]] = None
    try:
        with open(path, "rb", buffering=0) as stream:
            # read() per chunk, not readinto() a preallocated buffer: most
            # files are small, and zeroing a 1 MiB buffer per file costs more
            # than the hashing itself.
            chunk = stream.read(CHUNK)
            if want_elf and is_elf(chunk[:4]):
                facts = _elf_facts(stream)
                stream.seek(len(chunk))
            while chunk:
                digest.update(chunk)
                chunk = stream.read(CHUNK)
    except OSError as exc:
        raise UnreadableFile(path, exc.strerror or str(exc)) from exc
    return digest.hexdigest(), facts


def _elf_facts(stream: Any) -> Dict[str, Any]:
    try:
        return read_elf_facts(stream)
    except ElfError as exc:
        return {"error": str(exc)}


class StatCache:
    """Per-venv JSON file on the host, in the user's cache directory."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self.entries: Dict[str, CacheEntry] = {}
        if path and os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as stream:
                    data = json.load(stream)
                if isinstance(data, dict) and data.get("version") == CACHE_VERSION:
                    entries = data["entries"]
                    self.entries = entries if isinstance(entries, dict) else {}
            except (OSError, ValueError, KeyError):
                self.entries = {}  # a damaged cache only costs a cold run

    def lookup(self, rel: str, st: os.stat_result) -> Optional[CacheEntry]:
        entry = self.entries.get(rel)
        if isinstance(entry, list) and entry[:4] == _stat_key(st):
            return entry
        return None

    def save(self, entries: Dict[str, CacheEntry]) -> None:
        """Best effort: a cache that cannot be written (a full disk) costs the next run a cold
        hash, and must not fail an apply whose venv is already live."""
        if not self.path:
            return
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # json.dumps runs the C encoder; json.dump to a stream does not.
            with open(tmp, "w", encoding="utf-8") as stream:
                stream.write(json.dumps({"version": CACHE_VERSION, "entries": entries}))
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class Progress:
    """Throttled ``@progress`` lines on stderr for the controller's bar."""

    def __init__(self, total_bytes: int, total_files: int) -> None:
        self.total_bytes = total_bytes
        self.total_files = total_files
        self.done_bytes = 0
        self.done_files = 0
        self.lock = threading.Lock()
        self.last = 0.0

    def advance(self, nbytes: int) -> None:
        with self.lock:
            self.done_bytes += nbytes
            self.done_files += 1
            now = time.monotonic()
            if now - self.last < 0.1 and self.done_files != self.total_files:
                return
            self.last = now
            line: ProgressEvent = {
                "phase": "hash",
                "done": self.done_bytes,
                "total": self.total_bytes,
                "detail": "%d/%d files" % (self.done_files, self.total_files),
            }
        sys.stderr.write("@progress " + json.dumps(line) + "\n")
        sys.stderr.flush()


def hash_files(
    root: str,
    files: List[Tuple[str, os.stat_result]],
    cache: StatCache,
    jobs: int,
    on_hashed: Optional[Callable[[int], None]] = None,
    read_elf: bool = True,
) -> Tuple[Dict[str, CacheEntry], HashStats]:
    """Return ``{rel: [size, mtime, ino, ctime, sha256, elf]}`` for regular files."""
    result: Dict[str, CacheEntry] = {}
    todo: List[Tuple[str, os.stat_result]] = []
    for rel, st in files:
        entry = cache.lookup(rel, st)
        if entry is not None:
            result[rel] = entry
        else:
            todo.append((rel, st))
    progress = Progress(sum(st.st_size for _, st in todo), len(todo))

    def work(item: Tuple[str, os.stat_result]) -> Tuple[str, CacheEntry]:
        rel, st = item
        sha, facts = _hash_file(os.path.join(root, rel), read_elf and is_library_name(rel))
        progress.advance(st.st_size)
        return rel, [*_stat_key(st), sha, facts]

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for rel, entry in pool.map(work, todo):
                result[rel] = entry
    stats: HashStats = {
        "hashed": len(todo),
        "cached": len(files) - len(todo),
        "bytes_hashed": progress.done_bytes,
    }
    return result, stats
