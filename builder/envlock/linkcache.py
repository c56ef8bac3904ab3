"""A per-user cache of ELF link facts, so a warm ``envlock inspect`` reads no symbol table.

Checking whether a library loads means reading the ``.dynsym`` of every
library in its closure (~30 files and 126,000 symbols for libtorch_cuda.so):
most of a warm inspect's CPU time. The facts of a file depend on its bytes
only, so they are kept per file under ``~/.cache/envlock/linkfacts`` and
reused while the file is unchanged.

Why the key is sound (the rule of capture's stat cache, agent/hashing.py):
an entry is keyed by the opened file's (st_dev, st_ino, st_size,
st_mtime_ns, st_ctime_ns), taken with ``fstat`` on the very descriptor the
facts are read from. Any write, truncate, replace or chmod changes the
inode's ctime, which no unprivileged call can set back; a replaced file has
another inode. A file whose stat changes while it is read, or whose ctime is
too recent for a later write to show in it (the clock ticks coarser than
nanoseconds on most filesystems), is read but not cached.

The cache is input from disk like any other: the directory must be ours and
private (0700), an entry a regular file we own, and its contents must parse
completely, carry its own key and match its checksum. Anything else is
ignored (and overwritten by the fresh read), never trusted. Entries are
written atomically (``tmpname.private_sibling``, then rename).

``ENVLOCK_NO_LINK_CACHE=1`` turns it off. ``STATS`` counts hits, misses and
refusals for the tests.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Callable
from typing import IO

from envlock.binary.elf import LinkFacts, SectionInfo
from envlock.privatecache import NotPrivate, private_dir, read_private, write_private

FORMAT = b"envlock-linkfacts 1\n"
# A file changed less than this long ago may change again within the same ctime tick.
_SETTLED_NS = 2_000_000_000
_HEADER = struct.Struct("<II")  # header length, checksum of everything after the prefix
STATS = {"hits": 0, "misses": 0, "refused": 0}


def cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "envlock", "linkfacts")


def _key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _entry_path(root: str, st: os.stat_result) -> str:
    return os.path.join(root, f"{st.st_dev:x}-{st.st_ino:x}.facts")


def _encode(key: list[int], facts: LinkFacts) -> bytes:
    exported = "\0".join(facts.exported).encode("latin-1")  # a set: any order reads back equal
    undefined = "\0".join(facts.undefined).encode("latin-1")
    header = json.dumps(
        {
            "key": key,
            "machine": facts.machine,
            "elf_class": facts.elf_class,
            "type": facts.type,
            "soname": facts.soname,
            "needed": facts.needed,
            "rpath": facts.rpath,
            "runpath": facts.runpath,
            "version_needs": facts.version_needs,
            "version_defs": facts.version_defs,
            "sections": [list(s) for s in facts.sections],
            "file_size": facts.file_size,
            "exported": [len(facts.exported), len(exported)],
            "undefined": [len(facts.undefined), len(undefined)],
        }
    ).encode()
    body = header + exported + undefined
    return FORMAT + _HEADER.pack(len(header), zlib.crc32(body)) + body


def _names(blob: bytes, count: int) -> list[str]:
    if not count:
        if blob:
            raise ValueError("names where none were recorded")
        return []
    names = blob.decode("latin-1").split("\0")
    if len(names) != count:
        raise ValueError("name count")
    return names


def _strs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("not a list of strings")
    return tuple(value)


def _decode(data: bytes, key: list[int]) -> LinkFacts:
    """The facts in an entry; ValueError (KeyError, TypeError) unless it is an intact entry for ``key``."""
    if not data.startswith(FORMAT):
        raise ValueError("not an entry of this format")
    size, checksum = _HEADER.unpack_from(data, len(FORMAT))
    body = data[len(FORMAT) + _HEADER.size :]
    if zlib.crc32(body) != checksum or size > len(body):
        raise ValueError("checksum")
    head = json.loads(body[:size])
    if head["key"] != key:
        raise ValueError("another file's entry")
    (n_exp, len_exp), (n_und, len_und) = head["exported"], head["undefined"]
    if size + len_exp + len_und != len(body):
        raise ValueError("length")
    exported = _names(body[size : size + len_exp], n_exp)
    undefined = _names(body[size + len_exp :], n_und)
    needs = head["version_needs"]
    if not isinstance(needs, dict):
        raise ValueError("version_needs")
    sections = []
    for s in head["sections"]:
        name, kind, offset, length = s
        numbers = type(offset) is int and type(length) is int
        if not (isinstance(name, str) and isinstance(kind, str) and numbers):
            raise ValueError("section")
        sections.append(SectionInfo(name, kind, offset, length))
    soname = head["soname"]
    if not (soname is None or isinstance(soname, str)):
        raise ValueError("soname")
    for field in ("machine", "type"):
        if not isinstance(head[field], str):
            raise ValueError(field)
    for field in ("elf_class", "file_size"):
        if type(head[field]) is not int:
            raise ValueError(field)
    return LinkFacts(
        machine=head["machine"],
        elf_class=head["elf_class"],
        type=head["type"],
        soname=soname,
        needed=_strs(head["needed"]),
        rpath=_strs(head["rpath"]),
        runpath=_strs(head["runpath"]),
        version_needs={str(k): _strs(v) for k, v in needs.items()},
        version_defs=_strs(head["version_defs"]),
        exported=frozenset(exported),
        undefined=tuple(undefined),
        sections=tuple(sections),
        file_size=head["file_size"],
    )


def _lookup(root: str, st: os.stat_result) -> LinkFacts | None:
    try:
        data = read_private(_entry_path(root, st))
    except NotPrivate:
        STATS["refused"] += 1
        return None
    if data is None:
        return None
    try:
        return _decode(data, _key(st))
    except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError):
        STATS["refused"] += 1
        return None


def _store(root: str, st: os.stat_result, facts: LinkFacts) -> None:
    write_private(root, _entry_path(root, st), _encode(_key(st), facts))


def cached_link_facts(stream: IO[bytes], read: Callable[[IO[bytes]], LinkFacts]) -> LinkFacts:
    """``read(stream)``, or the facts remembered for the file ``stream`` is open on.

    ``stream`` must be a file opened from disk (it has a descriptor); ``read``
    raises as ``read_link_facts`` does, and nothing is remembered then.
    """
    if os.environ.get("ENVLOCK_NO_LINK_CACHE"):
        return read(stream)
    try:
        before = os.fstat(stream.fileno())
    except (OSError, AttributeError, ValueError):
        return read(stream)
    root = cache_root()
    if private_dir(root):
        known = _lookup(root, before)
        if known is not None:
            STATS["hits"] += 1
            return known
    STATS["misses"] += 1
    facts = read(stream)
    after = os.fstat(stream.fileno())
    settled = time.time_ns() - after.st_ctime_ns > _SETTLED_NS
    if _key(after) == _key(before) and settled:
        _store(root, after, facts)
    return facts
