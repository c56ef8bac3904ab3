"""ABI facts of a lock: which symbols each library takes from another package, and breaks.

Capture records, per native library, the symbols it binds from libraries of
*other* packages (``NativeLib.takes``: providing package -> sorted symbols,
``name@VERSION`` when versioned) and, per library, the symbols others bind
from it (``NativeLib.provides``); docs/lock-format.md, "ABI facts". An
extension built against one torch takes ``_ZN3c10...`` symbols that another
torch may not export, and no package metadata says so (sgl-kernel wheels do
not even depend on torch).

A **break** is a library kept byte for byte (same path, same sha256) from a
lock ``before`` to a lock ``after`` whose providing package changed (other
wheel) or went away, and a symbol it took from that package that the
package's libraries in ``after`` no longer provide; or the same for a
library that changed too, with what ``after`` says it takes (a capture:
what it binds, so never a break; a target lock: what its new build still
references of what it took before, ``still_taken``). ``envlock lock`` checks
the reference against the fresh target lock (refusing it), ``envlock
review`` base against head (blocking), ``envlock diff`` both ways.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from envlock.binary.elf import binds
from envlock.binary.loader import demangle
from envlock.loadable import library_label
from envlock.lock.model import Lock, NativeLib, Package


@dataclass(frozen=True, slots=True, order=True)
class AbiBreak:
    """One symbol a kept library takes from a package whose new version lacks it."""

    consumer: str  # package
    library: str  # the consumer's library (site-packages/...)
    provider: str  # package
    symbol: str  # as bound: ``name`` or ``name@VERSION``
    provider_library: str = ""  # where it came from in ``before`` ("" when not recorded)
    provider_before: str = ""  # version
    provider_after: str | None = None  # version; None: the package is gone
    # False: the consumer changed too, and its new build still references the symbol.
    kept: bool = True
    consumer_after: str = ""  # the consumer's version in ``after`` when not kept

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        """``sgl_kernel common_ops (sgl-kernel): takes c10::foo() (_ZN3c103fooEv) from torch
        (libc10.so in 2.14.1), which torch 2.15.0 no longer exports``."""
        shown = (names or {}).get(self.symbol, self.symbol)
        symbol = shown if shown == self.symbol else f"{shown} ({self.symbol})"
        where = posixpath.basename(self.provider_library) if self.provider_library else "its libraries"
        origin = f"{self.provider} ({where} in {self.provider_before})"
        if self.provider_after is None:
            lost = "which is not in the lock any more"
        else:
            lost = f"which {self.provider} {self.provider_after} no longer exports"
        if self.kept:
            return f"{library_label(self.library)} ({self.consumer}): takes {symbol} from {origin}, {lost}"
        who = f"{self.consumer} {self.consumer_after}"
        return f"{library_label(self.library)} ({who}): still takes {symbol} from {origin}, {lost}"


def symbol_names(breaks: Iterable[AbiBreak]) -> dict[str, str]:
    """Readable names of the breaks' symbols: ``name@VERSION`` keeps its version."""
    symbols = sorted({b.symbol for b in breaks})
    plain = [s.partition("@")[0] for s in symbols]
    names = demangle_symbols(plain)
    out = {}
    for symbol, name in zip(symbols, plain, strict=True):
        version = symbol.partition("@")[2]
        out[symbol] = names[name] + (f"@{version}" if version else "")
    return out


def demangle_symbols(symbols: Sequence[str]) -> dict[str, str]:
    """C++ names: ``c++filt`` when on PATH (``binary.loader.demangle``), else a small
    stdlib fallback for the common Itanium forms (``_ZN3c103fooEv`` -> ``c10::foo(...)``);
    a name neither understands stays mangled."""
    names = demangle(symbols)
    for symbol in symbols:
        if names.get(symbol, symbol) == symbol and symbol.startswith("_Z"):
            names[symbol] = _fallback_demangle(symbol)
    return names


_SOURCE_NAME = re.compile(r"(\d+)")


