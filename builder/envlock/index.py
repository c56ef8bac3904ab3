"""Simple-repository client: PEP 691 JSON and PEP 503 HTML, http(s) and file://.

Also reads pip-style find-links (a directory or an HTML page of links). Used
to find the exact wheel a distribution was installed from, its URL and
sha256, and to read that wheel's RECORD without downloading it when the
server honours HTTP range requests (a zip's central directory sits at its end).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urldefrag, urljoin, urlparse

from packaging.utils import canonicalize_name

from envlock.errors import IndexError_

if TYPE_CHECKING:
    import requests

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
TIMEOUT = 30


@dataclass(frozen=True, slots=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    source: str  # the index or find-links location that listed it
    yanked: bool = False
    requires_python: str | None = None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def _file_from_link(href: str, page_url: str, source: str, attrs: dict[str, Any]) -> IndexFile:
    absolute = urljoin(page_url, href)
    url, fragment = urldefrag(absolute)
    sha = None
    if fragment.startswith("sha256="):
        sha = fragment[len("sha256=") :]
    filename = unquote(urlparse(url).path.rsplit("/", 1)[-1])
    yanked = attrs.get("data-yanked") is not None
    return IndexFile(filename, url, sha, source, yanked, attrs.get("data-requires-python"))


def parse_html(text: str, page_url: str, source: str) -> list[IndexFile]:
    parser = _Links()
    parser.feed(text)
    return [_file_from_link(href, page_url, source, a) for a in parser.anchors if (href := a.get("href"))]


def parse_json(data: dict[str, Any], page_url: str, source: str) -> list[IndexFile]:
    files = []
    for item in data.get("files", []):
        url = urljoin(page_url, item["url"])
        yanked = bool(item.get("yanked"))
        sha = (item.get("hashes") or {}).get("sha256")
        files.append(
            IndexFile(
                item["filename"],
                urldefrag(url)[0],
                sha,
                source,
                yanked,
                item.get("requires-python"),
            )
        )
    return files


def _local_path(url: str) -> Path:
    return Path(unquote(urlparse(url).path))


class IndexClient:
    """Lists a project's files across several indexes and find-links."""

    def __init__(self, urls: tuple[str, ...], find_links: tuple[str, ...] = ()) -> None:
        self.urls = urls
        self.find_links = find_links
        self._session: requests.Session | None = None
        self._flat: dict[str, list[IndexFile]] = {}

    @property
    def session(self) -> requests.Session:
        # requests costs ~60 ms to import; file:// indexes never need it.
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    def files(self, project: str) -> list[IndexFile]:
        name = canonicalize_name(project)
        found: list[IndexFile] = []
        for base in self.urls:
            found.extend(self._project_page(base, name))
        for location in self.find_links:
            found.extend(f for f in self._flat_links(location) if _project_of(f.filename) == name)
        return found

    def _project_page(self, base: str, name: str) -> list[IndexFile]:
        page = base.rstrip("/") + f"/{name}/"
        if base.startswith("file://"):
            root = _local_path(base)
            if not root.is_dir():
                raise IndexError_(f"index {base}: no such directory")
            for candidate in ("index.json", "index.html"):
                path = _local_path(page) / candidate
                if path.is_file():
                    text = path.read_text(encoding="utf-8")
                    if candidate.endswith(".json"):
                        return parse_json(json.loads(text), page, base)
                    return parse_html(text, page, base)
            return []
        try:
            response = self.session.get(page, headers={"Accept": ACCEPT}, timeout=TIMEOUT)
        except _request_errors() as exc:
            raise IndexError_(f"index {base}: unreachable: {_short(exc)}") from exc
        if response.status_code == 404:
            return []
        if response.status_code >= 400:
            raise IndexError_(f"index {base}: HTTP {response.status_code} for {page}")
        kind = response.headers.get("Content-Type", "")
        if "json" in kind:
            return parse_json(response.json(), response.url, base)
        return parse_html(response.text, response.url, base)

    def _flat_links(self, location: str) -> list[IndexFile]:
        if location in self._flat:
            return self._flat[location]
        files: list[IndexFile] = []
        if location.startswith(("http://", "https://")):
            try:
                response = self.session.get(location, timeout=TIMEOUT)
                response.raise_for_status()
            except _request_errors() as exc:
                raise IndexError_(f"find-links {location}: unreachable: {_short(exc)}") from exc
            files = parse_html(response.text, response.url, location)
        else:
            directory = _local_path(location) if location.startswith("file://") else Path(location)
            if directory.is_dir():
                for entry in sorted(os.listdir(directory)):
                    if entry.endswith(".whl"):
                        files.append(IndexFile(entry, (directory / entry).as_uri(), None, location))
        self._flat[location] = files
        return files

    # ------------------------------------------------------------ wheel access

    def open_wheel(self, file: IndexFile) -> IO[bytes]:
        """A seekable binary stream over the wheel: local file, HTTP ranges, or a download."""
        if file.url.startswith("file://"):
            path = _local_path(file.url)
            try:
                return open(path, "rb")
            except OSError as exc:
                raise IndexError_(f"{file.url}: cannot read: {exc.strerror}") from exc
        return _HttpWheel.open(self.session, file.url)

    def wheel_sha256(self, file: IndexFile) -> str:
        if file.sha256:
            return file.sha256
        with self.open_wheel(file) as stream:
            digest = hashlib.sha256()
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def read_record(self, file: IndexFile) -> list[list[str]]:
        """Rows of the wheel's ``*.dist-info/RECORD``."""
        import csv

        try:
            with self.open_wheel(file) as stream, zipfile.ZipFile(stream) as archive:
                names = [
                    n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")
                ]
                if len(names) != 1:
                    raise IndexError_(f"{file.url}: wheel has no single .dist-info/RECORD")
                text = archive.read(names[0]).decode("utf-8")
        except (zipfile.BadZipFile, OSError) as exc:
            raise IndexError_(f"{file.url}: not a readable wheel: {exc}") from exc
        return [row for row in csv.reader(io.StringIO(text)) if row]


