"""The link-facts cache of ``envlock inspect`` (issue 17): a warm run reads no symbol table,
and an entry that is not an intact one of our own for the very file is never trusted.

Real libraries built with gcc: ``libb.so`` needs ``liba.so`` (RUNPATH $ORIGIN)
and calls ``alpha``, which liba exports, and ``beta``, which nothing exports,
so it does not load. A forged entry for liba claiming ``beta`` would hide that.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

import envlock.binary.elf
from envlock import linkcache
from envlock.binary.elf import read_link_facts
from envlock.inspect import inspect_path
from helpers import ENVLOCK


def gcc(out: Path, source: str, *args: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, cwd=out.parent)
    src.unlink()
    return out


@pytest.fixture
def libs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(liba, libb) in their own directory; the cache in its own XDG_CACHE_HOME."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVLOCK_NO_LINK_CACHE", raising=False)
    # Files built this instant are "racy" (see linkcache): let the test's own be cached.
    monkeypatch.setattr(linkcache, "_SETTLED_NS", 0)
    for key in linkcache.STATS:
        monkeypatch.setitem(linkcache.STATS, key, 0)
    where = tmp_path / "lib"
    where.mkdir()
    liba = gcc(where / "liba.so", "int alpha(void) { return 1; }\n")
    libb = gcc(
        where / "libb.so",
        "int alpha(void); int beta(void);\nint gamma_(void) { return alpha() + beta(); }\n",
        "-L.",
        "-la",
        "-Wl,-rpath,$ORIGIN",
    )
    return liba, libb


def missing(libb: Path) -> tuple[str, ...]:
    (library,) = inspect_path(libb).libraries
    assert library.load is not None
    return library.load.missing_symbols


def symbol_table_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of ``.dynsym`` parses (a spy on the real function, which still runs)."""
    count = [0]
    real = envlock.binary.elf._dynamic_symbols

    def counted(*args: object) -> object:
        count[0] += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(envlock.binary.elf, "_dynamic_symbols", counted)
    return count


def test_warm_inspect_reads_no_symbol_table(libs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _liba, libb = libs
    reads = symbol_table_reads(monkeypatch)
    cold = inspect_path(libb)
    assert reads[0] >= 2 and linkcache.STATS["misses"] >= 2  # libb, liba (and libc)
    reads[0] = 0
    warm = inspect_path(libb)
    assert reads[0] == 0
    assert linkcache.STATS["hits"] >= 2 and linkcache.STATS["refused"] == 0
    assert warm == cold
    assert "beta" in missing(libb) and "alpha" not in missing(libb)
    entries = list((Path(os.environ["XDG_CACHE_HOME"]) / "envlock" / "linkfacts").iterdir())
    assert entries and all(e.stat().st_mode & 0o077 == 0 for e in entries)
    assert (Path(os.environ["XDG_CACHE_HOME"]) / "envlock" / "linkfacts").stat().st_mode & 0o777 == 0o700


def test_a_changed_file_is_read_again(libs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    liba, libb = libs
    assert "beta" in missing(libb)
    # liba now exports beta too: same path, new bytes (written in place: same inode)
    fresh = gcc(liba.with_name("new.so"), "int alpha(void) { return 1; }\nint beta(void) { return 2; }\n")
    liba.write_bytes(fresh.read_bytes())
    reads = symbol_table_reads(monkeypatch)
    assert missing(libb) == ()
    assert reads[0] >= 1


def test_racy_files_are_not_cached(libs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _liba, libb = libs
    monkeypatch.setattr(linkcache, "_SETTLED_NS", 60 * 10**9)  # everything built by the fixture is "recent"
    inspect_path(libb)
    reads = symbol_table_reads(monkeypatch)
    inspect_path(libb)
    assert reads[0] >= 2  # libb and liba read again: a change in this ctime tick would not show


def _forge(liba: Path, *, key_delta: int = 0) -> bytes:
    """An entry for liba that claims it also exports ``beta``, keyed ``key_delta`` off its real inode."""
    with open(liba, "rb") as stream:
        facts = read_link_facts(stream)
        key = linkcache._key(os.fstat(stream.fileno()))
    key[1] += key_delta
    return linkcache._encode(key, facts._replace(exported=facts.exported | {"beta"}))


@pytest.mark.parametrize(
    "poison",
    ["trusted-control", "other-file", "bad-checksum", "truncated", "foreign-owner", "symlink", "shared-dir"],
)
def test_poisoned_cache_is_never_trusted(
    libs: tuple[Path, Path], poison: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    liba, libb = libs
    assert "beta" in missing(libb)  # fills the cache
    root = Path(linkcache.cache_root())
    entry = Path(linkcache._entry_path(str(root), os.stat(liba)))
    assert entry.is_file()
    forged = _forge(liba)
    if poison == "other-file":
        forged = _forge(liba, key_delta=1)
    elif poison == "bad-checksum":
        at = len(linkcache.FORMAT) + 4
        (crc,) = struct.unpack_from("<I", forged, at)
        forged = forged[:at] + struct.pack("<I", crc ^ 1) + forged[at + 4 :]
    elif poison == "truncated":
        forged = forged[:-3]
    entry.write_bytes(forged)
    if poison == "foreign-owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(entry, 65534, 65534)
    elif poison == "symlink":
        target = tmp_path / "elsewhere.facts"
        entry.rename(target)
        entry.symlink_to(target)
    elif poison == "shared-dir":
        root.chmod(0o755)
    if poison == "trusted-control":
        # The forgery is well formed: an entry like it, intact and ours, would be believed.
        # So the refusals below are the checks at work, not a forgery that never reaches the loader.
        assert missing(libb) == ()
        return
    assert "beta" in missing(libb)
    if poison != "shared-dir":
        assert linkcache.STATS["refused"] >= 1


def test_no_link_cache_switch(libs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _liba, libb = libs
    monkeypatch.setenv("ENVLOCK_NO_LINK_CACHE", "1")
    inspect_path(libb)
    assert not Path(linkcache.cache_root()).exists()


def test_cli_output_is_the_same_cold_and_warm(tmp_path: Path) -> None:
    """Through the real CLI on a system library (settled long ago, so cached): the same JSON."""
    library = Path("/lib/x86_64-linux-gnu/libm.so.6").resolve()
    if not library.is_file():
        pytest.skip("no x86-64 glibc libm here")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cli-cache")}
    env.pop("ENVLOCK_NO_LINK_CACHE", None)

    def run() -> str:
        done = subprocess.run(
            [ENVLOCK, "inspect", str(library), "--format", "json"], capture_output=True, text=True, env=env
        )
        assert done.returncode in (0, 1), done.stderr
        return re.sub(r'"seconds": [0-9.]+', "", done.stdout)

    cold = run()
    assert list((tmp_path / "cli-cache" / "envlock" / "linkfacts").glob("*.facts"))
    assert run() == cold
