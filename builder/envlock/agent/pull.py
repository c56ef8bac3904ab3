"""The host fetches artifacts itself: ``pull`` into the same drop as ``receive``.

The controller sends a list of ``{"sha256", "name", "size", "urls"}`` (the
shared store, the indexes the lock names); the host downloads each one it
lacks with urllib (stdlib only), hashing while it writes, and gives it its
final name ``DIR/<sha256>/<name>`` only when the bytes hash right, exactly
as ``receive`` does. What it cannot fetch it reports, and the controller
pushes that instead (an air-gapped host).

Partial files live in ``DIR/.pulling/<sha256>-<name>.part`` under an
exclusive ``flock``: a download cut off (a dropped link, a killed apply)
resumes from where it stopped with an HTTP ``Range`` request when the
server honours it (a 206 whose Content-Range starts at that offset), and
starts over when it does not. A resumed file that hashes wrong is
downloaded once more from zero (the kept part may be what was wrong).

An origin (scheme://host:port) that refuses or times out a connection is
not asked again in this run, so a host without a route to the store gives
up after one connect timeout, not one per artifact.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, List, Optional, Set, Tuple

from envlock.agent.protocol import ProgressEvent, PullAnswer, PulledArtifact, PullFailure, PullItem
from envlock.agent.receive import CHUNK, ReceiveError, _final

CONNECT_TIMEOUT = 20.0  # seconds per socket operation
ATTEMPTS = 3  # per URL: a connection cut mid-file is resumed this many times
MAX_UNSIZED = 64 << 30  # an artifact of unknown size may not exceed this (a server streaming forever)
JOBS = 4


class PullFailed(Exception):
    pass


class _Unreachable(PullFailed):
    """The origin did not answer at all (refused, no route, timed out)."""


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return "%s://%s" % (parts.scheme, parts.netloc)


def _open(url: str, offset: int) -> Tuple[IO[bytes], int]:
    """The response, and the offset its body starts at (0 when the server ignored the Range)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https", "file"):
        raise PullFailed("%s: not an http(s):// or file:// URL" % url)
    request = urllib.request.Request(url, headers={"User-Agent": "envlock-agent"})
    if offset and scheme != "file":
        request.add_header("Range", "bytes=%d-" % offset)
    try:
        response = urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT)
    except urllib.error.HTTPError as exc:
        raise PullFailed("%s: HTTP %d" % (url, exc.code)) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if scheme == "file":
            raise PullFailed("%s: %s" % (url, reason)) from exc
        raise _Unreachable("%s: %s" % (url, reason)) from exc
    status = getattr(response, "status", 200)
    started = 0
    if offset and status == 206:
        content_range = response.headers.get("Content-Range", "")
        if content_range.startswith("bytes %d-" % offset):
            started = offset
    return response, started


