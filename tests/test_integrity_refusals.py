"""Every check that keeps wrong bytes out, fed the wrong thing: it must refuse, and say why.

Each test has a positive control (the right thing passes) beside the
refusal, so a check that refuses everything fails too. The wheels, venvs,
HTTP server and shell are real; docs/testing.md lists which planted bug
each test catches.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import http.server
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from envlock.agent.apply import ApplyError, verify_staging
from envlock.agent.journal import StateDir
from envlock.agent.protocol import ApplyPlan, DistFacts
from envlock.agent.stamp import applied, write_stamp
from envlock.apply import check_digest, checked_lock
from envlock.errors import EnvlockError, LockError
from envlock.fetch import ArtifactError, VerifiedCache, blob, fetch_all, fetch_one
from envlock.index import IndexClient
from envlock.lock.digest import digest_problem, lock_digest, tree_digest
from envlock.lock.io import render_lock
from envlock.lock.manifest import manifest_sha256, parse_manifest, read_manifest, render_manifest
from envlock.lock.model import Artifact, FileEntry, Package, SourceTree
from envlock.provenance import Found, ProvenanceCache, find_on_index, record_matches, tags_match
from envlock.store import Store
from envlock.transport.ssh import SshTransport, _quote
from envlock.workspace import Workspace
from helpers import build_simple_index, make_venv, make_wheel, uv_install
from lockfactory import make_lock, pkg, rows_for, with_manifest, write_lock_files

PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ================================================================ capture provenance

PROV_FILES = {
    "prov/__init__.py": b"A = 1\n",
    "prov/data.txt": b"payload\n",
    "prov-1.0.data/purelib/prov_extra.py": b"E = 1\n",
    "prov-1.0.data/purelib/provx/deep.py": b"D = 1\n",
    "prov-1.0.data/platlib/provplat.py": b"P = 1\n",
    "prov-1.0.data/scripts/prov-tool": b"#!python\nprint('tool')\n",
}


def _wheel_rows(wheel: Path) -> list[list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        return list(csv.reader(io.StringIO(archive.read(name).decode())))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """prov 1.0 installed by uv into a real venv: its installed RECORD and WHEEL tags."""
    work = tmp_path_factory.mktemp("prov")
    wheel = make_wheel(work / "wheel", "prov", "1.0", PROV_FILES)
    venv = make_venv(work / "venv")
    uv_install(venv, str(wheel))
    info = next(venv.glob("lib/python*/site-packages/prov-1.0.dist-info"))
    record = (info / "RECORD").read_bytes()
    tags = [
        line.split(": ", 1)[1]
        for line in (info / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    ]
    return {
        "work": work,
        "wheel": wheel,
        "rows": list(csv.reader(io.StringIO(record.decode()))),
        "dist": {
            "name": "prov",
            "version": "1.0",
            "record_sha256": _sha(record),
            "wheel": {"tags": tags},
            "record": list(csv.reader(io.StringIO(record.decode()))),
            "console_scripts": [],
        },
    }


def _variant(
    installed: dict[str, Any], name: str, files: dict[str, bytes], tag: str = "py3-none-any"
) -> Path:
    return make_wheel(installed["work"] / name, "prov", "1.0", files, tag=tag)


def test_record_matches_the_wheel_that_was_installed(installed: dict[str, Any]) -> None:
    # Installer rows (INSTALLER, RECORD, the relocated script) are allowed extras.
    assert record_matches(_wheel_rows(installed["wheel"]), installed["rows"], set())


def test_record_refuses_a_wheel_with_other_bytes_at_the_same_path(installed: dict[str, Any]) -> None:
    other = _variant(installed, "bytes", {**PROV_FILES, "prov/data.txt": b"PAYLOAD\n"})
    assert not record_matches(_wheel_rows(other), installed["rows"], set())


def test_record_refuses_other_bytes_in_a_relocated_purelib_file(installed: dict[str, Any]) -> None:
    other = _variant(installed, "purelib", {**PROV_FILES, "prov-1.0.data/purelib/prov_extra.py": b"E = 2\n"})
    assert not record_matches(_wheel_rows(other), installed["rows"], set())


def test_record_refuses_other_bytes_in_nested_and_platlib_files(installed: dict[str, Any]) -> None:
    for path in ("prov-1.0.data/purelib/provx/deep.py", "prov-1.0.data/platlib/provplat.py"):
        other = _variant(installed, path.split("/")[1], {**PROV_FILES, path: b"X = 0\n"})
        assert not record_matches(_wheel_rows(other), installed["rows"], set()), path


def test_record_allows_only_installer_rows_beside_the_wheel(installed: dict[str, Any]) -> None:
    wheel = _wheel_rows(installed["wheel"])
    rows = installed["rows"]
    pyc = [
        ["prov/__pycache__/__init__.cpython-311.pyc", "", ""],
        ["provx/__pycache__/deep.cpython-38.pyc", "", ""],
    ]
    bookkeeping = [["prov-1.0.dist-info/REQUESTED", "", ""], ["prov-1.0.dist-info/direct_url.json", "", ""]]
    assert record_matches(wheel, [*rows, *pyc, *bookkeeping], set())
    # A bookkeeping *name* outside a .dist-info, or deeper in one, is payload.
    for extra in ("prov/RECORD", "prov/INSTALLER", "prov-1.0.dist-info/sub/RECORD", "prov/x.pyc.txt"):
        assert not record_matches(wheel, [*rows, [extra, "sha256=x", "1"]], set()), extra


def test_record_rows_without_a_hash_are_compared_by_presence(installed: dict[str, Any]) -> None:
    """RECORD may list itself (no hash) anywhere, even first, with or without the empty columns."""
    wheel = _wheel_rows(installed["wheel"])
    own = [r for r in wheel if r[0].endswith("/RECORD")]
    rest = [r for r in wheel if not r[0].endswith("/RECORD")]
    assert record_matches([*own, *rest], installed["rows"], set())
    assert record_matches([[own[0][0]], *rest], installed["rows"], set())
    two_columns = [[p, "sha256=" + "A" * 43] if p.endswith("data.txt") else [p, d, n] for p, d, n in rest]
    assert not record_matches([*own, *two_columns], installed["rows"], set())


def test_record_refuses_when_the_venv_holds_a_file_the_wheel_lacks(installed: dict[str, Any]) -> None:
    fewer = {k: v for k, v in PROV_FILES.items() if k != "prov/data.txt"}
    assert not record_matches(_wheel_rows(_variant(installed, "fewer", fewer)), installed["rows"], set())


def test_record_refuses_when_the_wheel_holds_a_file_the_venv_lacks(installed: dict[str, Any]) -> None:
    more = {**PROV_FILES, "prov/more.py": b"M = 1\n"}
    assert not record_matches(_wheel_rows(_variant(installed, "more", more)), installed["rows"], set())


def test_record_compares_even_installer_named_files_the_wheel_ships(installed: dict[str, Any]) -> None:
    """A bookkeeping name the wheel itself lists is still compared by hash."""
    rows = [[p, d, s] for p, d, s in installed["rows"]]
    record = next(r for r in rows if r[0].endswith(".dist-info/METADATA"))
    record[1] = "sha256=" + "A" * 43
    assert not record_matches(_wheel_rows(installed["wheel"]), rows, set())


def test_tags_must_match_the_installed_wheel() -> None:
    assert tags_match("prov-1.0-py3-none-any.whl", ["py3-none-any"])
    assert not tags_match("prov-1.0-cp311-cp311-linux_x86_64.whl", ["py3-none-any"])
    assert not tags_match("prov-1.0-py3-none-any.whl", ["cp311-cp311-linux_x86_64"])
    assert not tags_match("not a wheel name.whl", ["py3-none-any"])


def test_find_on_index_takes_only_the_wheel_that_was_installed(
    installed: dict[str, Any], tmp_path: Path
) -> None:
    """The very same bytes under another tag or version are not the installed wheel."""
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    wrong_tag = renamed / "prov-1.0-cp311-cp311-linux_x86_64.whl"
    wrong_version = renamed / "prov-1.1-py3-none-any.whl"
    older = renamed / "prov-0.9-py3-none-any.whl"  # listed before the right one
    for path in (wrong_tag, wrong_version, older):
        shutil.copy(installed["wheel"], path)
    url = build_simple_index(tmp_path / "bad", [wrong_tag, wrong_version, older])
    assert find_on_index(IndexClient((url,)), installed["dist"]) is None
    url = build_simple_index(tmp_path / "good", [wrong_tag, wrong_version, older, installed["wheel"]])
    found = find_on_index(IndexClient((url,)), installed["dist"])
    assert found is not None and found.artifact.filename == "prov-1.0-py3-none-any.whl"
    served = tmp_path / "good" / "files" / found.artifact.filename
    assert found.artifact == Artifact(
        filename=served.name,
        sha256=_sha(served.read_bytes()),
        size=served.stat().st_size,
        url=served.as_uri(),
    )
    assert found.index == url


def test_find_on_index_over_http_locks_the_served_url(
    installed: dict[str, Any], served: tuple[Path, str]
) -> None:
    root, base = served
    build_simple_index(root, [installed["wheel"]])
    found = find_on_index(IndexClient((f"{base}/simple",)), installed["dist"])
    name = installed["wheel"].name
    assert found == Found(
        Artifact(filename=name, sha256=_sha(installed["wheel"].read_bytes()), url=f"{base}/files/{name}"),
        f"{base}/simple",
    )


def test_provenance_cache_survives_a_reload_and_keys_on_the_installed_record(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "envlock" / "provenance.json"
    cache = ProvenanceCache(path)
    dist = cast(DistFacts, {"name": "prov", "version": "1.0", "record_sha256": "r1"})
    key = cache.key(dist, ("https://a/simple",))
    assert key == _sha(b"prov|1.0|r1|https://a/simple")
    assert cache.get(key) is None
    found = Found(
        Artifact(filename="prov-1.0-py3-none-any.whl", sha256="a" * 64, size=7, url="u"), "https://a/simple"
    )
    cache.put(key, found)
    cache.save()
    reloaded = ProvenanceCache(path)
    assert reloaded.get(key) == found and not reloaded.dirty
    # Another installed RECORD, version or index list is another question.
    for other in (
        cache.key(cast(DistFacts, {**dist, "record_sha256": "r2"}), ("https://a/simple",)),
        cache.key(cast(DistFacts, {**dist, "version": "1.1"}), ("https://a/simple",)),
        cache.key(dist, ("https://b/simple",)),
    ):
        assert other != key and reloaded.get(other) is None
    assert [p.name for p in path.parent.iterdir()] == ["provenance.json"]  # no temp file left
    # A second answer is added to the same file, keys sorted so the file is stable.
    reloaded.put("0" * 64, found)
    reloaded.save()
    assert path.read_text() == json.dumps(reloaded.data, sort_keys=True)
    assert list(json.loads(path.read_text())) == sorted([key, "0" * 64])
    path.write_text("{not json")
    assert ProvenanceCache(path).data == {}
    ProvenanceCache(None).save()  # nowhere to save: a no-op
    untouched = ProvenanceCache(tmp_path / "never.json")
    untouched.save()
    assert not (tmp_path / "never.json").exists()


# ================================================================ fetch and store


def _package(filename: str, data: bytes, *, url: str | None = None, path: str | None = None) -> Package:
    art = Artifact(filename=filename, sha256=_sha(data), size=len(data), url=url, path=path)
    return Package(name="prov", version="1.0", wheel=art, source="index", tree_digest="sha256:" + "0" * 64)


def _store_files(store: Store) -> list[str]:
    return sorted(p.relative_to(store.root).as_posix() for p in store.root.rglob("*") if p.is_file())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on loopback: (directory, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_over_http_refuses_other_bytes(tmp_path: Path, served: tuple[Path, str]) -> None:
    root, base = served
    good, bad = b"the locked wheel bytes", b"THE LOCKED WHEEL BYTES"
    (root / "a-1.0-py3-none-any.whl").write_bytes(good)
    store = Store(tmp_path / "store")
    fetched = fetch_one(
        store, tmp_path, _package("a-1.0-py3-none-any.whl", good, url=f"{base}/a-1.0-py3-none-any.whl")
    )
    assert fetched.path.read_bytes() == good and fetched.path == store.wheel_path(
        _sha(good), fetched.path.name
    )
    (root / "b-1.0-py3-none-any.whl").write_bytes(bad)
    url = f"{base}/b-1.0-py3-none-any.whl"
    with pytest.raises(ArtifactError) as caught:
        fetch_one(store, tmp_path, _package("b-1.0-py3-none-any.whl", good, url=url))
    assert str(caught.value) == (
        f"b-1.0-py3-none-any.whl from {url}: sha256 {_sha(bad)}, the lock says {_sha(good)}; refusing it"
    )
    assert _store_files(store) == [f"wheels/{_sha(good)}/a-1.0-py3-none-any.whl"]


def test_fetch_of_a_missing_url_names_it(tmp_path: Path, served: tuple[Path, str]) -> None:
    url = f"{served[1]}/gone-1.0-py3-none-any.whl"
    with pytest.raises(ArtifactError, match=r"^prov: cannot download http://127\.0\.0\.1:\d+/gone-1\.0"):
        fetch_one(Store(tmp_path / "store"), tmp_path, _package("gone-1.0-py3-none-any.whl", b"x", url=url))


def test_fetch_from_a_file_url_refuses_other_bytes(tmp_path: Path) -> None:
    source = tmp_path / "c-1.0-py3-none-any.whl"
    source.write_bytes(b"tampered")
    store = Store(tmp_path / "store")
    with pytest.raises(ArtifactError) as caught:
        fetch_one(store, tmp_path, _package(source.name, b"original", url=source.as_uri()))
    assert str(caught.value) == (
        f"{source.name} from {source.as_uri()}: sha256 {_sha(b'tampered')}, "
        f"the lock says {_sha(b'original')}; refusing it"
    )
    assert _store_files(store) == []  # no final name, no .part left behind
    with pytest.raises(ArtifactError, match=r"^prov: file://.*/none\.whl does not exist$"):
        fetch_one(store, tmp_path, _package("none.whl", b"x", url=(tmp_path / "none.whl").as_uri()))


def test_fetch_of_a_store_path_refuses_other_bytes(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d-1.0-py3-none-any.whl").write_bytes(b"edited")
    package = _package("d-1.0-py3-none-any.whl", b"repacked", path="../elsewhere/d-1.0-py3-none-any.whl")
    with pytest.raises(ArtifactError) as caught:
        fetch_one(Store(tmp_path / "store"), locks, package)
    source = tmp_path / "elsewhere" / "d-1.0-py3-none-any.whl"
    assert str(caught.value) == (
        f"d-1.0-py3-none-any.whl from {source}: sha256 {_sha(b'edited')}, "
        f"the lock says {_sha(b'repacked')}; refusing it"
    )
    gone = replace(package, wheel=replace(package.wheel, path="../elsewhere/missing.whl"))
    with pytest.raises(ArtifactError) as caught:
        fetch_one(Store(tmp_path / "store"), locks, gone)
    assert str(caught.value) == (
        "prov: ../elsewhere/missing.whl is not in the store (capture it again, copy the store, "
        "or name a shared store in envlock.toml: docs/store.md)"
    )
    nowhere = replace(package, wheel=replace(package.wheel, path=None, url=None))
    with pytest.raises(ArtifactError) as caught:
        fetch_one(Store(tmp_path / "store"), locks, nowhere)
    assert str(caught.value) == "prov: the lock gives neither url nor path for d-1.0-py3-none-any.whl"


def test_fetch_returns_the_package_and_its_store_path_from_every_source(
    tmp_path: Path, served: tuple[Path, str]
) -> None:
    """http, file://, a path beside the locks, and the store itself; progress in bytes."""
    root, base = served
    locks = tmp_path / "locks"
    locks.mkdir()
    data = {name: name.encode() * 3 for name in ("h-1.0-py3-none-any.whl", "f-1.0-py3-none-any.whl")}
    (root / "h-1.0-py3-none-any.whl").write_bytes(data["h-1.0-py3-none-any.whl"])
    (tmp_path / "f-1.0-py3-none-any.whl").write_bytes(data["f-1.0-py3-none-any.whl"])
    (tmp_path / "p-1.0-py3-none-any.whl").write_bytes(b"beside")
    packages = (
        _package(
            "h-1.0-py3-none-any.whl", data["h-1.0-py3-none-any.whl"], url=f"{base}/h-1.0-py3-none-any.whl"
        ),
        _package(
            "f-1.0-py3-none-any.whl",
            data["f-1.0-py3-none-any.whl"],
            url=(tmp_path / "f-1.0-py3-none-any.whl").as_uri(),
        ),
        replace(
            _package("p-1.0-py3-none-any.whl", b"beside", path="../p-1.0-py3-none-any.whl"), version="2.0"
        ),
    )
    sized = replace(packages[2], wheel=replace(packages[2].wheel, size=None))
    store = Store(tmp_path / "store")
    seen: list[tuple[int, int]] = []
    for _round in range(2):  # the second round finds every file in the store
        seen.clear()
        fetched = fetch_all(
            store, locks, (*packages[:2], sized), lambda done, total: seen.append((done, total))
        )
        assert [f.package for f in fetched] == [*packages[:2], sized]
        assert [f.path for f in fetched] == [
            store.wheel_path(p.wheel.sha256, p.wheel.filename) for p in packages
        ]
        assert [f.path.read_bytes() for f in fetched] == [*data.values(), b"beside"]
        first, second = (len(d) for d in data.values())  # the third has no size in the lock
        assert seen == [(first, first + second), (first + second, first + second), (first + second,) * 2]
    for package in packages:
        assert fetch_one(store, locks, package).package is package  # no verified cache: hashed again
    assert store.has_wheel(packages[0].wheel.sha256, packages[0].wheel.filename)
    assert not store.has_wheel(packages[0].wheel.sha256, packages[1].wheel.filename)
    assert not store.has_wheel(packages[1].wheel.sha256, packages[0].wheel.filename)


