"""Identity of the envlock code in use, for memos that must be redone when the code changes.

Its own module, with no imports beyond hashlib and os: a warm ``envlock
lock`` needs the key and nothing else of ``transport.bundle`` (zipfile,
tempfile, shutil, the transports), whose imports were a fifth of its run.
"""

from __future__ import annotations

import hashlib
import os

_CODE_KEY: list[str] = []


def code_key() -> str:
    """Names, sizes and mtimes of every module of the envlock package."""
    if not _CODE_KEY:
        import envlock

        digest = hashlib.sha256(envlock.__version__.encode())
        package = os.path.dirname(os.path.abspath(envlock.__file__))
        found = []
        for folder, dirs, files in os.walk(package):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [os.path.join(folder, name) for name in files if name.endswith(".py")]
        for path in sorted(found):
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        _CODE_KEY.append(digest.hexdigest()[:16])
    return _CODE_KEY[0]
