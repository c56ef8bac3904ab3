"""A shared store (envlock.toml) served by a real nginx on loopback: fresh clones, hosts that
fetch artifacts themselves, hosts that cannot, and corrupt objects on the server."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Reference, write_profile
from helpers import ENVLOCK, UV, copy_lock, walk_payload
from sshrig import VENV_PATH, SshRig
from storeserver import StoreServer

GIT = ["git", "-c", "user.name=envlock-tests", "-c", "user.email=tests@envlock.invalid"]


@dataclass(frozen=True)
class Shared:
    origin: Path  # the workspace that captured ct129, committed to git
    served: Path  # the shared store directory (store.push)
    server: StoreServer


def envlock(root: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """envlock as a whole process, with its own HOME: the host drop (~/.cache/envlock/artifacts)
    starts empty, so what reached the host is what this apply sent or fetched."""
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("ENVLOCK_STORE", None)
    return subprocess.run([ENVLOCK, *args, "--root", str(root)], capture_output=True, text=True, env=env)


def write_config(root: Path, url: str, push: Path | None = None) -> None:
    text = f'[store]\nurl = "{url}"\n' + (f'push = "{push}"\n' if push else "")
    (root / "envlock.toml").write_text(text)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, reference: Reference) -> Iterator[Shared]:
    base = tmp_path_factory.mktemp("shared")
    served = base / "srv-store"
    server = StoreServer.start(served, base / "nginx")
    origin = base / "origin"
    write_profile(origin, "ct129", reference.venv, reference.index.url)
    write_config(origin, server.url, served)
    (origin / ".gitignore").write_text("store/\n")
    proc = envlock(origin, base / "home", "capture", "ct129")
    assert proc.returncode == 0, proc.stderr
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run([*GIT, "-C", str(origin), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(origin), "commit", "-qm", "ct129"], check=True)
    yield Shared(origin, served, server)
    server.stop()


def clone(shared: Shared, into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(shared.origin), str(into)], check=True)
    assert not (into / "store").exists()
    return into


def add_target(root: Path, venv: Path, extra: str = "") -> None:
    write_profile(root, "ct200", venv, None, extra)
    copy_lock(root, "ct129", "ct200")


def lock_of(root: Path, host: str) -> dict[str, Any]:
    return tomllib.loads((root / "locks" / f"pylock.{host}.toml").read_text())


def repacked(root: Path, host: str) -> list[dict[str, Any]]:
    """The lock's wheels that only the store holds (repacked from the host's live files)."""
    return [p["wheels"][0] for p in lock_of(root, host)["packages"] if "path" in p["wheels"][0]]


def apply_json(root: Path, home: Path, *extra: str) -> dict[str, Any]:
    proc = envlock(root, home, "apply", "ct200", "--format", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)["result"]
    return result


def test_capture_pushes_its_new_objects_to_the_shared_store(shared: Shared) -> None:
    wheels = repacked(shared.origin, "ct129")
    assert {w["name"].split("-")[0] for w in wheels} >= {"localpkg", "editpkg"}
    for wheel in wheels:
        served = shared.served / "wheels" / wheel["hashes"]["sha256"] / wheel["name"]
        assert hashlib.sha256(served.read_bytes()).hexdigest() == wheel["hashes"]["sha256"]
    # Nothing half-written is left where readers look.
    assert not list(shared.served.rglob("*.part"))


def test_a_fresh_clone_locks_applies_verifies_and_reviews_through_the_store(
    tmp_path: Path, shared: Shared, reference: Reference
) -> None:
    root = clone(shared, tmp_path / "clone")
    target = tmp_path / "target-venv"
    # pull = false: the controller itself must fetch the store-only wheels from the server.
    add_target(root, target, "pull = false\n")
    result = apply_json(root, tmp_path / "home")
    assert result["pulled_files"] == 0 and result["pushed_files"] > 0
    assert walk_payload(target) == walk_payload(reference.venv)
    # Fetched on demand into the clone's store/, a cache, sha256-checked.
    for wheel in repacked(root, "ct200"):
        cached = root / "store" / "wheels" / wheel["hashes"]["sha256"] / wheel["name"]
        assert cached.is_file(), cached
    fetched = [line for line in shared.server.requests() if "localpkg" in line and "python-requests" in line]
    assert fetched, shared.server.requests()
    verify = envlock(root, tmp_path / "home", "verify", "ct200")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # A per-host lock from the reference, in a clone whose store/ holds only what apply cached.
    shutil.rmtree(root / "store")
    write_profile(root, "ct300", tmp_path / "venv300", None, 'reference = "ct129"\n')
    locked = envlock(root, tmp_path / "home", "lock", "ct300")
    assert locked.returncode == 0, locked.stderr
    # Its bin/ scripts point at ct300's venv: new blobs, pushed to the shared store by lock.
    blobs = {
        sha
        for p in lock_of(root, "ct300")["packages"]
        for sha in p.get("tool", {}).get("envlock", {}).get("scripts", {}).values()
    }
    assert blobs - {
        sha
        for p in lock_of(root, "ct129")["packages"]
        for sha in p.get("tool", {}).get("envlock", {}).get("scripts", {}).values()
    }, "ct300's scripts should differ from ct129's (another venv path)"
    for sha in blobs:
        assert (shared.served / "blobs" / sha[:2] / sha).is_file(), sha
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    review = envlock(root, tmp_path / "home", "review", "--base", "HEAD", "--no-index")
    assert review.returncode in (0, 1), review.stderr
    assert "ct300" in review.stdout


def test_a_local_host_fetches_what_the_controller_lacks(tmp_path: Path, shared: Shared) -> None:
    """A host on the controller itself: what the controller's store holds is hard-linked (uv),
    what it lacks the host fetches from the shared store (a fresh clone: every store wheel)."""
    root = clone(shared, tmp_path / "clone")
    add_target(root, tmp_path / "target-venv")
    before = len(shared.server.requests())
    result = apply_json(root, tmp_path / "home")
    assert result["host_report"]["verified_files"] > 20
    # Everything that reached the host's drop: wheels, bin/ scripts, the source archive, uv.
    drop = tmp_path / "home" / ".cache" / "envlock" / "artifacts"
    artifact_bytes = sum(p.stat().st_size for p in drop.glob("*/*") if not p.parent.name.startswith("."))
    assert result["pushed_files"] == 1 and result["pushed_bytes"] == Path(UV).stat().st_size, result
    # Beside that hard link, the controller sent the plan and the pull list only.
    assert 0 < result["bytes_sent"] - result["pushed_bytes"] < artifact_bytes / 100
    assert result["pulled_bytes"] >= sum(w["size"] for w in repacked(root, "ct200"))
    # The agent asked the server itself; the controller fetched nothing.
    by_agent = [line for line in shared.server.requests()[before:] if "envlock-agent" in line]
    assert any("localpkg" in line for line in by_agent), by_agent
    assert not (root / "store" / "wheels").exists()


def test_an_ssh_host_fetches_from_the_store_itself(tmp_path: Path, shared: Shared) -> None:
    """Over SSH (sshd in its own mount namespace, its own drop): the agent there pulls."""
    rig = SshRig.start(tmp_path / "rig", ("ct-pull",))
    try:
        root = clone(shared, tmp_path / "clone")
        (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-pull"))
        copy_lock(root, "ct129", "ct200")
        result = apply_json(root, tmp_path / "home")
        assert result["pushed_files"] == 0 and result["pull_failures"] == [], result
        assert result["bytes_sent"] < result["pulled_bytes"] / 100, result
        drop = rig.hosts["ct-pull"].root.parent / "cache" / "artifacts"
        for wheel in repacked(root, "ct200"):
            assert (drop / wheel["hashes"]["sha256"] / wheel["name"]).is_file()
        ran = rig.run("ct-pull", [f"{VENV_PATH}/bin/python", "-c", "import localpkg, alpha; print('ok')"])
        assert ran.stdout.strip() == "ok", ran.stderr
    finally:
        rig.stop()


def test_a_host_that_cannot_reach_the_store_gets_what_it_lacks_pushed(tmp_path: Path, shared: Shared) -> None:
    root = tmp_path / "ws"
    # The capturing workspace: the controller has its own copies in store/.
    shutil.copytree(shared.origin, root, ignore=shutil.ignore_patterns(".git"))
    assert (root / "store" / "wheels").is_dir()
    dead = StoreServer.start(tmp_path / "dead-store", tmp_path / "dead")
    dead.stop()  # nothing listens there any more: connection refused
    write_config(root, dead.url)
    rig = SshRig.start(tmp_path / "rig", ("ct-gapped",))
    try:
        (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-gapped"))
        copy_lock(root, "ct129", "ct200")
        result = apply_json(root, tmp_path / "home")
        failures = result["pull_failures"]
        assert len(failures) >= len(repacked(root, "ct200")), result
        assert all("Connection refused" in f or "unreachable earlier" in f for f in failures), failures
        assert result["pushed_files"] >= len(repacked(root, "ct200"))
        assert result["host_report"]["verified_files"] > 20
        # pull = true: the host must fetch itself; a failure is an error, nothing pushed.
        shutil.rmtree(rig.venv_dir("ct-gapped"))
        shutil.rmtree(rig.hosts["ct-gapped"].root / "venv.envlock", ignore_errors=True)
        shutil.rmtree(rig.hosts["ct-gapped"].root.parent / "cache" / "artifacts")
        (root / "hosts" / "ct200.toml").write_text(rig.profile("ct-gapped", extra="pull = true\n"))
        proc = envlock(root, tmp_path / "home", "apply", "ct200")
        assert proc.returncode == 2, proc.stdout
        assert "host ct200 could not fetch" in proc.stderr and "pull = true" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert not rig.venv_dir("ct-gapped").exists()
    finally:
        rig.stop()


def test_a_corrupt_object_on_the_server_is_refused(tmp_path: Path, shared: Shared) -> None:
    served = tmp_path / "srv"
    shutil.copytree(shared.served, served)
    server = StoreServer.start(served, tmp_path / "nginx")
    try:
        root = clone(shared, tmp_path / "clone")
        write_config(root, server.url)
        target = tmp_path / "target-venv"
        add_target(root, target)
        wheel = next(w for w in repacked(root, "ct200") if w["name"].startswith("localpkg"))
        path = served / "wheels" / wheel["hashes"]["sha256"] / wheel["name"]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        proc = envlock(root, tmp_path / "home", "apply", "ct200")
        assert proc.returncode == 2, proc.stdout
        assert wheel["name"] in proc.stderr and "refusing it" in proc.stderr, proc.stderr
        assert not target.exists()
        # Neither the host's drop nor the controller's cache gave it a final name.
        drop = tmp_path / "home" / ".cache" / "envlock" / "artifacts" / wheel["hashes"]["sha256"]
        assert not (drop / wheel["name"]).exists()
        assert not (root / "store" / "wheels" / wheel["hashes"]["sha256"] / wheel["name"]).exists()
        # The host tried first and refused it by its hash, then the controller did.
        assert any("envlock-agent" in line and "localpkg" in line for line in server.requests())
    finally:
        server.stop()


def agent_pull(directory: Path, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The host side alone: the agent's ``pull`` command as a process."""
    proc = subprocess.run(
        [str(Path(ENVLOCK).parent / "python"), "-m", "envlock.agent", "pull", "--dir", str(directory)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def test_a_cut_off_pull_resumes_with_a_range_request(tmp_path: Path, shared: Shared) -> None:
    wheel = max(repacked(shared.origin, "ct129"), key=lambda w: int(w["size"]))
    sha, name, size = wheel["hashes"]["sha256"], wheel["name"], int(wheel["size"])
    data = (shared.served / "wheels" / sha / name).read_bytes()
    drop = tmp_path / "drop"
    (drop / ".pulling").mkdir(parents=True)
    (drop / ".pulling" / f"{sha}-{name}.part").write_bytes(data[: size // 2])
    item = {"sha256": sha, "name": name, "size": size, "urls": [f"{shared.server.url}wheels/{sha}/{name}"]}
    before = len(shared.server.requests())
    answer = agent_pull(drop, [item])
    assert answer["failed"] == []
    assert answer["pulled"][0]["resumed_from"] == size // 2
    assert (drop / sha / name).read_bytes() == data
    assert not list((drop / ".pulling").iterdir())
    log = shared.server.requests()[before:]
    assert len(log) == 1 and '" 206 ' in log[0], log
    # A kept part with wrong bytes: the resumed file fails its hash, and is fetched again whole.
    again = tmp_path / "drop2"
    (again / ".pulling").mkdir(parents=True)
    (again / ".pulling" / f"{sha}-{name}.part").write_bytes(b"\0" * (size // 2))
    answer = agent_pull(again, [item])
    assert answer["failed"] == [] and (again / sha / name).read_bytes() == data


def test_the_agent_refuses_hostile_pull_items(tmp_path: Path, shared: Shared) -> None:
    sha = "a" * 64
    wheel = repacked(shared.origin, "ct129")[0]
    good_sha = wheel["hashes"]["sha256"]
    good = {
        "sha256": good_sha,
        "name": wheel["name"],
        "size": wheel["size"],
        "urls": [f"{shared.server.url}wheels/{good_sha}/{wheel['name']}"],
    }
    for item in (
        {"sha256": sha, "name": "../evil", "size": 1, "urls": [shared.server.url]},
        {"sha256": "../../x", "name": "ok.whl", "size": 1, "urls": [shared.server.url]},
    ):
        # The whole list is refused before anything is fetched, the good item included.
        proc = subprocess.run(
            [str(Path(ENVLOCK).parent / "python"), "-m", "envlock.agent", "pull", "--dir", str(tmp_path)],
            input=json.dumps([good, item]),
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and "refusing artifact name" in proc.stderr, proc.stderr
        assert not (tmp_path / good_sha).exists()
    # A URL that is not http(s) or file is a failure of that item, not a fetch.
    answer = agent_pull(tmp_path, [{"sha256": sha, "name": "x.whl", "size": 1, "urls": ["ftp://x/y"]}])
    assert answer["pulled"] == [] and "not an http(s)://" in answer["failed"][0]["error"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[store]\nurl = "ftp://x/"\n', "envlock.toml: store.url: expected http://"),
        ('[store]\nurl = "http://x/"\nsecret = 1\n', "envlock.toml: store.secret: unknown field"),
        ('[store]\npush = "http://x/"\n', "envlock.toml: store.push: expected a path or ssh://"),
        ('[store]\npush = "ssh:///srv"\n', "envlock.toml: store.push: expected ssh://[user@]host/path"),
        ('[publish]\nindex = "devpi"\n', "envlock.toml: publish.index: expected an http://"),
        ('[stores]\nurl = "http://x/"\n', "envlock.toml: stores: unknown table"),
        ("[store\n", "envlock.toml: not valid TOML"),
    ],
)
def test_a_bad_envlock_toml_is_one_line_naming_the_field(
    tmp_path: Path, reference: Reference, text: str, message: str
) -> None:
    root = tmp_path / "ws"
    write_profile(root, "ct129", reference.venv, reference.index.url)
    (root / "envlock.toml").write_text(text)
    proc = envlock(root, tmp_path / "home", "capture", "ct129")
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith(f"envlock: error: {message}") or message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ------------------------------------------------------------------ air-gapped bundles


@pytest.fixture(scope="module")
def bundle(shared: Shared, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ct200's bundle, written in a fresh clone (no store/: every object comes from the server)."""
    base = tmp_path_factory.mktemp("bundle")
    root = clone(shared, base / "clone")
    add_target(root, base / "unused-venv")
    out = base / "ct200.bundle"
    proc = envlock(root, base / "home", "bundle", "ct200", "-o", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["result"]
    assert result["output"] == str(out) and result["members"] > len(repacked(root, "ct200"))
    return out


def offline_clone(shared: Shared, into: Path, target: Path) -> Path:
    root = clone(shared, into)
    add_target(root, target)
    return root


def offline_apply(root: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """envlock in a network namespace of its own: no route anywhere, loopback down."""
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    return subprocess.run(
        ["unshare", "-n", ENVLOCK, "apply", "ct200", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
    )


def test_a_bundle_applies_with_the_network_cut_off(
    tmp_path: Path, shared: Shared, bundle: Path, reference: Reference
) -> None:
    target = tmp_path / "target-venv"
    root = offline_clone(shared, tmp_path / "clone", target)
    # Without the bundle the clone cannot apply offline: the store-only wheels are on the server.
    cut = offline_apply(root, tmp_path / "home0")
    assert cut.returncode == 2 and "cannot download" in cut.stderr, cut.stderr
    proc = offline_apply(root, tmp_path / "home", "--from", str(bundle), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["result"]
    assert result["pulled_files"] == 0 and result["host_report"]["verified_files"] > 20
    assert walk_payload(target) == walk_payload(reference.venv)


def _rewrite(good: Path, out: Path, change: Any) -> Path:
    """A copy of ``good`` whose members pass through ``change(info, data) -> [(info, data)]``."""
    import io
    import tarfile

    with tarfile.open(good) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for info in src.getmembers():
            stream = src.extractfile(info)
            data = stream.read() if stream is not None else b""
            for new_info, new_data in change(info, data):
                dst.addfile(new_info, io.BytesIO(new_data) if new_info.isreg() else None)
    return out


def _listing_with(data: bytes, edit: Any) -> bytes:
    table = json.loads(data)
    edit(table)
    return json.dumps(table).encode()


def _sized(info: Any, data: bytes) -> tuple[Any, bytes]:
    info.size = len(data)
    return info, data


def _hostile_cases(good: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    import tarfile

    def is_wheel(info: tarfile.TarInfo) -> bool:
        return info.name.startswith("store/wheels/") and "localpkg" in info.name

    def flip(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        if is_wheel(info):
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        return [(info, data)]

    def escape(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        if info.name == "envlock-bundle.json":

            def edit(table: dict[str, Any]) -> None:
                table["members"][2]["path"] = "store/wheels/" + table["members"][2]["sha256"] + "/../../../x"

            return [_sized(info, _listing_with(data, edit))]
        return [(info, data)]

    def extra(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        out = [(info, data)]
        if is_wheel(info):
            evil = tarfile.TarInfo("store/blobs/00/" + "0" * 64)
            evil.size = 3
            out.append((evil, b"bad"))
        return out

    def link(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        if is_wheel(info):
            sym = tarfile.TarInfo(info.name)
            sym.type = tarfile.SYMTYPE
            sym.linkname = "/etc/passwd"
            return [(sym, b"")]
        return [(info, data)]

    def short(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        return [_sized(info, data[:-1])] if is_wheel(info) else [(info, data)]

    def drop(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        return [] if is_wheel(info) else [(info, data)]

    def unlisted_first(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        return [] if info.name == "envlock-bundle.json" else [(info, data)]

    return {
        "hash": (_rewrite(good, tmp / "flip.bundle", flip), "the listing says"),
        "escape": (_rewrite(good, tmp / "escape.bundle", escape), "refusing member name"),
        "unlisted": (_rewrite(good, tmp / "extra.bundle", extra), "not in envlock-bundle.json"),
        "symlink": (_rewrite(good, tmp / "link.bundle", link), "not a regular file"),
        "size": (_rewrite(good, tmp / "short.bundle", short), "the listing says"),
        "missing": (_rewrite(good, tmp / "drop.bundle", drop), "listed member(s) missing"),
        "no listing": (_rewrite(good, tmp / "nolist.bundle", unlisted_first), "not an envlock bundle"),
    }


def test_a_hostile_bundle_is_refused(tmp_path: Path, shared: Shared, bundle: Path) -> None:
    target = tmp_path / "target-venv"
    root = offline_clone(shared, tmp_path / "clone", target)
    cases = _hostile_cases(bundle, tmp_path)
    gz = tmp_path / "gz.bundle"
    subprocess.run(f"gzip -c {bundle} > {gz}", shell=True, check=True)
    cases["compressed"] = (gz, "cannot read as an envlock bundle")
    for what, (path, message) in cases.items():
        proc = offline_apply(root, tmp_path / "home", "--from", str(path))
        assert proc.returncode == 2, (what, proc.stdout)
        assert message in proc.stderr and str(path) in proc.stderr, (what, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (what, proc.stderr)
        assert not target.exists(), what
        assert not list(tmp_path.rglob("x")) and not list(root.rglob("*.part")), what
        if what == "hash":  # the damaged wheel never took its name in the store
            assert not list(root.glob("store/wheels/*/localpkg-*.whl"))


def test_a_bundle_carrying_another_uv_never_runs_it(tmp_path: Path, shared: Shared, bundle: Path) -> None:
    """The bundle's uv is named by nothing reviewed (the lock matches the workspace's; the uv
    only matches the bundle's own listing): the host installs with the controller's uv."""
    import hashlib
    import shutil
    import tarfile

    marker = tmp_path / "the-bundles-uv-ran"
    fake = (
        f'#!/bin/sh\ntouch {marker}\nexec {shutil.which("uv") or Path(ENVLOCK).parent / "uv"} "$@"\n'.encode()
    )
    fake_sha = hashlib.sha256(fake).hexdigest()

    def swap(info: tarfile.TarInfo, data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
        if info.name == "envlock-bundle.json":

            def edit(table: dict[str, Any]) -> None:
                for member in table["members"]:
                    if member["path"].startswith("uv/"):
                        member.update(path=f"uv/{fake_sha}/uv", sha256=fake_sha, size=len(fake))

            return [_sized(info, _listing_with(data, edit))]
        if info.name.startswith("uv/"):
            info.name = f"uv/{fake_sha}/uv"
            info.mode = 0o755
            return [_sized(info, fake)]
        return [(info, data)]

    swapped = _rewrite(bundle, tmp_path / "swapped.bundle", swap)
    target = tmp_path / "target-venv"
    root = offline_clone(shared, tmp_path / "clone", target)
    proc = offline_apply(root, tmp_path / "home", "--from", str(swapped))
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()


def test_a_bad_pull_setting_names_the_profile_and_field(tmp_path: Path, reference: Reference) -> None:
    root = tmp_path / "ws"
    write_profile(root, "ct200", tmp_path / "venv", None, 'pull = "sometimes"\n')
    proc = envlock(root, tmp_path / "home", "apply", "ct200")
    assert proc.returncode == 2, proc.stdout
    assert "ct200.toml" in proc.stderr and 'pull: expected true, false or "auto"' in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
