"""The raw-hash anchor as a whole process: ``python rawhash.py VENV THREADS``.

Walks the venv as capture does (every regular file outside __pycache__, no
symlinks followed) and sha256es each file in a thread pool, 1 MiB reads:
the least any capture could do, with the interpreter start included.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import payload_files, raw_hash_python

if __name__ == "__main__":
    raw_hash_python(payload_files(Path(sys.argv[1])), int(sys.argv[2]))
