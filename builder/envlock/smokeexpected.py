"""Which smoke failures are expected on any healthy venv, and why.

``smoke --deep`` imports every submodule it finds, and an ordinary venv has
modules that cannot import on this host by design: Windows or macOS code,
test suites whose test dependencies are not installed, integrations with a
package that only an extra requires, optional imports inside a vendored
copy of a library. Each such failure gets a reason and does not gate (exit
0); everything else is a real failure. The rules, first match wins:

- ``[smoke] exclude`` in the host profile: fnmatch patterns of module names;
- platform-only: a name part that names another platform (``win32``,
  ``_windows``, ``msvc9compiler``, ``nt``, ``cygwin*``, ``darwin``,
  ``securetransport``, ``emscripten``...), an import of a Windows or macOS-only module
  (``winreg``, ``msvcrt``, ``_scproxy``...) or name (``ctypes.windll``), or
  an error that says it runs only on Windows or macOS;
- test package: a name part ``tests``, ``test``, ``testing``, ``conftest``
  or ``test_*``;
- optional extra: the missing module is, in the importing distribution's
  metadata, only in a ``Requires-Dist ... ; extra == "x"``;
- vendored: a missing module imported inside a ``_vendor``/``vendored``/
  ``extern`` tree, that the vendoring distribution does not require.

A profile check (``[smoke] checks``) is never expected: it was asked for.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# Name tokens (a module name part split at "_") that mean another platform.
_PLATFORM_TOKENS = {
    "win": "Windows",
    "win32": "Windows",
    "win64": "Windows",
    "windows": "Windows",
    "winreg": "Windows",
    "msvcrt": "Windows",
    "winapi": "Windows",
    "macos": "macOS",
    "darwin": "macOS",
    "osx": "macOS",
    "cocoa": "macOS",
    "securetransport": "macOS",
    "emscripten": "Emscripten (WebAssembly)",
    "pyodide": "Emscripten (WebAssembly)",
}
_PLATFORM_PREFIXES = {"msvc": "Windows", "cygwin": "Windows (Cygwin)", "mingw": "Windows (MinGW)"}
# Modules and ctypes names that exist only on one platform.
_PLATFORM_MODULES = {
    **dict.fromkeys(
        ("winreg", "_winreg", "msvcrt", "_winapi", "winsound", "_overlapped", "nt", "_msi", "msilib",
         "win32api", "win32con", "win32file", "win32pipe", "win32process", "win32event", "pywintypes",
         "pythoncom", "wmi"),
        "Windows",
    ),
    **dict.fromkeys(("_scproxy", "Foundation", "AppKit", "objc", "CoreFoundation", "Quartz"), "macOS"),
}  # fmt: skip
_PLATFORM_NAMES = {"windll": "Windows", "WinDLL": "Windows", "oledll": "Windows", "WinError": "Windows",
                   "FormatError": "Windows", "GetLastError": "Windows"}  # fmt: skip
_ONLY_ON = re.compile(
    r"\bonly\b.{0,40}\b(windows|win32|macos|mac os x?|os x|darwin)\b"
    r"|\b(windows|macos|darwin)\b.{0,20}\bonly\b",
    re.IGNORECASE,
)
_TEST_PARTS = {"test", "tests", "testing", "conftest", "_test", "_tests", "_testing"}
_VENDOR_PARTS = {"_vendor", "vendor", "_vendored", "vendored", "extern", "_extern"}
# Import names that differ from their distribution's name (the common ones).
_DIST_OF_MODULE = {
    "yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python", "sklearn": "scikit-learn",
    "attr": "attrs", "dateutil": "python-dateutil", "bs4": "beautifulsoup4", "Crypto": "pycryptodome",
    "jwt": "pyjwt", "OpenSSL": "pyopenssl", "serial": "pyserial", "zmq": "pyzmq", "socks": "pysocks",
    "dotenv": "python-dotenv", "docx": "python-docx", "magic": "python-magic", "google": "protobuf",
    "IPython": "ipython", "git": "gitpython", "skimage": "scikit-image", "fitz": "pymupdf",
}  # fmt: skip


def _platform_of_name(target: str) -> str | None:
    for part in target.split("."):
        if part == "nt":
            return "Windows"
        for token in filter(None, part.lower().split("_")):
            if token in _PLATFORM_TOKENS:
                return _PLATFORM_TOKENS[token]
            for prefix, platform in _PLATFORM_PREFIXES.items():
                if token.startswith(prefix):
                    return platform
    return None


def platform_only(target: str, kind: str | None, facts: Mapping[str, Any], message: str | None) -> str | None:
    platform = _platform_of_name(target)
    if platform is not None:
        return f"platform-only: {target} is {platform} code"
    module = str(facts.get("module") or "")
    if kind == "missing-module" and module.split(".")[0] in _PLATFORM_MODULES:
        top = module.split(".")[0]
        return f"platform-only: imports {top}, which exists only on {_PLATFORM_MODULES[top]}"
    name = str(facts.get("name") or "")
    if kind == "missing-name" and name in _PLATFORM_NAMES:
        return f"platform-only: needs {module}.{name}, which exists only on {_PLATFORM_NAMES[name]}"
    found = _ONLY_ON.search(message or "")
    if found is not None:
        return f"platform-only: says it runs only on {(found.group(1) or found.group(2))}"
    return None


def test_package(target: str) -> str | None:
    for part in target.split("."):
        if part in _TEST_PARTS or part.startswith("test_"):
            return f"test package: {part} is a test suite, not imported in use"
    return None


def _dist_names(module: str) -> set[str]:
    top = module.split(".")[0]
    names = {top, f"py{top}", f"python-{top}", f"{top}-py", f"{top}-python"}
    if top in _DIST_OF_MODULE:
        names.add(_DIST_OF_MODULE[top])
    return {canonicalize_name(n) for n in names}


_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")


def optional_extra(module: str, importer: str | None, requires_dist: Sequence[str]) -> str | None:
    """The importer requires ``module``'s distribution only through extras: which ones."""
    wanted = _dist_names(module)
    extras: list[str] = []
    for spec in requires_dist:
        try:
            req = Requirement(spec)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) not in wanted:
            continue
        found = _EXTRA.findall(str(req.marker)) if req.marker else []
        if not found:
            return None  # a hard dependency: its absence is a real failure
        extras += found
    if not extras:
        return None
    shown = ", ".join(f"'{e}'" for e in sorted(set(extras)))
    return f"optional extra: {module} is only in {importer}'s extra {shown}, not installed"


