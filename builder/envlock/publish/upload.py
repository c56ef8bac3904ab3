"""A private index as twine and ``uv publish`` see it: the legacy upload API and its simple pages.

Upload: one ``multipart/form-data`` POST per file to the index's upload URL
(``:action=file_upload``, ``protocol_version=1``, the wheel's core metadata
fields, ``filetype=bdist_wheel``, ``pyversion``, its sha256, md5 and
blake2-256 digests, and the file as ``content``), streamed from disk with a
Content-Length so a multi-gigabyte wheel never sits in memory. Check: the
index's simple page for the project (PEP 691 JSON or PEP 503 HTML), read
with the same parser as every other index.
"""

from __future__ import annotations

import email.parser
import hashlib
import re
import secrets
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from envlock.errors import PublishError
from envlock.index import ACCEPT, IndexFile, parse_html, parse_json
from envlock.publish.credentials import Credentials, redact

if TYPE_CHECKING:
    import requests

TIMEOUT = 60
CHUNK = 1 << 20

# Core metadata headers whose form field is not the header's lower-cased snake_case name.
_FIELD_NAMES = {"classifier": "classifiers", "project_url": "project_urls", "license_file": "license_files"}
_MULTIPLE = {
    "classifiers", "platform", "supported_platform", "requires_dist", "provides_extra", "project_urls",
    "requires_external", "provides_dist", "obsoletes_dist", "dynamic", "license_files",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Digests:
    sha256: str
    md5: str
    blake2_256: str
    size: int


def digests(path: Path) -> Digests:
    sha, md5, blake = hashlib.sha256(), hashlib.md5(usedforsecurity=False), hashlib.blake2b(digest_size=32)
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK):
            sha.update(chunk)
            md5.update(chunk)
            blake.update(chunk)
            size += len(chunk)
    return Digests(sha.hexdigest(), md5.hexdigest(), blake.hexdigest(), size)


def wheel_fields(path: Path, filename: str) -> list[tuple[str, str]]:
    """The form fields of a wheel's core metadata (what twine sends), read from its METADATA."""
    try:
        name, _version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise PublishError(f"{filename}: not a wheel file name: {exc}") from exc
    try:
        with zipfile.ZipFile(path) as archive:
            found = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(found) != 1:
                raise PublishError(f"{filename}: no single .dist-info/METADATA in the wheel")
            text = archive.read(found[0]).decode("utf-8")
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
        raise PublishError(f"{filename}: not a readable wheel: {exc}") from exc
    message = email.parser.Parser().parsestr(text)
    if canonicalize_name(message.get("Name", "")) != name:
        raise PublishError(f"{filename}: METADATA names {message.get('Name')!r}, the file name {name!r}")
    fields: list[tuple[str, str]] = []
    seen: set[str] = set()
    for header, value in message.items():
        key = header.lower().replace("-", "_")
        key = _FIELD_NAMES.get(key, key)
        if key in _MULTIPLE or key not in seen:  # a repeated single-valued header: the first counts
            fields.append((key, str(value)))
            seen.add(key)
    body = message.get_payload()
    if isinstance(body, str) and body.strip() and "description" not in seen:
        fields.append(("description", body))
    pyversions = sorted({tag.interpreter for tag in tags})
    fields.append(("pyversion", ".".join(pyversions)))
    return fields


class _Body:
    """A multipart/form-data body streamed from its parts: bytes, and one file read in chunks.

    ``requests`` sends an object with ``read`` and ``__len__`` as a stream with
    a Content-Length (some indexes refuse chunked uploads).
    """

    def __init__(self, head: bytes, path: Path, tail: bytes, on_read: Callable[[int], None]) -> None:
        self.head, self.path, self.tail, self.on_read = head, path, tail, on_read
        self.length = len(head) + path.stat().st_size + len(tail)
        self._parts = self._chunks()
        self._pending = b""

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks()

    def _chunks(self) -> Iterator[bytes]:
        yield self.head
        with open(self.path, "rb") as stream:
            while chunk := stream.read(CHUNK):
                self.on_read(len(chunk))
                yield chunk
        yield self.tail

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._pending) < size:
            chunk = next(self._parts, None)
            if chunk is None:
                break
            self._pending += chunk
        if size < 0:
            size = len(self._pending)
        out, self._pending = self._pending[:size], self._pending[size:]
        return out


def _quoted(value: str) -> str:
    if any(ch in value for ch in '"\r\n\\'):
        raise PublishError(f"{value!r}: not a name a multipart form can carry")
    return value


def multipart(
    fields: list[tuple[str, str]], path: Path, filename: str, on_read: Callable[[int], None]
) -> tuple[_Body, str]:
    boundary = secrets.token_hex(16)
    head = b""
    for key, value in fields:
        head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(key)}"\r\n\r\n'.encode()
            + value.encode("utf-8")
            + b"\r\n"
        )
    head += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"; filename="{_quoted(filename)}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return _Body(head, path, tail, on_read), f"multipart/form-data; boundary={boundary}"


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rsplit("@", 1)[-1]