def _hash_prefix(path: str, length: int) -> Any:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        left = length
        while left:
            chunk = stream.read(min(CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest


class _LocalWriteFailed(PullFailed):
    """The host's own disk refused the bytes (ENOSPC, EDQUOT, EIO): not the link, no retry."""


def _write(out: IO[bytes], chunk: bytes, part: str) -> None:
    try:
        if chunk:
            out.write(chunk)
        else:
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise _LocalWriteFailed("cannot write %s: %s" % (part, exc.strerror or exc)) from exc


def _download(url: str, part: str, sha: str, size: Optional[int]) -> int:
    """Fill ``part`` with the bytes of ``url``; return the offset it resumed from. Raises on a
    wrong hash or size (the part file is then removed)."""
    limit = size if size is not None else MAX_UNSIZED
    resumed_from = 0
    for attempt in range(ATTEMPTS):
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if have > limit:
            have = 0
        response, start = _open(url, have)
        try:
            digest = _hash_prefix(part, start) if start else hashlib.sha256()
            if attempt == 0:
                resumed_from = start
            written = start
            with open(part, "r+b" if start else "wb") as out:
                out.seek(start)
                out.truncate()
                try:
                    while True:
                        chunk = response.read(CHUNK)
                        if not chunk:
                            break
                        written += len(chunk)
                        if written > limit:
                            raise PullFailed("%s: more than the %d bytes the lock says" % (url, limit))
                        digest.update(chunk)
                        _write(out, chunk, part)
                except (OSError, ValueError, http.client.HTTPException) as exc:  # cut off mid-file: resume
                    if attempt + 1 == ATTEMPTS:
                        raise PullFailed("%s: %s" % (url, exc)) from exc
                    continue
                _write(out, b"", part)  # flush and fsync: ENOSPC may only show here
        finally:
            response.close()
        if size is not None and written < size:
            if attempt + 1 < ATTEMPTS:
                continue  # the server closed early: ask for the rest
            # Kept: the bytes so far are a prefix the next run resumes from (Range), not a
            # final file; a wrong one fails its hash there and is fetched again from zero.
            raise PullFailed("%s: cut off at %d of %d bytes (kept to resume)" % (url, written, size))
        if digest.hexdigest() != sha:
            os.unlink(part)
            if start and attempt + 1 < ATTEMPTS:
                continue  # the kept part may be what was wrong: once more from zero
            raise PullFailed("%s: sha256 %s, the lock says %s; refused" % (url, digest.hexdigest(), sha))
        return resumed_from
    raise PullFailed("%s: gave up after %d attempts" % (url, ATTEMPTS))


class _Puller:
    def __init__(self, directory: str) -> None:
        self.directory = os.path.expanduser(directory)
        self.pulling = os.path.join(self.directory, ".pulling")
        os.makedirs(self.pulling, exist_ok=True)
        self.dead: Set[str] = set()
        self.lock = threading.Lock()

    def fetch(self, item: PullItem) -> Tuple[Optional[PulledArtifact], Optional[PullFailure]]:
        sha, name = item["sha256"], item["name"]
        final = _final(self.directory, sha, name)
        if os.path.isfile(final):
            return None, None
        part = os.path.join(self.pulling, "%s-%s.part" % (sha, name))
        errors: List[str] = []
        with open(part, "ab") as held:
            fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another apply pulling the same file: wait for it
            if os.path.isfile(final):
                return None, None
            for url in item["urls"]:
                origin = _origin(url)
                with self.lock:
                    if origin in self.dead:
                        errors.append("%s: unreachable earlier in this run" % url)
                        continue
                try:
                    resumed = _download(url, part, sha, item["size"])
                except _Unreachable as exc:
                    with self.lock:
                        self.dead.add(origin)
                    errors.append(str(exc))
                    continue
                except _LocalWriteFailed as exc:
                    # The disk is full (or failing): another URL would fill it the same way. The
                    # part is dropped so that the space comes back; it never had a final name.
                    _unlink_quietly(part)
                    errors.append(str(exc))
                    break
                except (PullFailed, OSError) as exc:
                    errors.append(str(exc))
                    continue
                try:
                    os.makedirs(os.path.dirname(final), exist_ok=True)  # a directory needs space too
                    os.replace(part, final)
                except OSError as exc:
                    _unlink_quietly(part)
                    errors.append("cannot write %s: %s" % (final, exc.strerror or exc))
                    break
                got = os.path.getsize(final)
                return {"sha256": sha, "name": name, "size": got, "url": url, "resumed_from": resumed}, None
            if os.path.exists(part) and os.path.getsize(part) == 0:
                os.unlink(part)  # nothing to resume
        return None, {"sha256": sha, "name": name, "error": "; ".join(errors) or "no URL to fetch it from"}


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def pull(directory: str, items: List[PullItem], jobs: int = JOBS) -> PullAnswer:
    for item in items:  # every name checked before anything is fetched
        _final(os.path.expanduser(directory), item["sha256"], item["name"])
        for url in item["urls"]:
            if not isinstance(url, str) or "\n" in url:
                raise ReceiveError("refusing URL %r" % (url,))
    puller = _Puller(directory)
    answer: PullAnswer = {"pulled": [], "failed": []}
    total = sum(item["size"] or 0 for item in items)
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, (pulled, failed) in enumerate(pool.map(puller.fetch, items)):  # in order, as they end
            item = items[i]
            if pulled is not None:
                answer["pulled"].append(pulled)
            if failed is not None:
                answer["failed"].append(failed)
            done += item["size"] or 0
            _progress(done, total, item["name"])
    return answer


def _progress(done: int, total: int, detail: str) -> None:
    """An ``@progress`` line (``ProgressEvent``) on stderr, as the other host commands write."""
    event: ProgressEvent = {"phase": "pull", "done": done, "total": total, "detail": detail}
    sys.stderr.write("@progress " + json.dumps(event) + "\n")
    sys.stderr.flush()
