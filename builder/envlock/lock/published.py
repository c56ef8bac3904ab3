"""A wheel published before stays published when its host is captured or locked again.

``envlock publish`` points a lock's local wheels at a private index. A later
capture repacks the same live files into the same bytes (repacking is
deterministic), so a package whose new wheel has the file name and sha256
that the previous lock had published keeps the index URL and stays
``published``: capturing an unchanged venv does not undo a publish.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from envlock.lock.model import PUBLISHABLE, Lock, Package, PublishedFrom


def keep_published(previous: Lock | None, packages: Iterable[Package]) -> list[Package]:
    kept: list[Package] = []
    for pkg in packages:
        was = previous.package(pkg.name) if previous is not None else None
        if (
            was is not None
            and was.source == "published"
            and pkg.source in PUBLISHABLE
            and (pkg.wheel.filename, pkg.wheel.sha256) == (was.wheel.filename, was.wheel.sha256)
        ):
            where = PublishedFrom(source=pkg.source, path=pkg.wheel.path, url=pkg.wheel.url)
            pkg = replace(pkg, source="published", wheel=was.wheel, index=was.index, published_from=where)
        kept.append(pkg)
    return kept
