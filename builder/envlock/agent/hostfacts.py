"""Facts about the host and the interpreter the agent runs on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from configparser import ConfigParser
from configparser import Error as ConfigError
from typing import Any, Dict, List, Optional, Set

from envlock.agent.protocol import GpuFacts, InterpreterFacts, PipConfig, PlatformFacts


def interpreter_facts() -> InterpreterFacts:
    impl = sys.implementation
    return {
        "implementation": impl.name,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "version_info": list(sys.version_info[:3]),
        "releaselevel": sys.version_info.releaselevel,
        "cache_tag": impl.cache_tag,
        "soabi": sysconfig.get_config_var("SOABI"),
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "abiflags": getattr(sys, "abiflags", ""),
        "py_gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "pointer_bits": 64 if sys.maxsize > 2**32 else 32,
        "executable": sys.executable,
        # What `python -m venv` writes as pyvenv.cfg's executable.
        "executable_realpath": os.path.realpath(sys.executable),
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    }


def platform_facts() -> PlatformFacts:
    libc_name, libc_version = "", ""
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
        if value:
            libc_name, libc_version = value.split(" ", 1)
    except (ValueError, OSError, AttributeError):
        libc_name, libc_version = platform.libc_ver()
    return {
        "system": platform.system().lower(),
        "machine": platform.machine(),
        "libc": libc_name or None,
        "libc_version": libc_version or None,
        "kernel": platform.release(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count() or 1,
    }


def read_pyvenv_cfg(venv: str) -> Dict[str, str]:
    path = os.path.join(venv, "pyvenv.cfg")
    result: Dict[str, str] = {}
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            if "=" in line:
                key, value = line.split("=", 1)
                result[key.strip()] = value.strip()
    return result


def _pip_config_files(venv: str) -> List[str]:
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    home = os.path.expanduser("~")
    xdg_home = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    files = [os.path.join(d, "pip", "pip.conf") for d in reversed(xdg_dirs) if d]
    files.append("/etc/pip.conf")
    files += [os.path.join(home, ".pip", "pip.conf"), os.path.join(xdg_home, "pip", "pip.conf")]
    files.append(os.path.join(venv, "pip.conf"))
    if env_file:
        files.append(env_file)
    return files


def pip_index_config(venv: str) -> PipConfig:
    """Index URLs the host's pip would use, in pip's own precedence order.

    Later files and then ``PIP_*`` variables override earlier ones, as in pip.
    """
    values: Dict[str, str] = {}
    sources: List[str] = []
    for path in _pip_config_files(venv):
        if not os.path.isfile(path):
            continue
        parser = ConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (ConfigError, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key in ("index-url", "extra-index-url", "find-links", "no-index"):
                    if parser.has_option(section, key):
                        values[key] = parser.get(section, key)
                        sources.append(path)
    for key in ("index-url", "extra-index-url", "find-links", "no-index"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if env:
            values[key] = env
            sources.append("PIP_" + key.upper().replace("-", "_"))
    uv_default = os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL")
    index_url = values.get("index-url") or uv_default or "https://pypi.org/simple"
    extra = values.get("extra-index-url", "").split() + os.environ.get("UV_EXTRA_INDEX_URL", "").split()
    return {
        "urls": _dedupe([index_url, *extra]),
        "find_links": values.get("find-links", "").split(),
        "sources": _dedupe(sources),
    }


def _dedupe(items: List[str]) -> List[str]:
    seen: List[str] = []
    for item in items:
        if item and item not in seen:
            seen.append(item)
    return seen


def gpu_facts() -> Optional[List[GpuFacts]]:
    """One entry per GPU from nvidia-smi, or None where there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus: List[GpuFacts] = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "cc": parts[1], "driver": parts[2]})
    return gpus


def _elf_kind(path: str) -> Optional[bytes]:
    """ELF class, byte order and machine of a file (what ld.so matches on), or None."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return head[4:6] + head[18:20]


def _ld_cache() -> Dict[str, List[str]]:
    """``ldconfig -p``: each name with the paths the loader's cache holds for it, in cache order."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.isfile(p)), None
    )
    if ldconfig is None:
        return {}
    try:
        out = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, errors="replace", timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    cache: Dict[str, List[str]] = {}
    for line in out.splitlines()[1:]:  # the first line counts the entries
        name, arrow, path = line.strip().partition(" => ")
        if arrow:
            cache.setdefault(name.split(" (", 1)[0], []).append(path.strip())
    return cache


def host_libraries(native: Dict[str, Dict[str, Any]]) -> Dict[str, Optional[str]]:
    """Where the host's loader finds each DT_NEEDED name that no library of the venv provides.

    ``native`` maps a venv path to its ELF facts (``needed``, ``soname``). A
    name is looked up as ld.so does once a library's own RPATH/RUNPATH gave
    nothing: the ld.so cache (``ldconfig -p``), then the system directories
    (``binary.loader.system_library_dirs``); a file of another ELF class or
    machine than this interpreter is skipped, as ld.so skips it. The answer
    is the path found, or None: review blocks only on a None (docs/review.md).
    """
    from envlock.binary.loader import system_library_dirs

    provided: Set[str] = set()
    wanted: Set[str] = set()
    for rel, facts in native.items():
        provided.add(rel.rsplit("/", 1)[-1])
        if facts.get("soname"):
            provided.add(facts["soname"])
        wanted.update(n for n in facts.get("needed") or () if "/" not in n)
    names = sorted(wanted - provided)
    if not names:
        return {}
    own = _elf_kind(os.path.realpath(sys.executable))
    cache = _ld_cache()
    dirs = system_library_dirs()
    found: Dict[str, Optional[str]] = {}
    for name in names:
        candidates = cache.get(name, []) + [os.path.join(d, name) for d in dirs]
        found[name] = next(
            (p for p in candidates if os.path.isfile(p) and (own is None or _elf_kind(p) == own)), None
        )
    return found