def _fallback_demangle(symbol: str) -> str:
    """Nested names only (``_ZN``/``_ZNK`` ... ``E``), parameters shown as ``(...)``."""
    rest = symbol[2:]
    const = False
    if not rest.startswith("N"):
        match = _SOURCE_NAME.match(rest)
        if not match:
            return symbol
        size = int(match.group(1))
        name = rest[match.end() : match.end() + size]
        return f"{name}(...)" if len(name) == size else symbol
    rest = rest[1:]
    if rest.startswith("K"):
        const, rest = True, rest[1:]
    parts: list[str] = []
    while rest and not rest.startswith("E"):
        if rest.startswith(("C1", "C2")):
            parts.append(parts[-1] if parts else "?")
            rest = rest[2:]
            continue
        if rest.startswith(("D0", "D1", "D2")):
            parts.append("~" + (parts[-1] if parts else "?"))
            rest = rest[2:]
            continue
        match = _SOURCE_NAME.match(rest)
        if not match:
            return symbol
        size = int(match.group(1))
        part = rest[match.end() : match.end() + size]
        if len(part) != size:
            return symbol
        parts.append(part)
        rest = rest[match.end() + size :]
    if not parts or not rest.startswith("E"):
        return symbol
    return "::".join(parts) + "(...)" + (" const" if const else "")


# ---------------------------------------------------------------- facts


def with_abi_facts(
    packages: Sequence[Package], takes: Mapping[str, Mapping[str, Sequence[str]]]
) -> list[Package]:
    """Packages with ``takes``/``provides`` filled from ``{library: {providing library: symbols}}``
    (lock paths, ``site-packages/...``); bindings inside one package are dropped."""
    owner = {lib.path: pkg.name for pkg in packages for lib in pkg.native}
    taken: dict[str, dict[str, set[str]]] = {}
    provided: dict[str, set[str]] = {}
    for library, sources in takes.items():
        consumer = owner.get(library)
        if consumer is None:
            continue
        for source, symbols in sources.items():
            provider = owner.get(source)
            if provider is None or provider == consumer:
                continue
            taken.setdefault(library, {}).setdefault(provider, set()).update(symbols)
            provided.setdefault(source, set()).update(symbols)
    out = []
    for pkg in packages:
        if not any(lib.path in taken or lib.path in provided for lib in pkg.native):
            out.append(pkg)
            continue
        native = tuple(
            replace(
                lib,
                takes={p: tuple(sorted(s)) for p, s in sorted(taken.get(lib.path, {}).items())},
                provides=tuple(sorted(provided.get(lib.path, ()))),
            )
            for lib in pkg.native
        )
        out.append(replace(pkg, native=native))
    return out


@dataclass(frozen=True, slots=True)
class Exports:
    """What one library of a wheel exports, for checking takes against it."""

    path: str
    exported: frozenset[str]
    versioned: frozenset[str]  # ``name@VERSION`` definitions
    undefined: frozenset[str] = frozenset()  # strong references, ``name@VERSION`` when versioned

    def has(self, symbol: str) -> bool:
        return binds(symbol, self.exported, self.versioned, bool(self.versioned))


def provides_from_exports(pkg: Package, exports: Sequence[Exports], wanted: Iterable[str]) -> Package:
    """``pkg`` (a new wheel in a target lock) with each library's ``provides``: the
    ``wanted`` symbols (what other packages of the lock take from it) it exports."""
    symbols = sorted(set(wanted))
    by_path = {e.path: e for e in exports}
    native = []
    for lib in pkg.native:
        found = by_path.get(lib.path)
        has = tuple(s for s in symbols if found is not None and found.has(s))
        native.append(replace(lib, provides=has))
    return replace(pkg, native=tuple(native))


