"""Red-team refusals for the shared store, bundles, publish, groups and the lock-head memo.

Each test plays the attacker against a new feature (docs/testing.md,
"Red-team probes"): a teammate with write access to the shared store, a
server on loopback that answers with more bytes than the lock says, a
groups file that nests 100,000 deep, a memo planted in a cache another user
can write, a URL carrying a password. Each one failed before its fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import write_profile
from envlock.airgap import BundleError, import_bundle
from envlock.config import ConfigError, SshTarget, parse_config
from envlock.fetch import ArtifactError, fetch_one
from envlock.lock.head import LockHead, recall, remember
from envlock.publish.credentials import redact
from envlock.publish.upload import _short
from envlock.store import Store, blob_key, wheel_key
from envlock.storepush import StorePushError, push_objects
from envlock.workspace import open_workspace
from helpers import ENVLOCK, run_envlock
from lockfactory import pkg

NOBODY = 65534
DATA = b"a wheel's bytes\n" * 64
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "alpha-1.0-py3-none-any.whl"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "local" / NAME
    path.parent.mkdir()
    path.write_bytes(DATA)
    return path


# ------------------------------------------------------------- store.push (a directory)


def test_push_refuses_a_directory_symlinked_out_of_the_shared_store(tmp_path: Path, source: Path) -> None:
    """A teammate made ``wheels/<sha>`` a symlink to a directory of ours: nothing is written there."""
    shared, elsewhere = tmp_path / "shared", tmp_path / "victim-config"
    elsewhere.mkdir()
    (shared / "wheels").mkdir(parents=True)
    (shared / "wheels" / SHA).symlink_to(elsewhere)
    with pytest.raises(StorePushError, match="is a symlink; refusing to write through it"):
        push_objects(shared, [(wheel_key(SHA, NAME), source)])
    assert list(elsewhere.iterdir()) == []


def test_push_refuses_a_key_that_leaves_the_store(tmp_path: Path, source: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    for key in (f"wheels/{SHA}/../../../escaped", f"wheels/{SHA}/x/y", "blobs/zz/" + SHA, "/etc/x"):
        with pytest.raises(StorePushError, match="nothing written there"):
            push_objects(shared, [(key, source)])
    assert not (tmp_path / "escaped").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "shared"]


def test_push_never_writes_through_a_temp_name_planted_in_the_shared_store(
    tmp_path: Path, source: Path
) -> None:
    """The temp name used to be ``.<name>.<pid>.part``: predictable, so a teammate could plant a
    symlink there and have our push overwrite any file of ours with the object's bytes."""
    shared, victim = tmp_path / "shared", tmp_path / "victim.bashrc"
    victim.write_bytes(b"export PATH=/usr/bin\n")
    folder = shared / "wheels" / SHA
    folder.mkdir(parents=True)
    (folder / f".{NAME}.{os.getpid()}.part").symlink_to(victim)
    pushed = push_objects(shared, [(wheel_key(SHA, NAME), source)])
    assert pushed.objects == 1
    assert victim.read_bytes() == b"export PATH=/usr/bin\n"
    assert (folder / NAME).read_bytes() == DATA and not (folder / NAME).is_symlink()


def test_a_symlink_at_the_final_name_is_replaced_not_counted_as_present(tmp_path: Path, source: Path) -> None:
    shared, decoy = tmp_path / "shared", tmp_path / "decoy"
    decoy.write_bytes(b"other bytes")
    blob = shared / blob_key(SHA)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(decoy)
    pushed = push_objects(shared, [(blob_key(SHA), source)])
    assert (pushed.objects, pushed.present) == (1, 0)
    assert blob.read_bytes() == DATA and not blob.is_symlink() and decoy.read_bytes() == b"other bytes"


# ------------------------------------------------------------- bundles (apply --from)


