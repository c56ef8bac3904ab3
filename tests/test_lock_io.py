"""Lock model round trips, canonical bytes, and errors that name the field."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from envlock.errors import LockError
from envlock.lock.io import lock_to_dict, parse_lock, read_lock, render_lock
from envlock.lock.manifest import parse_manifest, render_manifest
from envlock.lock.model import Artifact, FileEntry, Interpreter, Lock, NativeLib, Package, Platform

names = st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,4})?", fullmatch=True)
versions = st.from_regex(r"[0-9]{1,2}\.[0-9]{1,2}(\+cu12[0-9])?", fullmatch=True)
hexes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@st.composite
def packages(draw: st.DrawFn) -> Package:
    name, version = draw(names), draw(versions)
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    source = draw(st.sampled_from(["index", "repacked"]))
    wheel = Artifact(
        filename=filename,
        sha256=draw(hexes),
        size=draw(st.integers(0, 10**9)),
        url=f"https://example.org/files/{filename}" if source == "index" else None,
        path=None if source == "index" else f"../store/wheels/x/{filename}",
    )
    return Package(
        name=name,
        version=version,
        wheel=wheel,
        source=source,  # type: ignore[arg-type]
        index="https://example.org/simple" if source == "index" else None,
        requires_dist=tuple(draw(st.lists(names, max_size=3))),
        top_level=(name.replace("-", "_"),),
        tree_digest="sha256:" + draw(hexes),
        file_count=draw(st.integers(0, 5000)),
        size=draw(st.integers(0, 10**10)),
        modified=tuple(sorted(draw(st.lists(st.just("site-packages/x.py"), max_size=1)))),
        reason=None if source == "index" else "built locally from file:///src",
        native=tuple(
            NativeLib(
                path=f"site-packages/{name}/_c.so",
                sha256=draw(hexes),
                needed=("libc.so.6",),
                version_needs={"GLIBC": "2.17"},
            )
            for _ in range(draw(st.integers(0, 1)))
        ),
    )


def make_lock(pkgs: list[Package], *, sort: bool = True) -> Lock:
    """``sort=False`` keeps the packages in the order given, for the writer to sort."""
    unique = {p.name: p for p in pkgs}
    return Lock(
        host="ct129",
        role="reference",
        venv="/opt/venv",
        site="lib/python3.11/site-packages",
        digest="sha256:" + "0" * 64,
        interpreter=Interpreter(implementation="cpython", version="3.11.7", abi="cp311"),
        platform=Platform(machine="x86_64", libc="glibc", libc_version="2.36"),
        pyvenv={"version": "3.11.7"},
        indexes=("https://example.org/simple",),
        find_links=(),
        packages=tuple(sorted(unique.values(), key=lambda p: p.name) if sort else unique.values()),
        manifest_sha256="1" * 64,
        manifest_files=3,
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(packages(), max_size=6))
def test_write_then_read_is_equal(pkgs: list[Package]) -> None:
    lock = make_lock(pkgs)
    data = render_lock(lock)
    assert parse_lock(tomllib.loads(data.decode()), "mem") == lock
    assert render_lock(parse_lock(tomllib.loads(data.decode()), "mem")) == data


@settings(max_examples=30, deadline=None)
@given(st.lists(packages(), min_size=2, max_size=5, unique_by=lambda p: p.name))
def test_output_does_not_depend_on_input_order(pkgs: list[Package]) -> None:
    # Neither lock is sorted before the writer sees it.
    forward = make_lock(pkgs, sort=False)
    backward = make_lock(list(reversed(pkgs)), sort=False)
    assert [p.name for p in forward.packages] != [p.name for p in backward.packages]
    assert render_lock(forward) == render_lock(backward)


def _native(path: str) -> NativeLib:
    return NativeLib(path=path, sha256="c" * 64, needed=("libc.so.6",), version_needs={})


def test_writer_sorts_packages_and_native_libraries() -> None:
    """Given in reverse order, written sorted: by name, and native libraries by path."""
    zeta = _document_package("zeta", (_native("site-packages/z/b.so"), _native("site-packages/z/a.so")))
    alpha = _document_package("alpha")
    lock = make_lock([zeta, alpha], sort=False)
    assert [p.name for p in lock.packages] == ["zeta", "alpha"]
    doc = tomllib.loads(render_lock(lock).decode())
    assert [p["name"] for p in doc["packages"]] == ["alpha", "zeta"]
    native = doc["packages"][1]["tool"]["envlock"]["native"]
    assert [n["path"] for n in native] == ["site-packages/z/a.so", "site-packages/z/b.so"]


def _document_package(name: str = "six", native: tuple[NativeLib, ...] = ()) -> Package:
    return Package(
        name=name,
        version="1.17.0",
        source="index",
        native=native,
        wheel=Artifact(
            filename=f"{name}-1.17.0-py2.py3-none-any.whl", sha256="a" * 64, url="https://x/six.whl"
        ),
        tree_digest="sha256:" + "b" * 64,
    )


def _document() -> dict[str, Any]:
    return dict(lock_to_dict(make_lock([_document_package()])))


def test_missing_field_is_named() -> None:
    doc = _document()
    del doc["packages"][0]["tool"]["envlock"]["tree-digest"]
    with pytest.raises(LockError, match=r"locks/x.toml: packages\[0\]\.tool\.envlock\.tree-digest: missing"):
        parse_lock(doc, "locks/x.toml")


def test_wrong_type_is_named() -> None:
    doc = _document()
    doc["tool"]["envlock"]["manifest"]["files"] = "three"
    with pytest.raises(LockError, match=r"tool\.envlock\.manifest\.files: expected int"):
        parse_lock(doc, "locks/x.toml")


def test_pep751_violation_is_reported() -> None:
    doc = _document()
    doc["packages"][0]["wheels"][0]["name"] = "other-1.0-py3-none-any.whl"
    with pytest.raises(LockError, match="not a valid PEP 751 lock"):
        parse_lock(doc, "locks/x.toml")


def test_future_format_is_refused() -> None:
    doc = _document()
    doc["tool"]["envlock"]["format"] = 99
    with pytest.raises(LockError, match="lock format 99 is not supported"):
        parse_lock(doc, "locks/x.toml")


def test_read_lock_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="no such lock"):
        read_lock(tmp_path / "pylock.none.toml")
    bad = tmp_path / "pylock.bad.toml"
    bad.write_text("lock-version = ")
    with pytest.raises(LockError, match=r"pylock\.bad\.toml: not valid TOML"):
        read_lock(bad)
    good = tmp_path / "pylock.good.toml"
    good.write_text(tomli_w.dumps(_document()))
    assert read_lock(good).host == "ct129"


def test_manifest_round_trip_with_odd_paths() -> None:
    rows = [
        FileEntry(owner="six", path="site-packages/six.py", sha256="c" * 64, size=10, kind="f"),
        FileEntry(owner=":venv", path="bin/python", sha256="python3", size=0, kind="l"),
        FileEntry(owner="odd", path="site-packages/a\tb\\c.txt", sha256="d" * 64, size=1, kind="x"),
    ]
    data = render_manifest(rows)
    assert sorted(parse_manifest(data, "m"), key=lambda e: e.path) == sorted(rows, key=lambda e: e.path)
    with pytest.raises(LockError, match="m:2: not a manifest row"):
        parse_manifest(b"# header\nbroken row\n", "m")
