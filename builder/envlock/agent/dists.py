"""Read installed distributions (``*.dist-info``) without importing them.

Everything comes from files: METADATA (email headers), RECORD (CSV),
WHEEL, INSTALLER, REQUESTED, direct_url.json, top_level.txt and
entry_points.txt. A damaged file is reported with its path and line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from email.parser import HeaderParser
from typing import List, Optional, Tuple

from envlock.agent.protocol import DistFacts, RecordRow, WheelFacts

_HASH = re.compile(r"^(sha256|sha384|sha512|sha1|md5)=[A-Za-z0-9_\-]+=*$")


class DistError(Exception):
    """A dist-info file is damaged; the message names the file and line."""


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        raise DistError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DistError("%s: not UTF-8 text (byte %d)" % (path, exc.start)) from exc


def _optional_text(path: str) -> Optional[str]:
    return _read_text(path) if os.path.isfile(path) else None


def parse_metadata(path: str) -> Tuple[str, str, List[str], Optional[str]]:
    """Name, version, Requires-Dist and Requires-Python of a METADATA file."""
    message = HeaderParser().parsestr(_read_text(path))
    name = message.get("Name")
    version = message.get("Version")
    if not name or not version:
        missing = "Name" if not name else "Version"
        raise DistError(f"{path}: corrupt METADATA: no {missing} header")
    return (
        name.strip(),
        version.strip(),
        [v.strip() for v in message.get_all("Requires-Dist") or []],
        (message.get("Requires-Python") or "").strip() or None,
    )


def parse_record(path: str) -> List[RecordRow]:
    """Rows ``[path, "sha256=..." or "", size or None]``; raises on damage."""
    text = _read_text(path)
    rows: List[RecordRow] = []
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row:
            continue
        if len(row) != 3:
            raise DistError("%s:%d: corrupt RECORD: expected 3 fields, got %d" % (path, lineno, len(row)))
        rel, digest, size = row
        if not rel:
            raise DistError("%s:%d: corrupt RECORD: empty path" % (path, lineno))
        if digest and not _HASH.match(digest):
            raise DistError("%s:%d: corrupt RECORD: bad hash %r" % (path, lineno, digest))
        if size and not size.isdigit():
            raise DistError("%s:%d: corrupt RECORD: bad size %r" % (path, lineno, size))
        rows.append((rel, digest, int(size) if size else None))
    if not rows:
        raise DistError(f"{path}: corrupt RECORD: no rows")
    return rows


def parse_wheel_file(path: str) -> WheelFacts:
    text = _optional_text(path)
    if text is None:
        return {"tags": [], "generator": None, "root_is_purelib": None, "build": None}
    message = HeaderParser().parsestr(text)
    purelib = (message.get("Root-Is-Purelib") or "").strip().lower()
    return {
        "tags": sorted(t.strip() for t in message.get_all("Tag") or []),
        "generator": (message.get("Generator") or "").strip() or None,
        "root_is_purelib": purelib == "true" if purelib else None,
        "build": (message.get("Build") or "").strip() or None,
    }


def console_scripts(text: Optional[str]) -> List[str]:
    """Names under [console_scripts] and [gui_scripts] of entry_points.txt."""
    if not text:
        return []
    names: List[str] = []
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            names.append(line.split("=", 1)[0].strip())
    return sorted(names)


def read_dist(site: str, dist_info: str) -> DistFacts:
    base = os.path.join(site, dist_info)
    name, version, requires_dist, requires_python = parse_metadata(os.path.join(base, "METADATA"))
    record_path = os.path.join(base, "RECORD")
    if not os.path.isfile(record_path):
        raise DistError(f"{record_path}: missing RECORD (installed by a tool that keeps none)")
    record = parse_record(record_path)
    with open(record_path, "rb") as stream:
        record_sha = hashlib.sha256(stream.read()).hexdigest()
    direct_url = None
    direct_text = _optional_text(os.path.join(base, "direct_url.json"))
    if direct_text is not None:
        try:
            direct_url = json.loads(direct_text)
        except ValueError as exc:
            raise DistError(
                "{}: corrupt direct_url.json: {}".format(os.path.join(base, "direct_url.json"), exc)
            ) from exc
    top_level = _optional_text(os.path.join(base, "top_level.txt"))
    installer = _optional_text(os.path.join(base, "INSTALLER"))
    return {
        "name": name,
        "version": version,
        "requires_dist": requires_dist,
        "requires_python": requires_python,
        "dist_info": dist_info,
        "wheel": parse_wheel_file(os.path.join(base, "WHEEL")),
        "installer": installer.strip() if installer else None,
        "requested": os.path.exists(os.path.join(base, "REQUESTED")),
        "direct_url": direct_url,
        "top_level": sorted(x.strip() for x in top_level.splitlines() if x.strip()) if top_level else None,
        "console_scripts": console_scripts(_optional_text(os.path.join(base, "entry_points.txt"))),
        "record": record,
        "record_sha256": record_sha,
    }


def find_dist_infos(site: str) -> List[str]:
    try:
        names = os.listdir(site)
    except OSError as exc:
        raise DistError(f"{site}: cannot list: {exc.strerror}") from exc
    return sorted(n for n in names if n.endswith(".dist-info") and os.path.isdir(os.path.join(site, n)))


def find_egg_infos(site: str) -> List[str]:
    return sorted(n for n in os.listdir(site) if n.endswith(".egg-info"))
