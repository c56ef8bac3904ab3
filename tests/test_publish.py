"""``envlock publish``: a real devpi-server on loopback, real uploads, real installs of the lock.

One workspace for the module: a venv holding a package built from a local
directory and a hand-patched index wheel (both repacked into the store),
captured, committed to git, then published to devpi. Each refusal gets a
fresh copy of the unpublished lock under another host name and, where the
index's contents matter, an index of its own.
"""

from __future__ import annotations

import email.parser
import hashlib
import http.client
import http.server
import json
import os
import shutil
import subprocess
import threading
import tomllib
import urllib.parse
import zipfile
from dataclasses import dataclass, replace
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from conftest import Index, write_profile
from devpirig import Devpi, DevpiIndex
from envlock.changes import PackageChange
from envlock.errors import LockError
from envlock.lock.io import parse_lock, read_lock
from envlock.publish.credentials import TOKEN_USER, find_credentials
from envlock.review.findings import package_findings
from helpers import ENVLOCK, UV, make_local_project, make_venv, uv_install

PATCH = b"\nPATCHED_BY_THE_TEAM = True\n"


@dataclass(frozen=True)
class Workspace:
    root: Path
    venv: Path
    index: DevpiIndex
    lock_before: bytes  # the lock as capture wrote it
    manifest: bytes
    store_sha256: dict[str, str]  # store wheel file name -> sha256 of its bytes, before publishing
    publish: subprocess.CompletedProcess[str]


def envlock(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TWINE_", "UV_PUBLISH_"))}
    return subprocess.run(
        [ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env={**clean, **(env or {})}
    )


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def _lock_path(root: Path, host: str) -> Path:
    return root / "locks" / f"pylock.{host}.toml"


def _twine(index: DevpiIndex, password: str | None = None) -> dict[str, str]:
    return {"TWINE_USERNAME": index.user, "TWINE_PASSWORD": password or index.password}


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, index: Index, devpi: Devpi) -> Workspace:
    base = tmp_path_factory.mktemp("publish")
    venv = make_venv(base / "venv")
    uv_install(venv, "--index-url", index.url, "alpha==1.0", "six==1.17.0")
    uv_install(venv, str(make_local_project(base / "projects" / "teamkernels", "teamkernels")))
    uv_install(venv, "-e", str(make_local_project(base / "projects" / "editkit", "editkit")))
    six = venv / "lib" / "python3.11" / "site-packages" / "six.py"
    six.write_bytes(six.read_bytes() + PATCH)  # hand-patched: repacked from the live files
    root = base / "ws"
    write_profile(root, "ct129", venv, index.url)
    captured = envlock(root, "capture", "ct129")
    assert captured.returncode == 0, captured.stderr
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "hosts", "locks")
    _git(root, "commit", "-q", "-m", "captured")
    store = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (root / "store").glob("wheels/*/*")}
    lock_before = _lock_path(root, "ct129").read_bytes()
    manifest = (root / "locks" / "pylock.ct129.files.tsv").read_bytes()
    target = devpi.index("team", "prod")
    published = envlock(
        root, "publish", "ct129", "--index", target.url, "--include-editable", env=_twine(target)
    )
    return Workspace(root, venv, target, lock_before, manifest, store, published)


def _copy_unpublished(ws: Workspace, host: str) -> None:
    """Host ``host`` gets ct129's lock as capture wrote it (before publishing)."""
    _lock_path(ws.root, host).write_bytes(ws.lock_before)
    (ws.root / "locks" / f"pylock.{host}.files.tsv").write_bytes(ws.manifest)


def _published(lock_text: str) -> dict[str, dict[str, Any]]:
    document = tomllib.loads(lock_text)
    return {p["name"]: p for p in document["packages"] if p["tool"]["envlock"]["source"] == "published"}


