"""Repack an installed distribution into a wheel that reinstalls the same bytes.

Used for anything an index cannot give back byte for byte: local builds,
editable installs, VCS/direct installs and hand-patched files. The wheel holds
the *live* bytes (patches included). Installer bookkeeping and bytecode are
left out; entry-point scripts are left out because installers generate them
(capture keeps their exact bytes separately). The zip is deterministic: sorted
entries, fixed timestamps, fixed modes, so the same venv repacks to the same
sha256.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import zipfile
from typing import BinaryIO, List, Optional, Tuple

from envlock.agent.dists import console_scripts, parse_metadata, parse_record
from envlock.agent.layout import unshebang

BOOKKEEPING = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def wheel_filename(name: str, version: str, tags: List[str]) -> str:
    """Compress ``["cp311-cp311-linux_x86_64", ...]`` into a wheel file name."""
    pys: List[str] = []
    abis: List[str] = []
    plats: List[str] = []
    for tag in tags or ["py3-none-any"]:
        py, abi, plat = tag.split("-", 2)
        for value, bucket in ((py, pys), (abi, abis), (plat, plats)):
            if value not in bucket:
                bucket.append(value)
    dist = re.sub(r"[-_.]+", "_", name).lower()
    ver = version.replace("-", "_")
    return "{}-{}-{}-{}-{}.whl".format(dist, ver, ".".join(pys), ".".join(abis), ".".join(plats))


def is_bookkeeping(site_rel: str) -> bool:
    parts = site_rel.split("/")
    return len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in BOOKKEEPING


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def plan_entries(venv: str, site: str, dist_info: str) -> Tuple[List[Tuple[str, str]], str, str, List[str]]:
    """``[(archive name, absolute source path)]``, plus name, version and tags."""
    site_abs = os.path.join(venv, site)
    base = os.path.join(site_abs, dist_info)
    name, version, _requires, _python = parse_metadata(os.path.join(base, "METADATA"))
    record = parse_record(os.path.join(base, "RECORD"))
    scripts = set(console_scripts(_read_optional(os.path.join(base, "entry_points.txt"))))
    data_dir = "{}-{}.data".format(dist_info[: -len(".dist-info")].split("-")[0], version)
    entries: List[Tuple[str, str]] = []
    for rel, _digest, _size in record:
        absolute = os.path.normpath(os.path.join(site_abs, rel))
        site_rel = os.path.relpath(absolute, site_abs).replace(os.sep, "/")
        if is_bookkeeping(site_rel) or "/__pycache__/" in "/" + site_rel or site_rel.endswith(".pyc"):
            continue
        if not os.path.lexists(absolute):
            continue  # deleted after install; the lock reports it as missing
        if not site_rel.startswith("../"):
            entries.append((site_rel, absolute))
            continue
        venv_rel = os.path.relpath(absolute, venv).replace(os.sep, "/")
        if venv_rel.startswith("../"):
            continue  # outside the venv: cannot be carried, capture reports it
        if venv_rel.startswith("bin/"):
            script = venv_rel[len("bin/") :]
            if script in scripts:
                continue
            entries.append((f"{data_dir}/scripts/{script}", absolute))
        else:
            entries.append((f"{data_dir}/data/{venv_rel}", absolute))
    tags: List[str] = []
    wheel_text = _read_optional(os.path.join(base, "WHEEL")) or ""
    for line in wheel_text.splitlines():
        if line.startswith("Tag:"):
            tags.append(line.split(":", 1)[1].strip())
    return entries, name, version, sorted(tags)


def _read_optional(path: str) -> Optional[str]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as stream:
        return stream.read()


def write_wheel(venv: str, site: str, dist_info: str, out: BinaryIO) -> str:
    """Write the repacked wheel to ``out``; return its file name."""
    entries, name, version, tags = plan_entries(venv, site, dist_info)
    # dist-info last, as the wheel spec recommends.
    entries.sort(key=lambda item: (item[0].startswith(dist_info + "/"), item[0]))
    record_rows: List[List[str]] = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for arcname, absolute in entries:
            with open(absolute, "rb") as stream:
                data = stream.read()
            mode = 0o755 if os.stat(absolute).st_mode & 0o111 else 0o644
            if "/scripts/" in arcname and arcname.split("/", 1)[0].endswith(".data"):
                data = unshebang(data)
            _add(archive, arcname, data, mode)
            record_rows.append([arcname, _record_hash(data), str(len(data))])
        record_name = dist_info + "/RECORD"
        record_rows.append([record_name, "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(record_rows)
        _add(archive, record_name, text.getvalue().encode(), 0o644)
    out.write(buffer.getvalue())
    return wheel_filename(name, version, tags)


def _add(archive: zipfile.ZipFile, arcname: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(arcname, FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    # Level 1: several times faster than the default on large native
    # libraries, a little larger; the bytes stay deterministic.
    info._compresslevel = 1  # type: ignore[attr-defined]
    info.external_attr = (0o100000 | mode) << 16
    archive.writestr(info, data)