def still_taken(pkg: Package, was: Package | None, exports: Sequence[Exports]) -> Package:
    """A new wheel of a package whose reference version took symbols from other packages:
    each library keeps, of what the same library took before, the symbols its new build
    still references (``undefined``), so ``abi_breaks`` checks them against the target's
    providers. What the new build takes beyond that is not known before it is installed."""
    before = {lib.path: lib for lib in was.native} if was is not None else {}
    references = {e.path: e.undefined for e in exports}
    native = []
    for lib in pkg.native:
        prior, undefined = before.get(lib.path), references.get(lib.path, frozenset())
        if prior is None or not prior.takes:
            native.append(lib)
            continue
        takes = {p: tuple(s for s in symbols if s in undefined) for p, symbols in sorted(prior.takes.items())}
        native.append(replace(lib, takes={p: symbols for p, symbols in takes.items() if symbols}))
    return replace(pkg, native=tuple(native))


def taken_from(lock: Lock) -> dict[str, set[str]]:
    """Providing package -> every symbol some library of ``lock`` takes from it."""
    wanted: dict[str, set[str]] = {}
    for pkg in lock.packages:
        for lib in pkg.native:
            for provider, symbols in lib.takes.items():
                wanted.setdefault(provider, set()).update(symbols)
    return wanted


# ---------------------------------------------------------------- breaks


def _provided(pkg: Package | None) -> dict[str, str]:
    """Symbol -> the library of ``pkg`` that provides it."""
    found: dict[str, str] = {}
    for lib in pkg.native if pkg is not None else ():
        for symbol in lib.provides:
            found.setdefault(symbol, lib.path)
    return found


def _taking_libraries(before: Lock, after: Lock) -> Iterable[tuple[Package, NativeLib, bool]]:
    """Libraries of ``after`` with what they take: the ``before`` facts of a library kept
    byte for byte (True), else its own ``after`` facts (False)."""
    old = {pkg.name: pkg for pkg in before.packages}
    for pkg in after.packages:
        was = old.get(pkg.name)
        libs = {lib.path: lib for lib in was.native if lib.takes} if was is not None else {}
        for lib in pkg.native:
            prior = libs.get(lib.path)
            if prior is not None and prior.sha256 == lib.sha256:
                yield pkg, prior, True
            elif lib.takes:
                yield pkg, lib, False


def abi_breaks(before: Lock, after: Lock) -> list[AbiBreak]:
    """Symbols libraries kept from ``before`` to ``after`` take from a package that changed
    between them and that the package in ``after`` no longer provides (see the module doc)."""
    old = {pkg.name: pkg for pkg in before.packages}
    new = {pkg.name: pkg for pkg in after.packages}
    provided: dict[str, dict[str, str]] = {}
    breaks: list[AbiBreak] = []
    for pkg, lib, kept in _taking_libraries(before, after):
        for provider, symbols in sorted(lib.takes.items()):
            was, now = old.get(provider), new.get(provider)
            if was is None or (now is not None and now.wheel.sha256 == was.wheel.sha256):
                continue  # the provider did not change: neither did what it exports
            if provider not in provided:
                provided[provider] = _provided(now)
            origin = _provided(was)
            for symbol in symbols:
                if symbol in provided[provider]:
                    continue
                breaks.append(
                    AbiBreak(
                        consumer=pkg.name,
                        library=lib.path,
                        provider=provider,
                        symbol=symbol,
                        provider_library=origin.get(symbol, ""),
                        provider_before=was.version,
                        provider_after=now.version if now is not None else None,
                        kept=kept,
                        consumer_after="" if kept else pkg.version,
                    )
                )
    return sorted(breaks)


def summarize(breaks: Sequence[AbiBreak], limit: int = 3) -> list[str]:
    """One line per (consumer library, provider), the first ``limit`` symbols demangled."""
    names = symbol_names(breaks)
    groups: dict[tuple[str, str, str], list[AbiBreak]] = {}
    for item in breaks:
        groups.setdefault((item.consumer, item.library, item.provider), []).append(item)
    lines = []
    for group in groups.values():
        first = group[0].describe(names)
        if len(group) > 1:
            others = ", ".join(names.get(b.symbol, b.symbol) for b in group[1:limit])
            more = len(group) - limit
            first += f"; also {others}" + (f" and {more} more" if more > 0 else "")
        lines.append(first)
    return lines