def vendored(target: str, module: str, importer: str | None, requires_dist: Sequence[str]) -> str | None:
    parts = target.split(".")
    if not any(part in _VENDOR_PARTS for part in parts):
        return None
    wanted = _dist_names(module)
    for spec in requires_dist:
        try:
            if canonicalize_name(Requirement(spec).name) in wanted:
                return None  # the vendoring distribution requires it: a real failure
        except InvalidRequirement:
            continue
    owner = importer or parts[0]
    return f"vendored: {target} is a vendored copy in {owner}, which does not require {module}"


def excluded(target: str, patterns: Sequence[str], source: str) -> str | None:
    for pattern in patterns:
        if fnmatch.fnmatchcase(target, pattern):
            return f"excluded: matches {pattern!r} ([smoke] exclude in {source})"
    return None


def expected_reason(
    *,
    target: str,
    check: bool,
    kind: str | None,
    facts: Mapping[str, Any],
    message: str | None,
    importer: str | None,
    requires_dist: Callable[[str | None], Sequence[str]],
    exclude: Sequence[str],
    profile_source: str,
) -> str | None:
    """Why this failure is expected on a healthy venv, or None: a real failure.

    ``importer``: the distribution whose file raised (the traceback's owner);
    ``requires_dist``: a distribution's Requires-Dist lines (live, else the lock's).
    """
    if check:
        return None
    module = str(facts.get("module") or "")
    reason = (
        excluded(target, exclude, profile_source)
        or platform_only(target, kind, facts, message)
        or test_package(target)
    )
    if reason is None and kind == "missing-module" and module:
        requires = requires_dist(importer)
        reason = optional_extra(module, importer, requires) or vendored(target, module, importer, requires)
    return reason
