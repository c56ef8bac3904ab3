"""The index client against real servers: a PEP 503 tree over HTTP on loopback."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Index, Reference, write_profile
from envlock.index import IndexClient, parse_json
from helpers import run_envlock


@pytest.fixture
def http_index(index: Index) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index.root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def test_capture_traces_wheels_over_http(tmp_path: Path, reference: Reference, http_index: str) -> None:
    write_profile(tmp_path, "ct129", reference.venv, http_index)
    proc = run_envlock(tmp_path, "capture", "ct129", "--format", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    packages = {p["name"]: p for p in json.loads(proc.stdout)["result"]["packages"]}
    for name in ("alpha", "beta", "six", "idna"):
        assert packages[name]["source"] == "index"
    lock = (tmp_path / "locks/pylock.ct129.toml").read_text()
    assert f'url = "{http_index[: -len("/simple")]}/files/six-1.17.0-py2.py3-none-any.whl"' in lock


def test_http_listing_and_record(http_index: str, index: Index) -> None:
    client = IndexClient((http_index,))
    (six,) = client.files("SIX")
    assert six.filename == "six-1.17.0-py2.py3-none-any.whl"
    served = index.root / "files" / six.filename
    assert six.sha256 == hashlib.sha256(served.read_bytes()).hexdigest()
    rows = client.read_record(six)
    assert any(row[0] == "six.py" for row in rows)
    assert client.files("no-such-project") == []


def test_pep691_json_page() -> None:
    data = {
        "meta": {"api-version": "1.0"},
        "files": [
            {
                "filename": "x-1.0-py3-none-any.whl",
                "url": "../../files/x-1.0-py3-none-any.whl",
                "hashes": {"sha256": "ab" * 32},
                "yanked": "broken",
                "requires-python": ">=3.8",
            },
        ],
    }
    (file,) = parse_json(data, "https://example.org/simple/x/", "https://example.org/simple")
    assert file.url == "https://example.org/files/x-1.0-py3-none-any.whl"
    assert file.sha256 == "ab" * 32 and file.yanked and file.requires_python == ">=3.8"