def test_publish_uploads_the_store_wheels_byte_for_byte(ws: Workspace) -> None:
    assert ws.publish.returncode == 0, ws.publish.stderr
    assert ws.index.password not in ws.publish.stdout + ws.publish.stderr
    before = tomllib.loads(ws.lock_before.decode())
    was = {p["name"]: p for p in before["packages"]}
    local = {"six", "teamkernels", "editkit"}
    assert {n for n, p in was.items() if p["tool"]["envlock"]["source"] == "repacked"} == local
    published = _published(_lock_path(ws.root, "ct129").read_text())
    assert set(published) == local
    for name, pkg in published.items():
        wheel, tool = pkg["wheels"][0], pkg["tool"]["envlock"]
        original = was[name]["wheels"][0]
        assert tool["published-from"] == {"source": "repacked", "path": original["path"]}
        assert tool["reason"] == was[name]["tool"]["envlock"]["reason"]  # provenance kept
        assert "path" not in wheel and wheel["url"].startswith(ws.index.url + "+f/")
        assert pkg["index"] == ws.index.simple
        assert wheel["hashes"] == original["hashes"] and wheel["name"] == original["name"]
        served = requests.get(wheel["url"], timeout=30)
        assert served.status_code == 200
        # the index serves the store's bytes exactly, so the lock's hash holds
        assert hashlib.sha256(served.content).hexdigest() == wheel["hashes"]["sha256"]
        assert ws.store_sha256[wheel["name"]] == wheel["hashes"]["sha256"]
    # the upload carried the wheel's core metadata, as twine sends it
    six_store = ws.root / "locks" / published["six"]["tool"]["envlock"]["published-from"]["path"]
    with zipfile.ZipFile(six_store) as archive:
        meta = email.parser.Parser().parsestr(archive.read("six-1.17.0.dist-info/METADATA").decode())
    project = requests.get(f"{ws.index.url}six", headers={"Accept": "application/json"}, timeout=30)
    release = project.json()["result"]["1.17.0"]
    assert (release["summary"], release["requires_python"]) == (meta["Summary"], meta["Requires-Python"])
    assert release["classifiers"] == meta.get_all("Classifier") and release["classifiers"]
    # untouched: index packages, the digest, the manifest; the live venv still verifies byte for byte
    lock = read_lock(_lock_path(ws.root, "ct129"))
    assert lock.digest == read_lock_bytes(ws.lock_before).digest
    assert lock.package("alpha") is not None and lock.package("alpha").source == "index"  # type: ignore[union-attr]
    assert (ws.root / "locks" / "pylock.ct129.files.tsv").read_bytes() == ws.manifest
    verify = envlock(ws.root, "verify", "ct129")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def read_lock_bytes(data: bytes) -> Any:
    return parse_lock(tomllib.loads(data.decode()), "before")


def test_a_machine_with_no_store_installs_the_published_lock_with_uv(ws: Workspace, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"  # no store/, no workspace: the lock alone
    elsewhere.mkdir()
    shutil.copy(_lock_path(ws.root, "ct129"), elsewhere / "pylock.toml")
    document = tomllib.loads((elsewhere / "pylock.toml").read_text())
    assert all("path" not in wheel for p in document["packages"] for wheel in p["wheels"])
    venv = make_venv(tmp_path / "fresh")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_LINK_MODE": "copy"}
    sync = subprocess.run(
        [UV, "pip", "sync", "--python", str(venv / "bin" / "python"), "pylock.toml"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
    )
    assert sync.returncode == 0, sync.stderr
    site, ref_site = (v / "lib" / "python3.11" / "site-packages" for v in (venv, ws.venv))
    assert (site / "six.py").read_bytes().endswith(PATCH)  # the hand-patched bytes, from the index
    for rel in ("six.py", "teamkernels/__init__.py", "alpha/__init__.py", "_editkit.pth"):
        assert (site / rel).read_bytes() == (ref_site / rel).read_bytes(), rel
    run = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import six, teamkernels, editkit; print(six.PATCHED_BY_THE_TEAM)",
        ],
        capture_output=True,
        text=True,
    )
    assert run.stdout.strip() == "True", run.stderr


