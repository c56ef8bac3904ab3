"""A real static web server for a shared store: Debian's nginx on loopback.

It serves a store directory with the location block docs/store.md gives
(``alias``, no directory listing, dot-names denied), so the tests exercise
the documented configuration, byte ranges included. Needs nginx-light
(``make test`` installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NGINX = "/usr/sbin/nginx"

# The snippet docs/store.md documents, with the store directory filled in.
LOCATION = """
        location /envlock/ {{
            alias {root}/;
            autoindex off;
            location ~ /\\. {{ deny all; }}
            types {{ }}
            default_type application/octet-stream;
        }}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class StoreServer:
    root: Path  # the store directory served
    url: str  # http://127.0.0.1:PORT/envlock/
    access_log: Path
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, root: Path, work: Path, also: dict[str, Path] | None = None) -> StoreServer:
        """Serve ``root`` at /envlock/ (and each of ``also``, name -> directory, at /name/)."""
        if not Path(NGINX).exists() and shutil.which("nginx") is None:
            raise RuntimeError("nginx not found: install Debian's nginx-light (make test does)")
        work.mkdir(parents=True, exist_ok=True)
        root.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        log = work / "access.log"
        temp = "".join(
            f"        {name}_temp_path {work / name};\n" for name in ("client_body", "proxy", "fastcgi")
        )
        locations = LOCATION.format(root=root)
        for name, directory in (also or {}).items():
            # A package index: nginx's built-in types, so index.html pages are text/html.
            locations += f"        location /{name}/ {{ alias {directory}/; index index.html; }}\n"
        conf = work / "nginx.conf"
        conf.write_text(
            f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {work / 'nginx.pid'};\n"
            f"error_log {work / 'error.log'};\nevents {{ worker_connections 64; }}\n"
            f"http {{\n    access_log {log} combined;\n{temp}"
            f"    server {{\n        listen 127.0.0.1:{port};\n{locations}    }}\n}}\n"
        )
        proc = subprocess.Popen(
            [NGINX, "-c", str(conf), "-p", str(work), "-e", str(work / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {(work / 'error.log').read_text()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return cls(root, f"http://127.0.0.1:{port}/envlock/", log, proc)
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"nginx did not listen on {port}")

    def requests(self) -> list[str]:
        """The access log's lines so far."""
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
