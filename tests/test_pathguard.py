"""The one path guard, and the editable-source unpacker that relies on it, on real files."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from envlock.agent.pathguard import PathError, check_absolute_dir, check_relative, check_script_key, safe_join
from envlock.agent.sources import SourceError, pack_source, unpack_source


@pytest.mark.parametrize(
    "rel",
    [
        "",
        "/etc/passwd",
        "bin/../../x",
        "..",
        "a/../b",
        "./bin/tool",
        "bin//tool",
        "bin/tool/",
        "bin\\..\\x",
        "bin/to\x00ol",
        "bin/tool\n",
        5,
        None,
    ],
)
def test_check_relative_refuses(rel: object) -> None:
    with pytest.raises(PathError, match="scripts"):
        check_relative(rel, "scripts")


@pytest.mark.parametrize("rel", ["bin/tool", "site-packages/a/b.py", "a", "bin/..tool", "x/...y"])
def test_check_relative_accepts(rel: str) -> None:
    assert check_relative(rel, "x") == rel


@pytest.mark.parametrize("rel", ["bin", "lib/x", "bin/a/b", "bin/../x", "/bin/x"])
def test_script_keys_are_bin_files(rel: str) -> None:
    with pytest.raises(PathError):
        check_script_key(rel, "scripts")
    assert check_script_key("bin/tool", "scripts") == "bin/tool"


def test_safe_join_stays_inside_and_refuses_symlinked_parents(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    (staging / "bin").mkdir(parents=True)
    assert safe_join(str(staging), "bin/tool", "bin_files") == str(staging / "bin" / "tool")
    with pytest.raises(PathError, match=r"bin_files: 'bin/\.\./\.\./x'"):
        safe_join(str(staging), "bin/../../x", "bin_files")
    with pytest.raises(PathError, match="absolute"):
        safe_join(str(staging), str(tmp_path / "victim"), "bin_files")
    # A symlinked bin/ would carry a correct-looking bin/tool anywhere.
    outside = tmp_path / "outside"
    outside.mkdir()
    (staging / "bin").rmdir()
    (staging / "bin").symlink_to(outside)
    with pytest.raises(PathError, match="is a symlink"):
        safe_join(str(staging), "bin/tool", "bin_files")
    # A file where a directory should be.
    (staging / "lib").write_text("")
    with pytest.raises(PathError, match="not a directory"):
        safe_join(str(staging), "lib/x", "bin_files")
    # Not-yet-existing parents are fine: nothing there to follow.
    assert safe_join(str(staging), "new/dir/file", "x").endswith("new/dir/file")


@pytest.mark.parametrize(
    "path",
    ["/", "/usr", "/etc", "/etc/cron.d/x", "/usr/lib/python3/x", "/home", "/home/alice", "/root", "rel/dir",
     "/a/../b", "/a/", "//a"],
)  # fmt: skip
def test_absolute_dirs_refused(path: str) -> None:
    with pytest.raises(PathError):
        check_absolute_dir(path, "source-tree.path")


def test_absolute_dirs_accepted() -> None:
    for path in ("/home/alice/src/proj", "/opt/proj", "/srv/app/src", "/usr/local/src/x", "/tmp/x"):
        assert check_absolute_dir(path, "p") == path


def _tar(path: Path, members: list[tuple[str, str, bytes | str]]) -> Path:
    """members: (name, kind f|d|l|h, data or link target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "d":
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif kind in ("l", "h"):
                info.type = tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE
                info.linkname = str(data)
                archive.addfile(info)
            else:
                payload = data if isinstance(data, bytes) else data.encode()
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
    import gzip

    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("evil", "l", "/outside"), ("evil/file", "f", b"x")], "symlink|outside the tree"),
        ([("link", "l", "../.."), ("link/pwned", "f", b"x")], "outside the tree"),
        ([("d", "d", ""), ("d/up", "l", "../../x")], "outside the tree"),
        ([("../escape", "f", b"x")], r"'\.\./escape'"),
        ([("/abs", "f", b"x")], "absolute"),
        ([("hard", "h", "/etc/passwd")], "hard link"),
    ],
)
def test_unpack_refuses_members_that_leave_the_tree(
    tmp_path: Path, members: list[tuple[str, str, bytes | str]], message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = _tar(
        tmp_path / "source.tar.gz", [(n, k, str(outside) if d == "/outside" else d) for n, k, d in members]
    )
    target = tmp_path / "work" / "proj"
    with pytest.raises(SourceError, match=message):
        unpack_source(str(archive), str(target))
    assert list(outside.iterdir()) == []
    assert not target.exists()
    assert not (tmp_path / "escape").exists()


def test_unpack_keeps_links_inside_the_tree(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "README.md").write_text("hello\n")
    (project / "README.md").symlink_to("docs/README.md")
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "run.sh").chmod(0o755)
    with open(tmp_path / "source.tar.gz", "wb") as out:
        pack_source(str(project), out)
    target = tmp_path / "elsewhere" / "proj"
    unpack_source(str(tmp_path / "source.tar.gz"), str(target))
    assert os.readlink(target / "README.md") == "docs/README.md"
    assert (target / "README.md").read_text() == "hello\n"
    assert os.access(target / "run.sh", os.X_OK)


def test_unpack_refuses_a_system_directory(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "source.tar.gz", [("x", "f", b"x")])
    with pytest.raises(SourceError, match="system directory"):
        unpack_source(str(archive), "/usr")