def _ctime_moved(path: Path, before: os.stat_result) -> None:
    """The kernel stamps ctime from a coarse clock: a change within one tick keeps
    the old value. Touch again (bounded) until the ctime differs, as it would
    for any edit made a few milliseconds later."""
    for _ in range(2000):
        if path.lstat().st_ctime_ns != before.st_ctime_ns:
            return
        time.sleep(0.001)
        os.utime(path, ns=(path.lstat().st_atime_ns, path.lstat().st_mtime_ns), follow_symlinks=False)
    raise AssertionError(f"{path}: ctime never moved")


def _tamper_same_size_and_mtime(path: Path, data: bytes) -> None:
    st = path.stat()
    assert len(data) == st.st_size
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime (and the bytes) tell
    _ctime_moved(path, st)


def test_a_tampered_store_file_is_refused_even_after_the_verified_cache_saw_it(tmp_path: Path) -> None:
    good = b"store wheel bytes"
    source = tmp_path / "e-1.0-py3-none-any.whl"
    source.write_bytes(good)
    store = Store(tmp_path / "store")
    package = _package(source.name, good, url=source.as_uri())
    (first,) = fetch_all(store, tmp_path, (package,))
    (again,) = fetch_all(store, tmp_path, (package,))  # hashed, cached by stat key, saved
    assert again.path == first.path
    cached = json.loads((store.root / ".verified.json").read_text())
    assert cached[str(first.path)][4] == _sha(good)
    _tamper_same_size_and_mtime(first.path, b"STORE WHEEL BYTES")
    with pytest.raises(ArtifactError) as caught:
        fetch_all(store, tmp_path, (package,))
    message = str(caught.value)
    assert message.startswith(
        f"e-1.0-py3-none-any.whl in the store is corrupt (sha256 {_sha(b'STORE WHEEL BYTES')[:16]}…, "
        f"the lock says {_sha(good)[:16]}…; prov needs it); moved to {store.root / 'quarantine'}/"
    )
    assert not first.path.exists()  # quarantined, never reused
    # Without any verified cache the same bytes are refused too.
    (second,) = fetch_all(store, tmp_path, (package,))  # fetched again from its url
    _tamper_same_size_and_mtime(second.path, b"STORE WHEEL BYTES")
    with pytest.raises(ArtifactError, match=r"in the store is corrupt .*; prov needs it\); moved to "):
        fetch_one(store, tmp_path, package)


