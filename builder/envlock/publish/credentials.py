"""Upload credentials, found where twine and ``uv publish`` look for them.

In order: ``--username``/``--password`` (``--token`` for a token), then
``UV_PUBLISH_TOKEN``, ``UV_PUBLISH_USERNAME``/``UV_PUBLISH_PASSWORD``, then
``TWINE_USERNAME``/``TWINE_PASSWORD``, then the ``~/.pypirc`` section whose
``repository`` is the index, then a user name and password in the index URL
itself. A token is sent as twine and uv send it: user ``__token__``. The
password is never part of any message: ``Credentials.who`` says only where
they came from and for which user.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

TOKEN_USER = "__token__"


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str | None
    password: str | None = field(default=None, repr=False)
    origin: str = "none"  # where they came from: a flag, an environment variable, ~/.pypirc

    @property
    def auth(self) -> tuple[str, str] | None:
        if self.username is None and self.password is None:
            return None
        return (self.username or "", self.password or "")

    @property
    def who(self) -> str:
        """For messages: the user and where the credentials came from, never the password."""
        if self.auth is None:
            return "no credentials"
        return f"user {self.username or '(none)'} from {self.origin}"


def redact(url: str) -> str:
    """The URL without any user name or password in it (for messages and the lock)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unbalanced "[": cut any user info out of the text itself
        scheme, sep, rest = url.partition("://")
        authority, slash, tail = rest.partition("/")
        return scheme + sep + authority.rpartition("@")[2] + slash + tail
    if "@" not in parts.netloc:
        return url
    # The text after the last "@", as written: parts.port raises on a bad port ("h:99999"),
    # and a message about a bad URL must not become a traceback that shows the password.
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _same_index(a: str, b: str) -> bool:
    return redact(a).rstrip("/") == redact(b).rstrip("/")


def _from_pypirc(index: str, path: Path) -> Credentials | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return None  # twine ignores an unreadable file too; the upload then says who was refused
    for section in parser.sections():
        repository = parser.get(section, "repository", fallback=None)
        if repository and _same_index(repository, index):
            username = parser.get(section, "username", fallback=None)
            password = parser.get(section, "password", fallback=None)
            if username is not None or password is not None:
                return Credentials(username, password, f"{path} [{section}]")
    return None


def find_credentials(
    index: str,
    username: str | None = None,
    password: str | None = None,
    token: str | None = None,
    environ: Mapping[str, str] | None = None,
    pypirc: Path | None = None,
) -> Credentials:
    env = os.environ if environ is None else environ
    if token is not None:
        return Credentials(TOKEN_USER, token, "--token")
    if username is not None or password is not None:
        return Credentials(username, password, "--username/--password")
    if env.get("UV_PUBLISH_TOKEN"):
        return Credentials(TOKEN_USER, env["UV_PUBLISH_TOKEN"], "UV_PUBLISH_TOKEN")
    for prefix in ("UV_PUBLISH", "TWINE"):
        user, secret = env.get(f"{prefix}_USERNAME"), env.get(f"{prefix}_PASSWORD")
        if user or secret:
            return Credentials(user, secret, f"{prefix}_USERNAME/{prefix}_PASSWORD")
    found = _from_pypirc(index, pypirc or Path.home() / ".pypirc")
    if found is not None:
        return found
    parts = urlsplit(index)
    if parts.username is not None:
        return Credentials(unquote(parts.username), unquote(parts.password or ""), "the index URL")
    return Credentials(None)
