"""``[publish]`` of the workspace's ``envlock.toml``: the index ``envlock publish`` uploads to.

A small reader of its own until the workspace config module reads the whole
file (issue 15): ``index`` (the upload URL) and ``check-url`` (the index's
simple page, when it is not the upload URL's ``+simple/`` or ``simple/``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from envlock.errors import EnvlockError
from envlock.workspace import Workspace

CONFIG_NAME = "envlock.toml"


@dataclass(frozen=True, slots=True)
class PublishConfig:
    index: str | None = None
    check_url: str | None = None


def read_publish_config(workspace: Workspace) -> PublishConfig:
    path = workspace.root / CONFIG_NAME
    shown = workspace.shown(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return PublishConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvlockError(f"{shown}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise EnvlockError(f"{shown}: not valid TOML: {exc}") from exc
    table = document.get("publish", {})
    if not isinstance(table, dict):
        raise EnvlockError(f"{shown}: publish: expected a table")
    values: dict[str, str | None] = {}
    for key in ("index", "check-url"):
        value = table.get(key)
        if value is not None and (
            not isinstance(value, str) or not value.startswith(("http://", "https://"))
        ):
            raise EnvlockError(f"{shown}: publish.{key}: expected an http(s) URL, got {value!r}")
        values[key] = value
    return PublishConfig(index=values["index"], check_url=values["check-url"])
