"""``[publish]`` of the workspace's ``envlock.toml``: the index ``envlock publish`` uploads to.

The file is read and checked by ``envlock.config`` (one reader for every
table): ``index`` (the upload URL) and ``check-url`` (the index's simple
page, when it is not the upload URL's ``+simple/`` or ``simple/``).
"""

from __future__ import annotations

from envlock.config import PublishConfig
from envlock.workspace import Workspace


def read_publish_config(workspace: Workspace) -> PublishConfig:
    return workspace.config().publish
