"""Is a locked wheel yanked? Asked of its index at review time, when the index answers.

A review must not fail because an index is down or the CI runner is
offline: an index that cannot be reached is noted once and its packages
are left unchecked. Only ``file://`` and ``http(s)://`` indexes are asked.
"""

from __future__ import annotations

from envlock.errors import EnvlockError
from envlock.index import IndexClient
from envlock.lock.model import Package


class YankedCheck:
    """Asks each index once per project; remembers the indexes that did not answer."""

    def __init__(self) -> None:
        self.unreachable: dict[str, str] = {}
        self.checked = 0
        self._clients: dict[str, IndexClient] = {}

    def is_yanked(self, pkg: Package) -> bool | None:
        """True/False from the index; None when not asked or not answered."""
        url = pkg.index
        if not url or not url.startswith(("file://", "http://", "https://")) or url in self.unreachable:
            return None
        client = self._clients.setdefault(url, IndexClient((url,)))
        try:
            files = client.files(pkg.name)
        except (EnvlockError, OSError, ValueError) as exc:
            self.unreachable[url] = str(exc)
            return None
        self.checked += 1
        for listed in files:
            if listed.filename == pkg.wheel.filename:
                return listed.yanked
        return None

    def notes(self) -> list[str]:
        return [
            f"yanked status not checked for {url}: {why}" for url, why in sorted(self.unreachable.items())
        ]