class PrivateIndex:
    """One index: its upload URL, its simple pages (``check_url``), the credentials for both."""

    def __init__(self, upload_url: str, check_url: str | None, credentials: Credentials) -> None:
        import requests

        self.upload_url = upload_url
        self.shown = redact(upload_url)
        self.credentials = credentials
        self.session: requests.Session = requests.Session()
        self._check_url = check_url

    def _auth_for(self, url: str) -> tuple[str, str] | None:
        # The upload credentials go to the upload URL's own server only.
        return self.credentials.auth if _origin(url) == _origin(self.upload_url) else None

    def _get(self, url: str, what: str, stream: bool = False) -> requests.Response:
        import requests

        try:
            return self.session.get(
                url, headers={"Accept": ACCEPT}, auth=self._auth_for(url), timeout=TIMEOUT, stream=stream
            )
        except requests.RequestException as exc:
            raise PublishError(f"index {self.shown}: unreachable reading {what}: {_short(exc)}") from exc

    @property
    def check_url(self) -> str:
        """The index's simple API root: given, else devpi's ``+simple/``, else ``simple/`` beside the
        upload URL (Artifactory, Nexus, GitLab), whichever answers."""
        if self._check_url is None:
            base = self.upload_url.rstrip("/") + "/"
            tried = [base + "+simple/", base + "simple/"]
            for candidate in tried:
                with self._get(candidate, redact(candidate), stream=True) as response:
                    if response.status_code < 300:
                        self._check_url = candidate
                        break
                    self._refused(response, redact(candidate))
            else:
                raise PublishError(
                    f"index {self.shown}: no simple index at {' or '.join(redact(t) for t in tried)}; "
                    "give its simple URL with --check-url (or [publish] check-url in envlock.toml)"
                )
        assert self._check_url is not None
        return self._check_url

    def _refused(self, response: requests.Response, what: str) -> None:
        if response.status_code in (401, 403):
            raise PublishError(
                f"index {self.shown}: HTTP {response.status_code} reading {what} "
                f"({self.credentials.who}): wrong or missing credentials"
            )

    def listed(self, project: str) -> dict[str, IndexFile]:
        """The files the index lists for ``project``, by file name (URLs without credentials)."""
        page = self.check_url.rstrip("/") + f"/{canonicalize_name(project)}/"
        shown = redact(page)
        response = self._get(page, shown)
        if response.status_code == 404:
            return {}
        self._refused(response, shown)
        if response.status_code >= 400:
            raise PublishError(f"index {self.shown}: HTTP {response.status_code} reading {shown}")
        try:
            if "json" in response.headers.get("Content-Type", ""):
                files = parse_json(response.json(), response.url, self.shown)
            else:
                files = parse_html(response.text, response.url, self.shown)
        except (ValueError, KeyError, TypeError) as exc:
            raise PublishError(f"index {self.shown}: {shown} is not a simple page: {_short(exc)}") from exc
        return {f.filename: _without_credentials(f) for f in files}

    def sha256_of(self, file: IndexFile, size: int | None = None) -> str:
        """A listed file's sha256 when the page gives none: download and hash it. With ``size``
        (the lock's), a body longer than that is other bytes: the download stops there (an
        index streaming without end would otherwise be read to the end of time)."""
        response = self._get(file.url, file.filename, stream=True)
        with response:
            if response.status_code >= 400:
                raise PublishError(f"index {self.shown}: HTTP {response.status_code} for {redact(file.url)}")
            digest = hashlib.sha256()
            read = 0
            for chunk in response.iter_content(CHUNK):
                read += len(chunk)
                if size is not None and read > size:
                    raise PublishError(
                        f"{file.filename}: index {self.shown} serves more than the lock's {size} bytes "
                        f"under this name at {redact(file.url)}: other bytes; an index never replaces a file"
                    )
                digest.update(chunk)
        return digest.hexdigest()

    def upload(
        self, path: Path, filename: str, sums: Digests, on_read: Callable[[int], None]
    ) -> Literal["uploaded", "exists"]:
        """POST one wheel; ``"exists"`` when the index already holds a file of that name."""
        import requests

        fields = [
            (":action", "file_upload"),
            ("protocol_version", "1"),
            *wheel_fields(path, filename),
            ("filetype", "bdist_wheel"),
            ("sha256_digest", sums.sha256),
            ("md5_digest", sums.md5),
            ("blake2_256_digest", sums.blake2_256),
        ]
        body, content_type = multipart(fields, path, filename, on_read)
        try:
            response = self.session.post(
                self.upload_url,
                data=body,  # a stream with a length: see _Body
                headers={"Content-Type": content_type},
                auth=self.credentials.auth,
                timeout=TIMEOUT,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise PublishError(f"index {self.shown}: upload of {filename} failed: {_short(exc)}") from exc
        status = response.status_code
        if status in (401, 403):
            raise PublishError(
                f"index {self.shown}: HTTP {status} uploading {filename} ({self.credentials.who}): "
                "wrong credentials, or no upload rights on this index"
            )
        if status == 409 or (status == 400 and "exist" in (response.reason or "").lower()):
            return "exists"
        if status >= 300:
            raise PublishError(
                f"index {self.shown}: upload of {filename} refused: "
                f"HTTP {status} {_short(response.reason or '')}"
            )
        return "uploaded"


def _without_credentials(file: IndexFile) -> IndexFile:
    return replace(file, url=redact(file.url))


# "scheme://user:password@": requests quotes the whole URL in some errors ("Failed to parse: ...").
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]*@")


def _short(exc: object) -> str:
    """The first line of an exception's text, for a message: any URL's user and password cut out."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = _USERINFO.sub(r"\1", text)
    return text if len(text) < 160 else text[:157] + "..."
