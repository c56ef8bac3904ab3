"""Read two locks for a comparison, parsing only the packages that can matter.

A 1,000-package lock is 1.5 to 3 MB of TOML, and tomllib parses that in
a quarter to half a second per lock: too slow for ``envlock diff`` and
``envlock review`` to answer at a glance. But two locks of one fleet share most packages byte for
byte, and envlock writes locks canonically: each package is one
``[[packages]]`` block, always serialised the same way. So the blocks are
compared as text first, and only these are parsed (and validated, through
the same ``parse_lock`` as everything else; a plain PEP 751 lock another
tool wrote is read by ``lock.foreign``):

- every package whose block differs, or that only one side has;
- an identical package whose block names a library that a differing
  package needs or provides (it may provide what the other side lost, or
  need what the other side dropped);
- when the two hosts' glibc differ, every identical package that needs a
  ``GLIBC_`` version;
- an identical package whose libraries take symbols from a differing
  package (ABI facts, ``envlock.abi``).

That is exactly the set whose load verdict (``loadable``) or ABI breaks can differ
between the two sides, so the comparison gives the same answer as with
both locks parsed whole (a property test checks this). Identical blocks
that are not parsed are not validated either: nothing reported depends on
them, and every command that reads a whole lock still validates it.
Anything that is not canonical text (a multi-line string, a package table
that is not a ``[[packages]]`` block, an unexpected first key) falls back
to a whole parse.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envlock.errors import LockError
from envlock.loadable import is_host_library
from envlock.lock.foreign import parse_any_lock
from envlock.lock.model import Lock

_BLOCK = "[[packages]]"
_NAME = re.compile(r'^name = "([^"\\]+)"$')
_NATIVE = "[[packages.tool.envlock.native]]"


@dataclass(frozen=True, slots=True)
class LockText:
    """A lock's text cut into its head (top-level keys and ``[tool.envlock]``) and package blocks."""

    source: str
    text: str
    head: str = ""
    blocks: Mapping[str, str] = field(default_factory=dict)  # name -> block body (after "[[packages]]")

    @property
    def split(self) -> bool:
        return bool(self.blocks)


@dataclass(frozen=True, slots=True)
class LockPair:
    """Two locks to compare.

    ``a`` and ``b`` hold every package that differs plus the identical ones
    that can change a load verdict (see the module docstring); ``names_a``
    and ``names_b`` name every package each side has.
    """

    a: Lock
    b: Lock
    names_a: frozenset[str]
    names_b: frozenset[str]


def split_lock(text: str, source: str) -> LockText:
    """Cut canonical lock text into blocks; an unsplittable text keeps ``blocks`` empty."""
    if '"""' in text or "'''" in text:
        return LockText(source, text)
    # str.find, not a split into lines: this runs on megabytes per comparison.
    marker = "\n" + _BLOCK + "\n"
    starts = []
    at = text.find(marker)
    while at != -1:
        starts.append(at + 1)
        at = text.find(marker, at + 1)
    if not starts:
        return LockText(source, text)
    # The last block runs to the first top-level table after it ([tool.envlock]).
    end = len(text)
    at = text.find("\n[", starts[-1])
    while at != -1:
        if not text.startswith(("\n[packages.", "\n[[packages."), at):
            end = at + 1
            break
        at = text.find("\n[", at + 1)
    blocks: dict[str, str] = {}
    for first, after in itertools.pairwise([*starts, end]):
        body = text[first + len(_BLOCK) + 1 : after]
        newline = body.find("\n")
        match = _NAME.match(body if newline == -1 else body[:newline])
        if match is None or match.group(1) in blocks:
            return LockText(source, text)
        blocks[match.group(1)] = body
    head = text[: starts[0]] + text[end:]
    return LockText(source, text, head, blocks)