def _request_errors() -> type[Exception]:
    import requests

    return requests.RequestException


def _project_of(filename: str) -> str | None:
    if not filename.endswith(".whl"):
        return None
    return canonicalize_name(filename.split("-", 1)[0])


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."


class _HttpWheel(io.RawIOBase):
    """Seekable reader over HTTP range requests (falls back to a download)."""

    def __init__(self, session: requests.Session, url: str, size: int) -> None:
        super().__init__()
        self.session, self.url, self.size, self.pos = session, url, size, 0

    @classmethod
    def open(cls, session: requests.Session, url: str) -> IO[bytes]:
        try:
            head = session.head(url, timeout=TIMEOUT, allow_redirects=True)
            head.raise_for_status()
            if head.headers.get("Accept-Ranges") == "bytes" and "Content-Length" in head.headers:
                raw = cls(session, head.url, int(head.headers["Content-Length"]))
                return io.BufferedReader(raw, buffer_size=1 << 16)
            response = session.get(url, timeout=TIMEOUT, stream=True)
            response.raise_for_status()
        except _request_errors() as exc:
            raise IndexError_(f"{url}: cannot fetch: {_short(exc)}") from exc
        spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
        for chunk in response.iter_content(1 << 20):
            spool.write(chunk)
        spool.seek(0)
        return spool

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        if self.pos >= self.size:
            return 0
        end = min(self.size, self.pos + len(buffer)) - 1
        response = self.session.get(self.url, headers={"Range": f"bytes={self.pos}-{end}"}, timeout=TIMEOUT)
        if response.status_code != 206:
            raise OSError(f"range request answered HTTP {response.status_code}")
        data = response.content
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)