def test_apply_fetches_the_published_wheels_from_the_index(ws: Workspace, tmp_path: Path) -> None:
    """A store without the repacked wheels (the blobs of bin/ scripts stay): apply downloads them."""
    store = tmp_path / "store"
    shutil.copytree(ws.root / "store", store, ignore=shutil.ignore_patterns("wheels", ".verified.json"))
    venv = tmp_path / "venv-ct300"
    write_profile(ws.root, "ct300", venv, None)
    shutil.copy(_lock_path(ws.root, "ct129"), _lock_path(ws.root, "ct300"))
    shutil.copy(ws.root / "locks" / "pylock.ct129.files.tsv", ws.root / "locks" / "pylock.ct300.files.tsv")
    env = {"ENVLOCK_STORE": str(store)}
    applied = envlock(ws.root, "apply", "ct300", "--format", "json", env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    result = json.loads(applied.stdout)["result"]
    # The host reaches the index, so it fetches the published wheels itself (docs/store.md,
    # "Hosts pull"), each checked against the lock's sha256 before it takes its name.
    lock = read_lock(_lock_path(ws.root, "ct300"))
    published = [p for p in lock.packages if p.source == "published" and p.name in ("six", "teamkernels")]
    assert len(published) == 2
    assert result["pull_failures"] == [], result
    # the controller never had them: they came from the index (this run's pull, or an earlier
    # run's in the host's content-addressed drop), never from the store
    for pkg in published:
        assert not (store / "wheels" / pkg.wheel.sha256).exists()
    assert (venv / "lib" / "python3.11" / "site-packages" / "six.py").read_bytes().endswith(PATCH)
    verify = envlock(ws.root, "verify", "ct300", env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_publishing_again_uploads_nothing(ws: Workspace, devpi: Devpi) -> None:
    serial = devpi.serial()
    published = _lock_path(ws.root, "ct129").read_bytes()
    again = envlock(
        ws.root, "publish", "ct129", "--index", ws.index.url, "--format", "json", env=_twine(ws.index)
    )
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)["result"]
    assert (result["uploaded"], result["written"]) == (0, False)
    actions = {w["name"]: w["action"] for w in result["wheels"]}
    assert actions == dict.fromkeys(("editkit", "six", "teamkernels"), "published")
    assert _lock_path(ws.root, "ct129").read_bytes() == published
    # the unpublished lock of another host: the index has every file already, by sha256
    _copy_unpublished(ws, "ct131")
    other = envlock(
        ws.root, "publish", "ct131", "--index", ws.index.url, "--include-editable", "--format", "json"
    )
    assert other.returncode == 0, other.stderr
    result = json.loads(other.stdout)["result"]
    assert (result["uploaded"], result["present"], result["written"]) == (0, 3, True)
    urls = {n: p["wheels"][0]["url"] for n, p in _published(_lock_path(ws.root, "ct131").read_text()).items()}
    assert urls == {n: p["wheels"][0]["url"] for n, p in _published(published.decode()).items()}
    assert devpi.serial() == serial  # nothing was written on the index


def test_dry_run_lists_what_would_upload_and_changes_nothing(ws: Workspace, devpi: Devpi) -> None:
    fresh = devpi.index("team", "dry")
    _copy_unpublished(ws, "ct132")
    serial = devpi.serial()
    dry = envlock(ws.root, "publish", "ct132", "--index", fresh.url, "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    result = json.loads(dry.stdout)["result"]
    assert result["dry_run"] is True and result["written"] is False
    # an editable install stays in the store unless --include-editable: its wheel is a .pth
    actions = {w["name"]: w["action"] for w in result["wheels"]}
    assert actions == {"six": "upload", "teamkernels": "upload", "editkit": "kept"}
    assert _lock_path(ws.root, "ct132").read_bytes() == ws.lock_before
    assert devpi.serial() == serial
    text = envlock(ws.root, "publish", "ct132", "--index", fresh.url, "--dry-run")
    assert "2 wheels would be uploaded" in text.stdout, text.stdout


def test_wrong_credentials_exit_2_naming_the_index(ws: Workspace, devpi: Devpi) -> None:
    fresh = devpi.index("team", "creds")
    _copy_unpublished(ws, "ct133")
    for env in (_twine(fresh, "not-the-password"), {}):
        proc = envlock(ws.root, "publish", "ct133", "--index", fresh.url, env=env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"envlock: error: index {fresh.url}: HTTP 401"), lines
        assert "not-the-password" not in proc.stdout + proc.stderr
        assert _lock_path(ws.root, "ct133").read_bytes() == ws.lock_before
    assert (
        "user team from TWINE_USERNAME/TWINE_PASSWORD"
        in envlock(ws.root, "publish", "ct133", "--index", fresh.url, env=_twine(fresh, "wrong")).stderr
    )


def test_other_bytes_under_the_same_name_are_refused(ws: Workspace, devpi: Devpi) -> None:
    clash = devpi.index("team", "clash")
    _copy_unpublished(ws, "ct134")
    pkg = read_lock(_lock_path(ws.root, "ct134")).package("teamkernels")
    assert pkg is not None and pkg.wheel.path is not None
    data = (ws.root / "locks" / pkg.wheel.path).read_bytes()
    taken = devpi.upload_raw(clash, pkg.wheel.filename, data + b"\0")  # same name, other bytes
    assert taken.status_code == 200, taken.text
    proc = envlock(ws.root, "publish", "ct134", "--index", clash.url, env=_twine(clash))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"envlock: error: {pkg.wheel.filename}: index {clash.url} already holds other bytes"
    )
    assert _lock_path(ws.root, "ct134").read_bytes() == ws.lock_before
    # an index whose simple page does not list what it accepted (six went up in the run above;
    # --check-url names another index): nothing is pointed at a URL the page did not give
    empty = devpi.index("team", "empty")
    blind = envlock(
        ws.root, "publish", "ct134", "--index", clash.url, "--check-url", empty.simple, env=_twine(clash)
    )
    assert blind.returncode == 2, blind.stdout + blind.stderr
    six = "six-1.17.0-py2.py3-none-any.whl"
    assert f"index {clash.url}: accepted {six} but does not list it at {empty.simple}" in blind.stderr
    assert _lock_path(ws.root, "ct134").read_bytes() == ws.lock_before


def test_review_calls_publishing_a_provenance_note(ws: Workspace) -> None:
    proc = envlock(ws.root, "review", "--base", "HEAD", "--no-index", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    changes = json.loads(proc.stdout)["result"]["changes"]
    found = {
        (c["package"], c["kind"], f["code"], f["severity"])
        for c in changes
        if c["lock"] == "locks/pylock.ct129.toml"
        for f in c["findings"]
    }
    assert found == {(name, "artifact", "published", "info") for name in ("editkit", "six", "teamkernels")}
    text = envlock(ws.root, "review", "--base", "HEAD", "--no-index").stdout
    assert f"teamkernels-0.1.0-py3-none-any.whl published to {ws.index.simple}" in text, text
    before = ws.root.parent / "pylock.before.toml"
    before.write_bytes(ws.lock_before)
    diff = envlock(ws.root, "diff", str(before), "ct129")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "teamkernels 0.1.0: same version, source repacked -> published" in diff.stdout, diff.stdout


def test_lock_reading_refuses_an_inconsistent_published_entry(ws: Workspace) -> None:
    text = _lock_path(ws.root, "ct129").read_text()
    document = tomllib.loads(text)
    six = next(p for p in document["packages"] if p["name"] == "six")
    alpha = next(p for p in document["packages"] if p["name"] == "alpha")
    cases = []
    del six["tool"]["envlock"]["published-from"]
    cases.append((json.loads(json.dumps(document)), "published-from: missing"))
    six["tool"]["envlock"]["published-from"] = {"source": "index"}
    cases.append((json.loads(json.dumps(document)), "published-from.source: expected one of"))
    six["tool"]["envlock"]["published-from"] = {"source": "repacked"}
    six["wheels"][0]["url"] = "file:///tmp/six.whl"
    cases.append((json.loads(json.dumps(document)), "a published wheel is fetched from its index"))
    six["wheels"][0]["url"] = "http://127.0.0.1:1/six.whl"
    alpha["tool"]["envlock"]["published-from"] = {"source": "repacked"}
    cases.append((document, "only a published package has one"))
    for doc, expected in cases:
        with pytest.raises(LockError, match=expected):
            parse_lock(doc, "pylock.ct129.toml")


def test_credentials_are_found_where_twine_and_uv_look(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/team/prod/"
    pypirc = tmp_path / ".pypirc"
    pypirc.write_text(
        "[distutils]\nindex-servers = other prod\n"
        "[other]\nrepository = http://elsewhere/\nusername = nobody\npassword = x\n"
        f"[prod]\nrepository = {url.rstrip('/')}\nusername = rc-user\npassword = rc-pw\n"
    )

    def found(env: dict[str, str], **flags: str) -> tuple[str | None, str | None, str]:
        c = find_credentials(url, environ=env, pypirc=pypirc, **flags)
        return c.username, c.password, c.origin

    assert found({}) == ("rc-user", "rc-pw", f"{pypirc} [prod]")
    assert found({"TWINE_USERNAME": "tw", "TWINE_PASSWORD": "twpw"})[:2] == ("tw", "twpw")
    uv = {"UV_PUBLISH_USERNAME": "uv", "UV_PUBLISH_PASSWORD": "uvpw", "TWINE_USERNAME": "tw"}
    assert found(uv)[:2] == ("uv", "uvpw")
    assert found({**uv, "UV_PUBLISH_TOKEN": "tok"})[:2] == (TOKEN_USER, "tok")
    assert found(uv, username="flag", password="flagpw")[:2] == ("flag", "flagpw")
    assert found(uv, token="t2")[:2] == (TOKEN_USER, "t2")
    assert "flagpw" not in repr(find_credentials(url, username="flag", password="flagpw"))
    bare = find_credentials("http://u:p%40w@127.0.0.1:9/x/", environ={}, pypirc=tmp_path / "none")
    assert (bare.username, bare.password) == ("u", "p@w")
    assert find_credentials("http://127.0.0.1:9/x/", environ={}, pypirc=tmp_path / "none").auth is None


def test_a_published_patch_going_back_to_the_index_wheel_is_no_clash(ws: Workspace) -> None:
    """six published from a hand patch, then the patch dropped: the index's six under the same
    file name with other bytes is how a patch ends, a local-build matter, not tampering."""
    six = read_lock(_lock_path(ws.root, "ct129")).package("six")
    assert six is not None and six.source == "published"
    wheel = replace(six.wheel, sha256="0" * 64, url="https://pypi.example/six.whl")
    from_index = replace(six, source="index", published_from=None, wheel=wheel, index="https://pypi.example/")
    codes = {f.code for f in package_findings(PackageChange("six", "artifact", six, from_index), (), None)}
    assert "same-name-different-bytes" not in codes
    both_index = replace(six, source="index", published_from=None)
    codes = {
        f.code for f in package_findings(PackageChange("six", "artifact", both_index, from_index), (), None)
    }
    assert "same-name-different-bytes" in codes  # the check itself still runs between index wheels


def test_capturing_again_keeps_what_was_published(ws: Workspace) -> None:
    """The venv did not change: capture repacks the same bytes and keeps their index URLs."""
    published = _lock_path(ws.root, "ct129").read_bytes()
    again = envlock(ws.root, "capture", "ct129", "--no-cache")
    assert again.returncode == 0, again.stderr
    assert "locks/pylock.ct129.toml: unchanged" in again.stdout, again.stdout
    assert _lock_path(ws.root, "ct129").read_bytes() == published


def test_locking_a_target_again_keeps_what_was_published(ws: Workspace, index: Index) -> None:
    """A target locked from an unpublished reference, then published: `envlock lock` again
    resolves the same bytes and keeps their index URLs."""
    _copy_unpublished(ws, "ref2")
    write_profile(ws.root, "ref2", ws.venv, index.url)
    (ws.root / "hosts" / "ct400.toml").write_text(
        f'venv = "{ws.root}/venv-ct400"\nreference = "ref2"\n[target]\npython = "3.11.7"\n'
        f'[index]\nurls = ["{index.url}"]\n'
    )
    assert envlock(ws.root, "lock", "ct400").returncode == 0
    assert not _published(_lock_path(ws.root, "ct400").read_text())
    done = envlock(ws.root, "publish", "ct400", "--index", ws.index.url, "--include-editable")
    assert done.returncode == 0, done.stderr
    published = _lock_path(ws.root, "ct400").read_bytes()
    assert set(_published(published.decode())) == {"editkit", "six", "teamkernels"}
    again = envlock(ws.root, "lock", "ct400")
    assert again.returncode == 0, again.stderr
    assert _lock_path(ws.root, "ct400").read_bytes() == published, again.stdout


def test_an_index_listing_a_non_http_url_is_refused(ws: Workspace, tmp_path: Path) -> None:
    """The URL a simple page gives goes into the lock: a server's file:// link never does."""
    _copy_unpublished(ws, "ct135")
    pkg = read_lock(_lock_path(ws.root, "ct135")).package("teamkernels")
    assert pkg is not None
    page = tmp_path / "simple" / "teamkernels"
    page.mkdir(parents=True)
    href = f"file:///etc/{pkg.wheel.filename}#sha256={pkg.wheel.sha256}"
    (page / "index.html").write_text(f'<a href="{href}">{pkg.wheel.filename}</a>\n')
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        check = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        proc = envlock(
            ws.root, "publish", "ct135", "--index", ws.index.url, "--check-url", check, "--dry-run"
        )
        server.shutdown()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{pkg.wheel.filename}: index {ws.index.url} lists 'file:///etc/" in proc.stderr, proc.stderr


def test_the_index_comes_from_the_flag_or_envlock_toml(ws: Workspace, tmp_path: Path) -> None:
    root = tmp_path / "clone"
    (root / "hosts").mkdir(parents=True)
    (root / "locks").mkdir()
    for name in ("pylock.ct129.toml", "pylock.ct129.files.tsv"):
        shutil.copy(ws.root / "locks" / name, root / "locks" / name)
    missing = envlock(root, "publish", "ct129")
    assert missing.returncode == 2
    assert (
        "no index to publish to: give --index URL, or set [publish] index in envlock.toml" in missing.stderr
    )
    (root / "envlock.toml").write_text('[publish]\nindex = "ftp://devpi.internal/team/prod/"\n')
    bad = envlock(root, "publish", "ct129")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "envlock: error: envlock.toml: publish.index: expected an http:// or https:// URL "
        "with a host and port and without query or fragment, got 'ftp://devpi.internal/team/prod/'"
    )
    (root / "envlock.toml").write_text(f'[publish]\nindex = "{ws.index.url}"\n')
    configured = envlock(root, "publish", "ct129", "--format", "json")  # every wheel published already
    assert configured.returncode == 0, configured.stderr
    assert json.loads(configured.stdout)["result"]["index"] == ws.index.url


class _HoldingProxy(http.server.ThreadingHTTPServer):
    """A loopback proxy in front of devpi that holds every request after the first upload
    (a POST answered 200) until released: the moment between two uploads, made to last."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = urllib.parse.urlsplit(upstream).netloc
        self.uploaded = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def url_of(self, devpi_url: str) -> str:
        return devpi_url.replace(self.upstream, f"127.0.0.1:{self.server_address[1]}")


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _HoldingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        if self.server.uploaded.is_set():
            self.server.held.set()
            self.server.release.wait(60)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conn = http.client.HTTPConnection(self.server.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(self.command, self.path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if self.command == "POST" and answer.status == 200:
            self.server.uploaded.set()

    do_GET = _forward
    do_POST = _forward


def test_publish_killed_between_uploads_and_the_lock_rewrite_converges(ws: Workspace, devpi: Devpi) -> None:
    fresh = devpi.index("team", "cut")
    _copy_unpublished(ws, "ct137")
    proxy = _HoldingProxy(devpi.root)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("TWINE_", "UV_PUBLISH_"))}
        argv = [ENVLOCK, "publish", "ct137", "--index", proxy.url_of(fresh.url), "--include-editable"]
        proc = subprocess.Popen(
            [*argv, "--root", str(ws.root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**clean, **_twine(fresh)},
        )
        assert proxy.held.wait(120), "publish never got past its first upload"
        proc.kill()  # one wheel on the index, the others not, the lock not rewritten
        proc.wait(timeout=30)
    finally:
        proxy.release.set()
        proxy.shutdown()
        proxy.server_close()
    assert _lock_path(ws.root, "ct137").read_bytes() == ws.lock_before
    again = envlock(
        ws.root, "publish", "ct137", "--index", fresh.url, "--include-editable", "--format", "json",
        env=_twine(fresh),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)["result"]
    # The wheel uploaded before the kill is found by its sha256 and not sent again.
    assert (result["present"], result["uploaded"], result["written"]) == (1, 2, True), result
    published = _published(_lock_path(ws.root, "ct137").read_text())
    assert sorted(published) == ["editkit", "six", "teamkernels"], (
        published
    )  # the one sent before the kill too
    serial = devpi.serial()
    third = envlock(ws.root, "publish", "ct137", "--index", fresh.url, "--format", "json", env=_twine(fresh))
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["result"]["written"] is False and devpi.serial() == serial
