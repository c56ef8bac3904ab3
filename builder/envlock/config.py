"""The workspace's own settings: ``envlock.toml`` at the workspace root.

::

    [store]
    url = "http://artifacts.internal/envlock/"  # where hosts and other clones READ objects
    push = "/srv/envlock-store"                 # where capture and lock WRITE new objects
    [publish]
    index = "http://devpi.internal/team/prod/"

Every field is optional and the file itself too (no file: the workspace's
own ``store/`` only, as before). Unknown tables or keys and malformed URLs
are errors naming ``envlock.toml`` and the field, so a typo never silently
turns a shared store off.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from envlock.errors import EnvlockError

CONFIG_NAME = "envlock.toml"
MAX_CONFIG_BYTES = 1 << 20  # a settings file; anything bigger is not one


class ConfigError(EnvlockError):
    """``envlock.toml`` is unreadable or holds a field envlock does not accept."""


@dataclass(frozen=True, slots=True)
class SshTarget:
    """``ssh://[user@]host[:port]/path``: a store directory written over the system ssh client."""

    host: str  # [user@]host, as ssh takes it
    port: int | None
    path: str  # absolute, on that host

    def __str__(self) -> str:
        port = f":{self.port}" if self.port else ""
        return f"ssh://{self.host}{port}{self.path}"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # Where objects are read from, as a URL ending in "/": http(s):// or file://
    # (a path in the file is turned into a file:// URL, relative to the workspace).
    url: str | None = None
    push: Path | SshTarget | None = None  # where new objects are written


@dataclass(frozen=True, slots=True)
class PublishConfig:
    index: str | None = None  # the private index `envlock publish` uploads to (ends in "/")
    # the index's simple page, when it is not the upload URL's ``+simple/`` or ``simple/``
    check_url: str | None = None


@dataclass(frozen=True, slots=True)
class WorkspaceConfig:
    path: Path | None  # the envlock.toml read (None: there is none)
    store: StoreConfig = StoreConfig()
    publish: PublishConfig = PublishConfig()


_TABLES: dict[str, set[str]] = {"store": {"url", "push"}, "publish": {"index", "check-url"}}


def load_config(root: Path) -> WorkspaceConfig:
    """``root/envlock.toml`` parsed and checked; an empty config when there is no such file."""
    path = root / CONFIG_NAME
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return WorkspaceConfig(path=None)
    except OSError as exc:
        raise ConfigError(f"{CONFIG_NAME}: cannot read: {exc.strerror}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{CONFIG_NAME}: over {MAX_CONFIG_BYTES} bytes, not a settings file")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{CONFIG_NAME}: not valid TOML: {exc}") from exc
    return parse_config(table, root, path)


def parse_config(table: dict[str, Any], root: Path, path: Path | None = None) -> WorkspaceConfig:
    for key in sorted(table):
        if key not in _TABLES:
            raise ConfigError(f"{CONFIG_NAME}: {key}: unknown table (known: {', '.join(sorted(_TABLES))})")
        if not isinstance(table[key], dict):
            raise ConfigError(f"{CONFIG_NAME}: {key}: expected a table, got {table[key]!r}")
        for field_name in sorted(table[key]):
            if field_name not in _TABLES[key]:
                known = ", ".join(sorted(_TABLES[key]))
                raise ConfigError(f"{CONFIG_NAME}: {key}.{field_name}: unknown field (known: {known})")
    store = table.get("store", {})
    publish = table.get("publish", {})
    url = _string(store, "store.url")
    push = _string(store, "store.push")
    index = _string(publish, "publish.index")
    check_url = _string(publish, "publish.check-url")
    return WorkspaceConfig(
        path=path,
        store=StoreConfig(
            url=_read_url(url, root) if url is not None else None,
            push=_push_target(push, root) if push is not None else None,
        ),
        publish=PublishConfig(
            index=_http_url(index, "publish.index") if index is not None else None,
            check_url=_http_url(check_url, "publish.check-url") if check_url is not None else None,
        ),
    )


def _string(table: dict[str, Any], field_name: str) -> str | None:
    value = table.get(field_name.split(".")[-1])
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{CONFIG_NAME}: {field_name}: expected a non-empty string, got {value!r}")
    if any(ch in value for ch in "\x00\n\r"):
        raise ConfigError(f"{CONFIG_NAME}: {field_name}: control characters in {value!r}")
    return value


def _shown(url: str) -> str:
    """``url`` for a message: whatever stands before an "@" in its authority (a password) left out."""
    scheme, sep, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    return scheme + sep + authority.rpartition("@")[2] + slash + tail if sep else url


def _slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _http_url(value: str, field_name: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
    ):
        raise ConfigError(
            f"{CONFIG_NAME}: {field_name}: expected an http:// or https:// URL with a host and port "
            f"and without query or fragment, got {_shown(value)!r}"
        )
    if parts.password is not None:
        # envlock.toml is committed; the URL is also shown in messages, JSON and the lock.
        raise ConfigError(
            f"{CONFIG_NAME}: {field_name}: no password in the URL {_shown(value)!r} "
            "(envlock.toml is committed: give credentials through ~/.netrc or the environment)"
        )
    return _slash(value)


def _read_url(value: str, root: Path) -> str:
    """``store.url`` as a URL ending in "/": http(s)://, file:// or a path (made absolute)."""
    if "://" not in value:
        return _slash((root / value).resolve().as_uri())
    scheme = value.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        return _http_url(value, "store.url")
    if scheme == "file":
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/") or parts.query:
            raise ConfigError(f"{CONFIG_NAME}: store.url: expected file:///absolute/path, got {value!r}")
        return _slash("file://" + quote(parts.path))
    raise ConfigError(
        f"{CONFIG_NAME}: store.url: expected http://, https://, file:// or a path, got {value!r}"
    )


def _push_target(value: str, root: Path) -> Path | SshTarget:
    """``store.push``: a directory (NFS, a local disk) or ``ssh://[user@]host[:port]/path``."""
    if "://" not in value:
        return (root / value).resolve()
    parts = urlsplit(value)
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return Path(parts.path)
    if parts.scheme != "ssh":
        raise ConfigError(
            f"{CONFIG_NAME}: store.push: expected a path or ssh://user@host/path, got {value!r} "
            "(an index takes uploads through `envlock publish`, [publish] index)"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{CONFIG_NAME}: store.push: bad port in {value!r}") from exc
    host = parts.hostname
    user = parts.username
    if not host or host.startswith("-") or (user is not None and (not user or user.startswith("-"))):
        raise ConfigError(f"{CONFIG_NAME}: store.push: expected ssh://[user@]host/path, got {value!r}")
    if parts.password is not None or parts.query or parts.fragment:
        raise ConfigError(f"{CONFIG_NAME}: store.push: no password, query or fragment in {value!r}")
    path = parts.path
    if not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
        raise ConfigError(
            f"{CONFIG_NAME}: store.push: expected an absolute directory after the host in {value!r}"
        )
    return SshTarget(host=f"{user}@{host}" if user else host, port=port, path=path.rstrip("/"))