def _bundle(path: Path, members: dict[str, bytes]) -> Path:
    """A bundle whose listing names every member truthfully (so only the checks under test refuse it)."""
    listing = {
        "format": "envlock-bundle-1",
        "host": "h1",
        "digest": "sha256:" + "0" * 64,
        "members": [
            {"path": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in members.items()
        ],
    }
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("envlock-bundle.json", json.dumps(listing).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_bundle_import_never_writes_through_a_planted_temp_name(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "hosts").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    folder = root / "store" / "wheels" / SHA
    folder.mkdir(parents=True)
    (folder / f".{NAME}.{os.getpid()}.part").symlink_to(victim)
    bundle = _bundle(tmp_path / "b.tar", {f"store/wheels/{SHA}/{NAME}": DATA})
    with pytest.raises(BundleError, match=r"listed member|expected one lock"):
        import_bundle(open_workspace(root), bundle, "h1", tmp_path / "into")
    assert victim.read_bytes() == b"precious\n"
    assert (folder / NAME).read_bytes() == DATA


def test_bundle_import_refuses_a_symlinked_directory_on_the_way(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "hosts").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "store" / "wheels").mkdir(parents=True)
    (root / "store" / "wheels" / SHA).symlink_to(elsewhere)
    bundle = _bundle(tmp_path / "b.tar", {f"store/wheels/{SHA}/{NAME}": DATA})
    with pytest.raises(BundleError, match="symlink"):
        import_bundle(open_workspace(root), bundle, "h1", tmp_path / "into")
    assert list(elsewhere.iterdir()) == []


# ------------------------------------------------------------- a server that answers with too much


class _Endless(http.server.BaseHTTPRequestHandler):
    """Answers every GET with a body that does not end (up to a bound, so the test ends either way)."""

    sent = 0
    BOUND = 64 << 20

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 40))  # a lie, and huge
        self.end_headers()
        chunk = b"\0" * (1 << 16)
        try:
            while type(self).sent < self.BOUND:
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:
            pass  # the client hung up: what the fix does

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def endless() -> Iterator[str]:
    _Endless.sent = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_a_download_stops_past_the_locked_size(tmp_path: Path, endless: str) -> None:
    """The lock says 1,000 bytes; a server streaming without end is cut off there, not read to
    the end of the disk before the hash says no."""
    package = pkg("alpha", "1.0")
    package = replace(package, wheel=replace(package.wheel, url=endless + NAME, size=1000))
    store = Store(tmp_path / "store")
    with pytest.raises(ArtifactError, match="more than the 1000 bytes the lock says"):
        fetch_one(store, tmp_path, package)
    assert _Endless.sent < _Endless.BOUND
    assert not any(p.is_file() for p in store.root.rglob("*"))


# ------------------------------------------------------------- passwords in URLs


def test_redacting_a_url_never_raises_and_never_keeps_the_password() -> None:
    for url in (
        "http://u:sekret@h:99999/x",  # port out of range: urlsplit().port raises
        "http://u:sekret@h:abc/x",
        "http://u:sekret@[::1/x",  # unbalanced bracket: urlsplit raises
        "https://u:sek@ret@h/x",
    ):
        shown = redact(url)
        assert "sekret" not in shown and "sek" not in shown, shown
    assert redact("http://h:8080/simple/") == "http://h:8080/simple/"


def test_request_errors_quoting_the_url_lose_its_password() -> None:
    import requests

    with pytest.raises(requests.RequestException) as caught:
        requests.get("http://u:sekret@127.0.0.1:99999/x", timeout=5)
    assert "sekret" in str(caught.value)  # what requests says
    assert "sekret" not in _short(caught.value)  # what envlock shows