def _tables(lock_text: LockText, names: Iterable[str]) -> list[dict[str, Any]]:
    """The package tables of ``names``, parsed in one go."""
    body = "".join(f"{_BLOCK}\n{lock_text.blocks[name]}" for name in sorted(names))
    tables: list[dict[str, Any]] = tomllib.loads(body).get("packages", []) if body else []
    return tables


def _subset(lock_text: LockText, head: dict[str, Any], tables: list[dict[str, Any]]) -> Lock:
    """The lock with only these package tables, validated like a whole lock."""
    document = {**head, "packages": sorted(tables, key=lambda t: str(t.get("name")))}
    return parse_any_lock(document, lock_text.source)


def parse_whole(lock_text: LockText) -> Lock:
    try:
        document = tomllib.loads(lock_text.text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{lock_text.source}: not valid TOML: {exc}") from exc
    return parse_any_lock(document, lock_text.source)


def pair_from_locks(a: Lock, b: Lock) -> LockPair:
    return LockPair(a, b, frozenset(p.name for p in a.packages), frozenset(p.name for p in b.packages))


def _library_names(tables: Iterable[dict[str, Any]]) -> set[str]:
    """Every library name the tables' native libraries need or provide (raw tables: not yet validated)."""
    names: set[str] = set()
    for table in tables:
        tool = table.get("tool", {}).get("envlock", {})
        for lib in tool.get("native", []) if isinstance(tool, dict) else []:
            if not isinstance(lib, dict):
                continue
            names.update(n for n in lib.get("needed", []) if isinstance(n, str))
            names.add(str(lib.get("path", "")).rsplit("/", 1)[-1])
            if isinstance(lib.get("soname"), str):
                names.add(lib["soname"])
    # The host provides these whatever the venv holds: they never change a verdict.
    return {name for name in names if name and not is_host_library(name)}


def _glibc(head: dict[str, Any]) -> object:
    platform = head.get("tool", {}).get("envlock", {}).get("platform", {})
    return (platform.get("libc"), platform.get("libc-version")) if isinstance(platform, dict) else None


def pair_from_texts(a_text: str, a_source: str, b_text: str, b_source: str) -> LockPair:
    """Compare two lock texts, parsing only what can matter (see the module docstring)."""
    a, b = split_lock(a_text, a_source), split_lock(b_text, b_source)
    if not (a.split and b.split):
        return pair_from_locks(parse_whole(a), parse_whole(b))
    try:
        return _pair_from_blocks(a, b)
    except (LockError, tomllib.TOMLDecodeError, AttributeError, KeyError, TypeError):
        # Let the whole-lock parse say what is wrong, with the right package index.
        return pair_from_locks(parse_whole(a), parse_whole(b))


def _pair_from_blocks(a: LockText, b: LockText) -> LockPair:
    common = a.blocks.keys() & b.blocks.keys()
    same = {name for name in common if a.blocks[name] == b.blocks[name]}
    head_a, head_b = tomllib.loads(a.head), tomllib.loads(b.head)
    tables_a = _tables(a, a.blocks.keys() - same)
    tables_b = _tables(b, b.blocks.keys() - same)
    names = _library_names(tables_a) | _library_names(tables_b)
    glibc_differs = _glibc(head_a) != _glibc(head_b)
    # ABI facts: a kept library's ``takes`` table names the providing package.
    takers = [f"\n{name} = [" for name in (a.blocks.keys() | b.blocks.keys()) - same]
    relevant = set()
    for name in same:
        block = a.blocks[name]
        if _NATIVE not in block:
            continue
        loads = (glibc_differs and "GLIBC" in block) or any(f'{lib}"' in block for lib in names)
        if loads or (".takes]" in block and any(taker in block for taker in takers)):
            relevant.add(name)
    extra = _tables(a, relevant)
    return LockPair(
        _subset(a, head_a, tables_a + extra),
        _subset(b, head_b, tables_b + extra),
        frozenset(a.blocks),
        frozenset(b.blocks),
    )