def test_verified_cache_answers_from_stat_only_while_the_stat_is_unchanged(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.root.mkdir()
    path = tmp_path / "f"
    path.write_bytes(b"one")
    cache = VerifiedCache(store)
    assert cache.sha256(path) == _sha(b"one")
    cache.save()
    reloaded = VerifiedCache(store)
    assert reloaded.entries == cache.entries
    assert reloaded.sha256(path) == _sha(b"one")
    _tamper_same_size_and_mtime(path, b"two")
    assert VerifiedCache(store).sha256(path) == _sha(b"two")


def test_verified_cache_is_trusted_while_the_stat_key_holds(tmp_path: Path) -> None:
    """The point of the cache: a warm apply does not hash gigabytes again. So a
    cached answer is returned as is while size, mtime, inode and ctime hold."""
    store = Store(tmp_path / "store")
    store.root.mkdir()
    path = tmp_path / "big.whl"
    path.write_bytes(b"gigabytes")
    cache = VerifiedCache(store)
    cache.sha256(path)
    cache.save()
    entries = json.loads((store.root / ".verified.json").read_text())
    entries[str(path)][4] = "cached answer"
    (store.root / ".verified.json").write_text(json.dumps(entries))
    assert VerifiedCache(store).sha256(path) == "cached answer"
    before = path.stat()
    os.chmod(path, 0o600)  # ctime moves: the answer is computed again
    _ctime_moved(path, before)
    assert VerifiedCache(store).sha256(path) == _sha(b"gigabytes")


def test_verified_cache_writes_only_what_it_learned(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.root.mkdir()
    VerifiedCache(store).save()
    assert not (store.root / ".verified.json").exists()
    (store.root / ".verified.json").write_text("{torn")
    assert VerifiedCache(store).entries == {}


def test_store_blobs_are_checked_against_their_name(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    sha = store.put_blob(b"#!python\nprint(1)\n")
    assert blob(store, sha, "prov bin/x") == store.root / "blobs" / sha[:2] / sha
    store.blob_path(sha).write_bytes(b"#!python\nprint(2)\n")
    with pytest.raises(ArtifactError) as caught:
        blob(store, sha, "prov bin/x")
    got = _sha(b"#!python\nprint(2)\n")
    assert str(caught.value).startswith(
        f"prov bin/x: store blob {sha[:16]}… is corrupt (its bytes hash to {got[:16]}…); "
        f"moved to {store.root / 'quarantine'}/"
    )
    assert not store.blob_path(sha).exists()
    missing = _sha(b"never stored")
    with pytest.raises(ArtifactError) as caught:
        blob(store, missing, "prov bin/y")
    assert str(caught.value) == (
        f"prov bin/y: blob {missing} is not in the store {store.root}; capture the host it came from again "
        "(`envlock capture --no-cache HOST`; for a target lock, `envlock lock HOST`)"
    )


def test_store_put_wheel_refuses_bytes_other_than_expected(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path, sha = store.put_wheel(b"wheel", "w-1.0-py3-none-any.whl", expected_sha256=_sha(b"wheel"))
    assert sha == _sha(b"wheel") and path.read_bytes() == b"wheel"
    assert path == tmp_path / "store" / "wheels" / sha / "w-1.0-py3-none-any.whl"
    with pytest.raises(EnvlockError) as caught:
        store.put_wheel(b"other", "w-1.0-py3-none-any.whl", expected_sha256=_sha(b"wheel"))
    assert str(caught.value) == (
        f"w-1.0-py3-none-any.whl: sha256 {_sha(b'other')} does not match expected {_sha(b'wheel')}"
    )
    assert _store_files(store) == [f"wheels/{sha}/w-1.0-py3-none-any.whl"]
    # The same bytes under a second name share the sha256 directory.
    second, _ = store.put_wheel(b"wheel", "w-1.0-py2.py3-none-any.whl")
    assert second.parent == path.parent and second.read_bytes() == b"wheel"


# ================================================================ staged venv and no-op stamp


@pytest.fixture(scope="module")
def staged(
    tmp_path_factory: pytest.TempPathFactory, installed: dict[str, Any]
) -> tuple[Path, list[list[Any]]]:
    """A real venv with prov installed, and its expected rows from an independent walk."""
    venv = make_venv(tmp_path_factory.mktemp("staged") / "venv")
    wheel = make_wheel(
        installed["work"] / "plain",
        "plain",
        "1.0",
        {"plain/__init__.py": b"P = 1\n", "plain/d.txt": b"12345"},
    )
    uv_install(venv, str(wheel))
    site = next(venv.glob("lib/python*/site-packages"))
    bookkeeping = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json", "uv_cache.json"}
    expected = []
    for path in sorted(site.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pth":
            continue
        if path.parent.name.endswith(".dist-info") and path.name in bookkeeping:
            continue
        st = path.stat()
        kind = "x" if st.st_mode & 0o111 else "f"
        rel = "site-packages/" + path.relative_to(site).as_posix()
        expected.append([rel, _sha(path.read_bytes()), st.st_size, kind])
    return venv, expected


def _plan(expected: list[list[Any]]) -> ApplyPlan:
    """Only what verify_staging reads: the staged venv is checked in place."""
    return cast(ApplyPlan, {"python_version": PY, "expected": expected})


def test_staged_venv_that_is_the_lock_passes(staged: tuple[Path, list[list[Any]]]) -> None:
    venv, expected = staged
    count, _found = verify_staging(_plan(expected), str(venv), 1)
    assert count == len(expected) >= 4


def test_staged_venv_with_other_bytes_of_the_same_size_is_refused(
    staged: tuple[Path, list[list[Any]]],
) -> None:
    venv, expected = staged
    rows = [list(r) for r in expected]
    row = next(r for r in rows if r[0].endswith("plain/d.txt"))
    locked = _sha(b"54321")
    row[1] = locked
    with pytest.raises(ApplyError) as caught:
        verify_staging(_plan(rows), str(venv), 1)
    got = _sha(b"12345")
    rel = next(venv.glob("lib/python*/site-packages")).relative_to(venv).as_posix() + "/plain/d.txt"
    assert str(caught.value) == (
        f"staged venv differs from the lock: {rel}: got {got[:12]} 5 f, locked {locked[:12]} 5 f"
    )


def test_staged_venv_missing_extra_or_other_kind_is_refused(staged: tuple[Path, list[list[Any]]]) -> None:
    venv, expected = staged
    site = next(venv.glob("lib/python*/site-packages")).relative_to(venv).as_posix()
    ghost = ["site-packages/plain/ghost.py", _sha(b""), 0, "f"]
    with pytest.raises(
        ApplyError, match=f"^staged venv differs from the lock: missing {site}/plain/ghost.py$"
    ):
        verify_staging(_plan([*expected, ghost]), str(venv), 1)
    fewer = [r for r in expected if not r[0].endswith("plain/d.txt")]
    with pytest.raises(
        ApplyError, match=f"^staged venv differs from the lock: extra file {site}/plain/d.txt$"
    ):
        verify_staging(_plan(fewer), str(venv), 1)
    executable = [[*r[:3], "x"] if r[0].endswith("plain/d.txt") else r for r in expected]
    with pytest.raises(ApplyError, match=r"plain/d\.txt: got \w{12} 5 f, locked \w{12} 5 x$"):
        verify_staging(_plan(executable), str(venv), 1)
    resized = [[r[0], r[1], r[2] + 1, r[3]] if r[0].endswith("plain/d.txt") else r for r in expected]
    with pytest.raises(ApplyError, match=r"plain/d\.txt: got \w{12} 5 f, locked \w{12} 6 f$"):
        verify_staging(_plan(resized), str(venv), 1)


def test_no_op_stamp_holds_only_for_the_same_lock_and_untouched_files(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "m.py").write_text("M = 1\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # apply only stamps a venv
    os.symlink("lib/m.py", venv / "link")
    assert not applied(str(venv), "sha256:" + "a" * 64)["matches"]  # no stamp yet
    StateDir(str(venv)).create()
    write_stamp(StateDir(str(venv)), "sha256:" + "a" * 64)
    assert applied(str(venv), "sha256:" + "a" * 64)["matches"]
    # Another lock: the venv is not that lock, whatever the files' stat says.
    assert not applied(str(venv), "sha256:" + "b" * 64)["matches"]
    before = (venv / "lib" / "m.py").stat()
    (venv / "lib" / "m.py").write_text("M = 2\n")  # same size
    os.utime(venv / "lib" / "m.py", ns=(before.st_atime_ns, before.st_mtime_ns))
    _ctime_moved(venv / "lib" / "m.py", before)
    assert not applied(str(venv), "sha256:" + "a" * 64)["matches"]
    write_stamp(StateDir(str(venv)), "sha256:" + "a" * 64)
    os.unlink(venv / "link")
    os.symlink("lib", venv / "link")
    assert not applied(str(venv), "sha256:" + "a" * 64)["matches"]


# ================================================================ manifest and lock digests


def test_tree_and_venv_digests_follow_the_written_rules() -> None:
    """docs/lock-format.md, computed here with hashlib, not with envlock."""
    rows = [
        FileEntry(owner="p", path="site-packages/p/b.py", sha256="bb", size=2, kind="f"),
        FileEntry(owner="p", path="site-packages/p/a", sha256="aa", size=10, kind="x"),
    ]
    text = "site-packages/p/a\taa\t10\tx\nsite-packages/p/b.py\tbb\t2\tf\n"
    assert tree_digest(rows) == "sha256:" + _sha(text.encode())
    # envlock-payload-2: sorted compact JSON lines (UTF-8, not \u escapes), one per fact.
    tree = SourceTree(path="/src/édit", sha256="c" * 64, size=10)
    edit = replace(pkg("edit", "0.1"), source_tree=tree, scripts={"bin/edit": "d" * 64, "bin/ed2": "e" * 64})
    lock = make_lock("ct200", [pkg("zeta", "2.0"), pkg("alpha", "1.0"), edit], python="3.11.7")
    lock = replace(lock, pyvenv={**lock.pyvenv, "prompt": "'café'"})
    facts: list[list[str]] = [["python", "3.11.7"], ["venv", lock.venv]]
    facts += [["pyvenv", k, v] for k, v in lock.pyvenv.items()]
    for p in lock.packages:
        facts.append(["package", p.name, p.version, p.tree_digest, p.wheel.filename, p.wheel.sha256])
        facts += [["script", p.name, rel, sha] for rel, sha in p.scripts.items()]
        if p.source_tree is not None:
            facts.append(["source-tree", p.name, p.source_tree.path, p.source_tree.sha256])
    lines = sorted(json.dumps(f, ensure_ascii=False, separators=(",", ":")) + "\n" for f in facts)
    assert lock_digest(lock) == "sha256:" + _sha("".join(lines).encode())
    # Each script and source-tree fact counts on its own.
    for other in (
        replace(edit, scripts={"bin/edit": "d" * 64}),
        replace(edit, scripts={"bin/edit": "d" * 64, "bin/ed3": "e" * 64}),
        replace(edit, source_tree=replace(tree, path="/src/other")),
        replace(edit, source_tree=replace(tree, sha256="f" * 64)),
        replace(edit, source_tree=None),
    ):
        changed = replace(lock, packages=tuple(other if p.name == "edit" else p for p in lock.packages))
        assert lock_digest(changed) != lock_digest(lock)


def test_a_lock_under_other_digest_rules_is_refused_with_what_to_do() -> None:
    lock = make_lock("ct200", [pkg("six", "1.17.0")])
    assert digest_problem(lock) is None
    assert digest_problem(replace(lock, digest_rules="envlock-payload-1")) == (
        "tool.envlock.digest-rules is 'envlock-payload-1'; this envlock checks 'envlock-payload-2' "
        "(capture or lock it again with this envlock)"
    )


def _workspace(tmp_path: Path) -> tuple[Workspace, Path, Path]:
    """A lock and manifest exactly as envlock writes them: every digest consistent."""
    packages = [pkg("numpy", "2.2.6"), pkg("six", "1.17.0", files=2), pkg("empty", "1.0", files=0)]
    rows = rows_for(packages)
    packages = [replace(p, tree_digest=tree_digest(r for r in rows if r.owner == p.name)) for p in packages]
    lock = make_lock("ct200", packages)
    lock, manifest = with_manifest(lock, rows)
    lock = replace(lock, digest=lock_digest(lock))
    workspace = Workspace(tmp_path / "fleet")
    path = write_lock_files(workspace.locks_dir, lock, manifest)
    return workspace, path, workspace.manifest_path("ct200")


def test_an_untouched_lock_and_manifest_pass(tmp_path: Path) -> None:
    workspace, _lock, _manifest = _workspace(tmp_path)
    lock, rows = checked_lock(workspace, "ct200")
    assert len(rows) == 5 and [p.name for p in lock.packages] == ["empty", "numpy", "six"]


def test_an_unreadable_lock_is_named_as_the_workspace_shows_it(tmp_path: Path) -> None:
    workspace, path, _manifest = _workspace(tmp_path)
    path.write_text("lock-version = ")
    with pytest.raises(LockError, match=r"^locks/pylock\.ct200\.toml: not valid TOML"):
        checked_lock(workspace, "ct200")


def test_a_lock_whose_digest_was_edited_is_refused(tmp_path: Path) -> None:
    workspace, path, _manifest = _workspace(tmp_path)
    text = path.read_text()
    digest = tomllib.loads(text)["tool"]["envlock"]["digest"]
    path.write_text(text.replace(digest, "sha256:" + "0" * 64))
    with pytest.raises(LockError) as caught:
        checked_lock(workspace, "ct200")
    assert (
        str(caught.value)
        == "locks/pylock.ct200.toml: tool.envlock.digest does not match its packages, scripts, source trees "
        "or pyvenv facts (edited by hand? capture or lock it again)"
    )


def test_a_lock_whose_version_was_edited_is_refused(tmp_path: Path) -> None:
    workspace, _path, _manifest = _workspace(tmp_path)
    lock, _rows = checked_lock(workspace, "ct200")
    edited = replace(
        lock, packages=tuple(replace(p, version="2.2.7") if p.name == "numpy" else p for p in lock.packages)
    )
    with pytest.raises(LockError, match=r"^shown: tool\.envlock\.digest does not match its packages"):
        check_digest(edited, "shown")
    check_digest(lock, "shown")
    other_python = replace(lock, interpreter=replace(lock.interpreter, version="3.11.10"))
    with pytest.raises(LockError):
        check_digest(other_python, "shown")


def test_an_edited_manifest_is_refused(tmp_path: Path) -> None:
    workspace, _path, manifest = _workspace(tmp_path)
    data = manifest.read_bytes()
    manifest.write_bytes(data.replace(b"\t100\tf\n", b"\t101\tf\n", 1))
    with pytest.raises(LockError) as caught:
        checked_lock(workspace, "ct200")
    assert str(caught.value) == (
        "locks/pylock.ct200.files.tsv: sha256 does not match locks/pylock.ct200.toml's "
        "tool.envlock.manifest.sha256 (edited by hand? capture again or restore it)"
    )


def test_a_manifest_edited_with_the_lock_hash_updated_fails_the_tree_digest(tmp_path: Path) -> None:
    workspace, path, manifest = _workspace(tmp_path)
    old = manifest_sha256(manifest.read_bytes())
    rows = parse_manifest(manifest.read_bytes(), "m")
    rows = [replace(r, sha256=_sha(b"injected")) if r.path.endswith("six/m1.py") else r for r in rows]
    data = render_manifest(rows)
    manifest.write_bytes(data)
    path.write_text(path.read_text().replace(old, manifest_sha256(data)))
    with pytest.raises(LockError) as caught:
        checked_lock(workspace, "ct200")
    assert str(caught.value) == (
        "locks/pylock.ct200.toml: six: tree-digest does not match the manifest (edited by hand?)"
    )


def test_manifest_rows_that_are_not_rows_are_named(tmp_path: Path) -> None:
    good = "six\tsite-packages/six.py\t" + "a" * 64 + "\t10\tf\n"
    assert parse_manifest(("# header\n\n" + good).encode(), "m") == [
        FileEntry(owner="six", path="site-packages/six.py", sha256="a" * 64, size=10, kind="f")
    ]
    for bad in (
        "six\tsite-packages/six.py\t" + "a" * 64 + "\t10\n",  # a field short
        "six\tsite-packages/six.py\t" + "a" * 64 + "\t10\tz\n",  # unknown kind
        "six\tsite-packages/six.py\t" + "a" * 64 + "\tten\tf\n",  # size not a number
    ):
        with pytest.raises(LockError, match=r"^locks/m\.tsv:3: not a manifest row$"):
            parse_manifest(("# h\n" + good + bad).encode(), "locks/m.tsv")
    with pytest.raises(LockError, match=r"cannot read manifest"):
        read_manifest(tmp_path / "absent.tsv")


def test_manifest_escapes_round_trip() -> None:
    odd = [
        FileEntry(owner="we\tird", path="site-packages/a\\b\tc\nd", sha256="e" * 64, size=3, kind="l"),
        FileEntry(owner="tab\t", path="site-packages/nl\n", sha256="back\\", size=0, kind="x"),
        FileEntry(owner="p", path="site-packages/with space.py", sha256="e" * 64, size=1, kind="f"),
    ]
    assert parse_manifest(render_manifest(odd), "m") == sorted(odd, key=lambda e: e.path)


def test_manifest_reads_hand_edits_leniently_but_not_bad_bytes(tmp_path: Path) -> None:
    """An unknown escape keeps its character; a lone trailing backslash stays."""
    (entry,) = parse_manifest(("x\\qy\tsite-packages/a\\" + "\t" + "a" * 64 + "\t1\tf\n").encode(), "m")
    assert (entry.owner, entry.path) == ("xqy", "site-packages/a\\")
    bad = tmp_path / "pylock.x.files.tsv"
    bad.write_bytes(b"six\tsite-packages/\xff.py\t" + b"a" * 64 + b"\t1\tf\n")
    with pytest.raises(LockError) as caught:
        read_manifest(bad)
    assert str(caught.value) == f"{bad}: not UTF-8 text (byte 18); not a manifest envlock wrote"
    bad.write_bytes(b"# header\nsix\tsite-packages/six.py\n")
    with pytest.raises(LockError) as caught:
        read_manifest(bad)
    assert str(caught.value) == f"{bad}:2: not a manifest row"


# ================================================================ SSH quoting


ARGV_PRINTER = "import json, sys; print(json.dumps(sys.argv[1:]))"
HOSTILE = [
    "plain",
    "two words",
    "semi;colon",
    "$HOME",
    "${PATH}",
    "a&b",
    "`id`",
    "$(id)",
    "line\nbreak",
    "it's",
    'say "hi"',
    "back\\slash",
    "*",
    "~",
    "#comment",
    "a|b",
    "<in>out",
    "",
    "-n",
]


def test_remote_words_reach_the_remote_program_unchanged(tmp_path: Path) -> None:
    """The remote side runs the command line through a shell: run it through ``sh -c`` here."""
    canary = tmp_path / "canary"
    words = [*HOSTILE, f"; touch {canary}", f"$(touch {canary})", f"`touch {canary}`"]
    line = _quote([sys.executable, "-c", ARGV_PRINTER, *words])
    proc = subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(proc.stdout) == words
    assert not canary.exists()


def test_ssh_argv_ends_with_one_quoted_command_line(tmp_path: Path) -> None:
    transport = SshTransport("h", "user@h", ["-o", "BatchMode=yes"], tmp_path, "key", tmp_path / "bundle.zip")
    argv = transport.ssh_argv([sys.executable, "-c", ARGV_PRINTER, *HOSTILE])
    assert argv[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "ControlMaster=no", "--", "user@h"]
    proc = subprocess.run(["sh", "-c", argv[-1]], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(proc.stdout) == HOSTILE


STUB_AGENT = "import json, sys; print(json.dumps(sys.argv[1:]))\n"


def test_agent_command_line_reaches_the_agent_through_a_shell(tmp_path: Path) -> None:
    """The bootstrap runs in the venv's Python, finds the agent by key, passes the words on."""
    venv = make_venv(tmp_path / "venvX")  # a trailing X: rstrip must strip "/" only
    home = tmp_path / "home"
    transport = SshTransport("h", "user@h", [], tmp_path, "k3y", tmp_path / "bundle.zip")
    words = ["apply", "--venv", "/opt/my venv", "$(touch x)", "a;b"]
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    argv = transport.agent_argv(f"{venv}/", words)
    assert argv[-1].startswith(shlex.quote(f"{venv}/bin/python") + " -I -c ")
    missing = subprocess.run(["sh", "-c", argv[-1]], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (missing.returncode, missing.stderr) == (99, "@need-bundle\n")
    agent = home / ".cache" / "envlock" / "envlock-agent-k3y"
    (agent / "envlock" / "agent").mkdir(parents=True)
    (agent / "__main__.py").write_text("")
    (agent / "envlock" / "__init__.py").write_text("")
    (agent / "envlock" / "agent" / "__init__.py").write_text("")
    (agent / "envlock" / "agent" / "__main__.py").write_text(
        "import json, sys; print(json.dumps([sys.executable, sys.flags.isolated, *sys.argv[1:]]))\n"
    )
    ran = subprocess.run(
        ["sh", "-c", argv[-1]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
    assert json.loads(ran.stdout) == [f"{venv}/bin/python", 1, *words]
    assert not (tmp_path / "x").exists()
    explicit = transport.agent_argv(str(venv), words, python=sys.executable)
    ran = subprocess.run(
        ["sh", "-c", explicit[-1]], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    assert json.loads(ran.stdout)[0] == sys.executable


# ================================================================ the lock on disk is the rendered lock


def test_written_lock_is_the_rendered_lock(tmp_path: Path) -> None:
    workspace, path, _manifest = _workspace(tmp_path)
    lock, _rows = checked_lock(workspace, "ct200")
    assert path.read_bytes() == render_lock(lock)