def test_publish_to_a_bad_port_is_one_line_without_the_password(tmp_path: Path) -> None:
    from envlock.lock.digest import lock_digest
    from lockfactory import make_lock, rows_for, with_manifest, write_lock_files

    write_profile(tmp_path, "h1", tmp_path / "venv", None)
    packages = [pkg("alpha", "1.0", source="repacked")]  # a store wheel: publish has work to do
    lock, manifest = with_manifest(make_lock("h1", packages), rows_for(packages))
    write_lock_files(tmp_path / "locks", replace(lock, digest=lock_digest(lock)), manifest)
    for index in (
        "http://u:sekret@127.0.0.1:99999/",
        "http://u:sekret@[::1/",
        "http://u:sekret@127.0.0.1:1/",
    ):
        proc = run_envlock(tmp_path, "publish", "h1", "--index", index)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "sekret" not in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # The simple index is read with the upload credentials only when it is the upload URL's
    # origin; a user and password in --check-url would be shown in messages: refused.
    proc = run_envlock(
        tmp_path,
        "publish",
        "h1",
        "--index",
        "http://127.0.0.1:1/",
        "--check-url",
        "http://u:sekret@127.0.0.1:1/",
    )
    assert proc.returncode == 2 and "no user or password in it" in proc.stderr, proc.stderr
    assert "sekret" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://u:sekret@store.internal/envlock/", "no password in the URL"),
        ("http://store.internal:99999/envlock/", "with a host and port"),
        ("http://:80/envlock/", "with a host and port"),
    ],
)
def test_envlock_toml_refuses_a_password_or_a_bad_port(tmp_path: Path, url: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        parse_config({"store": {"url": url}}, tmp_path)
    assert "sekret" not in str(caught.value)


# ------------------------------------------------------------- hosts/groups.toml


def _groups_workspace(tmp_path: Path, groups: str) -> Path:
    write_profile(tmp_path, "ct1", tmp_path / "venv-ct1", None)
    (tmp_path / "hosts" / "groups.toml").write_text(groups)
    return tmp_path


def test_100000_nested_groups_expand_without_a_traceback(tmp_path: Path) -> None:
    depth = 100_000
    lines = [f'g{i} = ["@g{i + 1}"]' for i in range(depth)] + [f'g{depth} = ["ct1"]']
    root = _groups_workspace(tmp_path, "\n".join(lines) + "\n")
    proc = run_envlock(root, "verify", "@g0", "--format", "json")
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr, proc.stderr[-2000:]
    hosts = json.loads(proc.stdout)["result"]["hosts"]
    assert [h["host"] for h in hosts] == ["ct1"]  # reached through all 100,000 groups; its venv is missing


def test_a_group_named_twice_per_level_is_expanded_once(tmp_path: Path) -> None:
    """Each level names the next twice: walked naively that is 2**60 paths (the command never
    returns); walked once per group it is 60. The subprocess timeout only bounds a hang."""
    depth = 60
    lines = [f'd{i} = ["@d{i + 1}", "@d{i + 1}"]' for i in range(depth)] + [f'd{depth} = ["ct1"]']
    root = _groups_workspace(tmp_path, "\n".join(lines) + "\n")
    proc = subprocess.run(
        [ENVLOCK, "verify", "@d0", "--format", "json", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert [h["host"] for h in json.loads(proc.stdout)["result"]["hosts"]] == ["ct1"]


def test_thousands_of_problems_make_one_bounded_line(tmp_path: Path) -> None:
    root = _groups_workspace(tmp_path, "".join(f'g{i} = ["@missing{i}"]\n' for i in range(5000)))
    proc = run_envlock(root, "verify", "@g0")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.endswith("and 4980 more") and len(line) < 20_000, line[-300:]  # was 778,788


# ------------------------------------------------------------- the lock-head memo


HEAD = LockHead("sha256:" + "1" * 64, "3.12.1", {"home": "/usr/bin"}, "target")
FORGED = {"digest": "sha256:" + "f" * 64, "python": "3.12.1", "pyvenv": {}, "role": "target"}


def test_a_memo_planted_by_another_user_is_not_trusted(tmp_path: Path) -> None:
    memo = tmp_path / "lockheads"
    memo.mkdir(mode=0o700)
    planted = memo / ("a" * 64 + ".json")
    planted.write_text(json.dumps(FORGED))
    os.chown(planted, NOBODY, NOBODY)
    assert recall(memo, "a" * 64) is None
    os.chown(planted, os.getuid(), os.getgid())
    assert recall(memo, "a" * 64) is not None  # the same file, ours: trusted (the check is ownership)


def test_a_memo_in_a_directory_others_can_write_is_not_trusted_nor_written(tmp_path: Path) -> None:
    memo = tmp_path / "lockheads"
    memo.mkdir()
    memo.chmod(0o777)
    (memo / ("b" * 64 + ".json")).write_text(json.dumps(FORGED))
    assert recall(memo, "b" * 64) is None
    remember(memo, "c" * 64, HEAD)
    assert not (memo / ("c" * 64 + ".json")).exists()
    memo.chmod(0o700)
    remember(memo, "c" * 64, HEAD)
    assert recall(memo, "c" * 64) == HEAD


def test_a_symlinked_or_writable_memo_file_is_not_trusted(tmp_path: Path) -> None:
    memo = tmp_path / "lockheads"
    memo.mkdir(mode=0o700)
    target = tmp_path / "forged.json"
    target.write_text(json.dumps(FORGED))
    (memo / ("d" * 64 + ".json")).symlink_to(target)
    assert recall(memo, "d" * 64) is None
    writable = memo / ("e" * 64 + ".json")
    writable.write_text(json.dumps(FORGED))
    writable.chmod(0o666)
    assert recall(memo, "e" * 64) is None


# ------------------------------------------------------------- store.push over ssh


@pytest.fixture
def ssh_push(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshTarget]:
    """A real sshd on loopback; ``ssh`` on PATH is the system client reading the rig's config
    (storepush runs plain ``ssh``, which reads ~/.ssh/config, a file the tests must not touch)."""
    from sshrig import SshRig

    rig = SshRig.start(tmp_path / "rig", ("ct-store",))
    shim = tmp_path / "bin" / "ssh"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {rig.config} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    try:
        yield SshTarget(host="ct-store", port=None, path=str(tmp_path / "shared"))
    finally:
        rig.stop()


def test_ssh_push_refuses_symlinks_a_teammate_planted_in_the_store(
    tmp_path: Path, source: Path, ssh_push: SshTarget
) -> None:
    shared, elsewhere = Path(ssh_push.path), tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A clean push works end to end (tar over ssh, sha256 checked on arrival, renamed into place).
    other = tmp_path / "other.bin"
    other.write_bytes(b"other object")
    other_sha = hashlib.sha256(b"other object").hexdigest()
    assert push_objects(ssh_push, [(blob_key(other_sha), other)]).objects == 1
    assert (shared / blob_key(other_sha)).read_bytes() == b"other object"
    # wheels/<sha> made a symlink out of the store: refused, nothing lands there.
    (shared / "wheels").mkdir()
    (shared / "wheels" / SHA).symlink_to(elsewhere)
    with pytest.raises(StorePushError, match="is a symlink; refusing to write through it"):
        push_objects(ssh_push, [(wheel_key(SHA, NAME), source)])
    assert list(elsewhere.iterdir()) == []
    # A directory at the final name: mv would move the object into it.
    (shared / "wheels" / SHA).unlink()
    (shared / wheel_key(SHA, NAME)).mkdir(parents=True)
    with pytest.raises(StorePushError, match="is a directory; refusing to write into it"):
        push_objects(ssh_push, [(wheel_key(SHA, NAME), source)])
    assert list((shared / wheel_key(SHA, NAME)).iterdir()) == []
    # A key that is not a store key never reaches the remote shell.
    with pytest.raises(StorePushError, match="not a store key"):
        push_objects(ssh_push, [("wheels/../../x", source)])


# ------------------------------------------------------------- the host pulling from a hostile server


class _Liar(http.server.BaseHTTPRequestHandler):
    """Every way a store server can lie about ``DATA``, by path."""

    other = ""  # another origin, for the cross-host redirect

    def do_GET(self) -> None:
        path = self.path.rsplit("/", 1)[0]
        if path == "/to-file":
            self._redirect("file:///etc/passwd")
        elif path == "/to-other":
            self._redirect(self.other + "/wrong/" + NAME)
        elif path == "/wrong":  # the right size, other bytes
            self._body(200, b"X" * len(DATA))
        elif path == "/range-lie":  # says 206 from offset 100, sends that many bytes from 0
            self._body(206, DATA[:-100], {"Content-Range": f"bytes 100-{len(DATA) - 1}/{len(DATA)}"})
        elif path == "/endless":
            self._body(200, b"\0" * (8 << 20), {"Content-Length": str(1 << 40)})
        else:
            self._body(404, b"")

    def _redirect(self, where: str) -> None:
        self.send_response(302)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _body(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {"Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        with contextlib.suppress(OSError):  # the client hung up early: what a refusal does
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_host_refuses_every_lie_of_a_store_server(tmp_path: Path) -> None:
    """Held before this pass (urllib refuses a redirect to file://; sizes and hashes are checked);
    kept as a regression test of the host side against a server that lies."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Liar) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    base, _Liar.other = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    drop = tmp_path / "drop"
    (drop / ".pulling").mkdir(parents=True)
    # A kept part makes the agent ask for a range, so the lying 206 is what it gets.
    (drop / ".pulling" / f"{SHA}-{NAME}.part").write_bytes(DATA[:100])
    routes = ("range-lie", "to-file", "to-other", "wrong", "endless")
    item = {"sha256": SHA, "name": NAME, "size": len(DATA), "urls": [f"{base}/{r}/{NAME}" for r in routes]}
    try:
        proc = subprocess.run(
            [str(Path(ENVLOCK).parent / "python"), "-m", "envlock.agent", "pull", "--dir", str(drop)],
            input=json.dumps([item]),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["pulled"] == [], answer
    (failed,) = answer["failed"]
    said = {r: failed["error"].split(f"/{r}/{NAME}: ")[1] for r in routes}
    # the lying 206 ends short: refused, the part kept for a resume (whose sha256 is checked in full)
    assert said["range-lie"].startswith("cut off at 924 of 1024 bytes"), said
    assert said["to-file"].startswith("HTTP 302"), said  # urllib will not follow to file://
    assert said["to-other"].startswith("sha256 ") and said["wrong"].startswith("sha256 "), said
    assert said["endless"].startswith("more than the 1024 bytes the lock says"), said
    assert not (drop / SHA).exists()


# ------------------------------------------------------------- ABI symbols in the lock's literal strings


HOSTILE_SYMBOLS = (
    "plain_symbol@@GLIBC_2.17",
    "quote'inside",
    "'''",
    'double"quote',
    "back\\slash",
    "new\nline",
    "nul\0byte",
    "bell\x07",
    "del\x7f",
    "    ',",  # what a rewritten line looks like, as a symbol
    "]",
    "\u2028line separator",
    "tab\there",
    "provides = [",
)


def test_hostile_symbols_survive_the_literal_string_writer() -> None:
    """Held: ``_literal_symbols`` rewrites only what is safe as a literal string; every other
    symbol keeps tomli_w's escaped basic string, and the lock reads back the same."""
    from envlock.lock.io import lock_from_text, render_lock
    from lockfactory import lib, make_lock

    native = replace(
        lib("site-packages/alpha/_core.so"),
        provides=HOSTILE_SYMBOLS,
        takes={"beta": HOSTILE_SYMBOLS, "q'uote\"d": ("x",)},
    )
    lock = make_lock("h1", [pkg("alpha", "1.0", native=[native])])
    text = render_lock(lock).decode()
    again = lock_from_text(text, "hostile")
    (read,) = again.packages[0].native
    assert sorted(read.provides) == sorted(HOSTILE_SYMBOLS)  # the writer sorts them
    assert {k: sorted(v) for k, v in read.takes.items()} == {k: sorted(v) for k, v in native.takes.items()}
    assert "    'plain_symbol@@GLIBC_2.17'," in text  # the fast form is still used where it is safe


@pytest.mark.parametrize(
    "push",
    [
        "ssh://-oProxyCommand=touch%20/tmp/pwned/srv/store",
        "ssh://-oProxyCommand=x@host/srv/store",
        "ssh://host/srv/../etc",
        "ssh://user:pw@host/srv/store",
        "ssh://host:22x/srv/store",
        "ssh://host/srv/store\n-oProxyCommand=x",
    ],
)
def test_store_push_option_injection_is_refused(tmp_path: Path, push: str) -> None:
    """Held: the host and user may not start with "-" (and ssh gets "--" before the host anyway);
    no password, port that is not a number, ``..`` or control character passes."""
    with pytest.raises(ConfigError, match=r"store\.push"):
        parse_config({"store": {"push": push}}, tmp_path)


class _HostileIndex(http.server.BaseHTTPRequestHandler):
    """A simple index that lists the lock's own file (the right sha256) at a URL of its choosing."""

    listed_url = ""
    sha256 = ""

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/simple/alpha":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        page = {
            "meta": {"api-version": "1.0"},
            "name": "alpha",
            "files": [
                {
                    "filename": NAME,
                    "url": self.listed_url,
                    "hashes": {"sha256": self.sha256} if self.sha256 else {},
                }
            ],
        }
        data = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _one_package_lock(tmp_path: Path) -> tuple[Path, str]:
    """Host h1 and its lock holding one repacked wheel, ``NAME``: the lock's path and the
    wheel's sha256."""
    from envlock.lock.digest import lock_digest
    from lockfactory import make_lock, rows_for, with_manifest, write_lock_files

    write_profile(tmp_path, "h1", tmp_path / "venv", None)
    packages = [pkg("alpha", "1.0", source="repacked", filename=NAME)]
    lock, manifest = with_manifest(make_lock("h1", packages), rows_for(packages))
    path = write_lock_files(tmp_path / "locks", replace(lock, digest=lock_digest(lock)), manifest)
    return path, packages[0].wheel.sha256


def _publish_to_hostile_index(
    tmp_path: Path, listed_url: str, sha256: str
) -> subprocess.CompletedProcess[str]:
    """``envlock publish h1`` against ``_HostileIndex`` listing the wheel at ``listed_url``."""
    _HostileIndex.listed_url, _HostileIndex.sha256 = listed_url, sha256
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileIndex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        return run_envlock(
            tmp_path, "publish", "h1", "--index", base + "/upload/", "--check-url", base + "/simple/"
        )
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("listed", ["file:///etc/passwd", "ftp://127.0.0.1/x.whl", "javascript:alert(1)"])
def test_publish_refuses_an_index_that_lists_a_url_no_host_can_fetch(tmp_path: Path, listed: str) -> None:
    """The index's answer goes into the lock: a file:// URL there made the rewritten lock
    unreadable (a published wheel must come from an http(s) URL)."""
    lock_path, sha256 = _one_package_lock(tmp_path)
    before = lock_path.read_bytes()
    proc = _publish_to_hostile_index(tmp_path, listed, sha256)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not an http(s) URL a host can fetch" in proc.stderr, proc.stderr
    assert lock_path.read_bytes() == before


def test_publish_stops_hashing_an_endless_file_the_index_lists_without_a_sha256(
    tmp_path: Path, endless: str
) -> None:
    """The page gives no sha256, so publish downloads the file to hash it: a server streaming
    without end is cut one byte past the lock's size."""
    _one_package_lock(tmp_path)
    proc = _publish_to_hostile_index(tmp_path, endless + NAME, "")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "serves more than the lock's 1000 bytes" in proc.stderr, proc.stderr
    assert _Endless.sent < _Endless.BOUND


class _EscapingReason(http.server.BaseHTTPRequestHandler):
    """Refuses every file with a reason phrase that would retitle the terminal and ring its bell."""

    def do_GET(self) -> None:
        self.send_response(404, "Not Found\x1b]0;owned\x07\x1b[2J")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_server_cannot_send_escape_sequences_to_the_terminal(tmp_path: Path) -> None:
    from envlock.lock.digest import lock_digest
    from lockfactory import make_lock, rows_for, with_manifest, write_lock_files

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EscapingReason)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{NAME}"
    write_profile(tmp_path, "h1", tmp_path / "venv", None)
    from envlock.lock.digest import tree_digest

    alpha = pkg("alpha", "1.0", filename=NAME)
    rows = rows_for([alpha])
    packages = [replace(alpha, wheel=replace(alpha.wheel, url=url), tree_digest=tree_digest(rows))]
    lock, manifest = with_manifest(make_lock("h1", packages), rows)
    write_lock_files(tmp_path / "locks", replace(lock, digest=lock_digest(lock)), manifest)
    try:
        proc = run_envlock(tmp_path, "bundle", "h1", "-o", str(tmp_path / "h1.bundle"))
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Not Found\\x1b]0;owned\\x07\\x1b[2J" in proc.stderr, proc.stderr  # shown, escaped
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr
